package discover

import (
	"bytes"
	"cmp"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode"

	"golang.org/x/sys/unix"

	"github.com/gpu-runtime/gpu-runtime/internal/atomicfile"
	"github.com/gpu-runtime/gpu-runtime/internal/quote"
	"github.com/gpu-runtime/gpu-runtime/internal/trustedfile"
)

// Health says why a device must not be given to containers. Three signals count, none
// needing NVML: the driver's /proc entry of a known GPU is gone (HealthGone), the driver
// excluded the GPU (HealthExcluded), or the health file — written by gpu-ctk health watch from
// NVML events, or gpu-ctk health mark — has a record for the GPU or MIG device (HealthRecorded).
type Health struct {
	Signal string `json:"signal"`
	// Reason says what is wrong: "Xid 79: GPU has fallen off the bus", "double-bit ECC error",
	// an operator's words.
	Reason string `json:"reason"`
	// Xid is the Xid of an Xid error; 0 for none.
	Xid uint64 `json:"xid,omitempty"`
	// Since is when the health file's record was made; zero for the driver's signals.
	Since time.Time `json:"since,omitzero"`
	// Source is the file that says it: the health file, or the driver's /proc file.
	Source string `json:"source"`
}

// The signals of Health.
const (
	HealthGone     = "gone"
	HealthExcluded = "excluded"
	HealthRecorded = "recorded"
)

// String describes h for messages: the reason, since when, and where it was read.
func (h Health) String() string {
	if h.Signal != HealthRecorded {
		return h.Reason
	}
	return fmt.Sprintf("%s since %s (recorded in %s)", h.Reason, h.Since.UTC().Format(time.RFC3339), h.Source)
}

// Fix says how the device comes back into service.
func (h Health) Fix(uuid string) string {
	switch h.Signal {
	case HealthGone:
		return "check the kernel log (dmesg) for Xid errors, reset or re-seat the GPU, or reload the driver"
	case HealthExcluded:
		return "remove it from the driver's NVreg_ExcludedGpus and reload the driver to use it"
	default:
		return "when it is repaired, or the record was a false alarm, return it to service: gpu-ctk health clear " + uuid
	}
}

// ExcludedGPU is a GPU the driver excludes (NVreg_ExcludedGpus): NVML does not enumerate it,
// so it has no index, only what nvmlGetExcludedDeviceInfoByIndex says.
type ExcludedGPU struct {
	UUID  string `json:"uuid"`
	BusID string `json:"bus_id"`
}

// Where is " at <bus>" as the driver's /proc names the bus, or "" when it does not parse.
func (x ExcludedGPU) Where() string {
	if bus, ok := ProcBusID(x.BusID); ok {
		return " at " + bus
	}
	return ""
}

// Reason says why gpu-runtime gives x to no container.
func (x ExcludedGPU) Reason() string {
	return "excluded by the driver (NVreg_ExcludedGpus)" + x.Where() + ": NVML and CUDA do not see it"
}

// The driver's per-GPU /proc directory, relative to the proc root.
const ProcGPUs = "proc/driver/nvidia/gpus"

// ProcBusID is the name of a GPU's directory under ProcGPUs for NVML's bus id, false when it
// does not parse: "00000000:0F:00.0" → "0000:0f:00.0", the kernel's "%04x:%02x:%02x.%x".
func ProcBusID(busID string) (string, bool) {
	domain, rest, ok1 := strings.Cut(busID, ":")
	bus, rest, ok2 := strings.Cut(rest, ":")
	dev, fn, ok3 := strings.Cut(rest, ".")
	if !ok1 || !ok2 || !ok3 {
		return "", false
	}
	var n [4]uint64
	for i, s := range []string{domain, bus, dev, fn} {
		v, err := strconv.ParseUint(s, 16, 32)
		if err != nil || s == "" {
			return "", false
		}
		n[i] = v
	}
	return fmt.Sprintf("%04x:%02x:%02x.%x", n[0], n[1], n[2], n[3]), true
}

// HealthOptions say where health is read.
type HealthOptions struct {
	// File is the health file; "" for none.
	File string
	// ProcRoot is where the driver's /proc files are read ("/" normally).
	ProcRoot string
}

