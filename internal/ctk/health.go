package ctk

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/gpu-runtime/gpu-runtime/internal/gpuhost"
	"github.com/gpu-runtime/gpu-runtime/internal/nvmlinfo"
	"github.com/gpu-runtime/gpu-runtime/pkg/config"
	"github.com/gpu-runtime/gpu-runtime/pkg/discover"
	"github.com/gpu-runtime/gpu-runtime/pkg/plan"
)

const healthUsage = `usage:
  gpu-ctk health [--json]
  gpu-ctk health watch
  gpu-ctk health mark DEVICE --reason TEXT [--xid N]
  gpu-ctk health clear DEVICE|all

DEVICE is an index as gpu-ctk health prints it (0, or 1:0 for a MIG device) or a UUID
(GPU-…, MIG-…).

gpu-runtime gives no container a device that is unhealthy: a GPU whose
/proc/driver/nvidia/gpus/<bus id> is gone, one the driver excludes ("GPU Excluded: Yes"),
and a GPU or MIG device recorded in the health file (health.file, default
/run/gpu-runtime/health.csv). A container naming one fails with the reason;
NVIDIA_VISIBLE_DEVICES=all leaves it out with a warning (health.all = "skip") or fails
(health.all = "fail").

  health         each device (from NVML) with its state, since when, the Xid recorded with it
                 and the reason; records for devices this host does not have are listed too
  watch          wait on NVML events of every GPU and MIG device — Xid critical errors
                 (except health.ignore-xids: application errors) and double-bit ECC errors —
                 and record each device they make unhealthy; runs until stopped (SIGTERM),
                 re-initialising NVML when the driver goes away and comes back; SIGHUP
                 re-initialises it at once. The package's gpu-runtime-health.service runs it.
  mark           record a device as unhealthy (an operator, a DCGM policy script)
  clear          remove a device's record (or every record): it is given to containers again
`

// healthCommands are the subcommands of gpu-ctk health; without one it shows every device.
var healthCommands = map[string]func(args []string, stdout, stderr io.Writer) error{
	"watch": runHealthWatch, "mark": runHealthMark, "clear": runHealthClear,
}

func runHealth(args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && healthCommands[args[0]] != nil {
		return healthCommands[args[0]](args[1:], stdout, stderr)
	}
	fs := flag.NewFlagSet("gpu-ctk health", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print JSON")
	if help, err := parseFlags(fs, args, healthUsage, stdout); help || err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unknown health command %q: the commands are watch, mark and clear (gpu-ctk health --help)", ErrUsage, fs.Arg(0))
	}
	cfg, err := loadConfig(stderr)
	if err != nil {
		return err
	}
	return showHealth(cfg, *asJSON, stdout, stderr)
}

// DeviceHealth is one line of gpu-ctk health.
type DeviceHealth struct {
	// Index is "0", "0:1", or "" for a device this host does not show (an excluded GPU, a
	// record of a device that is gone).
	Index string `json:"index"`
	UUID  string `json:"uuid"`
	// Kind is "GPU" or "MIG device".
	Kind string `json:"kind"`
	// State is "healthy" or "unhealthy".
	State  string           `json:"state"`
	Health *discover.Health `json:"health,omitempty"`
}

// deviceHealth lists the health of every device of drv (its GPUs' Health read), the GPUs
// the driver excludes, and the health file's records of devices drv does not have.
func deviceHealth(drv discover.Driver, records []discover.HealthRecord, file string) []DeviceHealth {
	out := []DeviceHealth{} // --json prints [], not null
	known := map[string]bool{}
	add := func(index, uuid, kind string, h *discover.Health) {
		state := "healthy"
		if h != nil {
			state = "unhealthy"
		}
		out = append(out, DeviceHealth{Index: index, UUID: uuid, Kind: kind, State: state, Health: h})
		known[strings.ToUpper(uuid)] = true
	}
	for _, g := range drv.GPUs {
		add(strconv.Itoa(g.Index), g.UUID, "GPU", g.Health)
		for _, m := range g.MIGDevices {
			add(fmt.Sprintf("%d:%d", g.Index, m.Index), m.UUID, "MIG device", cmp.Or(g.Health, m.Health))
		}
	}
	for _, x := range drv.Excluded {
		add("", x.UUID, "GPU", &discover.Health{Signal: discover.HealthExcluded, Reason: x.Reason()})
	}
	for _, r := range records {
		if known[strings.ToUpper(r.UUID)] {
			continue
		}
		kind := "GPU"
		if strings.HasPrefix(strings.ToUpper(r.UUID), "MIG-") {
			kind = "MIG device"
		}
		add("", r.UUID, kind, &discover.Health{Signal: discover.HealthRecorded, Reason: r.Reason + " (not on this host now)", Xid: r.Xid, Since: r.Since, Source: file})
	}
	return out
}

