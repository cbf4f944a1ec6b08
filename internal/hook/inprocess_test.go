package hook

import (
	"bytes"
	"errors"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gpu-runtime/gpu-runtime/internal/confined"
	"github.com/gpu-runtime/gpu-runtime/internal/ldupdate"

	securejoin "github.com/cyphar/filepath-securejoin"
	"golang.org/x/sys/unix"

	"github.com/gpu-runtime/gpu-runtime/internal/ldcache"
	"github.com/gpu-runtime/gpu-runtime/internal/testimage"
)

const (
	libDir64     = "/usr/lib/x86_64-linux-gnu"
	libDir32     = "/usr/lib/i386-linux-gnu"
	hostLDConfig = "/sbin/ldconfig"
	driverVer    = "550.54.15"
)

// driverLib is a driver library as the runtime mounts it: its directory, file and SONAME.
type driverLib struct {
	dir, file, soname string
	arch              testimage.Arch
}

// driverLibs are libraries of driver 550.54.15 as the runtime injects them;
// libnvidia-gpucomp's SONAME is its file name, as in the driver.
var driverLibs = []driverLib{
	{libDir64, "libcuda.so.550.54.15", "libcuda.so.1", testimage.AMD64},
	{libDir64, "libnvidia-ml.so.550.54.15", "libnvidia-ml.so.1", testimage.AMD64},
	{libDir64, "libnvidia-ptxjitcompiler.so.550.54.15", "libnvidia-ptxjitcompiler.so.1", testimage.AMD64},
	{libDir64, "libnvidia-nvvm.so.550.54.15", "libnvidia-nvvm.so.4", testimage.AMD64},
	{libDir64, "libnvidia-gpucomp.so.550.54.15", "libnvidia-gpucomp.so.550.54.15", testimage.AMD64},
	{libDir32, "libcuda.so.550.54.15", "libcuda.so.1", testimage.I386},
}

// compatSonames are the libraries testimage puts in the compat directory.
var compatSonames = []string{"libcuda.so.1", "libcudadebugger.so.1", "libnvidia-nvvm.so.4", "libnvidia-ptxjitcompiler.so.1"}

// buildRoot builds an image with testimage (and its cache, unless opts.NoCache) into a new
// directory. It skips, saying why, without root: ldconfig -r chroots.
func buildRoot(t *testing.T, opts testimage.Options) (string, *testimage.Image) {
	t.Helper()
	requireRoot(t)
	root := t.TempDir()
	img, err := testimage.Build(root, opts)
	if err != nil {
		t.Fatal(err)
	}
	return root, img
}

// inject writes the driver libraries into root as the runtime's bind mounts put them there
// (files only: links are the hook's job) and returns their container paths.
func inject(t *testing.T, root string, libs []driverLib) []string {
	t.Helper()
	return injectB(t, root, libs)
}