// ReadHealth sets the Health of every GPU and MIG device of gpus, in place, from the driver's
// /proc (one small file per GPU) and the health file, never NVML. A MIG device's own field says
// only what concerns it (pkg/plan adds its GPU's). An untrusted or corrupt health file is
// ignored, with a warning.
func ReadHealth(gpus []GPU, opts HealthOptions) []string {
	// Entries are opened relative to the gpus directory: shorter lookups, and without it (no
	// driver loaded) nothing is known of any GPU, at the cost of this one call.
	gpusDir := filepath.Join(cmp.Or(opts.ProcRoot, "/"), ProcGPUs)
	dir, err := unix.Open(gpusDir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err == nil {
		defer func() { _ = unix.Close(dir) }()
	}
	for i := range gpus {
		g := &gpus[i]
		g.Health = nil
		for j := range g.MIGDevices {
			g.MIGDevices[j].Health = nil
		}
		if err == nil {
			g.Health = procHealth(dir, gpusDir, g.BusID)
		}
	}
	if opts.File == "" {
		return nil
	}
	records, err := ReadHealthFile(opts.File)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return []string{err.Error() + "; no device is held back by it until it is fixed (gpu-ctk health clear all rewrites it)"}
	}
	for _, r := range records {
		h := &Health{Signal: HealthRecorded, Reason: r.Reason, Xid: r.Xid, Since: r.Since, Source: opts.File}
		for i := range gpus {
			g := &gpus[i]
			if strings.EqualFold(g.UUID, r.UUID) && g.Health == nil {
				g.Health = h
			}
			for j := range g.MIGDevices {
				if m := &g.MIGDevices[j]; strings.EqualFold(m.UUID, r.UUID) {
					m.Health = h
				}
			}
		}
	}
	return nil
}

// excludedLine is the line of a GPU's information file that says the driver excludes it
// (kernel-open/nvidia/nv-procfs.c: "GPU Excluded:\t %s\n", "Yes" or "No").
var excludedLine = []byte("GPU Excluded:")

// procHealth reads what the driver's /proc (dir, an O_PATH handle of gpusDir) says of the GPU
// at busID: gone without an entry, excluded when its information file says "GPU Excluded:
// Yes"; nil otherwise. Raw system calls: this runs for every GPU of every create.
func procHealth(dir int, gpusDir, busID string) *Health {
	name, ok := ProcBusID(busID)
	if !ok {
		return nil
	}
	shown := "/" + ProcGPUs + "/" + name // as the user knows it
	fd, err := unix.Openat(dir, name+"/information", unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if errors.Is(err, unix.ENOENT) {
		var st unix.Stat_t
		if errors.Is(unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW), unix.ENOENT) {
			return &Health{Signal: HealthGone, Reason: "gone: the driver has no " + shown + " (the GPU fell off the bus, or was removed)", Source: gpusDir + "/" + name}
		}
		return nil
	}
	if err != nil {
		return nil
	}
	defer func() { _ = unix.Close(fd) }() // read-only: nothing to lose
	// One read: the file is ~400 bytes, and procfs gives a read all of it that fits.
	var buf [4096]byte
	n, err := unix.Read(fd, buf[:])
	if err != nil || n <= 0 {
		return nil
	}
	data := buf[:n]
	i := bytes.Index(data, excludedLine)
	if i < 0 {
		return nil
	}
	value, _, _ := bytes.Cut(data[i+len(excludedLine):], []byte("\n"))
	if !bytes.EqualFold(bytes.TrimSpace(value), []byte("Yes")) {
		return nil
	}
	return &Health{Signal: HealthExcluded, Reason: "excluded by the administrator: " + shown + `/information says "GPU Excluded: Yes" (NVreg_ExcludedGpus)`,
		Source: gpusDir + "/" + name + "/information"}
}

// HealthRecord is one record of the health file: a GPU or MIG device kept from containers.
type HealthRecord struct {
	UUID   string
	Reason string
	Xid    uint64 // 0 for none
	Since  time.Time
}

// The health file is CSV with a header, one record per device, readable with cat:
//
//	uuid,reason,xid,since
//	GPU-8f3a…,Xid 79: GPU has fallen off the bus,79,2026-11-25T10:00:00Z
//	MIG-1c2d…,taken out for maintenance,,2026-11-25T10:05:00Z
var healthHeader = []string{"uuid", "reason", "xid", "since"}

// maxHealthSize bounds the health file: a record is ~100 bytes.
const maxHealthSize = 1 << 20

// MaxHealthReason bounds a record's reason.
const MaxHealthReason = 256

// ErrHealthFormat marks a health file that is not one.
var ErrHealthFormat = errors.New("not a health file")

// ValidHealthUUID reports whether s is "GPU-" or "MIG-" (in any case, as
// NVIDIA_VISIBLE_DEVICES matches them) and then letters, digits and dashes.
func ValidHealthUUID(s string) bool {
	if len(s) <= 4 || len(s) > 96 || !(strings.EqualFold(s[:4], "GPU-") || strings.EqualFold(s[:4], "MIG-")) {
		return false
	}
	for _, r := range s[4:] {
		if !(r == '-' || r < unicode.MaxASCII && (unicode.IsLetter(r) || unicode.IsDigit(r))) {
			return false
		}
	}
	return true
}

// ValidHealthReason says what is wrong with a reason, or "" when it is good: one line of
// printable text, at most MaxHealthReason bytes.
func ValidHealthReason(s string) string {
	switch {
	case strings.TrimSpace(s) == "":
		return "it is empty"
	case len(s) > MaxHealthReason:
		return fmt.Sprintf("it is longer than %d bytes", MaxHealthReason)
	case strings.IndexFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0:
		return "it holds a control character (one line of printable text expected)"
	}
	return ""
}

