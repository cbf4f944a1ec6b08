package fakehost

import (
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvlib/pkg/nvlib/device"
	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// nvlib is go-nvlib's device library, whose MIG profile names NVIDIA's tools and our
// nvmlinfo print; the tests check the fake's names and its NVML answers against it.
// NewMigProfile needs no NVML.
var nvlib = device.New(nil)

// ciProfileIndex is the NVML_COMPUTE_INSTANCE_PROFILE_* of a compute instance of N slices.
var ciProfileIndex = map[int]int{1: nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE, 2: nvml.COMPUTE_INSTANCE_PROFILE_2_SLICE,
	3: nvml.COMPUTE_INSTANCE_PROFILE_3_SLICE, 4: nvml.COMPUTE_INSTANCE_PROFILE_4_SLICE, 6: nvml.COMPUTE_INSTANCE_PROFILE_6_SLICE,
	7: nvml.COMPUTE_INSTANCE_PROFILE_7_SLICE, 8: nvml.COMPUTE_INSTANCE_PROFILE_8_SLICE}

func TestMIGProfiles(t *testing.T) {
	// The names `nvidia-smi mig -lgip` and `-lcip` print on both products.
	want := []string{"1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb",
		"1c.2g.20gb", "1c.3g.40gb", "2c.3g.40gb", "1c.4g.40gb", "2c.4g.40gb",
		"1c.7g.80gb", "2c.7g.80gb", "3c.7g.80gb", "4c.7g.80gb"}
	a100, h100 := Default(2).GPUs[0], Default(2).GPUs[1]
	a100_40 := a100
	a100_40.Name, a100_40.MemoryMiB = "NVIDIA A100-SXM4-40GB", 40960
	testCases := []struct {
		description string
		gpu         GPU
		want        []string
		memMiB      map[string]int
	}{
		{"A100-SXM4-80GB", a100, want, map[string]int{"1g.10gb": 9728, "2g.20gb": 19968, "3g.40gb": 40192, "7g.80gb": 80896}},
		{"H100 80GB HBM3", h100, want, map[string]int{"1g.10gb": 9984, "1g.20gb": 20096, "4g.40gb": 40448, "7g.80gb": 81152}},
		{"A100 with 40 GB (scaled sizes)", a100_40, []string{"1g.5gb", "1g.5gb+me", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb",
			"1c.2g.10gb", "1c.3g.20gb", "2c.3g.20gb", "1c.4g.20gb", "2c.4g.20gb", "1c.7g.40gb", "2c.7g.40gb", "3c.7g.40gb", "4c.7g.40gb"}, nil},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			got := MIGProfiles(tc.gpu)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("MIGProfiles = %q, want %q", got, tc.want)
			}
			// go-nvlib names every profile the same from its NVML profile indexes and memory.
			p := migProductFor(&tc.gpu)
			total := uint64(tc.gpu.memoryMiB()) << 20
			for _, name := range got {
				mp, err := resolveProfile(&p, name)
				if err != nil {
					t.Errorf("%s: %v", name, err)
					continue
				}
				mem := p.memMiBFor(mp.gi.memSlices)
				back, err := nvlib.NewMigProfile(mp.gi.index, ciProfileIndex[mp.c], nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, uint64(mem), total)
				if err != nil || back.String() != name {
					t.Errorf("%s: GPU instance profile %d, %d compute slices, %d MiB of %d MiB: go-nvlib names it %v (%v)",
						name, mp.gi.index, mp.c, mem, tc.gpu.memoryMiB(), back, err)
				}
				if w, ok := tc.memMiB[name]; ok && mem != w {
					t.Errorf("%s: %d MiB, want %d", name, mem, w)
				}
			}
		})
	}
}

