package fakehost

import (
	"bufio"
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"reflect"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gpu-runtime/gpu-runtime/internal/ldcache"
)

// requireBuildable skips, loudly, where Build cannot work.
func requireBuildable(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("SKIPPED: building a fake host needs root (mknod, ldconfig -r); run these tests as root")
	}
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("SKIPPED: building a fake host needs gcc; install it (apt-get install gcc)")
	}
}

// buildHost builds a fake host in a fresh temporary directory.
func buildHost(t *testing.T, opts Options) *Host {
	t.Helper()
	h, err := Build(filepath.Join(t.TempDir(), "host"), opts)
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	return h
}

func TestDefault(t *testing.T) {
	uuidRE := regexp.MustCompile(`^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
	opts := Default(10)
	if err := opts.validate(); err != nil {
		t.Fatalf("Default(10) is not valid: %v", err)
	}
	if opts.DriverVersion != "550.54.15" || opts.CUDAVersion != 12040 || !opts.WithPersistencedSocket {
		t.Errorf("Default(10) = driver %q, CUDA %d, socket %v; want 550.54.15, 12040, true",
			opts.DriverVersion, opts.CUDAVersion, opts.WithPersistencedSocket)
	}
	uuids, busIDs := map[string]bool{}, map[string]bool{}
	for i, g := range opts.GPUs {
		if g.Index != i || g.Minor != i {
			t.Errorf("GPU %d: index %d, minor %d; want %d, %d", i, g.Index, g.Minor, i, i)
		}
		if !uuidRE.MatchString(g.UUID) || uuids[g.UUID] {
			t.Errorf("GPU %d: UUID %q is malformed or repeated", i, g.UUID)
		}
		uuids[g.UUID] = true
		if busIDs[g.BusID] {
			t.Errorf("GPU %d: bus id %q is repeated", i, g.BusID)
		}
		busIDs[g.BusID] = true
		wantCC := [2]int{8, 0}
		if i == 1 {
			wantCC = [2]int{9, 0}
		}
		if got := [2]int{g.CCMajor, g.CCMinor}; got != wantCC {
			t.Errorf("GPU %d: compute capability %v, want %v", i, got, wantCC)
		}
	}
	if opts.GPUs[1].Brand == opts.GPUs[0].Brand || opts.GPUs[1].Name == opts.GPUs[0].Name {
		t.Errorf("GPU 1 should differ from GPU 0 in brand and name: %+v, %+v", opts.GPUs[0], opts.GPUs[1])
	}
	if got, want := opts.GPUs[9].BusID, "00000001:0F:00.0"; got != want {
		t.Errorf("GPU 9: bus id %q, want %q", got, want)
	}
	if !reflect.DeepEqual(Default(3).GPUs, Default(10).GPUs[:3]) {
		t.Errorf("Default is not deterministic")
	}
}

func TestLibraries(t *testing.T) {
	libs := Libraries("550.54.15")
	byPrefix := map[string]Library{}
	caps := map[string]int{}
	for _, l := range libs {
		byPrefix[l.Prefix] = l
		caps[l.Capability]++
	}
	if len(byPrefix) != len(libs) {
		t.Errorf("Libraries has repeated prefixes")
	}
	wantCaps := map[string]int{"utility": 3, "compute": 9, "video": 4, "graphics": 13, "ngx": 1}
	if !reflect.DeepEqual(caps, wantCaps) {
		t.Errorf("libraries per capability = %v, want %v", caps, wantCaps)
	}
	testCases := []struct {
		description string
		want        Library
	}{
		{"NVML", Library{"libnvidia-ml", "libnvidia-ml.so.1", "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.550.54.15", "utility"}},
		{"libcuda", Library{"libcuda", "libcuda.so.1", "usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15", "compute"}},
		{"full-version SONAME", Library{"libnvidia-gpucomp", "libnvidia-gpucomp.so.550.54.15", "usr/lib/x86_64-linux-gnu/libnvidia-gpucomp.so.550.54.15", "compute"}},
		{"VDPAU in a sub-directory", Library{"libvdpau_nvidia", "libvdpau_nvidia.so.1", "usr/lib/x86_64-linux-gnu/vdpau/libvdpau_nvidia.so.550.54.15", "video"}},
		{"GLX", Library{"libGLX_nvidia", "libGLX_nvidia.so.0", "usr/lib/x86_64-linux-gnu/libGLX_nvidia.so.550.54.15", "graphics"}},
		{"NVVM", Library{"libnvidia-nvvm", "libnvidia-nvvm.so.4", "usr/lib/x86_64-linux-gnu/libnvidia-nvvm.so.550.54.15", "compute"}},
		{"NGX", Library{"libnvidia-ngx", "libnvidia-ngx.so.1", "usr/lib/x86_64-linux-gnu/libnvidia-ngx.so.550.54.15", "ngx"}},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			if got := byPrefix[tc.want.Prefix]; got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestLayoutPath(t *testing.T) {
	testCases := []struct {
		description string
		layout      Layout
		rel, want   string
	}{
		{"default layout, library", LayoutDistribution, "usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15", "usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15"},
		{"lib64, library", LayoutLib64, "usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15", "lib64/libcuda.so.550.54.15"},
		{"lib64, vdpau", LayoutLib64, "usr/lib/x86_64-linux-gnu/vdpau/libvdpau_nvidia.so.1", "lib64/vdpau/libvdpau_nvidia.so.1"},
		{"lib64, binary", LayoutLib64, "usr/bin/nvidia-smi", "bin/nvidia-smi"},
		{"lib64, firmware unchanged", LayoutLib64, "lib/firmware/nvidia/550.54.15/gsp_ga10x.bin", "lib/firmware/nvidia/550.54.15/gsp_ga10x.bin"},
		{"lib64, a name that only starts like usr/bin", LayoutLib64, "usr/binaries/x", "usr/binaries/x"},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			if got := tc.layout.Path(tc.rel); got != tc.want {
				t.Errorf("Layout(%q).Path(%q) = %q, want %q", tc.layout, tc.rel, got, tc.want)
			}
		})
	}
}

func TestDecoys(t *testing.T) {
	testCases := []struct {
		description   string
		driverVersion string
		want          []string
	}{
		{"newer driver", "550.54.15", []string{"usr/lib/x86_64-linux-gnu/libfoo.so.1.2.3", "usr/lib/x86_64-linux-gnu/libcuda.so.470.57.02"}},
		{"older driver", "460.32.03", []string{"usr/lib/x86_64-linux-gnu/libfoo.so.1.2.3"}},
		{"same driver", "470.57.02", []string{"usr/lib/x86_64-linux-gnu/libfoo.so.1.2.3"}},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			var got []string
			for _, d := range Decoys(tc.driverVersion) {
				got = append(got, d.RelPath)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Decoys(%q) = %q, want %q", tc.driverVersion, got, tc.want)
			}
		})
	}
}

func TestCompareVersions(t *testing.T) {
	testCases := []struct {
		a, b string
		want int
	}{
		{"550.54.15", "470.57.02", 1},
		{"470.57.02", "550.54.15", -1},
		{"550.54.15", "550.54.15", 0},
		{"550.100.01", "550.54.15", 1},
		{"550.54", "550.54.1", -1},
	}
	for _, tc := range testCases {
		if got := compareVersions(tc.a, tc.b); got != tc.want {
			t.Errorf("compareVersions(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}

func TestBuild(t *testing.T) {
	requireBuildable(t)
	oldDriver := Default(2)
	oldDriver.DriverVersion = "460.32.03"
	oldDriver.CUDAVersion = 11020
	noSocket := Default(1)
	noSocket.WithPersistencedSocket = false
	excluded := Default(3)
	excluded.GPUs[1].Excluded = true
	lib64 := Default(2)
	lib64.Layout = LayoutLib64
	lib64MIG := migHost(t)
	lib64MIG.Layout = LayoutLib64

	testCases := []struct {
		description string
		opts        Options
		subdir      string // under the temporary directory
		wantCUDA    string // as nvidia-smi prints it
	}{
		{description: "one GPU", opts: Default(1), wantCUDA: "12.4"},
		{description: "two GPUs", opts: Default(2), wantCUDA: "12.4"},
		{description: "eight GPUs", opts: Default(8), wantCUDA: "12.4"},
		{description: "no GPUs", opts: Default(0), wantCUDA: "12.4"},
		{description: "driver older than the decoy libcuda", opts: oldDriver, wantCUDA: "11.2"},
		{description: "no persistenced socket", opts: noSocket, wantCUDA: "12.4"},
		{description: "socket path longer than sockaddr_un", opts: Default(1), subdir: strings.Repeat("d", 120), wantCUDA: "12.4"},
		{description: "MIG devices", opts: migHost(t), wantCUDA: "12.4"},
		{description: "an excluded GPU", opts: excluded, wantCUDA: "12.4"},
		{description: "lib64 layout", opts: lib64, wantCUDA: "12.4"},
		{description: "lib64 layout with MIG devices", opts: lib64MIG, wantCUDA: "12.4"},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			t.Parallel()
			h, err := Build(filepath.Join(t.TempDir(), tc.subdir, "host"), tc.opts)
			if err != nil {
				t.Fatalf("Build: %v", err)
			}
			checkDeviceNodes(t, h)
			checkLibraries(t, h)
			checkLDCache(t, h)
			checkBinaries(t, h, tc.wantCUDA)
			checkFiles(t, h)
		})
	}
}

func checkDeviceNodes(t *testing.T, h *Host) {
	t.Helper()
	type node struct {
		name         string // relative to dev/
		major, minor uint32
		mode         uint32
	}
	var want []node
	for _, g := range h.Options.GPUs {
		want = append(want, node{fmt.Sprintf("nvidia%d", g.Minor), 195, uint32(g.Minor), 0o666})
	}
	want = append(want, node{"nvidiactl", 195, 255, 0o666}, node{"nvidia-modeset", 195, 254, 0o666},
		node{"nvidia-uvm", 235, 0, 0o666}, node{"nvidia-uvm-tools", 235, 1, 0o666})
	inMIGMode := false
	for _, g := range h.Options.GPUs {
		inMIGMode = inMIGMode || g.MIGCurrent
	}
	if inMIGMode { // config, monitor and each GPU and compute instance (see proc_test.go)
		want = append(want, node{"nvidia-caps/nvidia-cap1", DefaultCapsMajor, 1, 0o400}, node{"nvidia-caps/nvidia-cap2", DefaultCapsMajor, 2, 0o444})
		gis := map[int]bool{}
		for _, m := range h.MIGDevices() {
			if !gis[m.GICapMinor] {
				want = append(want, node{fmt.Sprintf("nvidia-caps/nvidia-cap%d", m.GICapMinor), DefaultCapsMajor, uint32(m.GICapMinor), 0o444})
				gis[m.GICapMinor] = true
			}
			want = append(want, node{fmt.Sprintf("nvidia-caps/nvidia-cap%d", m.CICapMinor), DefaultCapsMajor, uint32(m.CICapMinor), 0o444})
		}
	}

	var got []node
	dev := filepath.Join(h.DevRoot, "dev")
	err := filepath.WalkDir(dev, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		var st unix.Stat_t
		if err := unix.Stat(path, &st); err != nil {
			return err
		}
		rel, _ := filepath.Rel(dev, path)
		if st.Mode&unix.S_IFMT != unix.S_IFCHR {
			t.Errorf("%s: mode %o, want a character device", rel, st.Mode)
		}
		got = append(got, node{rel, unix.Major(st.Rdev), unix.Minor(st.Rdev), st.Mode & 0o777})
		return nil
	})
	if err != nil {
		t.Fatalf("read device directory: %v", err)
	}
	byName := func(a, b node) int { return strings.Compare(a.name, b.name) }
	slices.SortFunc(got, byName)
	slices.SortFunc(want, byName)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("device nodes = %v, want %v", got, want)
	}

	var listed []node
	for _, n := range h.DeviceNodes() {
		listed = append(listed, node{strings.TrimPrefix(n.RelPath, "dev/"), n.Major, n.Minor, n.Mode})
	}
	slices.SortFunc(listed, byName)
	if !reflect.DeepEqual(listed, want) {
		t.Errorf("DeviceNodes() = %v, want %v", listed, want)
	}
}

// soname returns the DT_SONAME of an ELF shared library.
func soname(t *testing.T, path string) string {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatalf("open ELF file: %v", err)
	}
	defer f.Close()
	names, err := f.DynString(elf.DT_SONAME)
	if err != nil || len(names) != 1 {
		t.Fatalf("read SONAME of %s: %q, %v", path, names, err)
	}
	return names[0]
}

// exports reports whether an ELF shared library exports symbol.
func exports(t *testing.T, path, symbol string) bool {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatalf("open ELF file: %v", err)
	}
	defer f.Close()
	syms, err := f.DynamicSymbols()
	if err != nil {
		t.Fatalf("read dynamic symbols of %s: %v", path, err)
	}
	for _, s := range syms {
		if s.Name == symbol && s.Section != elf.SHN_UNDEF {
			return true
		}
	}
	return false
}

func checkLibraries(t *testing.T, h *Host) {
	t.Helper()
	libs := append(Libraries(h.Options.DriverVersion), Decoys(h.Options.DriverVersion)...)
	for _, l := range libs {
		p := filepath.Join(h.DriverRoot, h.Options.Layout.Path(l.RelPath))
		fi, err := os.Lstat(p)
		if err != nil || !fi.Mode().IsRegular() {
			t.Errorf("library %s: want a regular file, got %v, %v", l.RelPath, fi, err)
			continue
		}
		if got := soname(t, p); got != l.SONAME {
			t.Errorf("library %s: SONAME %q, want %q", l.RelPath, got, l.SONAME)
		}
	}
	if p := h.NVMLPath(); !exports(t, p, "nvmlInit_v2") || !exports(t, p, "nvmlDeviceGetPciInfo_v3") {
		t.Errorf("%s does not export the NVML API", p)
	}
	cuda := filepath.Join(h.LibDir, "libcuda.so."+h.Options.DriverVersion)
	if !exports(t, cuda, "cuDriverGetVersion") {
		t.Errorf("%s does not export cuDriverGetVersion", cuda)
	}
	if exports(t, filepath.Join(h.LibDir, "libnvidia-cfg.so."+h.Options.DriverVersion), "cuDriverGetVersion") {
		t.Errorf("a stub library exports cuDriverGetVersion")
	}
}

// checkLDCache checks the driver root's ld.so.cache with the host's ldconfig -p; for
// LayoutLib64, that there is none and that the SONAME links are there all the same.
func checkLDCache(t *testing.T, h *Host) {
	t.Helper()
	if h.Options.Layout == LayoutLib64 {
		for _, rel := range []string{LDSOCacheRel, LDSOConfRel} {
			if _, err := os.Lstat(filepath.Join(h.DriverRoot, rel)); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("lib64 layout: %s exists (%v), want none", rel, err)
			}
		}
		for _, l := range Libraries(h.Options.DriverVersion) {
			rel := h.Options.Layout.Path(l.RelPath)
			if l.SONAME == path.Base(rel) {
				continue
			}
			link, err := os.Readlink(filepath.Join(h.DriverRoot, path.Dir(rel), l.SONAME))
			if err != nil || link != path.Base(rel) {
				t.Errorf("lib64 layout: %s -> %q (%v), want %q", path.Join(path.Dir(rel), l.SONAME), link, err, path.Base(rel))
			}
		}
		return
	}
	ldconfig, err := findLDConfig()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(ldconfig, "-p", "-C", filepath.Join(h.DriverRoot, LDSOCacheRel)).Output()
	if err != nil {
		t.Fatalf("ldconfig -p: %v", err)
	}
	cache := map[string]string{} // SONAME => path
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		name, rest, ok := strings.Cut(strings.TrimSpace(sc.Text()), " (libc6,x86-64) => ")
		if ok {
			cache[name] = rest
		}
	}
	want := map[string]string{"libfoo.so.1": "/usr/lib/x86_64-linux-gnu/libfoo.so.1"}
	for _, l := range Libraries(h.Options.DriverVersion) {
		want[l.SONAME] = "/" + path.Join(path.Dir(l.RelPath), l.SONAME)
	}
	if !reflect.DeepEqual(cache, want) {
		t.Errorf("ld.so.cache = %v, want %v", cache, want)
	}
	link, err := os.Readlink(filepath.Join(h.LibDir, "libcuda.so.1"))
	if want := "libcuda.so." + h.Options.DriverVersion; err != nil || link != want {
		t.Errorf("libcuda.so.1 -> %q (%v), want %q", link, err, want)
	}
}

func checkBinaries(t *testing.T, h *Host, wantCUDA string) {
	t.Helper()
	for _, rel := range Binaries() {
		rel = h.Options.Layout.Path(rel)
		fi, err := os.Stat(filepath.Join(h.DriverRoot, rel))
		if err != nil || fi.Mode().Perm() != 0o755 {
			t.Errorf("binary %s: want mode 0755, got %v, %v", rel, fi, err)
		}
	}
	smi := filepath.Join(h.BinDir, "nvidia-smi")
	out, err := exec.Command(smi).Output()
	if err != nil {
		t.Fatalf("run nvidia-smi: %v", err)
	}
	header := regexp.MustCompile(`Driver Version: ` + regexp.QuoteMeta(h.Options.DriverVersion) +
		` +CUDA Version: ` + regexp.QuoteMeta(wantCUDA) + ` `)
	if !header.Match(out) {
		t.Errorf("nvidia-smi output lacks the version header:\n%s", out)
	}
	var list []string
	migs := h.MIGDevices()
	for _, g := range h.Options.GPUs { // Default lists GPUs in index order
		line := fmt.Sprintf("GPU %d: %s (UUID: %s)", h.NVMLIndex(g.Index), g.Name, g.UUID)
		if g.Excluded {
			if bytes.Contains(out, []byte(g.UUID)) {
				t.Errorf("nvidia-smi lists excluded GPU %d:\n%s", g.Index, out)
			}
			continue
		}
		list = append(list, line)
		if !bytes.Contains(out, []byte(line)) {
			t.Errorf("nvidia-smi output lacks %q:\n%s", line, out)
		}
		for _, m := range migs {
			if m.GPU == g.Index {
				list = append(list, fmt.Sprintf("  MIG %-11s Device %2d: (UUID: %s)", m.Profile, m.Index, m.UUID))
			}
		}
	}
	out, err = exec.Command(smi, "-L").Output()
	if err != nil {
		t.Fatalf("run nvidia-smi -L: %v", err)
	}
	var got []string
	for _, line := range strings.Split(string(out), "\n") {
		if line != "" {
			got = append(got, line)
		}
	}
	if !reflect.DeepEqual(got, list) {
		t.Errorf("nvidia-smi -L = %q, want %q", got, list)
	}
}

func checkFiles(t *testing.T, h *Host) {
	t.Helper()
	for _, rel := range append(FirmwareFiles(h.Options.DriverVersion), ConfigFiles()...) {
		fi, err := os.Stat(filepath.Join(h.DriverRoot, rel))
		if err != nil || !fi.Mode().IsRegular() || fi.Size() == 0 {
			t.Errorf("%s: want a non-empty file, got %v, %v", rel, fi, err)
		}
	}
	fi, err := os.Lstat(filepath.Join(h.DriverRoot, PersistencedSocketRel))
	switch {
	case !h.Options.WithPersistencedSocket:
		if !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("persistenced socket exists without WithPersistencedSocket: %v, %v", fi, err)
		}
	case err != nil || fi.Mode().Type() != fs.ModeSocket:
		t.Errorf("persistenced socket: want a socket, got %v, %v", fi, err)
	}
}

func TestBuildRejects(t *testing.T) {
	withGPUs := func(edit func(gpus []GPU)) Options {
		opts := Default(2)
		edit(opts.GPUs)
		return opts
	}
	badDriver := Default(1)
	badDriver.DriverVersion = "550"
	noCUDA := Default(1)
	noCUDA.CUDAVersion = 0
	badLayout := Default(1)
	badLayout.Layout = "usr/local/nvidia"
	badArch := Default(1)
	badArch.Arch = "aarch64"
	testCases := []struct {
		description string
		opts        Options
		want        string
	}{
		{"driver version without dots", badDriver, `driver version "550"`},
		{"no CUDA version", noCUDA, "CUDA version 0"},
		{"unknown layout", badLayout, `layout "usr/local/nvidia" is not "" or "lib64"`},
		{"architecture in uname's words", badArch, `architecture "aarch64": the fake host's architecture is "" (this machine's), "amd64" or "arm64"`},
		{"index gap", withGPUs(func(g []GPU) { g[1].Index = 2 }), "index 2 is not in 0-1"},
		{"repeated minor", withGPUs(func(g []GPU) { g[1].Minor = 0 }), "minor 0 is used twice"},
		{"minor of nvidiactl", withGPUs(func(g []GPU) { g[1].Minor = 255 }), "minor 255 is not in 0-253"},
		{"repeated UUID", withGPUs(func(g []GPU) { g[1].UUID = g[0].UUID }), "is used twice"},
		{"empty UUID", withGPUs(func(g []GPU) { g[0].UUID = "" }), `UUID ""`},
		{"name with a newline", withGPUs(func(g []GPU) { g[0].Name = "A100\nFAKEHOST_EOF" }), "not printable"},
		{"malformed bus id", withGPUs(func(g []GPU) { g[0].BusID = "17:00.0" }), `bus id "17:00.0"`},
		{"same bus id twice", withGPUs(func(g []GPU) { g[1].BusID = "0000:07:00.0" }), `bus id "0000:07:00.0" is used twice`},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "host")
			_, err := Build(dir, tc.opts)
			if !errors.Is(err, ErrInvalidOptions) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Build error = %v, want ErrInvalidOptions mentioning %q", err, tc.want)
			}
			if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("Build created %s for invalid options: %v", dir, err)
			}
		})
	}

	t.Run("directory not empty", func(t *testing.T) {
		dir := t.TempDir()
		if err := writeNewFile(filepath.Join(dir, "x"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := Build(dir, Default(1)); err == nil || !strings.Contains(err.Error(), "not empty") {
			t.Errorf("Build error = %v, want a directory-not-empty error", err)
		}
	})
}

func TestBuildLibrary(t *testing.T) {
	requireBuildable(t)
	dir := t.TempDir()
	testCases := []struct {
		description string
		build       func(path string) error
		soname      string
		cuda        bool
	}{
		{"stub", func(p string) error { return BuildLibrary(p, "libfoo.so.2") }, "libfoo.so.2", false},
		{"CUDA forward-compat libcuda", func(p string) error {
			return BuildCUDALibrary(p, "libcuda.so.1", 12060)
		}, "libcuda.so.1", true},
	}
	for i, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			p := filepath.Join(dir, strconv.Itoa(i), "usr/local/cuda/compat/lib.so")
			if err := tc.build(p); err != nil {
				t.Fatalf("build: %v", err)
			}
			if got := soname(t, p); got != tc.soname {
				t.Errorf("SONAME %q, want %q", got, tc.soname)
			}
			if got := exports(t, p, "cuDriverGetVersion"); got != tc.cuda {
				t.Errorf("exports cuDriverGetVersion: %v, want %v", got, tc.cuda)
			}
			if err := tc.build(p); !errors.Is(err, fs.ErrExist) {
				t.Errorf("building over an existing file: error %v, want fs.ErrExist", err)
			}
		})
	}
}

func TestNvidiaSMIMIG(t *testing.T) {
	requireBuildable(t)
	opts := Default(2)
	opts.GPUs[1].UUID = "GPU-c08d91cb-e324-655c-71ba-7570956445bc"
	if err := opts.GPUs[1].AddMIGDevices("1c.3g.40gb", "1c.3g.40gb", "1c.3g.40gb", "1g.10gb", "1g.10gb"); err != nil {
		t.Fatal(err)
	}
	for i, uuid := range []string{"MIG-c788539f-c1ea-5a36-8b4d-9b07d024b1bb", "MIG-405bbda1-6b05-535f-9702-f95e8cd170ce",
		"MIG-df7e5a27-eeea-51a0-9055-b36d5a552879", "MIG-b4b2228d-6933-5839-bc0e-41ab9edb61c6", "MIG-c71dc464-b9f9-5611-9d29-d601a47cffd6"} {
		opts.GPUs[1].MIGDevices[i].UUID = uuid
	}
	h := buildHost(t, opts)
	out, err := exec.Command(filepath.Join(h.DriverRoot, BinDirRel, "nvidia-smi"), "-L").Output()
	if err != nil {
		t.Fatal(err)
	}
	// GPU 1 is the H100 example of the NVIDIA MIG user guide ("CI UUID assignment on H100"), whose
	// nvidia-smi -L output this is, line for line.
	want := "GPU 0: NVIDIA A100-SXM4-80GB (UUID: " + opts.GPUs[0].UUID + ")\n" + `GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-c08d91cb-e324-655c-71ba-7570956445bc)
  MIG 1c.3g.40gb  Device  0: (UUID: MIG-c788539f-c1ea-5a36-8b4d-9b07d024b1bb)
  MIG 1c.3g.40gb  Device  1: (UUID: MIG-405bbda1-6b05-535f-9702-f95e8cd170ce)
  MIG 1c.3g.40gb  Device  2: (UUID: MIG-df7e5a27-eeea-51a0-9055-b36d5a552879)
  MIG 1g.10gb     Device  3: (UUID: MIG-b4b2228d-6933-5839-bc0e-41ab9edb61c6)
  MIG 1g.10gb     Device  4: (UUID: MIG-c71dc464-b9f9-5611-9d29-d601a47cffd6)
