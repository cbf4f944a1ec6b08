package hook

import (
	"testing"

	"github.com/gpu-runtime/gpu-runtime/internal/ldupdate"
	"github.com/gpu-runtime/gpu-runtime/internal/testimage"
)

// BenchmarkUpdateLDCache measures gpu-hook update-ldcache's work, in-process, on the
// realistic image (1,500 libraries and its ld.so.cache) and on a busybox-like root without a
// cache, with the driver libraries injected: what each GPU container pays besides gpu-hook's
// process start-up. The first run makes the links; later ones find them and rewrite the cache.
//
// The root is under $TMPDIR: TMPDIR=/dev/shm puts it on tmpfs, as the bench's bundles are
// (on ext4 the cache's fsync adds about half a millisecond).
//
//	TMPDIR=/dev/shm go test -run='^$' -bench=UpdateLDCache ./internal/hook/
func BenchmarkUpdateLDCache(b *testing.B) {
	for _, bc := range []struct {
		name string
		opts testimage.Options
	}{
		{"realistic", testimage.Default()},
		{"busybox", testimage.Options{NoConfig: true, NoCache: true}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			root := b.TempDir()
			if _, err := testimage.Build(root, bc.opts); err != nil {
				b.Skipf("SKIP: %v", err)
			}
			opts := LDCacheOptions{Options: ldupdate.Options{LDConfig: hostLDConfig, DriverVersion: driverVer, Libraries: libraries(injectB(b, root, driverLibs), nil)}}
			for b.Loop() {
				res, err := UpdateLDCache(root, opts)
				if err != nil || res.Method != ldupdate.MethodInProcess {
					b.Fatalf("UpdateLDCache = %+v, %v", res, err)
				}
			}
		})
	}
}

// BenchmarkUpdateLDCacheAtCreate measures the same update as gpu-runtime does it at create
// (UpdateLDCacheAtCreate: the libraries read at their host files), and the loader paths it
// checks mounts against.
//
//	TMPDIR=/dev/shm go test -run='^$' -bench=UpdateLDCacheAtCreate ./internal/hook/
func BenchmarkUpdateLDCacheAtCreate(b *testing.B) {
	for _, bc := range []struct {
		name string
		opts testimage.Options
	}{
		{"realistic", testimage.Default()},
		{"busybox", testimage.Options{NoConfig: true, NoCache: true}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			root, host := b.TempDir(), b.TempDir()
			if _, err := testimage.Build(root, bc.opts); err != nil {
				b.Skipf("SKIP: %v", err)
			}
			paths := injectB(b, host, driverLibs)
			opts := ldupdate.Options{LDConfig: hostLDConfig, DriverVersion: driverVer, Libraries: libraries(paths, func(p string) string { return host + p })}
			b.Run("update", func(b *testing.B) {
				for b.Loop() {
					res, err := atCreate(b, root, opts)
					if err != nil || res.Method != ldupdate.MethodInProcess {
						b.Fatalf("UpdateLDCacheAtCreate = %+v, %v", res, err)
					}
				}
			})
			b.Run("loader-paths", func(b *testing.B) {
				for b.Loop() {
					if _, err := ldupdate.LoaderPaths(openRoot(b, root), opts.Libraries); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}
