package fakehost

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strings"
)

// MIGDevice is one MIG device of a GPU: a compute instance (CI) inside a GPU instance (GI), as
// NVML enumerates them with nvmlDeviceGetMigDeviceHandleByIndex.
type MIGDevice struct {
	// Profile is the MIG profile name as NVIDIA tools print it: "3g.40gb", "1c.3g.40gb",
	// "1g.10gb+me". It must be the name that go-nvlib's formula gives for this GPU (see
	// MIGProfiles): the GB figure depends on the GPU's memory.
	Profile string
	// GI is the GPU instance id (0-14; the id doubles as the instance's placement, as the
	// driver's swizzle ids do), CI the compute instance id inside it (0-7). MIG devices sharing
	// a GI must have the same GPU instance profile. AddMIGDevices picks both.
	GI, CI int
	// UUID is "MIG-..."; empty means one derived from the parent's UUID, GI and CI.
	UUID string
	// MemoryMiB is what nvmlDeviceGetAttributes reports as memorySizeMB and
	// nvmlDeviceGetMemoryInfo as the total; 0 means the GPU instance profile's memory.
	MemoryMiB int
}

// Minor numbers of the MIG capability device nodes /dev/nvidia-caps/nvidia-cap<N>. The nvidia
// kernel module numbers every capability it could ever create at load time, in this order
// (kernel-open/nvidia/nv-caps.c, g_nv_cap_nvlink_table, g_nv_cap_mig_table,
// g_nv_cap_mig_gpu_table): nvlink's fabric-mgmt 0, mig/config 1, mig/monitor 2, then for each
// GPU minor 0-31 and GPU instance 0-14 the instance's access file followed by its compute
// instances 0-7. The NVIDIA MIG user guide shows the same numbers ("gpu0/gi0/access 3" ...
// "gpu31/gi14/ci7/access 4322").
const (
	CapMinorMIGConfig  = 1
	CapMinorMIGMonitor = 2
	// MIGMaxGPUMinor is the largest GPU minor with MIG capabilities (gpu0-gpu31).
	MIGMaxGPUMinor = 31
	// MIGMaxGI and MIGMaxCI are the largest GPU and compute instance ids with capabilities.
	MIGMaxGI = 14
	MIGMaxCI = 7
)

// GICapMinor returns the minor of /dev/nvidia-caps/nvidia-cap<N> that guards GPU instance gi
// of the GPU with device minor gpuMinor (mig-minors' "gpu<minor>/gi<gi>/access").
func GICapMinor(gpuMinor, gi int) int {
	return 3 + gpuMinor*(MIGMaxGI+1)*(MIGMaxCI+2) + gi*(MIGMaxCI+2)
}

// CICapMinor returns the minor that guards compute instance ci of GPU instance gi
// (mig-minors' "gpu<minor>/gi<gi>/ci<ci>/access").
func CICapMinor(gpuMinor, gi, ci int) int {
	return GICapMinor(gpuMinor, gi) + 1 + ci
}

// Modes the driver gives the capability files, and nvidia-modprobe the device nodes it makes
// from their DeviceFileMode: mig/config is OS_RUSR, mig/monitor and every GPU and compute
// instance access file OS_RUGO (src/nvidia/arch/nvalloc/unix/src/os.c, osRmCapRegisterSys,
// osRmCapRegisterSmcPartition, osRmCapRegisterSmcExecutionPartition).
const (
	capModeConfig = 0o400
	capModeRead   = 0o444
)

// giProfile is a GPU instance profile, as `nvidia-smi mig -lgip` lists them. The ids are the
// driver's profile ids (nvmlGpuInstanceProfileInfo_t.id, nvmlGpuInstanceInfo_t.profileId) and
// the indexes the NVML_GPU_INSTANCE_PROFILE_* constants of nvml.h.
type giProfile struct {
	index, id    int
	slices       int  // compute slices: the "Ng" of the name
	memSlices    int  // memory slices out of 8
	me           bool // "+me": the media extensions of NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1
	instances    int  // how many fit on the GPU
	placements   []int
	sm           int
	ce, dec, enc int
	jpeg, ofa    int
}

