package discover

import (
	"bytes"
	"cmp"
	"context"
	"encoding/csv"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gpu-runtime/gpu-runtime/internal/atomicfile"
	"github.com/gpu-runtime/gpu-runtime/internal/trustedfile"
	"github.com/gpu-runtime/gpu-runtime/pkg/capabilities"
)

// Host is everything discovery learns that is worth keeping between containers.
type Host struct {
	Driver Driver `json:"driver"`
	Files  []File `json:"files"`
	// MIGCaps is how the driver exposes MIG capabilities (from /proc).
	MIGCaps MIGCaps `json:"mig_caps"`
}

// maxCacheSize bounds the cache read: a host's is a few kilobytes.
const maxCacheSize = 16 << 20

// CacheVersion changes whenever the cache format or what discovery finds changes.
const CacheVersion = 8

type cacheFile struct {
	Version     int
	Fingerprint string
	Inputs      []string // fingerprintInputs at the time of writing
	Host        Host
}

// ErrTimeout: NVML did not answer in time.
var ErrTimeout = errors.New("GPU discovery timed out")

// errStale: the cache was written by another gpu-runtime version (a normal event).
var errStale = errors.New("discovery cache is stale")

// Options configure Discover.
type Options struct {
	DriverRoot string
	DevRoot    string
	// ProcRoot is where the driver's /proc files are read for the fingerprint ("/" normally).
	ProcRoot string
	// CacheFile, when set, keeps discovery results between containers.
	CacheFile string
	// Timeout bounds the NVML query; 0 means no bound.
	Timeout time.Duration
	// Query asks NVML, only when the cache cannot answer (gpu-runtime runs `gpu-ctk info
	// --json` and kills it at the deadline).
	Query QueryFunc
}

// QueryFunc asks NVML about a driver root, honouring ctx's deadline.
type QueryFunc func(ctx context.Context, driverRoot string) (Driver, error)

// Result says what Discover did, for logs.
type Result struct {
	Host     Host
	CacheHit bool
	// CacheProblem says why an existing cache could not be trusted or written ("" when it
	// was used, or was missing or stale, which are normal).
	CacheProblem string
}

// Discover returns the host's driver facts and files: from the cache when its fingerprint
// still matches the host, else by querying NVML and scanning the driver root (then refreshing
// the cache). devices, the current device-node scan, is part of the fingerprint, with the
// driver root, the NVML library, the root's ld.so.cache and library directories and the
// driver's /proc entries: a cache never answers for a host that changed.
func Discover(opts Options, devices DeviceNodes) (Result, error) {
	var res Result
	var inputs []string
	var fp string
	if opts.CacheFile != "" {
		c, state, problem := checkCache(opts, devices)
		if state == CacheFresh {
			return Result{Host: c.Host, CacheHit: true}, nil
		}
		if problem != nil && !errors.Is(problem, errStale) {
			res.CacheProblem = problem.Error()
		}
		inputs = fingerprintInputs(opts)
		fp = fingerprint(opts, devices, inputs)
	}
	driver, err := Query(opts)
	if err != nil {
		return res, err
	}
	files, err := FindDriverFiles(opts.DriverRoot, driver.Version)
	if err != nil {
		return res, err
	}
	caps, err := ReadMIGCaps(cmp.Or(opts.ProcRoot, "/"), driver.GPUs)
	if err != nil {
		return res, err
	}
	res.Host = Host{Driver: driver, Files: files, MIGCaps: caps}
	if opts.CacheFile != "" {
		if err := writeCache(opts.CacheFile, cacheFile{Version: CacheVersion, Fingerprint: fp, Inputs: inputs, Host: res.Host}); err != nil {
			res.CacheProblem = strings.TrimPrefix(res.CacheProblem+"; "+err.Error(), "; ")
		}
	}
	return res, nil
}

// The states CheckCache reports.
const (
	CacheFresh    = "fresh"    // it answers for the host as it is: the next create costs no NVML call
	CacheStale    = "stale"    // the host changed since it was written: the next create re-queries NVML
	CacheMissing  = "missing"  // none yet: the next create writes it
	CacheUnusable = "unusable" // it cannot be trusted or read (the error says why): it is rebuilt
)

// CheckCache says what the cache at opts.CacheFile would do for the next create, without
// querying NVML or writing anything (gpu-ctk doctor). The error explains CacheUnusable.
func CheckCache(opts Options, devices DeviceNodes) (string, error) {
	_, state, err := checkCache(opts, devices)
	return state, err
}