func TestCapMinors(t *testing.T) {
	// From the NVIDIA MIG user guide's mig-minors listing and its example (GI 1's CIs 0-2 on
	// gpu0 are nvidia-cap13 to 15, GI 1 itself nvidia-cap12).
	testCases := []struct {
		name      string
		got, want int
	}{
		{"gpu0/gi0/access", GICapMinor(0, 0), 3},
		{"gpu0/gi0/ci0/access", CICapMinor(0, 0, 0), 4},
		{"gpu0/gi0/ci2/access", CICapMinor(0, 0, 2), 6},
		{"gpu0/gi1/access", GICapMinor(0, 1), 12},
		{"gpu0/gi1/ci2/access", CICapMinor(0, 1, 2), 15},
		{"gpu31/gi14/ci6/access", CICapMinor(31, 14, 6), 4321},
		{"gpu31/gi14/ci7/access", CICapMinor(31, 14, 7), 4322},
	}
	for _, tc := range testCases {
		if tc.got != tc.want {
			t.Errorf("%s: minor %d, want %d", tc.name, tc.got, tc.want)
		}
	}
}

func TestAddMIGDevices(t *testing.T) {
	type dev struct {
		Profile string
		GI, CI  int
	}
	testCases := []struct {
		description string
		gpu         int // of Default(2)
		profiles    []string
		want        []dev // in the order given
		wantErr     string
	}{
		{description: "3-2-1 on an A100", profiles: []string{"3g.40gb", "2g.20gb", "1g.10gb"},
			want: []dev{{"3g.40gb", 1, 0}, {"2g.20gb", 5, 0}, {"1g.10gb", 13, 0}}},
		{description: "small first is placed as if created big first", profiles: []string{"1g.10gb", "2g.20gb", "3g.40gb"},
			want: []dev{{"1g.10gb", 13, 0}, {"2g.20gb", 5, 0}, {"3g.40gb", 1, 0}}},
		{description: "4g then 3g takes the other half", profiles: []string{"3g.40gb", "4g.40gb"},
			want: []dev{{"3g.40gb", 2, 0}, {"4g.40gb", 1, 0}}},
		{description: "seven 1g", profiles: strings.Split(strings.Repeat("1g.10gb,", 7), ",")[:7],
			want: []dev{{"1g.10gb", 7, 0}, {"1g.10gb", 8, 0}, {"1g.10gb", 9, 0}, {"1g.10gb", 10, 0}, {"1g.10gb", 11, 0}, {"1g.10gb", 12, 0}, {"1g.10gb", 13, 0}}},
		{description: "compute instances share their GPU instance", gpu: 1, profiles: []string{"1c.3g.40gb", "1c.3g.40gb", "1c.3g.40gb", "1g.10gb+me"},
			want: []dev{{"1c.3g.40gb", 1, 0}, {"1c.3g.40gb", 1, 1}, {"1c.3g.40gb", 1, 2}, {"1g.10gb+me", 11, 0}}},
		{description: "a full compute instance gets its own GPU instance", profiles: []string{"2c.3g.40gb", "1c.3g.40gb", "3g.40gb"},
			want: []dev{{"2c.3g.40gb", 1, 0}, {"1c.3g.40gb", 1, 1}, {"3g.40gb", 2, 0}}},
		{description: "too much memory", profiles: []string{"4g.40gb", "4g.40gb"}, wantErr: "no placement of the GPU instances"},
		{description: "a profile of another GPU", profiles: []string{"1g.5gb"}, wantErr: `MIG profile "1g.5gb" does not exist on this GPU`},
		{description: "not a profile", profiles: []string{"3g"}, wantErr: `MIG profile "3g" is not of the form`},
		{description: "a GPU without MIG", gpu: -1, profiles: []string{"1g.10gb"},
			wantErr: "GPU 0 (NVIDIA A100-SXM4-80GB, compute capability 8.6) is not MIG-capable"},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			var g GPU
			if tc.gpu >= 0 {
				g = Default(2).GPUs[tc.gpu]
			} else { // an A100 with a GA102's compute capability: not MIG-capable by default
				g = Default(1).GPUs[0]
				g.CCMinor = 6
				g.MIGCapable = migCapableCC(g.CCMajor, g.CCMinor)
			}
			err := g.AddMIGDevices(tc.profiles...)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("AddMIGDevices error = %v, want one mentioning %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []dev
			for _, d := range g.MIGDevices {
				got = append(got, dev{d.Profile, d.GI, d.CI})
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("MIG devices = %v, want %v", got, tc.want)
			}
			if !g.MIGCapable || !g.MIGCurrent || !g.MIGPending {
				t.Errorf("MIG capable, current, pending = %v, %v, %v; want all true", g.MIGCapable, g.MIGCurrent, g.MIGPending)
			}
			if errs := validateMIG(tc.gpu, &g); len(errs) > 0 {
				t.Errorf("the result is not valid: %v", errors.Join(errs...))
			}
		})
	}
	t.Run("on top of existing devices", func(t *testing.T) {
		g := Default(1).GPUs[0]
		if err := g.AddMIGDevices("1c.3g.40gb"); err != nil {
			t.Fatal(err)
		}
		if err := g.AddMIGDevices("2c.3g.40gb", "3g.40gb"); err != nil {
			t.Fatal(err)
		}
		got := fmt.Sprint(g.MIGDevices)
		if want := "[{1c.3g.40gb 1 0  0} {2c.3g.40gb 1 1  0} {3g.40gb 2 0  0}]"; got != want {
			t.Errorf("MIG devices = %s, want %s", got, want)
		}
	})
}