// migProduct is the MIG geometry of a GPU product.
type migProduct struct {
	name      string
	totalMiB  int   // the total memory NVML reports for the product
	memMiB    []int // GPU instance memory by memory slice count 1, 2, 4 and 8 (index 0-3)
	profiles  []giProfile
	maxMIGDev int
}

// GPU instance ids by placement. The driver names a GPU instance by its swizzle id, which
// fixes its memory slices: 0 the whole GPU, 1-2 the halves, 3-6 the quarters, 7-14 the
// eighths (`nvidia-smi mig -lgi` on an A100 shows GI 7-13 at 1g placements 0-6, GIs 3-5 at
// 2g placements 0, 2, 4 and GI 2 at the 3g placement 4).
var (
	placementsWhole    = []int{0}
	placementsHalf0    = []int{1}
	placementsHalves   = []int{1, 2}
	placementsQuarter  = []int{3, 4, 5}
	placementsQuarter4 = []int{3, 4, 5, 6}
	placementsEighths  = []int{7, 8, 9, 10, 11, 12, 13}
)

// giMemorySlices returns the first memory slice and the slice count of GPU instance gi.
func giMemorySlices(gi int) (start, size int) {
	switch {
	case gi == 0:
		return 0, 8
	case gi <= 2:
		return (gi - 1) * 4, 4
	case gi <= 6:
		return (gi - 3) * 2, 2
	default:
		return gi - 7, 1
	}
}

// The A100-SXM4-80GB and H100 80GB HBM3 profiles, from `nvidia-smi mig -lgip` on each (SMs,
// copy engines, decoders, encoders, JPEG and OFA engines, memory in GiB: 9.50, 19.50, 39.25,
// 79.00 on the A100; 9.75, 19.62, 39.50, 79.25 on the H100) and the NVIDIA MIG user guide's
// profile tables. 1g.20gb's engine counts on the A100 are not in those outputs; they are
// taken from the guide's H100 table's shape (one of each engine but OFA).
var (
	productA100 = migProduct{
		name:     "A100-SXM4-80GB",
		totalMiB: 81920,
		memMiB:   []int{9728, 19968, 40192, 80896},
		profiles: []giProfile{
			{index: 0, id: 19, slices: 1, memSlices: 1, instances: 7, placements: placementsEighths, sm: 14, ce: 1},
			{index: 7, id: 20, slices: 1, memSlices: 1, me: true, instances: 1, placements: placementsEighths, sm: 14, ce: 1, dec: 1, jpeg: 1, ofa: 1},
			{index: 9, id: 15, slices: 1, memSlices: 2, instances: 4, placements: placementsQuarter4, sm: 14, ce: 1, dec: 1},
			{index: 1, id: 14, slices: 2, memSlices: 2, instances: 3, placements: placementsQuarter, sm: 28, ce: 2, dec: 1},
			{index: 2, id: 9, slices: 3, memSlices: 4, instances: 2, placements: placementsHalves, sm: 42, ce: 3, dec: 2},
			{index: 3, id: 5, slices: 4, memSlices: 4, instances: 1, placements: placementsHalf0, sm: 56, ce: 4, dec: 2},
			{index: 4, id: 0, slices: 7, memSlices: 8, instances: 1, placements: placementsWhole, sm: 98, ce: 7, dec: 5, jpeg: 1, ofa: 1},
		},
		maxMIGDev: 7,
	}
	productH100 = migProduct{
		name:     "H100 80GB HBM3",
		totalMiB: 81559,
		memMiB:   []int{9984, 20096, 40448, 81152},
		profiles: []giProfile{
			{index: 0, id: 19, slices: 1, memSlices: 1, instances: 7, placements: placementsEighths, sm: 16, ce: 1, dec: 1, jpeg: 1},
			{index: 7, id: 20, slices: 1, memSlices: 1, me: true, instances: 1, placements: placementsEighths, sm: 16, ce: 1, dec: 1, jpeg: 1, ofa: 1},
			{index: 9, id: 15, slices: 1, memSlices: 2, instances: 4, placements: placementsQuarter4, sm: 26, ce: 1, dec: 1, jpeg: 1},
			{index: 1, id: 14, slices: 2, memSlices: 2, instances: 3, placements: placementsQuarter, sm: 32, ce: 2, dec: 2, jpeg: 2},
			{index: 2, id: 9, slices: 3, memSlices: 4, instances: 2, placements: placementsHalves, sm: 60, ce: 3, dec: 3, jpeg: 3},
			{index: 3, id: 5, slices: 4, memSlices: 4, instances: 1, placements: placementsHalf0, sm: 64, ce: 4, dec: 4, jpeg: 4},
			{index: 4, id: 0, slices: 7, memSlices: 8, instances: 1, placements: placementsWhole, sm: 132, ce: 8, dec: 7, jpeg: 7, ofa: 1},
		},
		maxMIGDev: 7,
	}
)