// EncodeHealth writes records as a health file, sorted by UUID.
func EncodeHealth(records []HealthRecord) []byte {
	sorted := slices.Clone(records)
	slices.SortFunc(sorted, func(a, b HealthRecord) int { return strings.Compare(a.UUID, b.UUID) })
	var b bytes.Buffer
	w := csv.NewWriter(&b)
	_ = w.Write(healthHeader)
	for _, r := range sorted {
		xid := ""
		if r.Xid != 0 {
			xid = strconv.FormatUint(r.Xid, 10)
		}
		_ = w.Write([]string{r.UUID, r.Reason, xid, r.Since.UTC().Format(time.RFC3339)})
	}
	w.Flush()
	return b.Bytes()
}

// DecodeHealth reads a health file; an error (wrapping ErrHealthFormat) names the line.
func DecodeHealth(data []byte) ([]HealthRecord, error) {
	cr := csv.NewReader(bytes.NewReader(data))
	cr.FieldsPerRecord = -1
	header, err := cr.Read()
	if err != nil || !slices.Equal(header, healthHeader) {
		return nil, fmt.Errorf("%w: the first line is not %q", ErrHealthFormat, strings.Join(healthHeader, ","))
	}
	var out []HealthRecord
	seen := map[string]int{}
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrHealthFormat, err)
		}
		line, _ := cr.FieldPos(0)
		bad := func(format string, args ...any) error {
			return fmt.Errorf("%w: line %d: %s", ErrHealthFormat, line, fmt.Sprintf(format, args...))
		}
		if len(rec) != len(healthHeader) {
			return nil, bad("%d fields, want 4 (uuid, reason, xid, since)", len(rec))
		}
		r := HealthRecord{UUID: rec[0], Reason: rec[1]}
		if !ValidHealthUUID(r.UUID) {
			return nil, bad("%s is not a GPU or MIG device UUID", quote.Value(r.UUID))
		}
		if first, dup := seen[strings.ToUpper(r.UUID)]; dup {
			return nil, bad("%s already has a record on line %d", r.UUID, first)
		}
		seen[strings.ToUpper(r.UUID)] = line
		if why := ValidHealthReason(r.Reason); why != "" {
			return nil, bad("the reason of %s is not valid: %s", r.UUID, why)
		}
		if rec[2] != "" {
			if r.Xid, err = strconv.ParseUint(rec[2], 10, 64); err != nil || r.Xid == 0 || strconv.FormatUint(r.Xid, 10) != rec[2] {
				return nil, bad("xid %s is not an Xid number", quote.Value(rec[2]))
			}
		}
		if r.Since, err = time.Parse(time.RFC3339, rec[3]); err != nil {
			return nil, bad("since %s is not an RFC 3339 time", quote.Value(rec[3]))
		}
		if y := r.Since.UTC().Year(); y < 0 || y > 9999 {
			// Written back in UTC, it would not parse: year 0 at +01:00 is year -1.
			return nil, bad("since %s is outside the years 0000–9999 in UTC", quote.Value(rec[3]))
		}
		out = append(out, r)
	}
}

// ReadHealthFile reads the health file at p if it is root's own with mode 0600
// (trustedfile); an error wraps fs.ErrNotExist or says why the file is ignored.
func ReadHealthFile(p string) ([]HealthRecord, error) {
	data, err := trustedfile.Read(p, trustedfile.Rule{What: "health file", Mode: 0o600, Max: maxHealthSize})
	if err != nil {
		return nil, err
	}
	records, err := DecodeHealth(data)
	if err != nil {
		return nil, fmt.Errorf("health file %s ignored: %w", p, err)
	}
	return records, nil
}

// UpdateHealthFile replaces the health file at p atomically (mode 0600) with what update
// returns for its records. An advisory lock on p + ".lock" serialises updates, so the watcher
// and gpu-ctk health mark never lose each other's records. A file that cannot be trusted or
// read is started afresh, with a warning.
func UpdateHealthFile(p string, update func([]HealthRecord) ([]HealthRecord, error)) (warning string, err error) {
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return "", fmt.Errorf("create health file directory: %w", err)
	}
	lock, err := os.OpenFile(p+".lock", os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0o600)
	if err != nil {
		return "", fmt.Errorf("open health file lock: %w", err)
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		return "", fmt.Errorf("lock health file %s: %w", p, err)
	}
	records, err := ReadHealthFile(p) // none on any error
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		warning = err.Error() + "; it is replaced"
	}
	next, err := update(records)
	if err != nil {
		return warning, err
	}
	if err := atomicfile.Write(p, EncodeHealth(next), 0o600, atomicfile.Options{}); err != nil {
		return warning, fmt.Errorf("write health file: %w", err)
	}
	return warning, nil
}
