package create

// Benchmarks of the create path's health check (discover.ReadHealth) on the fake 8-GPU host of
// BenchmarkCreatePath, and of a cache-hit create with the driver's /proc in place, so that what
// health adds to a create can be read off:
//
//	sudo go test -run '^$' -bench CreatePathHealth -benchmem ./internal/create/
//
// ReadHealth/driver-proc reads the 8 GPUs' /proc/driver/nvidia/gpus/<bus>/information files
// with no health file (a healthy host); /with-file adds a trusted health file of two records;
// /no-driver-proc is a proc root without the driver's gpus directory (BenchmarkCreatePath's
// fixture, which reads the machine's own /proc), where each GPU costs three failed lookups.
// PrepareBundle/* are whole in-process creates of the runc-default spec with NVIDIA_VISIBLE_DEVICES=all
// and a discovery-cache hit: compare PrepareBundle/healthy with the same create on a build
// without health (see the lead's make bench) for the check's share of a create.

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/gpu-runtime/gpu-runtime/pkg/config"
	"github.com/gpu-runtime/gpu-runtime/pkg/discover"
)

func BenchmarkCreatePathHealth(b *testing.B) {
	f := newBenchFixture(b)
	gpus := f.phost.Driver.GPUs
	healthFile := filepath.Join(b.TempDir(), "health.csv")
	records := []discover.HealthRecord{
		{UUID: gpus[3].UUID, Reason: "Xid 79: GPU has fallen off the bus", Xid: 79, Since: time.Now()},
		{UUID: gpus[5].UUID, Reason: "double-bit ECC error", Since: time.Now()},
	}
	if _, err := discover.UpdateHealthFile(healthFile, func([]discover.HealthRecord) ([]discover.HealthRecord, error) { return records, nil }); err != nil {
		b.Fatal(err)
	}
	readCases := []struct {
		name string
		opts discover.HealthOptions
		sick int // devices found unhealthy
	}{
		{"driver-proc", discover.HealthOptions{ProcRoot: f.host.ProcRoot, File: filepath.Join(b.TempDir(), "none.csv")}, 0},
		{"with-file", discover.HealthOptions{ProcRoot: f.host.ProcRoot, File: healthFile}, 2},
		{"no-driver-proc", discover.HealthOptions{ProcRoot: b.TempDir(), File: filepath.Join(b.TempDir(), "none.csv")}, 0},
	}
	for _, rc := range readCases {
		b.Run("ReadHealth/"+rc.name, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				if w := discover.ReadHealth(gpus, rc.opts); w != nil {
					b.Fatal(w)
				}
			}
			b.StopTimer()
			sick := 0
			for _, g := range gpus {
				if g.Health != nil {
					sick++
				}
			}
			if sick != rc.sick {
				b.Fatalf("%d unhealthy GPUs, want %d", sick, rc.sick)
			}
		})
	}

	prepare := func(name string, cfg config.Config) {
		b.Run("PrepareBundle/"+name, func(b *testing.B) {
			f.needCTK(b) // the untimed first call fills the discovery cache through gpu-ctk
			f.prepareBundles(b, f.specs["runc-default"], cfg)
		})
	}
	cfg := f.cfg
	cfg.Driver.ProcRoot = f.host.ProcRoot
	cfg.Health.File = filepath.Join(b.TempDir(), "none.csv")
	prepare("healthy", cfg) // the usual host: 8 information files read, no health file
	cfg.Health.File = healthFile
	prepare("two-unhealthy", cfg) // and a health file: all leaves two GPUs out, with two warnings
}
