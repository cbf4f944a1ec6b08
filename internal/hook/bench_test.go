package hook

import (
	"testing"

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
			opts := LDCacheOptions{LDConfig: hostLDConfig, DriverVersion: driverVer, Libraries: injectB(b, root, driverLibs)}
			for b.Loop() {
				res, err := UpdateLDCache(root, opts)
				if err != nil || res.Method != MethodInProcess {
					b.Fatalf("UpdateLDCache = %+v, %v", res, err)
				}
			}
		})
	}
}