// showHealth prints every device's health. Without NVML it prints the health file's records.
func showHealth(cfg config.Config, asJSON bool, stdout, stderr io.Writer) error {
	// The health file's trust is said below, with the records read from it, not by Driver.
	drv, _, nvmlErr := gpuhost.Driver(cfg, nvmlinfo.QueryContext, true)
	var records []discover.HealthRecord
	if cfg.Health.File != "" {
		var err error
		records, err = discover.ReadHealthFile(cfg.Health.File)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			warn(stderr, err.Error()+"; gpu-runtime ignores it (gpu-ctk health clear all rewrites it)")
			records = nil
		}
	}
	if nvmlErr != nil {
		warn(stderr, nvmlErr.Error()+"; only the health file's records are shown")
		drv = discover.Driver{}
	}
	devices := deviceHealth(drv, records, cfg.Health.File)
	if asJSON {
		return writeJSON(stdout, devices)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "INDEX\tUUID\tSTATE\tSINCE\tXID\tREASON")
	for _, d := range devices {
		index, since, xid, reason := cmp.Or(d.Index, "-"), "-", "-", "-"
		if d.Kind == "MIG device" && d.Index != "" {
			index = "  " + index
		}
		if h := d.Health; h != nil {
			reason = h.Reason
			if h.Xid != 0 {
				xid = strconv.FormatUint(h.Xid, 10)
			}
			if !h.Since.IsZero() {
				since = h.Since.UTC().Format(time.RFC3339)
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", index, d.UUID, d.State, since, xid, reason)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return nvmlErr
}

const healthMarkUsage = `usage:
  gpu-ctk health mark DEVICE --reason TEXT [--xid N]

mark records a GPU or MIG device in the health file: gpu-runtime then gives it to no
container until gpu-ctk health clear DEVICE. DEVICE is its index as gpu-ctk health prints it
(0, or 1:0 for a MIG device; NVML says which device that is now, and the record holds its
UUID) or its UUID (GPU-…, MIG-…). A device already recorded keeps its record. The device must
exist on this host when NVML can say so.
`

func runHealthMark(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("gpu-ctk health mark", flag.ContinueOnError)
	reason := fs.String("reason", "", "why it is kept from containers (required; one line)")
	xid := fs.Uint64("xid", 0, "the Xid, when an Xid error is the reason")
	if help, err := parseFlags(fs, args, healthMarkUsage, stdout); help || err != nil {
		return err
	}
	// Flags may follow the device too (gpu-ctk health mark GPU-… --reason …).
	target := fs.Arg(0)
	if target != "" {
		if help, err := parseFlags(fs, fs.Args()[1:], healthMarkUsage, stdout); help || err != nil {
			return err
		}
	}
	switch {
	case target == "":
		return fmt.Errorf("%w: health mark needs a GPU or MIG device: its index or UUID, as gpu-ctk health lists them (gpu-ctk health mark --help)", ErrUsage)
	case fs.NArg() > 0:
		return fmt.Errorf("%w: health mark takes one device, got also %q", ErrUsage, fs.Args())
	case !validHealthTarget(target):
		return fmt.Errorf("%w: %q is not a device index (0, 1:0) or UUID (GPU-…, MIG-…), as gpu-ctk health lists them", ErrUsage, target)
	case *reason == "":
		return fmt.Errorf("%w: health mark needs --reason TEXT: it is what a container asking for the device is told", ErrUsage)
	}
	if why := discover.ValidHealthReason(*reason); why != "" {
		return fmt.Errorf("%w: --reason %q: %s", ErrUsage, *reason, why)
	}
	cfg, err := loadConfig(stderr)
	if err != nil {
		return err
	}
	if cfg.Health.File == "" {
		return errors.New(`health.file is "": there is no health file to record the device in; set health.file in the gpu-runtime config`)
	}
	uuid := target
	if drv, _, err := gpuhost.Driver(cfg, nvmlinfo.QueryContext, false); isIndex(target) {
		if uuid, err = indexUUID(drv, err, target); err != nil {
			return err
		}
	} else if err != nil {
		warn(stderr, err.Error()+"; "+uuid+" is recorded without checking that this host has it")
	} else if !hasDevice(drv, uuid) {
		return fmt.Errorf("no GPU or MIG device %s on this host (gpu-ctk info lists them)", uuid)
	}
	rec := discover.HealthRecord{UUID: uuid, Reason: *reason, Xid: *xid, Since: time.Now().UTC().Truncate(time.Second)}
	added, warning, err := addRecords(cfg.Health.File, []discover.HealthRecord{rec})
	warn(stderr, warning)
	if err != nil {
		return err
	}
	if len(added) == 0 {
		_, _ = fmt.Fprintf(stdout, "%s was already recorded as unhealthy (gpu-ctk health shows why); its record is kept\n", uuid)
		return nil
	}
	_, err = fmt.Fprintf(stdout, "recorded %s as unhealthy: %s (in %s); gpu-runtime gives it to no container until gpu-ctk health clear %s\n", uuid, *reason, cfg.Health.File, uuid)
	return err
}

// validHealthTarget reports whether s names a device as health mark and clear take it: an
// index (isIndex) or a UUID.
func validHealthTarget(s string) bool { return isIndex(s) || discover.ValidHealthUUID(s) }

// isIndex reports whether s is a device index as gpu-ctk health prints it: "1", or "1:0" for
// a MIG device (at most 4 digits each: no host has more devices).
func isIndex(s string) bool {
	digits := func(p string) bool { return p != "" && len(p) <= 4 && strings.Trim(p, "0123456789") == "" }
	gpu, mig, isMIG := strings.Cut(s, ":")
	return digits(gpu) && (!isMIG || digits(mig))
}

// indexUUID is the UUID of the device at index (isIndex) in drv, which NVML gave (queryErr
// when it could not): an index means nothing without NVML, and changes with the host.
func indexUUID(drv discover.Driver, queryErr error, index string) (string, error) {
	if queryErr != nil {
		return "", fmt.Errorf("device %s: an index names a device only through NVML, which failed: %w; give its UUID instead (gpu-ctk health lists them)", index, queryErr)
	}
	var have []string
	for _, g := range drv.GPUs {
		have = append(have, strconv.Itoa(g.Index))
		if strconv.Itoa(g.Index) == index {
			return g.UUID, nil
		}
		for _, m := range g.MIGDevices {
			i := fmt.Sprintf("%d:%d", g.Index, m.Index)
			have = append(have, i)
			if i == index {
				return m.UUID, nil
			}
		}
	}
	return "", fmt.Errorf("no GPU or MIG device %s on this host: it has %s (gpu-ctk health lists them)", index, cmp.Or(strings.Join(have, ", "), "none"))
}

// hasDevice reports whether drv has a GPU or MIG device of that UUID.
func hasDevice(drv discover.Driver, uuid string) bool {
	for _, g := range drv.GPUs {
		if strings.EqualFold(g.UUID, uuid) || slices.ContainsFunc(g.MIGDevices, func(m discover.MIGDevice) bool { return strings.EqualFold(m.UUID, uuid) }) {
			return true
		}
	}
	return false
}

// addRecords adds the records of devices the health file does not have yet; it returns
// those it added, and a warning about a file that could not be trusted (it is replaced).
func addRecords(file string, recs []discover.HealthRecord) (added []discover.HealthRecord, warning string, err error) {
	warning, err = discover.UpdateHealthFile(file, func(have []discover.HealthRecord) ([]discover.HealthRecord, error) {
		for _, r := range recs {
			if !slices.ContainsFunc(have, func(h discover.HealthRecord) bool { return strings.EqualFold(h.UUID, r.UUID) }) {
				have = append(have, r)
				added = append(added, r)
			}
		}
		return have, nil
	})
	return added, warning, err
}

const healthClearUsage = `usage:
  gpu-ctk health clear DEVICE|all

clear removes a device's record from the health file (all: every record): gpu-runtime gives
it to containers again. DEVICE is its index as gpu-ctk health prints it (0, 1:0) or its UUID.
A device that has no record (is not marked) is an error: clear exits 1 and says so. It does not touch what the driver says (a GPU that is gone or
excluded stays unhealthy), and does not repair anything: run it once the device is fixed,
or when the record was a false alarm.
`

// ErrNoRecord: clear named a device the health file has no record of.
var ErrNoRecord = errors.New("no health record")

func runHealthClear(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("gpu-ctk health clear", flag.ContinueOnError)
	if help, err := parseFlags(fs, args, healthClearUsage, stdout); help || err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return fmt.Errorf("%w: health clear takes one device (its index or UUID), or all (gpu-ctk health clear --help)", ErrUsage)
	}
	target := fs.Arg(0)
	if target != "all" && !validHealthTarget(target) {
		return fmt.Errorf("%w: %q is not a device index (0, 1:0) or UUID (GPU-…, MIG-…), as gpu-ctk health lists them, nor all", ErrUsage, target)
	}
	cfg, err := loadConfig(stderr)
	if err != nil {
		return err
	}
	if cfg.Health.File == "" {
		return errors.New(`health.file is "": there is no health file to clear`)
	}
	named := target // as the messages name it: "1:0 (MIG-…)" for an index
	if isIndex(target) {
		drv, _, err := gpuhost.Driver(cfg, nvmlinfo.QueryContext, false)
		uuid, err := indexUUID(drv, err, target)
		if err != nil {
			return err
		}
		target, named = uuid, target+" ("+uuid+")"
	}
	var cleared []string
	warning, err := discover.UpdateHealthFile(cfg.Health.File, func(have []discover.HealthRecord) ([]discover.HealthRecord, error) {
		var keep []discover.HealthRecord
		for _, r := range have {
			if target == "all" || strings.EqualFold(r.UUID, target) {
				cleared = append(cleared, r.UUID)
				continue
			}
			keep = append(keep, r)
		}
		if len(cleared) == 0 && target != "all" {
			return nil, fmt.Errorf("%w: %s is not marked unhealthy: the health file %s has no record of it, so there is nothing to clear; gpu-ctk health shows why a device is held back (the driver's /proc may say so: that clears when the driver does)", ErrNoRecord, named, cfg.Health.File)
		}
		return keep, nil
	})
	warn(stderr, warning)
	if err != nil {
		return err
	}
	if len(cleared) == 0 {
		_, err = fmt.Fprintf(stdout, "no records in %s\n", cfg.Health.File)
		return err
	}
	_, err = fmt.Fprintf(stdout, "cleared %s: gpu-runtime gives it to containers again\n", strings.Join(cleared, ", "))
	return err
}

const healthWatchUsage = `usage:
  gpu-ctk health watch [--driver-root DIR]

watch waits on NVML events of every GPU and MIG device — Xid critical errors and double-bit
ECC errors — and records each device they make unhealthy in the health file (health.file),
where gpu-runtime reads it. Xids in health.ignore-xids (application errors: 13, 31, 43, 45,
68, 109 by default) are logged and ignored. An event with GPU and compute instance ids
concerns that MIG device only; without, the whole GPU (and so its MIG devices). It runs until
SIGTERM or SIGINT, logging to stderr what it does. When NVML cannot be initialised or stops
answering (the driver unloaded, the driver root unmounted) it releases NVML and tries again,
waiting 1s, 2s, 4s … up to a minute between tries; SIGHUP re-initialises it at once (after a
GPU is added, say). Records are never removed by watch: gpu-ctk health clear does that.
`

func runHealthWatch(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("gpu-ctk health watch", flag.ContinueOnError)
	root := fs.String("driver-root", "", "driver root (default: driver.root from the gpu-runtime config)")
	if help, err := parseNoArgs(fs, args, healthWatchUsage, stdout); help || err != nil {
		return err
	}
	cfg, err := loadConfig(stderr)
	if err != nil {
		return err
	}
	cfg.Driver.Root = cmp.Or(*root, cfg.Driver.Root)
	if cfg.Health.File == "" {
		return errors.New(`health.file is "": there is no health file to record unhealthy devices in; set health.file in the gpu-runtime config`)
	}
	log := logrus.New()
	log.SetOutput(stderr)
	log.SetFormatter(&logrus.TextFormatter{FullTimestamp: true, TimestampFormat: time.RFC3339})
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	w := &watcher{
		root: cfg.Driver.Root, file: cfg.Health.File, ignore: cfg.Health.IgnoreXids, log: log,
		open:      func(root string) (eventSource, error) { return nvmlinfo.OpenEvents(root) },
		now:       time.Now,
		reload:    hup,
		waitSlice: time.Second, backoff: time.Second, maxBackoff: time.Minute,
	}
	return w.run(ctx)
}

// eventSource is what the watcher waits on: nvmlinfo.Events.
type eventSource interface {
	GPUs() []discover.GPU
	Warnings() []string
	Wait(timeout time.Duration) (nvmlinfo.Event, bool, error)
	Close()
}

// watcher is gpu-ctk health watch: its seams (open, now, the backoff and wait durations) are
// fields, so that its unit tests need no NVML and no waiting.
type watcher struct {
	root   string
	file   string
	ignore []int
	log    logrus.FieldLogger
	open   func(root string) (eventSource, error)
	now    func() time.Time
	reload <-chan os.Signal
	// waitSlice is how long one NVML wait lasts (how soon a stop is noticed); backoff the
	// first pause after a failed initialisation, doubled up to maxBackoff.
	waitSlice, backoff, maxBackoff time.Duration
}

// run watches until ctx ends; it returns nil then.
func (w *watcher) run(ctx context.Context) error {
	pause := w.backoff
	w.log.WithFields(logrus.Fields{"driver_root": w.root, "health_file": w.file, "ignore_xids": w.ignore}).Info("health watch: starting")
	for ctx.Err() == nil {
		src, err := w.open(w.root)
		if err != nil {
			w.log.WithError(err).Warnf("health watch: NVML cannot be initialised; trying again in %s", pause)
			select {
			case <-ctx.Done():
			case <-time.After(pause):
			case <-w.reload:
			}
			pause = min(2*pause, w.maxBackoff)
			continue
		}
		pause = w.backoff
		var uuids []string
		for _, g := range src.GPUs() {
			uuids = append(uuids, fmt.Sprintf("%d=%s", g.Index, g.UUID))
		}
		w.log.WithField("gpus", uuids).Infof("health watch: watching %d GPU(s) for Xid and double-bit ECC errors", len(uuids))
		for _, warning := range src.Warnings() {
			w.log.Warn("health watch: " + warning)
		}
		w.watch(ctx, src)
		src.Close()
	}
	w.log.Info("health watch: stopped")
	return nil
}

// watch handles src's events until ctx ends, a reload is asked for, or NVML fails.
func (w *watcher) watch(ctx context.Context, src eventSource) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.reload:
			w.log.Info("health watch: SIGHUP: re-initialising NVML")
			return
		default:
		}
		ev, ok, err := src.Wait(w.waitSlice)
		if err != nil {
			w.log.WithError(err).Warn("health watch: NVML stopped answering (the driver or a GPU went away?); releasing it and initialising it again")
			return
		}
		if ok {
			w.handle(ev)
		}
	}
}

