package fakehost

import (
	_ "embed" // for the C checker
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// A process can use only one fake NVML (see csrc/fakenvml.c), so every go-nvml check runs in a
// child process: the test binary run again for TestNVMLChild, with these variables set.
const (
	childLibsEnv     = "FAKEHOST_TEST_NVML_LIBS"     // fake NVML paths to load in turn, os.PathListSeparator-separated
	childReportEnv   = "FAKEHOST_TEST_NVML_REPORT"   // where to write what the child read, as JSON
	childScenarioEnv = "FAKEHOST_TEST_NVML_SCENARIO" // what the child does: a key of childScenarios
	childEventsEnv   = "FAKEHOST_TEST_NVML_EVENTS"   // the events file, for the "events" scenario
	childHostDirEnv  = "FAKEHOST_TEST_HOST_DIR"      // the host's directory, for the "reload" scenario
)

// childScenarios are what a child process can do with one fake NVML at path: each returns
// what it read, to be written as JSON. "" is the []nvmlReport of TestNVML, for every library.
var childScenarios = map[string]func(t *testing.T, path string) any{
	"mig":    readMIG,
	"events": runEvents,
	"reload": runReload,
}

// nvmlReport is what the child read through go-nvml from one fake NVML.
type nvmlReport struct {
	Init          int
	InitError     string
	InitTook      time.Duration `json:"-"`
	InitMillis    int64
	DriverVersion string
	NVMLVersion   string
	CUDAVersion   int
	CUDAVersionV2 int
	GPUs          []gpuReport
	Excluded      []string // "<UUID> <bus id>" of nvmlGetExcludedDeviceInfoByIndex
	Shutdown      int
}

type gpuReport struct {
	Index, Minor     int
	UUID, Name       string
	Brand            int
	CCMajor, CCMinor int
	Architecture     int
	BusID            string
	BusIDLegacy      string
	Domain, Bus      uint32
	PCIDeviceID      uint32
	ByUUID, ByBusID  int // index of the handle found by UUID, by legacy bus id
	MigModeReturn    int
	PersistenceMode  int
}

// TestNVMLChild is not a test: it is the child process of the NVML tests.
func TestNVMLChild(t *testing.T) {
	libs := os.Getenv(childLibsEnv)
	if libs == "" {
		t.Skip("not a test: the child process of the NVML tests, run only by them")
	}
	var report any
	if scenario := os.Getenv(childScenarioEnv); scenario != "" {
		report = childScenarios[scenario](t, libs)
	} else {
		var reports []nvmlReport
		for _, path := range filepath.SplitList(libs) {
			reports = append(reports, readNVML(t, path))
		}
		report = reports
	}
	data, err := json.Marshal(report)
	if err != nil {
		t.Fatal(err)
	}
	if err := writeNewFile(os.Getenv(childReportEnv), data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// readNVML loads the NVML library at path with go-nvml and reads everything it reports.
func readNVML(t *testing.T, path string) nvmlReport {
	check := func(what string, ret nvml.Return) {
		if ret != nvml.SUCCESS {
			t.Errorf("%s %s: %v", path, what, ret)
		}
	}
	lib := nvml.New(nvml.WithLibraryPath(path))
	var r nvmlReport
	start := time.Now()
	ret := lib.Init()
	r.InitMillis = time.Since(start).Milliseconds()
	r.Init, r.InitError = int(ret), ret.Error()
	if ret == nvml.SUCCESS {
		var ret nvml.Return
		r.DriverVersion, ret = lib.SystemGetDriverVersion()
		check("driver version", ret)
		r.NVMLVersion, ret = lib.SystemGetNVMLVersion()
		check("NVML version", ret)
		r.CUDAVersion, ret = lib.SystemGetCudaDriverVersion()
		check("CUDA version", ret)
		r.CUDAVersionV2, ret = lib.SystemGetCudaDriverVersion_v2()
		check("CUDA version v2", ret)
		n, ret := lib.DeviceGetCount()
		check("device count", ret)
		for i := 0; i < n; i++ {
			r.GPUs = append(r.GPUs, readGPU(t, lib, i))
		}
		n, ret = lib.GetExcludedDeviceCount()
		check("excluded device count", ret)
		for i := 0; i < n; i++ {
			info, ret := lib.GetExcludedDeviceInfoByIndex(i)
			check("excluded device info", ret)
			r.Excluded = append(r.Excluded, cChars(info.Uuid[:])+" "+cChars(info.PciInfo.BusId[:]))
		}
	}
	r.Shutdown = int(lib.Shutdown())
	return r
}

func readGPU(t *testing.T, lib nvml.Interface, i int) gpuReport {
	check := func(what string, ret nvml.Return) {
		if ret != nvml.SUCCESS {
			t.Errorf("GPU %d %s: %v", i, what, ret)
		}
	}
	var g gpuReport
	dev, ret := lib.DeviceGetHandleByIndex(i)
	check("handle", ret)
	g.Index, ret = dev.GetIndex()
	check("index", ret)
	g.Minor, ret = dev.GetMinorNumber()
	check("minor", ret)
	g.UUID, ret = dev.GetUUID()
	check("UUID", ret)
	g.Name, ret = dev.GetName()
	check("name", ret)
	brand, ret := dev.GetBrand()
	check("brand", ret)
	g.Brand = int(brand)
	g.CCMajor, g.CCMinor, ret = dev.GetCudaComputeCapability()
	check("compute capability", ret)
	arch, ret := dev.GetArchitecture()
	check("architecture", ret)
	g.Architecture = int(arch)
	pci, ret := dev.GetPciInfo()
	check("PCI info", ret)
	g.BusID, g.BusIDLegacy = cChars(pci.BusId[:]), cChars(pci.BusIdLegacy[:])
	g.Domain, g.Bus, g.PCIDeviceID = pci.Domain, pci.Bus, pci.PciDeviceId
	byUUID, ret := lib.DeviceGetHandleByUUID(g.UUID)
	check("handle by UUID", ret)
	g.ByUUID, _ = byUUID.GetIndex()
	byBusID, ret := lib.DeviceGetHandleByPciBusId(strings.ToLower(g.BusIDLegacy))
	check("handle by bus id", ret)
	g.ByBusID, _ = byBusID.GetIndex()
	_, _, ret = dev.GetMigMode()
	g.MigModeReturn = int(ret)
	mode, ret := dev.GetPersistenceMode()
	check("persistence mode", ret)
	g.PersistenceMode = int(mode)
	return g
}

// cChars converts a NUL-terminated C char array.
func cChars(a []int8) string {
	var b strings.Builder
	for _, c := range a {
		if c == 0 {
			break
		}
		b.WriteByte(byte(c))
	}
	return b.String()
}

// runChild runs a child process with the given environment (childLibsEnv and
// childScenarioEnv at least), decodes what it reports into report and returns its stderr.
func runChild(t *testing.T, report any, env ...string) string {
	t.Helper()
	reportPath := filepath.Join(t.TempDir(), "report.json")
	cmd := exec.Command(os.Args[0], "-test.run=^TestNVMLChild$", "-test.count=1")
	cmd.Env = append(append(os.Environ(), env...), childReportEnv+"="+reportPath)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("child process: %v\nstdout:\n%s\nstderr:\n%s", err, out, stderr.String())
	}
	data, err := os.ReadFile(reportPath)
	if err != nil {
		t.Fatalf("read child report: %v", err)
	}
	if err := json.Unmarshal(data, report); err != nil {
		t.Fatalf("decode child report: %v", err)
	}
	return stderr.String()
}

// runNVMLChild loads the libraries at paths, in turn, in a child process and returns what it
// read and its stderr.
func runNVMLChild(t *testing.T, paths ...string) ([]nvmlReport, string) {
	t.Helper()
	var reports []nvmlReport
	stderr := runChild(t, &reports, childLibsEnv+"="+strings.Join(paths, string(os.PathListSeparator)))
	for i := range reports {
		reports[i].InitTook = time.Duration(reports[i].InitMillis) * time.Millisecond
		reports[i].InitMillis = 0
	}
	return reports, stderr
}

// wantReport is what a fake NVML built from opts must report. GPUs must be listed in index
// order with canonical bus ids.
func wantReport(opts Options) nvmlReport {
	archs := map[[2]int]int{{7, 5}: 6, {8, 0}: 7, {8, 6}: 7, {8, 9}: 8, {9, 0}: 9}
	devIDs := map[string]uint32{"NVIDIA A100-SXM4-80GB": 0x20b210de, "NVIDIA H100 80GB HBM3": 0x233010de}
	r := nvmlReport{
		Init:          0,
		InitError:     "Success",
		DriverVersion: opts.DriverVersion,
		NVMLVersion:   strconv.Itoa(opts.CUDAVersion/1000) + "." + opts.DriverVersion,
		CUDAVersion:   opts.CUDAVersion,
		CUDAVersionV2: opts.CUDAVersion,
	}
	for _, g := range opts.GPUs {
		if g.Excluded {
			r.Excluded = append(r.Excluded, g.UUID+" "+g.BusID)
			continue
		}
		domain, _ := strconv.ParseUint(g.BusID[:8], 16, 32)
		bus, _ := strconv.ParseUint(g.BusID[9:11], 16, 32)
		devID, ok := devIDs[g.Name]
		if !ok {
			devID = 0x20b210de
		}
		migMode, persistence := nvml.ERROR_NOT_SUPPORTED, nvml.FEATURE_ENABLED
		if g.MIGCapable {
			migMode = nvml.SUCCESS
		}
		if g.PersistenceDisabled {
			persistence = nvml.FEATURE_DISABLED
		}
		index := len(r.GPUs) // excluded GPUs make NVML indexes differ from GPU.Index
		r.GPUs = append(r.GPUs, gpuReport{
			Index: index, Minor: g.Minor, UUID: g.UUID, Name: g.Name, Brand: g.Brand,
			CCMajor: g.CCMajor, CCMinor: g.CCMinor, Architecture: archs[[2]int{g.CCMajor, g.CCMinor}],
			BusID: g.BusID, BusIDLegacy: g.BusID[4:], Domain: uint32(domain), Bus: uint32(bus),
			PCIDeviceID: devID, ByUUID: index, ByBusID: index,
			MigModeReturn:   int(migMode),
			PersistenceMode: int(persistence),
		})
	}
	return r
}

func TestNVML(t *testing.T) {
	requireBuildable(t)

	// Listed out of index order, with odd minors, a 4-digit lower-case bus id and a GeForce.
	custom := Options{
		DriverVersion: "535.104.05",
		CUDAVersion:   12020,
		GPUs: []GPU{
			{Index: 1, Minor: 7, UUID: "GPU-11111111-2222-3333-4444-555555555555", Name: "NVIDIA GeForce RTX 3090",
				Brand: 5, BusID: "0000:3b:00.0", CCMajor: 8, CCMinor: 6},
			{Index: 0, Minor: 3, UUID: "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee", Name: "Tesla T4",
				Brand: 2, BusID: "00000000:AF:00.0", CCMajor: 7, CCMinor: 5},
		},
	}
	customWant := wantReport(Options{DriverVersion: custom.DriverVersion, CUDAVersion: custom.CUDAVersion,
		GPUs: []GPU{custom.GPUs[1], custom.GPUs[0]}})
	customWant.GPUs[1].BusID, customWant.GPUs[1].BusIDLegacy = "00000000:3B:00.0", "0000:3B:00.0"
	customWant.GPUs[1].Domain, customWant.GPUs[1].Bus = 0, 0x3b

	initError := Default(2)
	initError.NVMLInitError = true
	initErrorWant := nvmlReport{Init: int(nvml.ERROR_DRIVER_NOT_LOADED), InitError: "Driver Not Loaded",
		Shutdown: int(nvml.ERROR_UNINITIALIZED)}

	delayed := Default(1)
	delayed.NVMLInitDelay = 300 * time.Millisecond

	// GPU 1 excluded: NVML lists GPUs 0 and 2 as 0 and 1. GPU 0 not in persistence mode.
	excluded := Default(3)
	excluded.GPUs[1].Excluded = true
	excluded.GPUs[0].PersistenceDisabled = true

	otherHostWant := nvmlReport{Init: int(nvml.ERROR_UNKNOWN), InitError: "Unknown Error",
		Shutdown: int(nvml.ERROR_UNINITIALIZED)}

	testCases := []struct {
		description string
		hosts       []Options // loaded in turn in one process
		want        []nvmlReport
		wantStderr  string
		minInit     time.Duration
	}{
		{description: "one GPU", hosts: []Options{Default(1)}, want: []nvmlReport{wantReport(Default(1))}},
		{description: "two GPUs", hosts: []Options{Default(2)}, want: []nvmlReport{wantReport(Default(2))}},
		{description: "eight GPUs", hosts: []Options{Default(8)}, want: []nvmlReport{wantReport(Default(8))}},
		{description: "nine GPUs over two PCI domains", hosts: []Options{Default(9)}, want: []nvmlReport{wantReport(Default(9))}},
		{description: "no GPUs", hosts: []Options{Default(0)}, want: []nvmlReport{wantReport(Default(0))}},
		{description: "custom GPUs", hosts: []Options{custom}, want: []nvmlReport{customWant}},
		{description: "init error", hosts: []Options{initError}, want: []nvmlReport{initErrorWant}},
		{description: "init delay", hosts: []Options{delayed}, want: []nvmlReport{wantReport(delayed)},
			minInit: delayed.NVMLInitDelay},
		{description: "an excluded GPU and persistence mode off", hosts: []Options{excluded}, want: []nvmlReport{wantReport(excluded)}},
		{description: "two hosts alike in one process", hosts: []Options{Default(2), Default(2)},
			want: []nvmlReport{wantReport(Default(2)), wantReport(Default(2))}},
		{description: "two different hosts in one process fail loudly", hosts: []Options{Default(1), Default(3)},
			want:       []nvmlReport{wantReport(Default(1)), otherHostWant},
			wantStderr: "fake NVML libraries of different fake hosts are loaded in this process"},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			t.Parallel()
			var paths []string
			for i, opts := range tc.hosts {
				h, err := Build(filepath.Join(t.TempDir(), "host"+strconv.Itoa(i)), opts)
				if err != nil {
					t.Fatalf("Build: %v", err)
				}
				paths = append(paths, h.NVMLPath())
			}
			got, stderr := runNVMLChild(t, paths...)
			for i := range got {
				if got[i].InitTook < tc.minInit {
					t.Errorf("library %d: init took %v, want at least %v", i, got[i].InitTook, tc.minInit)
				}
				got[i].InitTook = 0
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("go-nvml read:\n%s\nwant:\n%s", jsonString(got), jsonString(tc.want))
			}
			if tc.wantStderr == "" && stderr != "" || !strings.Contains(stderr, tc.wantStderr) {
				t.Errorf("child stderr %q, want it to mention %q (and to be empty when that is empty)", stderr, tc.wantStderr)
			}
		})
	}
}