func injectB(t testing.TB, root string, libs []driverLib) []string {
	t.Helper()
	var paths []string
	for _, l := range libs {
		data, err := testimage.SharedObject(l.arch, l.soname, "libc.so.6")
		if err != nil {
			t.Fatal(err)
		}
		p := path.Join(l.dir, l.file)
		if err := os.MkdirAll(filepath.Join(root, l.dir), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, p), data, 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	return paths
}

// listing returns ldconfig -p's lines for root's cache, paths resolved inside root.
func listing(t *testing.T, root string) []testimage.CacheLine {
	t.Helper()
	lines, err := testimage.ListCache(hostLDConfig, filepath.Join(root, "etc/ld.so.cache"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range lines {
		lines[i].Path = testimage.ResolveDir(root, lines[i].Path)
	}
	return lines
}

// updateWithLDConfig updates root's cache the way the hook did before it could do so
// in-process, and still does when it cannot: ldconfig over the image, sandboxed.
func updateWithLDConfig(t *testing.T, root string, opts LDCacheOptions) {
	t.Helper()
	r := openRoot(t, root)
	in, _, err := ldupdate.Prepare(r, opts.Options)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := runLDConfig(r, opts.LDConfig, in, DefaultDeadline); err != nil {
		t.Fatal(err)
	}
}

// TestLDCacheEquivalence: for each kind of image, the cache gpu-hook writes in-process (B)
// and the one the sandboxed ldconfig writes over the same image (A, what the hook did before
// and does where it must) make ldconfig -p print the same lines, in the same order: every
// injected library, its SONAME and development link, every library of the image (glibc-hwcaps
// variants included) and the compat libraries are found at the same file. The SONAME links
// made on disk are the same. No ldconfig ran for B.
func TestLDCacheEquivalence(t *testing.T) {
	small := testimage.Options{Libraries: 200, UsrMerge: true, CUDALibraries: 10, I386Libraries: 4}
	with := func(o testimage.Options, edit func(*testimage.Options)) testimage.Options {
		edit(&o)
		return o
	}
	testCases := []struct {
		description string
		opts        testimage.Options
		libs        []driverLib
	}{
		{description: "busybox-like image: libraries in /lib, no ld.so.conf", opts: testimage.Options{Libraries: 5, LibDir: "/lib", NoConfig: true}},
		{description: "realistic CUDA image (1,500 libraries)", opts: testimage.Default()},
		{description: "forward compat newer than the driver: preferred",
			opts: with(small, func(o *testimage.Options) { o.CompatVersion = "560.35.03" })},
		{description: "forward compat in the image's ld.so.conf.d, newer than the driver",
			opts: with(small, func(o *testimage.Options) { o.CompatVersion, o.CompatInConfig = "560.35.03", true })},
		{description: "forward compat in the image's ld.so.conf.d, older than the driver: the driver's libcuda wins",
			opts: with(small, func(o *testimage.Options) { o.CompatVersion, o.CompatInConfig = "535.104.05", true })},
		{description: "glibc-hwcaps subdirectories",
			opts: testimage.Options{Libraries: 200, UsrMerge: true, GlibcHwcaps: []string{"x86-64-v2", "x86-64-v3", "x86-64-v4"}, HwcapsLibraries: 20}},
		{description: "no cache and no libraries (a static busybox image)", opts: testimage.Options{NoConfig: true, NoCache: true}},
		{description: "no cache, a loader configuration and no libraries", opts: testimage.Options{NoCache: true, UsrMerge: true}},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			libs := tc.libs
			if libs == nil {
				libs = driverLibs
			}
			rootA, _ := buildRoot(t, tc.opts)
			rootB, img := buildRoot(t, tc.opts)
			opts := LDCacheOptions{Options: ldupdate.Options{LDConfig: hostLDConfig, DriverVersion: driverVer}}
			opts.Libraries = libraries(inject(t, rootA, libs), nil)
			inject(t, rootB, libs)

			updateWithLDConfig(t, rootA, opts)
			// B must not run ldconfig: give it one that fails if it runs.
			optsB := opts
			optsB.LDConfig = failingLDConfig(t)
			res, err := UpdateLDCache(rootB, optsB)
			if err != nil || res.Method != ldupdate.MethodInProcess {
				t.Fatalf("UpdateLDCache = %+v, %v; want it done in-process", res, err)
			}

			a, b := listing(t, rootA), listing(t, rootB)
			if !slices.Equal(a, b) {
				t.Errorf("ldconfig -p differs between ldconfig's cache (A) and gpu-hook's (B):\n%s", testimage.DiffListings("A", a, "B", b))
			}
			// What must be in both: every injected library, under its SONAME and at its
			// SONAME link, and every library of the image.
			first := map[string]string{}
			for _, l := range b {
				if _, ok := first[l.Key+" ("+l.Desc+")"]; !ok && !strings.Contains(l.Desc, "hwcap") {
					first[l.Key+" ("+l.Desc+")"] = l.Path
				}
			}
			for _, l := range libs {
				desc := "libc6,x86-64"
				if l.arch == testimage.I386 {
					desc = "libc6"
				}
				want := path.Join(l.dir, l.soname)
				if tc.opts.CompatVersion == "560.35.03" && l.arch == testimage.AMD64 && slices.Contains(compatSonames, l.soname) {
					want = ldupdate.CompatDir + "/" + l.soname // the compat package's libraries come first
				}
				if got := first[l.soname+" ("+desc+")"]; got != want {
					t.Errorf("%s (%s) is found at %q, want %q", l.soname, desc, got, want)
				}
				for _, root := range []string{rootA, rootB} {
					if l.soname == l.file {
						continue
					}
					if got, err := os.Readlink(filepath.Join(root, l.dir, l.soname)); err != nil || got != l.file {
						t.Errorf("%s: SONAME link %s -> %q (%v), want %q", root, l.soname, got, err, l.file)
					}
				}
			}
			for _, l := range img.Libraries {
				if l.Hwcaps != "" || strings.HasPrefix(l.File, ldupdate.CompatDir) {
					continue
				}
				desc := "libc6,x86-64"
				if l.Arch == testimage.I386 {
					desc = "libc6"
				}
				if got := first[l.Soname+" ("+desc+")"]; got != testimage.ResolveDir(rootB, l.Path()) {
					t.Errorf("image library %s (%s) is found at %q, want %q", l.Soname, desc, got, l.Path())
				}
			}
			c := readCache(t, rootB)
			if c.Generator != ldupdate.CacheGenerator() {
				t.Errorf("generator = %q, want %q", c.Generator, ldupdate.CacheGenerator())
			}
		})
	}
}

// failingLDConfig returns a static executable that fails when run as ldconfig: busybox,
// which has no such applet.
func failingLDConfig(t *testing.T) string {
	t.Helper()
	if _, err := ldupdate.StaticLDConfig("/bin/busybox"); err != nil {
		t.Skipf("SKIP: a static busybox is needed to stand in for ldconfig (apt-get install busybox-static): %v", err)
	}
	if _, _, err := runLDConfig(openRoot(t, t.TempDir()), "/bin/busybox", ldupdate.LDConfigInput{}, DefaultDeadline); err == nil {
		t.Fatal("busybox run as ldconfig succeeded: it cannot show that no ldconfig ran")
	}
	return "/bin/busybox"
}

// openRoot opens root for one update with the default limits, closed at cleanup.
func openRoot(t testing.TB, root string) *confined.Root {
	t.Helper()
	r, err := confined.Open(root, confined.DefaultLimits(DefaultDeadline))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r
}

// libraries are the injected libraries at the container paths paths; source, when not nil,
// names each one's host file (an update at create).
func libraries(paths []string, source func(string) string) []ldupdate.Library {
	out := make([]ldupdate.Library, len(paths))
	for i, p := range paths {
		out[i] = ldupdate.Library{Path: p}
		if source != nil {
			out[i].Source = source(p)
		}
	}
	return out
}

// atCreate updates root's loader cache as gpu-runtime does at create, reading the libraries
// at their host files.
func atCreate(t testing.TB, root string, o ldupdate.Options) (ldupdate.Result, error) {
	t.Helper()
	return ldupdate.Update(openRoot(t, root), o)
}

// readCache parses root's cache with ldcache, its path resolved inside root.
func readCache(t *testing.T, root string) *ldcache.Cache {
	t.Helper()
	p, err := securejoin.SecureJoin(root, "/etc/ld.so.cache")
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	c, err := ldcache.ParseCache(data)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestLDCacheAtCreateEquivalence: the update gpu-runtime does at create, before the
// libraries are mounted (reading them at their host files), leaves the same root as the
// hook's in-process update after the mounts: the same cache, byte for byte, the same SONAME
// and development links, the same compat configuration.
func TestLDCacheAtCreateEquivalence(t *testing.T) {
	small := testimage.Options{Libraries: 200, UsrMerge: true, CUDALibraries: 10, I386Libraries: 4}
	for _, tc := range []struct {
		description string
		opts        testimage.Options
	}{
		{"busybox-like image: libraries in /lib, no ld.so.conf", testimage.Options{Libraries: 5, LibDir: "/lib", NoConfig: true}},
		{"small CUDA image", small},
		{"forward compat newer than the driver", func() testimage.Options { o := small; o.CompatVersion = "560.35.03"; return o }()},
		{"glibc-hwcaps subdirectories", testimage.Options{Libraries: 50, UsrMerge: true, GlibcHwcaps: []string{"x86-64-v3"}, HwcapsLibraries: 5}},
		{"no cache and no libraries", testimage.Options{NoConfig: true, NoCache: true}},
	} {
		t.Run(tc.description, func(t *testing.T) {
			rootHook, _ := buildRoot(t, tc.opts)
			rootCreate, _ := buildRoot(t, tc.opts)
			host := t.TempDir()
			paths := inject(t, rootHook, driverLibs)
			inject(t, host, driverLibs)
			opts := ldupdate.Options{LDConfig: failingLDConfig(t), DriverVersion: driverVer,
				Libraries: libraries(paths, func(p string) string { return filepath.Join(host, p) })}

			if res, err := atCreate(t, rootCreate, opts); err != nil || res.Method != ldupdate.MethodInProcess {
				t.Fatalf("the update at create = %+v, %v; want it done in-process", res, err)
			}
			inject(t, rootCreate, driverLibs) // the mounts, after the create
			hookOpts := LDCacheOptions{Options: opts}
			hookOpts.Libraries = libraries(paths, nil)
			if res, err := UpdateLDCache(rootHook, hookOpts); err != nil || res.Method != ldupdate.MethodInProcess {
				t.Fatalf("UpdateLDCache = %+v, %v; want it done in-process", res, err)
			}

			for _, f := range []string{"etc/ld.so.cache", strings.TrimPrefix(ldupdate.CompatConf, "/")} {
				a, errA := os.ReadFile(filepath.Join(rootHook, f))
				b, errB := os.ReadFile(filepath.Join(rootCreate, f))
				if !bytes.Equal(a, b) || (errA == nil) != (errB == nil) {
					t.Errorf("/%s differs: the hook's %d bytes (%v), at create %d bytes (%v)", f, len(a), errA, len(b), errB)
				}
			}
			for _, l := range driverLibs {
				for _, name := range []string{l.soname, ldupdate.DevLinkName(l.file)} {
					a, errA := os.Readlink(filepath.Join(rootHook, l.dir, name))
					b, errB := os.Readlink(filepath.Join(rootCreate, l.dir, name))
					if a != b || (errA == nil) != (errB == nil) {
						t.Errorf("%s/%s: the hook's link -> %q (%v), at create -> %q (%v)", l.dir, name, a, errA, b, errB)
					}
				}
			}
		})
	}
}

// TestLDCacheAtCreateErrors: at create, a library without a host file to read, or one that
// is not a regular file, is an error (the runtime then leaves the update to the hook).
func TestLDCacheAtCreateErrors(t *testing.T) {
	root, _ := buildRoot(t, testimage.Options{Libraries: 5, UsrMerge: true})
	lib := libDir64 + "/libcuda.so.550.54.15"
	for _, tc := range []struct {
		description string
		sources     map[string]string
		want        string
	}{
		{"a host file that is not absolute", map[string]string{lib: "relative"}, `injected library ` + lib + `: no host file to read it from ("relative")`},
		{"a FIFO as the host file", map[string]string{lib: "fifo"}, ""},
	} {
		t.Run(tc.description, func(t *testing.T) {
			sources := tc.sources
			want := tc.want
			if tc.description == "a FIFO as the host file" {
				fifo := filepath.Join(t.TempDir(), "fifo")
				if err := unix.Mkfifo(fifo, 0o644); err != nil {
					t.Fatal(err)
				}
				sources = map[string]string{lib: fifo}
				want = "injected library " + lib + ": " + fifo + ": not a regular file"
			}
			res, err := atCreate(t, root, ldupdate.Options{LDConfig: hostLDConfig, Libraries: libraries([]string{lib}, func(p string) string { return sources[p] })})
			if err == nil && res.Method == ldupdate.MethodLDConfig {
				err = errors.New(res.Reason)
			}
			if err == nil || err.Error() != want {
				t.Errorf("error %v, want %q", err, want)
			}
		})
	}
}

// TestLDCacheAtCreateUnreadableLink: where a link the update checks (the injected library's
// SONAME link, or its development link) cannot be read as the container's user (its
// directory is not searchable for them), the reason names that and its cause: the name is
// not said to be the image's own file.
func TestLDCacheAtCreateUnreadableLink(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("SKIPPED: reading as the container's user (setfsuid) needs root")
	}
	testCases := []struct {
		description string
		lib         driverLib
		want        string
	}{
		{"the SONAME link", driverLibs[0],
			"injected library " + libDir64 + "/libcuda.so.550.54.15: read the link " + libDir64 + "/libcuda.so.1: permission denied"},
		{"the development link (the file has its SONAME's name)", driverLibs[4],
			"injected library " + libDir64 + "/libnvidia-gpucomp.so.550.54.15: read the link " + libDir64 + "/libnvidia-gpucomp.so: permission denied"},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			root, _ := buildRoot(t, testimage.Options{Libraries: 5, UsrMerge: true})
			host := t.TempDir()
			paths := inject(t, host, []driverLib{tc.lib})
			for dir, mode := range map[string]os.FileMode{root: 0o755, filepath.Join(root, libDir64): 0o700} {
				if err := os.Chmod(dir, mode); err != nil {
					t.Fatal(err)
				}
			}
			r := openRoot(t, root)
			r.ReadAs(&confined.Cred{UID: 1000, GID: 1000})
			res, err := ldupdate.Update(r, ldupdate.Options{LDConfig: hostLDConfig, DriverVersion: driverVer,
				Libraries: libraries(paths, func(p string) string { return filepath.Join(host, p) })})
			if err != nil || res.Method != ldupdate.MethodLDConfig || res.Reason != tc.want {
				t.Errorf("Update = %q because %q, %v\nwant %q because %q", res.Method, res.Reason, err, ldupdate.MethodLDConfig, tc.want)
			}
		})
	}
}