func TestBuildRejectsMIG(t *testing.T) {
	withGPU := func(i int, edit func(g *GPU)) Options {
		opts := Default(3)
		edit(&opts.GPUs[i])
		return opts
	}
	mig := func(profiles ...string) func(g *GPU) {
		return func(g *GPU) {
			if err := g.AddMIGDevices(profiles...); err != nil {
				t.Fatal(err)
			}
		}
	}
	testCases := []struct {
		description string
		opts        Options
		want        string
	}{
		{"bad profile", withGPU(0, func(g *GPU) {
			mig("3g.40gb")(g)
			g.MIGDevices[0].Profile = "3g.41gb"
		}), `GPU 0: MIG device 0 (3g.41gb, GI 1, CI 0): MIG profile "3g.41gb" does not exist on this GPU (A100-SXM4-80GB, 81920 MiB)`},
		{"duplicate GI and CI", withGPU(2, func(g *GPU) {
			mig("1c.3g.40gb", "1c.3g.40gb")(g)
			g.MIGDevices[1].CI = 0
		}), "GPU 2: MIG device 1 (1c.3g.40gb, GI 1, CI 0): GI 1 / CI 0 is also MIG device 0's"},
		{"MIG devices on a GPU that is not MIG-capable", withGPU(1, func(g *GPU) {
			mig("3g.40gb")(g)
			g.MIGCapable = false
		}), "GPU 1: has 1 MIG devices but is not MIG-capable"},
		{"MIG devices on a GPU not in MIG mode", withGPU(1, func(g *GPU) {
			mig("3g.40gb")(g)
			g.MIGCurrent = false
		}), "GPU 1: has 1 MIG devices but its current MIG mode is disabled"},
		{"MIG mode on a GPU that is not MIG-capable", withGPU(0, func(g *GPU) {
			g.MIGCapable, g.MIGPending = false, true
		}), "GPU 0: MIG mode is enabled but the GPU is not MIG-capable"},
		{"GPU instance id of another profile", withGPU(0, func(g *GPU) {
			mig("3g.40gb")(g)
			g.MIGDevices[0].GI = 3
		}), "GPU 0: MIG device 0 (3g.40gb, GI 3, CI 0): GPU instance id 3 is not a placement of its GPU instance profile (ids [1 2])"},
		{"overlapping GPU instances", withGPU(0, func(g *GPU) {
			mig("3g.40gb", "1g.10gb")(g)
			g.MIGDevices[1].GI = 7
		}), "GPU 0: MIG device 1 (1g.10gb, GI 7, CI 0): GPU instance 7 overlaps GPU instance 1 (memory slice 0)"},
		{"two profiles in one GPU instance", withGPU(0, func(g *GPU) {
			mig("3g.40gb", "4g.40gb")(g)
			g.MIGDevices[0].GI, g.MIGDevices[0].CI = 1, 1
		}), "GPU 0: MIG device 1 (4g.40gb, GI 1, CI 0): GPU instance 1 has the profile of MIG device 0 (3g.40gb)"},
		{"compute instances bigger than their GPU instance", withGPU(0, func(g *GPU) {
			mig("2c.3g.40gb", "1c.3g.40gb")(g)
			g.MIGDevices = append(g.MIGDevices, MIGDevice{Profile: "1c.3g.40gb", GI: 1, CI: 2})
		}), "GPU 0: MIG device 2 (1c.3g.40gb, GI 1, CI 2): the compute instances of GPU instance 1 need 4 compute slices, it has 3"},
		{"compute instance id out of range", withGPU(0, func(g *GPU) {
			mig("3g.40gb")(g)
			g.MIGDevices[0].CI = 8
		}), "GPU 0: MIG device 0 (3g.40gb, GI 1, CI 8): compute instance id 8 is not in 0-7"},
		{"minor without MIG capabilities", withGPU(0, func(g *GPU) {
			mig("7g.80gb")(g)
			g.Minor = 32
		}), "GPU 0: minor 32 has no MIG capabilities: the driver numbers them for minors 0-31"},
		{"MIG devices on an excluded GPU", withGPU(0, func(g *GPU) {
			mig("7g.80gb")(g)
			g.Excluded = true
		}), "GPU 0: has MIG devices but is excluded from the driver"},
		{"memory of another profile", withGPU(0, func(g *GPU) {
			mig("3g.40gb")(g)
			g.MIGDevices[0].MemoryMiB = 20000
		}), "GPU 0: MIG device 0 (3g.40gb, GI 1, CI 0): memory 20000 MiB makes it a 3g.20gb"},
		{"MIG UUID used twice", func() Options {
			opts := withGPU(0, mig("3g.40gb"))
			mig("3g.40gb")(&opts.GPUs[1])
			opts.GPUs[0].MIGDevices[0].UUID = "MIG-same"
			opts.GPUs[1].MIGDevices[0].UUID = "MIG-same"
			return opts
		}(), `GPU 1: MIG UUID "MIG-same" is also a MIG device's of GPU 0`},
		{"MIG UUID without the prefix", withGPU(0, func(g *GPU) {
			mig("3g.40gb")(g)
			g.MIGDevices[0].UUID = "GPU-1"
		}), `UUID "GPU-1" is not a printable "MIG-..." string without blanks`},
		{"nvidia-caps major of nvidia-uvm", func() Options {
			opts := Default(1)
			opts.CapsMajor = UVMMajor
			return opts
		}(), "nvidia-caps major 235 is another NVIDIA device's"},
		{"nvidia-caps major of another driver", func() Options {
			opts := Default(1)
			opts.CapsMajor = 226
			return opts
		}(), "nvidia-caps major 226 is not a free major in 1-511"},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "host")
			_, err := Build(dir, tc.opts)
			if !errors.Is(err, ErrInvalidOptions) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Build error = %v, want ErrInvalidOptions mentioning %q", err, tc.want)
			}
		})
	}
}