// migProductFor returns the MIG geometry of a GPU: the A100 one for compute capability 8.x and
// the H100 one for 9.x and others, with their real memory sizes when the GPU has the real
// product's total memory and sizes scaled from its own total otherwise.
func migProductFor(g *GPU) migProduct {
	p := productA100
	if g.CCMajor >= 9 {
		p = productH100
	}
	total := g.memoryMiB()
	if total == p.totalMiB {
		return p
	}
	p.name = fmt.Sprintf("%d MiB GPU", total)
	p.totalMiB = total
	p.memMiB = nil
	for _, slices := range []int{1, 2, 4, 8} {
		// A GPU instance gets a little less than its share: the driver keeps some of each
		// memory slice (compare 9728 MiB for 1/8 of 81920 MiB).
		share := total * slices / 8
		p.memMiB = append(p.memMiB, (share-share/32)/64*64)
	}
	return p
}

// memMiBFor returns the memory of a GPU instance with memSlices memory slices.
func (p *migProduct) memMiBFor(memSlices int) int {
	return p.memMiB[map[int]int{1: 0, 2: 1, 4: 2, 8: 3}[memSlices]]
}

// The fake names its profiles itself, from the slice counts, memory and media extensions of
// its tables, as nvidia-smi prints them; go-nvlib, which consumers use, names them from the
// NVML profile indexes the fake reports. The tests check the one against the other
// (TestMIGProfiles, TestNVMLMIG), which would prove nothing if the fake asked go-nvlib; and
// this package stays free of cgo, which go-nvlib's device package brings in with go-nvml.

// migMemorySizeGB is the rounding of go-nvlib's getMigMemorySizeGB
// (pkg/nvlib/device/mig_profile.go) and nvidia-smi: the GB figure of a profile name, from the
// instance's memory and the whole GPU's, in bytes.
func migMemorySizeGB(totalDeviceMemory, migMemorySizeMB uint64) uint64 {
	const fracDenominator = 8
	const oneMB = 1024 * 1024
	const oneGB = 1024 * 1024 * 1024
	fractionalGpuMem := (float64(migMemorySizeMB) * oneMB) / float64(totalDeviceMemory)
	fractionalGpuMem = math.Ceil(fractionalGpuMem*fracDenominator) / fracDenominator
	totalMemGB := float64((totalDeviceMemory + oneGB - 1) / oneGB)
	return uint64(math.Round(fractionalGpuMem * totalMemGB))
}

// profileName formats a MIG profile name the way go-nvlib's MigProfileInfo.String does.
func profileName(c, g int, gb uint64, me bool) string {
	suffix := ""
	if me {
		suffix = "+me"
	}
	if c == g {
		return fmt.Sprintf("%dg.%dgb%s", g, gb, suffix)
	}
	return fmt.Sprintf("%dc.%dg.%dgb%s", c, g, gb, suffix)
}

// profileName returns the profile name of a GPU instance profile with c compute slices.
func (p *migProduct) profileName(gp *giProfile, c int) string {
	gb := migMemorySizeGB(uint64(p.totalMiB)<<20, uint64(p.memMiBFor(gp.memSlices)))
	return profileName(c, gp.slices, gb, gp.me)
}