// checkCache reads the cache and says whether it answers for the host as it is now.
func checkCache(opts Options, devices DeviceNodes) (cacheFile, string, error) {
	c, err := readCache(opts.CacheFile)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return c, CacheMissing, nil
	case err != nil:
		return c, CacheUnusable, err
	case fingerprint(opts, devices, c.Inputs) != c.Fingerprint:
		return c, CacheStale, nil
	}
	return c, CacheFresh, nil
}

// Query asks NVML with opts.Query about opts.DriverRoot, bounded by opts.Timeout: past it, the
// error is ErrTimeout's, which names the setting and the fix.
func Query(opts Options) (Driver, error) {
	if opts.Query == nil {
		return Driver{}, errors.New("discover: no NVML query configured")
	}
	ctx := context.Background()
	if opts.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, opts.Timeout)
		defer cancel()
	}
	d, err := opts.Query(ctx, opts.DriverRoot)
	if err != nil && ctx.Err() != nil {
		return Driver{}, fmt.Errorf("%w: NVML did not answer within %s (setting discovery.timeout): the NVIDIA driver may be hung or still initialising; check nvidia-smi on the host, and enable persistence mode (nvidia-smi -pm 1)", ErrTimeout, opts.Timeout)
	}
	return d, err
}

// fingerprintInputs lists, as "<label> <path>", what the fingerprint stamps besides the driver
// root's ld.so.cache: every path NVML may be loaded from (an upgrade replaces it) and every
// directory a driver file may live in (libraries, binaries, sockets, configs, firmware versions),
// so that adding or removing a file changes a stamp. The list follows from the ld.so.cache and
// the stamped firmware directories, so the cache keeps it: a hit needs no ld.so.cache parse.
func fingerprintInputs(opts Options) []string {
	entries := rootLDCache(opts.DriverRoot) // parsed once for both uses below
	var inputs []string
	for _, c := range nvmlCandidates(opts.DriverRoot, entries) {
		inputs = append(inputs, "nvml "+c)
	}
	dirs64, dirs32 := libSearchDirs(entries)
	var firmware []string
	for _, d := range firmwareDirs {
		names, _ := os.ReadDir(inRootLexical(opts.DriverRoot, d)) // a missing one is stamped as such
		for _, n := range names {
			if n.IsDir() || n.Type()&fs.ModeSymlink != 0 {
				firmware = append(firmware, firmwareVersionDir(d, n.Name()))
			}
		}
	}
	// The lists share some directories (32- and 64-bit, sockets and configs): each is stamped once.
	for _, d := range dedupe(slices.Concat(dirs64, dirs32, binDirs, firmwareDirs, firmware, capabilities.FileDirs())) {
		inputs = append(inputs, "dir "+inRootLexical(opts.DriverRoot, d))
	}
	return inputs
}

// fingerprint hashes the roots, the stat of the ld.so.cache and of every input, the device
// nodes and the driver's /proc entries.
func fingerprint(opts Options, devices DeviceNodes, inputs []string) string {
	// FNV-128a, not a cryptographic hash: the inputs are the host's (root's) files, not
	// anything a container controls, and crypto/* would add start-up cost to every call.
	h := fnv.New128a()
	_, _ = fmt.Fprintf(h, "v%d\nroot %s\ndev %s\n", CacheVersion, filepath.Clean(opts.DriverRoot), filepath.Clean(opts.DevRoot))
	stamp := func(input string) {
		_, p, _ := strings.Cut(input, " ")
		var st syscall.Stat_t
		if err := syscall.Stat(p, &st); err != nil {
			_, _ = fmt.Fprintf(h, "%s missing\n", input)
			return
		}
		_, _ = fmt.Fprintf(h, "%s %d:%d %d %d.%d %d.%d\n", input, st.Dev, st.Ino, st.Size, st.Mtim.Sec, st.Mtim.Nsec, st.Ctim.Sec, st.Ctim.Nsec)
	}
	ldc, _ := ldcacheFile(opts.DriverRoot)
	stamp("ldcache " + ldc)
	for _, in := range inputs {
		stamp(in)
	}
	var nodes []string
	for p, n := range devices.Nodes {
		nodes = append(nodes, fmt.Sprintf("%s %s %d:%d", p, n.Type, n.Major, n.Minor))
	}
	for p := range devices.Invalid {
		nodes = append(nodes, p+" invalid")
	}
	sort.Strings(nodes)
	_, _ = fmt.Fprintf(h, "nodes %s\n", strings.Join(nodes, ","))
	// A MIG reconfiguration changes the capabilities tree (and the caps nodes above).
	pr := cmp.Or(opts.ProcRoot, "/")
	stamp("version " + filepath.Join(pr, "proc/driver/nvidia/version"))
	stamp("mig-minors " + filepath.Join(pr, ProcMIGMinors))
	_, _ = fmt.Fprintf(h, "gpus %s\n", strings.Join(listTree(filepath.Join(pr, "proc/driver/nvidia/gpus"), 1), ","))
	_, _ = fmt.Fprintf(h, "caps %s\n", strings.Join(listTree(filepath.Join(pr, ProcCapabilities), 6), ","))
	return hex.EncodeToString(h.Sum(nil))
}

