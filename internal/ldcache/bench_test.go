package ldcache

import (
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/gpu-runtime/gpu-runtime/internal/testimage"
)

// BenchmarkParseAddEncode measures what the OCI hook does per container
// with this package, on the realistic image's cache (1,500 distribution
// libraries, 32 CUDA and 4 i386 ones; about 1,700 entries): parse the
// image's cache, add the driver libraries and forward-compat ones, encode.
// The ldconfig case is what the hook does today for the same root: run
// ldconfig -r after the driver libraries are in place.
//
// Besides wall time, each case reports cpu-ns/op: the CPU time the
// process (for ldconfig, its children) used per operation, which the
// other load on a shared machine disturbs much less.
//
//	go test -run='^$' -bench=ParseAddEncode ./internal/ldcache/
func BenchmarkParseAddEncode(b *testing.B) {
	img := buildImage(b, testimage.Default(), nil)
	data, err := os.ReadFile(filepath.Join(img.Root, "etc/ld.so.cache"))
	if err != nil {
		b.Fatal(err)
	}
	libs := append(injectDriver(b, img.Root, "/usr/lib/x86_64-linux-gnu"), compatLibs(true)...)
	parsed, err := ParseCache(data)
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("image cache: %d entries, %d bytes", len(parsed.Entries), len(data))

	b.Run("parse+add+encode", func(b *testing.B) {
		defer reportCPU(b, syscall.RUSAGE_SELF)()
		for b.Loop() {
			c, err := ParseCache(data)
			if err != nil {
				b.Fatal(err)
			}
			if err := c.Add(libs...); err != nil {
				b.Fatal(err)
			}
			if _, err := c.Encode(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("parse", func(b *testing.B) {
		defer reportCPU(b, syscall.RUSAGE_SELF)()
		for b.Loop() {
			if _, err := ParseCache(data); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("add", func(b *testing.B) {
		defer reportCPU(b, syscall.RUSAGE_SELF)()
		for b.Loop() {
			c := *parsed
			c.Entries = slices.Clone(parsed.Entries)
			if err := c.Add(libs...); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encode", func(b *testing.B) {
		c := *parsed
		c.Entries = slices.Clone(parsed.Entries)
		if err := c.Add(libs...); err != nil {
			b.Fatal(err)
		}
		defer reportCPU(b, syscall.RUSAGE_SELF)()
		for b.Loop() {
			if _, err := c.Encode(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("ldconfig", func(b *testing.B) {
		defer reportCPU(b, syscall.RUSAGE_CHILDREN)()
		for b.Loop() {
			ldconfigCache(b, img.Root, "/etc/ld.so.cache.bench")
		}
	})
}

// reportCPU starts measuring the CPU time of who (RUSAGE_SELF or
// RUSAGE_CHILDREN); the function it returns, called after the benchmark
// loop, reports it per operation as cpu-ns/op.
func reportCPU(b *testing.B, who int) func() {
	cpu := func() time.Duration {
		var ru syscall.Rusage
		if err := syscall.Getrusage(who, &ru); err != nil {
			b.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	start := cpu()
	return func() {
		b.ReportMetric(float64(cpu()-start)/float64(b.N), "cpu-ns/op")
	}
}