// ciSlicesValid reports whether a compute instance of c slices exists in a GPU instance of g
// slices: all of it, or at most about half (go-nvlib's VisitMigProfiles filter, which matches
// the CI profiles `nvidia-smi mig -lcip` lists on A100 and H100: 1c, 2c and 3g in a 3g).
func ciSlicesValid(c, g int) bool {
	return c == g || (c >= 1 && c < g && c*2 <= g+1)
}

// migProfile is a parsed, resolved profile name.
type migProfile struct {
	gi *giProfile
	c  int
}

var profileRE = regexp.MustCompile(`^(?:([1-9])c\.)?([1-9])g\.([0-9]+)gb(\+me)?$`)

// MIGProfiles returns the profile names a GPU accepts, GPU instance profiles first and then
// their compute instance profiles, in the driver's profile order.
func MIGProfiles(g GPU) []string {
	p := migProductFor(&g)
	var names []string
	for i := range p.profiles {
		names = append(names, p.profileName(&p.profiles[i], p.profiles[i].slices))
	}
	for i := range p.profiles {
		gp := &p.profiles[i]
		for c := 1; c < gp.slices; c++ {
			if ciSlicesValid(c, gp.slices) {
				names = append(names, p.profileName(gp, c))
			}
		}
	}
	return names
}

// resolveProfile finds the GPU instance profile and compute slices of a profile name on a GPU.
func resolveProfile(p *migProduct, name string) (migProfile, error) {
	m := profileRE.FindStringSubmatch(name)
	if m == nil {
		return migProfile{}, fmt.Errorf("MIG profile %q is not of the form 3g.40gb, 1c.3g.40gb or 1g.10gb+me", name)
	}
	for i := range p.profiles {
		gp := &p.profiles[i]
		for c := 1; c <= gp.slices; c++ {
			if ciSlicesValid(c, gp.slices) && p.profileName(gp, c) == name {
				return migProfile{gi: gp, c: c}, nil
			}
		}
	}
	var names []string
	for i := range p.profiles {
		names = append(names, p.profileName(&p.profiles[i], p.profiles[i].slices))
	}
	return migProfile{}, fmt.Errorf("MIG profile %q does not exist on this GPU (%s, %d MiB): its GPU instance profiles are %s",
		name, p.name, p.totalMiB, strings.Join(names, ", "))
}

// TotalMemoryMiB is the GPU's total memory, as its fake NVML reports it
// (nvmlDeviceGetMemoryInfo): MemoryMiB, or the default for its name.
func (g GPU) TotalMemoryMiB() int { return g.memoryMiB() }

// memoryMiB returns the GPU's total memory.
func (g *GPU) memoryMiB() int {
	if g.MemoryMiB != 0 {
		return g.MemoryMiB
	}
	if m, ok := defaultMemoryMiB[g.Name]; ok {
		return m
	}
	return 81920
}

// defaultMemoryMiB is the total memory NVML reports for the names Default uses.
var defaultMemoryMiB = map[string]int{
	"NVIDIA A100-SXM4-80GB": 81920,
	"NVIDIA H100 80GB HBM3": 81559,
}

// defaultMIGUUID derives a MIG device UUID from its parent's UUID and its instance ids.
func defaultMIGUUID(parent string, gi, ci int) string {
	h := sha256.Sum256([]byte(fmt.Sprintf("gpu-runtime fakehost MIG %s/%d/%d", parent, gi, ci)))
	return fmt.Sprintf("MIG-%x-%x-%x-%x-%x", h[0:4], h[4:6], h[6:8], h[8:10], h[10:16])
}

// ErrMIGLayout is returned by AddMIGDevices for profiles that do not fit on the GPU.
var ErrMIGLayout = errors.New("MIG devices do not fit")