// migHost returns Default(5) with MIG devices on GPUs 0 and 1, MIG mode on but pending off
// and no MIG devices on GPU 2, MIG mode off on GPU 3 and GPU 4 not MIG-capable.
func migHost(t *testing.T) Options {
	t.Helper()
	opts := Default(5)
	if err := opts.GPUs[0].AddMIGDevices("3g.40gb", "2g.20gb", "1g.10gb"); err != nil {
		t.Fatal(err)
	}
	if err := opts.GPUs[1].AddMIGDevices("1c.3g.40gb", "1c.3g.40gb", "1c.3g.40gb", "1g.10gb+me", "1g.20gb"); err != nil {
		t.Fatal(err)
	}
	opts.GPUs[2].MIGCurrent = true
	opts.GPUs[4].MIGCapable = false
	return opts
}

// migReport is what the "mig" child reads.
type migReport struct {
	GPUs []migGPUReport
}

type migGPUReport struct {
	UUID                  string
	MigMode               string // "<return> <current> <pending>"
	MaxMigDevices         int
	Devices               []migDeviceReport
	AfterLast             string // GetMigDeviceHandleByIndex's return at the index after the last device
	AtMax                 string // and at the max count
	OnGPU                 string // GetGpuInstanceId, GetComputeInstanceId, GetAttributes on the GPU handle
	UnusedGI              string // GetGpuInstanceById of a GI id no device uses
	MemoryMiB             uint64
	FromMigDeviceOfParent string // GetDeviceHandleFromMigDeviceHandle of the GPU handle
	// What go-nvlib's Device reads: "<index> <UUID>" of each MIG device VisitMigDevices
	// visits, and the names of GetMigProfiles, sorted and without duplicates.
	Visited  []string
	Profiles []string
}