// listTree lists the entry names under dir, depth levels deep.
func listTree(dir string, depth int) []string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
		if e.IsDir() && depth > 1 {
			for _, sub := range listTree(filepath.Join(dir, e.Name()), depth-1) {
				out = append(out, path.Join(e.Name(), sub))
			}
		}
	}
	return out
}

// cacheRule is what the cache must be to be read (internal/trustedfile): its writer's alone.
var cacheRule = trustedfile.Rule{What: "discovery cache", Mode: 0o600, Max: maxCacheSize}

// readCache returns the cache file if it is trustworthy (cacheRule), of this version and has
// a driver version; not its fingerprint.
func readCache(p string) (cacheFile, error) {
	data, err := trustedfile.Read(p, cacheRule)
	if err != nil {
		return cacheFile{}, err
	}
	c, err := decodeCache(data)
	if err != nil {
		if errors.Is(err, errStale) {
			return cacheFile{}, fmt.Errorf("%w: %s: written by another gpu-runtime version", errStale, p)
		}
		return cacheFile{}, fmt.Errorf("discovery cache %s ignored: %w", p, err)
	}
	if c.Host.Driver.Version == "" {
		return cacheFile{}, fmt.Errorf("discovery cache %s ignored: no driver version", p)
	}
	return c, nil
}

// The cache is CSV, one record per fact, so that a cache hit decodes without reflection
// (encoding/json cost ~3x as much in a cold gpu-runtime process):
//
//	gpu-runtime discovery cache,<CacheVersion>
//	fingerprint,<hex>
//	input,<label path>                       one per fingerprint input
//	driver,<version>,<CUDA version>,<NVML path>
//	gpu,<index>,<minor>,<UUID>,<name>,<brand>,<bus ID>,<compute capability>,<MIG: capable current pending as 0/1>,<memory MiB>
//	mig,<MIG index>,<UUID>,<GI>,<CI>,<profile>,<memory MiB>,<GI cap minor>,<CI cap minor>   of the gpu record above
//	excluded,<UUID>,<bus ID>                 a GPU the driver excludes
//	caps,<nvidia-caps major>,<config minor>,<monitor minor>
//	file,<kind>,<capability>,<prefix>,<bits>,<host path>,<container path>
const cacheMagic = "gpu-runtime discovery cache"

var cacheFields = map[string]int{"fingerprint": 2, "input": 2, "driver": 4, "gpu": 10, "mig": 9, "excluded": 3, "caps": 4, "file": 7}

// migFlags writes a GPU's MIG state as three 0/1 digits: capable, current, pending.
func migFlags(g GPU) string {
	digit := map[bool]string{false: "0", true: "1"}
	return digit[g.MIGCapable] + digit[g.MIGCurrent] + digit[g.MIGPending]
}