`
	if string(out) != want {
		t.Errorf("nvidia-smi -L:\n%s\nwant:\n%s", out, want)
	}
	out, err = exec.Command(filepath.Join(h.DriverRoot, BinDirRel, "nvidia-smi")).Output()
	if err != nil || !bytes.Contains(out, []byte("| MIG devices:")) || !bytes.Contains(out, []byte("Driver Version: 550.54.15")) {
		t.Errorf("nvidia-smi: %v\n%s", err, out)
	}
}

// TestBuildFiles: the file tree without device nodes, built by anyone; where ldconfig -r
// cannot run (not root), the SONAME links are made as ldconfig makes them.
func TestBuildFiles(t *testing.T) {
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("SKIPPED: building a fake host needs gcc; install it (apt-get install gcc)")
	}
	h := BuildFilesT(t, Default(2))
	if entries, err := os.ReadDir(h.DevRoot); err != nil || len(entries) != 0 {
		t.Errorf("device root: %v, %v; want an empty directory", entries, err)
	}
	if _, err := os.Stat(h.NVMLPath()); err != nil {
		t.Errorf("NVML library: %v", err)
	}
	if err := h.linkSONAMEs(); err != nil { // what a non-root build does instead of ldconfig -r
		t.Fatal(err)
	}
	for link, want := range map[string]string{
		"libnvidia-ml.so.1": "libnvidia-ml.so.550.54.15",
		"libcuda.so.1":      "libcuda.so.550.54.15", // the driver's, not the older decoy's
		"libfoo.so.1":       "libfoo.so.1.2.3",
	} {
		if got, err := os.Readlink(filepath.Join(h.LibDir, link)); err != nil || got != want {
			t.Errorf("%s -> %q, %v; want %q", link, got, err, want)
		}
	}
}

// TestBuildFilesArm64 builds the fake host of a Grace Hopper node on this machine: every
// library and the compiled nvidia-cuda-mps-control are aarch64 ELF files in the arm64 multiarch
// directory, the ld.so.cache (which this machine's ldconfig cannot write for them) lists them
// with the AArch64 flags, and the driver's /proc version names the aarch64 module. An arm64
// gpu-ctk loads this NVML under qemu-user in tests/arm64.
func TestBuildFilesArm64(t *testing.T) {
	if runtime.GOARCH == "arm64" {
		t.Skip("SKIPPED: this machine is arm64: TestBuild covers its native fake host")
	}
	if _, err := exec.LookPath("aarch64-linux-gnu-gcc"); err != nil {
		t.Skip("SKIPPED: an arm64 fake host needs the aarch64 cross compiler: apt-get install gcc-aarch64-linux-gnu libc6-dev-arm64-cross (make deps does)")
	}
	opts := Default(2)
	opts.Arch = "arm64"
	h := BuildFilesT(t, opts)
	if want := filepath.Join(h.DriverRoot, "usr/lib/aarch64-linux-gnu"); h.LibDir != want {
		t.Errorf("LibDir = %s, want %s", h.LibDir, want)
	}
	machine := func(p string) elf.Machine {
		t.Helper()
		f, err := elf.Open(p)
		if err != nil {
			t.Fatalf("open %s: %v", p, err)
		}
		defer f.Close()
		return f.Machine
	}
	for _, l := range append(Libraries(opts.DriverVersion), Decoys(opts.DriverVersion)...) {
		if m := machine(filepath.Join(h.DriverRoot, h.Options.Path(l.RelPath))); m != elf.EM_AARCH64 {
			t.Errorf("%s is for %v, want EM_AARCH64", l.RelPath, m)
		}
	}
	if m := machine(filepath.Join(h.BinDir, "nvidia-cuda-mps-control")); m != elf.EM_AARCH64 {
		t.Errorf("nvidia-cuda-mps-control is for %v, want EM_AARCH64", m)
	}
	entries, err := ldcache.Load(filepath.Join(h.DriverRoot, LDSOCacheRel))
	if err != nil {
		t.Fatalf("ld.so.cache: %v", err)
	}
	aarch64, err := ldcache.FlagsFor(64, uint16(elf.EM_AARCH64))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, e := range entries {
		if e.Flags != aarch64 {
			t.Errorf("ld.so.cache entry %s has flags %#x, want AArch64's %#x", e.Name, e.Flags, aarch64)
		}
		got[e.Name] = e.Path
	}
	for name, want := range map[string]string{
		"libnvidia-ml.so.1":    "/usr/lib/aarch64-linux-gnu/libnvidia-ml.so.1",
		"libcuda.so.1":         "/usr/lib/aarch64-linux-gnu/libcuda.so.1",
		"libvdpau_nvidia.so.1": "/usr/lib/aarch64-linux-gnu/vdpau/libvdpau_nvidia.so.1",
	} {
		if got[name] != want {
			t.Errorf("ld.so.cache: %s => %q, want %q", name, got[name], want)
		}
	}
	if n := len(Libraries(opts.DriverVersion)) + 1; len(entries) != n { // the decoy libcuda shares libcuda.so.1
		t.Errorf("ld.so.cache has %d entries, want %d", len(entries), n)
	}
	if link, err := os.Readlink(filepath.Join(h.LibDir, "libcuda.so.1")); err != nil || link != "libcuda.so."+opts.DriverVersion {
		t.Errorf("libcuda.so.1 -> %q, %v; want the driver's libcuda", link, err)
	}
	version, err := os.ReadFile(filepath.Join(h.ProcRoot, ProcVersionRel))
	if err != nil || !strings.HasPrefix(string(version), "NVRM version: NVIDIA UNIX aarch64 Kernel Module  "+opts.DriverVersion) {
		t.Errorf("%s = %q, %v; want the aarch64 module's", ProcVersionRel, version, err)
	}
}