type migDeviceReport struct {
	Index       int
	UUID, Name  string
	IsMig       bool
	Parent      string // UUID of GetDeviceHandleFromMigDeviceHandle
	ByUUID      string // "same" when GetHandleByUUID gives back this handle
	GI, CI      int
	MinorNumber string // return of GetMinorNumber
	Attributes  nvml.DeviceAttributes
	MemoryMiB   uint64
	GIProfileID uint32
	GIPlacement nvml.GpuInstancePlacement
	CIPlacement nvml.ComputeInstancePlacement
	Profile     string // go-nvlib's MigDevice.GetProfile, from the GPU and compute instance profile ids
}

// readMIG is the "mig" child: it walks every GPU's MIG devices through go-nvml, and reads
// them with go-nvlib.
func readMIG(t *testing.T, path string) any {
	lib := nvml.New(nvml.WithLibraryPath(path))
	if ret := lib.Init(); ret != nvml.SUCCESS {
		t.Fatalf("init: %v", ret)
	}
	defer lib.Shutdown()
	devs := device.New(lib)
	must := func(what string, ret nvml.Return) {
		t.Helper()
		if ret != nvml.SUCCESS {
			t.Errorf("%s: %v", what, ret)
		}
	}
	var r migReport
	n, ret := lib.DeviceGetCount()
	must("count", ret)
	for i := 0; i < n; i++ {
		gpu, ret := lib.DeviceGetHandleByIndex(i)
		must("handle", ret)
		var g migGPUReport
		g.UUID, _ = gpu.GetUUID()
		cur, pend, ret := gpu.GetMigMode()
		g.MigMode = fmt.Sprintf("%v %d %d", ret, cur, pend)
		g.MaxMigDevices, ret = gpu.GetMaxMigDeviceCount()
		must("max MIG device count", ret)
		mem, ret := gpu.GetMemoryInfo()
		must("memory", ret)
		g.MemoryMiB = mem.Total >> 20
		_, ret1 := gpu.GetGpuInstanceId()
		_, ret2 := gpu.GetComputeInstanceId()
		_, ret3 := gpu.GetAttributes()
		g.OnGPU = fmt.Sprintf("%v, %v, %v", ret1, ret2, ret3)
		_, ret = gpu.GetDeviceHandleFromMigDeviceHandle()
		g.FromMigDeviceOfParent = ret.Error()
		_, ret = gpu.GetGpuInstanceById(14)
		g.UnusedGI = ret.Error()
		// Enumerate as the reference says: 0..max-1, stopping at NOT_FOUND.
		for j := 0; j < g.MaxMigDevices; j++ {
			mig, ret := gpu.GetMigDeviceHandleByIndex(j)
			if ret == nvml.ERROR_NOT_FOUND {
				g.AfterLast = ret.Error()
				break
			}
			must("MIG device handle", ret)
			g.Devices = append(g.Devices, readMIGDevice(t, lib, devs, gpu, mig))
		}
		_, ret = gpu.GetMigDeviceHandleByIndex(g.MaxMigDevices)
		g.AtMax = ret.Error()
		dev, err := devs.NewDevice(gpu)
		if err != nil {
			t.Fatal(err)
		}
		if err := dev.VisitMigDevices(func(j int, m device.MigDevice) error {
			uuid, ret := m.GetUUID()
			if ret != nvml.SUCCESS {
				return ret
			}
			g.Visited = append(g.Visited, fmt.Sprintf("%d %s", j, uuid))
			return nil
		}); err != nil {
			t.Errorf("go-nvlib VisitMigDevices: %v", err)
		}
		profiles, err := dev.GetMigProfiles()
		if err != nil {
			t.Errorf("go-nvlib GetMigProfiles: %v", err)
		}
		for _, p := range profiles {
			g.Profiles = append(g.Profiles, p.String())
		}
		slices.Sort(g.Profiles)
		g.Profiles = slices.Compact(g.Profiles)
		r.GPUs = append(r.GPUs, g)
	}
	return r
}