// xidNames says what well-known Xids mean (NVIDIA's Xid catalog); the others are named by
// number only.
var xidNames = map[uint64]string{
	48: "double-bit ECC error", 63: "ECC page retirement or row remapping", 64: "ECC page retirement or row remapping failure",
	74: "NVLink error", 79: "GPU has fallen off the bus", 92: "high single-bit ECC error rate", 94: "contained ECC error",
	95: "uncontained ECC error", 119: "GSP RPC timeout", 120: "GSP error",
}

// handle records the devices an event makes unhealthy.
func (w *watcher) handle(ev nvmlinfo.Event) {
	fields := logrus.Fields{"gpu": ev.GPU.UUID, "gpu_index": ev.GPU.Index}
	if ev.GI != nvmlinfo.NoInstance {
		fields["gpu_instance"], fields["compute_instance"] = ev.GI, int64(ev.CI)
		if ev.CI == nvmlinfo.NoInstance {
			fields["compute_instance"] = "all"
		}
	}
	log := w.log.WithFields(fields)
	reason := "double-bit ECC error"
	if ev.Kind == nvmlinfo.EventXid {
		log = log.WithField("xid", ev.Xid)
		if slices.ContainsFunc(w.ignore, func(x int) bool { return x > 0 && uint64(x) == ev.Xid }) {
			log.Infof("health watch: Xid %d ignored: an application's error, not the GPU's (health.ignore-xids)", ev.Xid)
			return
		}
		reason = "Xid " + strconv.FormatUint(ev.Xid, 10)
		if name, ok := xidNames[ev.Xid]; ok {
			reason += ": " + name
		}
	}
	var recs []discover.HealthRecord
	now := w.now().UTC().Truncate(time.Second)
	switch {
	case ev.GI == nvmlinfo.NoInstance:
		recs = append(recs, discover.HealthRecord{UUID: ev.GPU.UUID, Reason: reason, Xid: ev.Xid, Since: now})
	case len(ev.MIGDevices) == 0:
		log.Warnf("health watch: %s on GPU instance %d of GPU %s, which holds no such MIG device now: nothing recorded", reason, ev.GI, ev.GPU.UUID)
		return
	default:
		for _, m := range ev.MIGDevices {
			recs = append(recs, discover.HealthRecord{UUID: m.UUID, Reason: reason, Xid: ev.Xid, Since: now})
		}
	}
	added, warning, err := addRecords(w.file, recs)
	if warning != "" {
		log.Warn("health watch: " + warning)
	}
	if err != nil {
		log.WithError(err).Errorf("health watch: %s: cannot record it", reason)
		return
	}
	for _, r := range recs {
		if slices.Contains(added, r) {
			log.WithField("device", r.UUID).Warnf("health watch: %s: recorded %s as unhealthy in %s; gpu-runtime gives it to no container until gpu-ctk health clear %s", reason, r.UUID, w.file, r.UUID)
		} else {
			log.WithField("device", r.UUID).Infof("health watch: %s: %s was already recorded as unhealthy", reason, r.UUID)
		}
	}
}

// healthSummary describes the unhealthy devices of drv for gpu-ctk info and doctor: "GPU 1
// (GPU-…): Xid 79 …", one per device, nil when all are healthy.
func healthSummary(drv discover.Driver) []string {
	var out []string
	for _, d := range plan.Devices(drv.GPUs) {
		if h := d.Health(); h != nil {
			what := "GPU " + d.String()
			if d.IsMIG() {
				what = "MIG device " + d.String()
			}
			out = append(out, what+": "+h.String())
		}
	}
	// A GPU in MIG mode is not a device of its own, but its health is its MIG devices'.
	for _, g := range drv.GPUs {
		if g.MIGEnabled() && g.Health != nil && len(g.MIGDevices) == 0 {
			out = append(out, fmt.Sprintf("GPU %d (%s): %s", g.Index, g.UUID, g.Health))
		}
	}
	return out
}