func jsonString(v any) string {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(data)
}

//go:embed csrc/nvmlcheck.c
var nvmlCheckSource []byte

// TestNVMLLibraryC checks, with plain dlopen, what go-nvml cannot reach: calls before init,
// small buffers, bad handles, reference counting, and the fake libcuda.
func TestNVMLLibraryC(t *testing.T) {
	requireBuildable(t)
	exe, err := gccBuild("", map[string][]byte{"nvmlcheck.c": nvmlCheckSource}, "-Wall", "-Wextra", "-Werror", "nvmlcheck.c")
	if err != nil {
		t.Fatalf("build nvmlcheck: %v", err)
	}
	checker := filepath.Join(t.TempDir(), "nvmlcheck")
	if err := writeNewFile(checker, exe, 0o755); err != nil {
		t.Fatal(err)
	}
	testCases := []struct {
		description string
		opts        Options
	}{
		{"one GPU", Default(1)},
		{"three GPUs", Default(3)},
		{"no GPUs", Default(0)},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			h := buildHost(t, tc.opts)
			firstUUID := "none"
			if len(tc.opts.GPUs) > 0 {
				firstUUID = tc.opts.GPUs[0].UUID
			}
			out, err := exec.Command(checker, h.NVMLPath(), strconv.Itoa(len(tc.opts.GPUs)), firstUUID,
				filepath.Join(h.LibDir, "libcuda.so.1"), strconv.Itoa(tc.opts.CUDAVersion)).CombinedOutput()
			if err != nil {
				t.Errorf("nvmlcheck: %v\n%s", err, out)
			}
		})
	}
}