func readMIGDevice(t *testing.T, lib nvml.Interface, devs device.Interface, gpu, mig nvml.Device) migDeviceReport {
	must := func(what string, ret nvml.Return) {
		t.Helper()
		if ret != nvml.SUCCESS {
			t.Errorf("%s: %v", what, ret)
		}
	}
	var d migDeviceReport
	var ret nvml.Return
	d.Index, ret = mig.GetIndex()
	must("MIG index", ret)
	d.UUID, ret = mig.GetUUID()
	must("MIG UUID", ret)
	d.Name, ret = mig.GetName()
	must("MIG name", ret)
	d.IsMig, ret = mig.IsMigDeviceHandle()
	must("is MIG", ret)
	parent, ret := mig.GetDeviceHandleFromMigDeviceHandle()
	must("parent", ret)
	d.Parent, _ = parent.GetUUID()
	byUUID, ret := lib.DeviceGetHandleByUUID(d.UUID)
	must("by UUID", ret)
	if byUUID == mig {
		d.ByUUID = "same"
	}
	d.GI, ret = mig.GetGpuInstanceId()
	must("GI id", ret)
	d.CI, ret = mig.GetComputeInstanceId()
	must("CI id", ret)
	_, ret = mig.GetMinorNumber()
	d.MinorNumber = ret.Error()
	d.Attributes, ret = mig.GetAttributes()
	must("attributes", ret)
	mem, ret := mig.GetMemoryInfo()
	must("MIG memory", ret)
	d.MemoryMiB = mem.Total >> 20
	gi, ret := gpu.GetGpuInstanceById(d.GI)
	must("GPU instance", ret)
	giInfo, ret := gi.GetInfo()
	must("GPU instance info", ret)
	d.GIProfileID, d.GIPlacement = giInfo.ProfileId, giInfo.Placement
	ci, ret := gi.GetComputeInstanceById(d.CI)
	must("compute instance", ret)
	ciInfo, ret := ci.GetInfo()
	must("compute instance info", ret)
	d.CIPlacement = ciInfo.Placement
	if giInfo.Device != gpu || ciInfo.Device != gpu || ciInfo.GpuInstance != gi || int(ciInfo.Id) != d.CI {
		t.Errorf("MIG device %s: instance infos do not point back at their GPU, GPU instance and id", d.UUID)
	}

	m, err := devs.NewMigDevice(mig)
	if err != nil {
		t.Fatal(err)
	}
	if profile, err := m.GetProfile(); err != nil {
		d.Profile = err.Error()
	} else {
		d.Profile = profile.String()
	}
	return d
}