func encodeCache(c cacheFile) ([]byte, error) {
	var b bytes.Buffer
	w := csv.NewWriter(&b)
	d := c.Host.Driver
	records := [][]string{
		{cacheMagic, strconv.Itoa(c.Version)},
		{"fingerprint", c.Fingerprint},
	}
	for _, in := range c.Inputs {
		records = append(records, []string{"input", in})
	}
	records = append(records, []string{"driver", d.Version, d.CUDAVersion, d.NVMLPath})
	for _, g := range d.GPUs {
		records = append(records, []string{"gpu", strconv.Itoa(g.Index), strconv.Itoa(g.Minor), g.UUID, g.Name, g.Brand, g.BusID, g.ComputeCapability, migFlags(g), strconv.Itoa(g.MemoryMiB)})
		for _, m := range g.MIGDevices {
			records = append(records, []string{"mig", strconv.Itoa(m.Index), m.UUID, strconv.Itoa(m.GI), strconv.Itoa(m.CI), m.Profile,
				strconv.Itoa(m.MemoryMiB), strconv.Itoa(m.GICap), strconv.Itoa(m.CICap)})
		}
	}
	for _, x := range d.Excluded {
		records = append(records, []string{"excluded", x.UUID, x.BusID})
	}
	mc := c.Host.MIGCaps
	records = append(records, []string{"caps", strconv.Itoa(mc.Major), strconv.Itoa(mc.Config), strconv.Itoa(mc.Monitor)})
	for _, f := range c.Host.Files {
		records = append(records, []string{"file", string(f.Kind), string(f.Capability), f.Prefix, strconv.Itoa(f.Bits), f.HostPath, f.ContainerPath})
	}
	// encoding/csv reads "\r\n" inside a quoted field back as "\n": such a value would not
	// come back as it went in, so it is not cached (discovery still answers).
	for _, rec := range records {
		for _, field := range rec {
			if strings.ContainsRune(field, '\r') {
				return nil, fmt.Errorf("%s record: %q holds a carriage return", rec[0], field)
			}
		}
	}
	if err := w.WriteAll(records); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// decodeCache reads what encodeCache wrote; errStale for another cache version.
func decodeCache(data []byte) (cacheFile, error) {
	if bytes.HasPrefix(data, []byte(`{"version":`)) {
		return cacheFile{}, errStale // the JSON cache of gpu-runtime before CacheVersion 3
	}
	cr := csv.NewReader(bytes.NewReader(data))
	cr.FieldsPerRecord = -1
	var c cacheFile
	header, err := cr.Read()
	if err != nil || len(header) != 2 || header[0] != cacheMagic {
		return c, errors.New("not a discovery cache")
	}
	if c.Version, err = strconv.Atoi(header[1]); err != nil || c.Version != CacheVersion {
		return c, errStale
	}
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			return c, nil
		}
		if err != nil {
			return c, err
		}
		line, _ := cr.FieldPos(0)
		if want, ok := cacheFields[rec[0]]; !ok || len(rec) != want {
			return c, fmt.Errorf("line %d: unexpected record %q with %d fields", line, rec[0], len(rec))
		}
		var nerr error
		number := func(s string) int {
			n, err := strconv.Atoi(s)
			if err != nil && nerr == nil {
				nerr = fmt.Errorf("line %d: %q is not a number", line, s)
			}
			return n
		}
		switch rec[0] {
		case "fingerprint":
			c.Fingerprint = rec[1]
		case "input":
			c.Inputs = append(c.Inputs, rec[1])
		case "driver":
			c.Host.Driver.Version, c.Host.Driver.CUDAVersion, c.Host.Driver.NVMLPath = rec[1], rec[2], rec[3]
		case "gpu":
			flags := rec[8]
			if len(flags) != 3 || strings.Trim(flags, "01") != "" {
				return c, fmt.Errorf("line %d: MIG state %q is not three 0/1 digits", line, flags)
			}
			c.Host.Driver.GPUs = append(c.Host.Driver.GPUs, GPU{Index: number(rec[1]), Minor: number(rec[2]),
				UUID: rec[3], Name: rec[4], Brand: rec[5], BusID: rec[6], ComputeCapability: rec[7],
				MIGCapable: flags[0] == '1', MIGCurrent: flags[1] == '1', MIGPending: flags[2] == '1', MemoryMiB: number(rec[9])})
		case "mig":
			gpus := c.Host.Driver.GPUs
			if len(gpus) == 0 {
				return c, fmt.Errorf("line %d: a mig record before any gpu record", line)
			}
			g := &gpus[len(gpus)-1]
			g.MIGDevices = append(g.MIGDevices, MIGDevice{Index: number(rec[1]), UUID: rec[2], GI: number(rec[3]), CI: number(rec[4]),
				Profile: rec[5], MemoryMiB: number(rec[6]), GICap: number(rec[7]), CICap: number(rec[8])})
		case "excluded":
			c.Host.Driver.Excluded = append(c.Host.Driver.Excluded, ExcludedGPU{UUID: rec[1], BusID: rec[2]})
		case "caps":
			c.Host.MIGCaps = MIGCaps{Major: number(rec[1]), Config: number(rec[2]), Monitor: number(rec[3])}
		case "file":
			c.Host.Files = append(c.Host.Files, File{Kind: Kind(rec[1]), Capability: capabilities.Capability(rec[2]),
				Prefix: rec[3], Bits: number(rec[4]), HostPath: rec[5], ContainerPath: rec[6]})
		}
		if nerr != nil {
			return c, nerr
		}
	}
}

func writeCache(p string, c cacheFile) error {
	data, err := encodeCache(c)
	if err != nil {
		return fmt.Errorf("encode discovery cache: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return fmt.Errorf("create discovery cache directory: %w", err)
	}
	return atomicfile.Write(p, data, 0o600, atomicfile.Options{}) // root's own file: never a link's target, never another owner
}