// AddMIGDevices puts g, which must be MIG-capable, in MIG mode (current and pending) and adds
// MIG devices of the given profiles, choosing GPU and compute instance ids as the driver could:
// a compute-instance profile ("1c.3g.40gb") goes into an earlier GPU instance of the same
// GPU instance profile while that one has compute slices left, and GPU instances take the
// lowest free ids whose memory slices do not overlap, whatever the order they are listed in
// (as the MIG user guide advises, bigger instances are placed as if created first).
func (g *GPU) AddMIGDevices(profiles ...string) error {
	if !g.MIGCapable {
		return fmt.Errorf("GPU %d (%s, compute capability %d.%d) is not MIG-capable", g.Index, g.Name, g.CCMajor, g.CCMinor)
	}
	p := migProductFor(g)
	type instance struct {
		gp      *giProfile
		gi      int
		used    int // compute slices used by CIs
		nextCI  int
		members []int // indexes into devs
	}
	var instances []*instance
	devs := make([]MIGDevice, len(profiles))
	// Existing devices occupy their instances.
	for _, d := range g.MIGDevices {
		mp, err := resolveProfile(&p, d.Profile)
		if err != nil {
			return fmt.Errorf("GPU %d: existing MIG device %s: %w", g.Index, d.Profile, err)
		}
		var in *instance
		for _, x := range instances {
			if x.gi == d.GI {
				in = x
			}
		}
		if in == nil {
			in = &instance{gp: mp.gi, gi: d.GI}
			instances = append(instances, in)
		}
		in.used += mp.c
		in.nextCI = max(in.nextCI, d.CI+1)
	}
	fixed := len(instances)
	var errs []error
	for i, name := range profiles {
		mp, err := resolveProfile(&p, name)
		if err != nil {
			errs = append(errs, fmt.Errorf("GPU %d: MIG device %d: %w", g.Index, i, err))
			continue
		}
		devs[i].Profile = name
		var in *instance
		if mp.c < mp.gi.slices {
			for _, x := range instances {
				if x.gp == mp.gi && x.used+mp.c <= x.gp.slices {
					in = x
					break
				}
			}
		}
		if in == nil {
			in = &instance{gp: mp.gi, gi: -1}
			instances = append(instances, in)
		}
		in.used += mp.c
		devs[i].GI, devs[i].CI = in.gi, in.nextCI // a new instance's GI is placed below
		in.nextCI++
		in.members = append(in.members, i)
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	// Place the new GPU instances, biggest first, backtracking over the lowest free ids.
	var used [8]bool
	for _, in := range instances[:fixed] {
		start, size := giMemorySlices(in.gi)
		for s := start; s < start+size; s++ {
			used[s] = true
		}
	}
	pending := slices.Clone(instances[fixed:])
	slices.SortStableFunc(pending, func(a, b *instance) int { return b.gp.memSlices - a.gp.memSlices })
	var place func(k int) bool
	place = func(k int) bool {
		if k == len(pending) {
			return true
		}
		for _, gi := range pending[k].gp.placements {
			start, size := giMemorySlices(gi)
			if slices.Contains(used[start:start+size], true) {
				continue
			}
			for s := start; s < start+size; s++ {
				used[s] = true
			}
			pending[k].gi = gi
			if place(k + 1) {
				return true
			}
			for s := start; s < start+size; s++ {
				used[s] = false
			}
		}
		return false
	}
	if !place(0) {
		return fmt.Errorf("GPU %d: %w: %s on top of %d existing MIG devices: no placement of the GPU instances leaves their memory slices apart",
			g.Index, ErrMIGLayout, strings.Join(profiles, ","), len(g.MIGDevices))
	}
	for _, in := range pending {
		for _, i := range in.members {
			devs[i].GI = in.gi
		}
	}
	g.MIGCurrent, g.MIGPending = true, true
	g.MIGDevices = append(g.MIGDevices, devs...)
	return nil
}

// migDevice is a MIG device with everything derived from its profile.
type migDevice struct {
	MIGDevice
	index   int // NVML MIG index on the parent
	gp      *giProfile
	c       int
	sm      int
	name    string // what nvmlDeviceGetName reports
	giStart int
	giSize  int
}

// resolvedMIGDevices returns g's MIG devices in NVML enumeration order (by GPU instance id,
// then compute instance id, as `nvidia-smi -L` and the MIG devices table number them), with
// defaults filled in. g must be valid.
func resolvedMIGDevices(g *GPU) []migDevice {
	p := migProductFor(g)
	var out []migDevice
	for _, d := range g.MIGDevices {
		mp, err := resolveProfile(&p, d.Profile)
		if err != nil {
			continue // validated by Build
		}
		if d.UUID == "" {
			d.UUID = defaultMIGUUID(g.UUID, d.GI, d.CI)
		}
		if d.MemoryMiB == 0 {
			d.MemoryMiB = p.memMiBFor(mp.gi.memSlices)
		}
		start, size := giMemorySlices(d.GI)
		out = append(out, migDevice{
			MIGDevice: d, gp: mp.gi, c: mp.c,
			sm:      mp.gi.sm * mp.c / mp.gi.slices,
			name:    g.Name + " MIG " + d.Profile,
			giStart: start, giSize: size,
		})
	}
	slices.SortFunc(out, func(a, b migDevice) int {
		if a.GI != b.GI {
			return a.GI - b.GI
		}
		return a.CI - b.CI
	})
	for i := range out {
		out[i].index = i
	}
	return out
}

// validateMIG returns the problems of GPU i's MIG options.
func validateMIG(i int, g *GPU) []error {
	var errs []error
	where := func(j int, d MIGDevice) string {
		return fmt.Sprintf("GPU %d: MIG device %d (%s, GI %d, CI %d)", i, j, d.Profile, d.GI, d.CI)
	}
	if !g.MIGCapable && (g.MIGCurrent || g.MIGPending) {
		errs = append(errs, fmt.Errorf("GPU %d: MIG mode is enabled but the GPU is not MIG-capable (set MIGCapable)", i))
	}
	if len(g.MIGDevices) == 0 {
		return errs
	}
	switch {
	case !g.MIGCapable:
		errs = append(errs, fmt.Errorf("GPU %d: has %d MIG devices but is not MIG-capable (set MIGCapable)", i, len(g.MIGDevices)))
		return errs
	case !g.MIGCurrent:
		errs = append(errs, fmt.Errorf("GPU %d: has %d MIG devices but its current MIG mode is disabled (set MIGCurrent)", i, len(g.MIGDevices)))
		return errs
	case g.Excluded:
		errs = append(errs, fmt.Errorf("GPU %d: has MIG devices but is excluded from the driver", i))
	case g.Minor > MIGMaxGPUMinor:
		errs = append(errs, fmt.Errorf("GPU %d: minor %d has no MIG capabilities: the driver numbers them for minors 0-%d", i, g.Minor, MIGMaxGPUMinor))
	}
	p := migProductFor(g)
	type instance struct {
		gp     *giProfile
		slices int
		first  int
	}
	instances := map[int]*instance{}
	cis, uuids := map[[2]int]int{}, map[string]bool{}
	var memUsed [8]int // GI id holding each memory slice, +1
	for j, d := range g.MIGDevices {
		mp, err := resolveProfile(&p, d.Profile)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", where(j, d), err))
			continue
		}
		if d.GI < 0 || d.GI > MIGMaxGI {
			errs = append(errs, fmt.Errorf("%s: GPU instance id %d is not in 0-%d", where(j, d), d.GI, MIGMaxGI))
			continue
		}
		if d.CI < 0 || d.CI > MIGMaxCI {
			errs = append(errs, fmt.Errorf("%s: compute instance id %d is not in 0-%d", where(j, d), d.CI, MIGMaxCI))
			continue
		}
		if k, dup := cis[[2]int{d.GI, d.CI}]; dup {
			errs = append(errs, fmt.Errorf("%s: GI %d / CI %d is also MIG device %d's", where(j, d), d.GI, d.CI, k))
		}
		cis[[2]int{d.GI, d.CI}] = j
		in, ok := instances[d.GI]
		switch {
		case !ok:
			if !slices.Contains(mp.gi.placements, d.GI) {
				errs = append(errs, fmt.Errorf("%s: GPU instance id %d is not a placement of its GPU instance profile (ids %v)",
					where(j, d), d.GI, mp.gi.placements))
			}
			start, size := giMemorySlices(d.GI)
			for s := start; s < start+size; s++ {
				if memUsed[s] != 0 {
					errs = append(errs, fmt.Errorf("%s: GPU instance %d overlaps GPU instance %d (memory slice %d)", where(j, d), d.GI, memUsed[s]-1, s))
					break
				}
			}
			for s := start; s < start+size; s++ {
				memUsed[s] = d.GI + 1
			}
			in = &instance{gp: mp.gi, first: j}
			instances[d.GI] = in
		case in.gp != mp.gi:
			errs = append(errs, fmt.Errorf("%s: GPU instance %d has the profile of MIG device %d (%s)", where(j, d), d.GI, in.first, g.MIGDevices[in.first].Profile))
		}
		in.slices += mp.c
		if in.gp == mp.gi && in.slices > mp.gi.slices {
			errs = append(errs, fmt.Errorf("%s: the compute instances of GPU instance %d need %d compute slices, it has %d", where(j, d), d.GI, in.slices, mp.gi.slices))
		}
		if d.UUID != "" {
			if !strings.HasPrefix(d.UUID, "MIG-") || !printableRE.MatchString(d.UUID) || strings.ContainsAny(d.UUID, " \t") {
				errs = append(errs, fmt.Errorf("%s: UUID %q is not a printable \"MIG-...\" string without blanks", where(j, d), d.UUID))
			}
			if uuids[d.UUID] {
				errs = append(errs, fmt.Errorf("%s: UUID %q is used twice", where(j, d), d.UUID))
			}
			uuids[d.UUID] = true
		}
		if d.MemoryMiB < 0 {
			errs = append(errs, fmt.Errorf("%s: memory %d MiB is negative", where(j, d), d.MemoryMiB))
		} else if d.MemoryMiB > 0 {
			gb := migMemorySizeGB(uint64(p.totalMiB)<<20, uint64(d.MemoryMiB))
			if got := profileName(mp.c, mp.gi.slices, gb, mp.gi.me); got != d.Profile {
				errs = append(errs, fmt.Errorf("%s: memory %d MiB makes it a %s", where(j, d), d.MemoryMiB, got))
			}
		}
	}
	return errs
}