func TestNVMLMIG(t *testing.T) {
	requireBuildable(t)
	h := buildHost(t, migHost(t))
	var got migReport
	if stderr := runChild(t, &got, childLibsEnv+"="+h.NVMLPath(), childScenarioEnv+"=mig"); stderr != "" {
		t.Errorf("child stderr: %s", stderr)
	}

	// The GI profile ids and placements of `nvidia-smi mig -lgip` / `-lgipp`.
	giProfileIDs := map[string]uint32{"3g.40gb": 9, "2g.20gb": 14, "1g.10gb": 19, "1c.3g.40gb": 9, "1g.10gb+me": 20, "1g.20gb": 15}
	placements := map[int]nvml.GpuInstancePlacement{1: {Start: 0, Size: 4}, 5: {Start: 4, Size: 2}, 13: {Start: 6, Size: 1}}
	attributes := map[string]nvml.DeviceAttributes{ // from `nvidia-smi mig -lgip` of each product
		"A100 3g.40gb":    {MultiprocessorCount: 42, SharedCopyEngineCount: 3, SharedDecoderCount: 2, GpuInstanceSliceCount: 3, ComputeInstanceSliceCount: 3, MemorySizeMB: 40192},
		"A100 2g.20gb":    {MultiprocessorCount: 28, SharedCopyEngineCount: 2, SharedDecoderCount: 1, GpuInstanceSliceCount: 2, ComputeInstanceSliceCount: 2, MemorySizeMB: 19968},
		"A100 1g.10gb":    {MultiprocessorCount: 14, SharedCopyEngineCount: 1, GpuInstanceSliceCount: 1, ComputeInstanceSliceCount: 1, MemorySizeMB: 9728},
		"H100 1c.3g.40gb": {MultiprocessorCount: 20, SharedCopyEngineCount: 3, SharedDecoderCount: 3, SharedJpegCount: 3, GpuInstanceSliceCount: 3, ComputeInstanceSliceCount: 1, MemorySizeMB: 40448},
		"H100 1g.20gb":    {MultiprocessorCount: 26, SharedCopyEngineCount: 1, SharedDecoderCount: 1, SharedJpegCount: 1, GpuInstanceSliceCount: 1, ComputeInstanceSliceCount: 1, MemorySizeMB: 20096},
		"H100 1g.10gb+me": {MultiprocessorCount: 16, SharedCopyEngineCount: 1, SharedDecoderCount: 1, SharedJpegCount: 1, SharedOfaCount: 1, GpuInstanceSliceCount: 1, ComputeInstanceSliceCount: 1, MemorySizeMB: 9984},
	}
	var want migReport
	migs := h.MIGDevices()
	for _, g := range h.Options.GPUs {
		w := migGPUReport{UUID: g.UUID, MemoryMiB: uint64(g.memoryMiB()),
			OnGPU: "Not Supported, Not Supported, Not Supported", FromMigDeviceOfParent: "Invalid Argument"}
		switch {
		case !g.MIGCapable:
			w.MigMode, w.AtMax, w.UnusedGI = "Not Supported 0 0", "Not Supported", "Not Supported"
		case !g.MIGCurrent:
			w.MigMode, w.AtMax, w.UnusedGI = "Success 0 0", "Invalid Argument", "Not Supported"
		default:
			w.MigMode = fmt.Sprintf("Success 1 %d", map[bool]int{false: 0, true: 1}[g.MIGPending])
			w.MaxMigDevices, w.AtMax, w.UnusedGI = 7, "Invalid Argument", "Not Found"
			if len(g.MIGDevices) < 7 {
				w.AfterLast = "Not Found"
			}
		}
		product := map[int]string{8: "A100", 9: "H100"}[g.CCMajor]
		for _, m := range migs {
			if m.GPU != g.Index {
				continue
			}
			d := migDeviceReport{Index: m.Index, UUID: m.UUID, Name: g.Name + " MIG " + m.Profile, IsMig: true,
				Parent: g.UUID, ByUUID: "same", GI: m.GI, CI: m.CI, MinorNumber: "Not Supported",
				Attributes: attributes[product+" "+m.Profile], MemoryMiB: uint64(m.MemoryMiB),
				GIProfileID: giProfileIDs[m.Profile], GIPlacement: placements[m.GI],
				CIPlacement: nvml.ComputeInstancePlacement{Start: uint32(m.CI), Size: map[bool]uint32{true: 1, false: 3}[strings.HasPrefix(m.Profile, "1")]},
				Profile:     m.Profile}
			if strings.HasPrefix(m.Profile, "2g") {
				d.CIPlacement.Size = 2
			}
			w.Devices = append(w.Devices, d)
			w.Visited = append(w.Visited, fmt.Sprintf("%d %s", m.Index, m.UUID))
		}
		if g.MIGCapable {
			w.Profiles = slices.Sorted(slices.Values(MIGProfiles(g)))
		}
		want.GPUs = append(want.GPUs, w)
	}
	// GPU 0: GIs 1, 5, 13 (3g, 2g, 1g); GPU 1: GI 1 holds three 1c CIs, 1g.20gb is GI 5, +me GI 13.
	if n := len(want.GPUs[0].Devices) + len(want.GPUs[1].Devices); n != 8 {
		t.Fatalf("test host has %d MIG devices, want 8", n)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("go-nvml read:\n%s\nwant:\n%s", jsonString(got), jsonString(want))
	}
}