// MIGInfo is what a test needs to know about one MIG device of a built host.
type MIGInfo struct {
	GPU        int // the parent's GPU.Index
	NVMLIndex  int // the parent's NVML index: the G of the "G:I" name
	GPUMinor   int // the parent's device minor: /dev/nvidia<GPUMinor>, and the gpu<N> of the caps
	Index      int // the MIG index I: nvmlDeviceGetMigDeviceHandleByIndex(parent, I)
	UUID       string
	Profile    string
	GI, CI     int
	GICapMinor int // minor of the GPU instance's access capability node
	CICapMinor int // minor of the compute instance's access capability node
	MemoryMiB  int
}

// MIGDevices returns every MIG device of the host, by GPU index and then in NVML order.
func (h *Host) MIGDevices() []MIGInfo {
	var out []MIGInfo
	for _, g := range byIndex(h.Options.GPUs) {
		for _, d := range resolvedMIGDevices(&g) {
			out = append(out, MIGInfo{
				GPU: g.Index, NVMLIndex: h.NVMLIndex(g.Index), GPUMinor: g.Minor, Index: d.index,
				UUID: d.UUID, Profile: d.Profile, GI: d.GI, CI: d.CI,
				GICapMinor: GICapMinor(g.Minor, d.GI), CICapMinor: CICapMinor(g.Minor, d.GI, d.CI),
				MemoryMiB: d.MemoryMiB,
			})
		}
	}
	return out
}

// NVMLIndex returns the NVML index of the GPU with the given GPU.Index, or -1 for an excluded
// GPU, which NVML does not enumerate.
func (h *Host) NVMLIndex(gpuIndex int) int {
	return nvmlIndex(h.Options.GPUs, gpuIndex)
}

// nvmlIndex returns the NVML index of GPU gpuIndex of gpus: its position among the GPUs that
// are not excluded.
func nvmlIndex(gpus []GPU, gpuIndex int) int {
	n := 0
	for _, g := range byIndex(gpus) {
		if g.Index == gpuIndex {
			if g.Excluded {
				return -1
			}
			return n
		}
		if !g.Excluded {
			n++
		}
	}
	return -1
}
