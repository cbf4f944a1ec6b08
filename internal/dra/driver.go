package dra

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/gpu-runtime/gpu-runtime/internal/atomicfile"
	"github.com/gpu-runtime/gpu-runtime/internal/cdi"
	"github.com/gpu-runtime/gpu-runtime/internal/gpuhost"
	"github.com/gpu-runtime/gpu-runtime/internal/mps"
	"github.com/gpu-runtime/gpu-runtime/pkg/config"
	"github.com/gpu-runtime/gpu-runtime/pkg/plan"
)

// Options say what node the driver serves and where it writes.
type Options struct {
	Config   config.Config
	NodeName string
	// CDIDir receives one CDI spec per prepared claim; StateDir the checkpoint.
	CDIDir, StateDir string
	// Host builds the host view as it is now (gpuhost.Build, with health and topology).
	Host func() (gpuhost.Result, error)
	// Render says how the specs' hooks are written (the gpu-hook on the host).
	Render plan.Render
	Log    logrus.FieldLogger
	// MPSLauncher is the program that becomes a shared claim's MPS control daemon as
	// `<launcher> mps __daemon <shm> <control>` (gpu-ctk; internal/mps.Daemon).
	MPSLauncher string
}

// Driver is the DRA driver of one node: it implements kubeletplugin.DRAPlugin. Its methods
// may be called concurrently; preparation is serialised by its lock.
type Driver struct {
	o  Options
	mu sync.Mutex
	cp checkpoint
}

var _ kubeletplugin.DRAPlugin = (*Driver)(nil)

// New makes the driver's directories, reads its checkpoint (the claims a previous run
// prepared), and removes CDI spec files of its own that no prepared claim owns (a run
// killed between writing a spec and its checkpoint).
func New(o Options) (*Driver, error) {
	if err := os.MkdirAll(o.StateDir, 0o700); err != nil {
		return nil, fmt.Errorf("--state-dir: %w", err)
	}
	if err := os.MkdirAll(o.CDIDir, 0o755); err != nil {
		return nil, fmt.Errorf("--cdi-dir: %w", err)
	}
	cp, err := loadCheckpoint(o.StateDir)
	if err != nil {
		return nil, err
	}
	d := &Driver{o: o, cp: cp}
	// The daemons of shared claims outlive a plugin restart: those of prepared claims are
	// found again by their pid files (and restarted by the next prepare when they died); any
	// other is stopped.
	if err := d.stopOrphans(); err != nil {
		o.Log.WithError(err).Error("MPS daemons of claims that are not prepared")
	}
	for _, s := range d.preparedShares() {
		if st := mps.Check(d.mpsConfig(s), s.Name); !st.Running {
			o.Log.WithFields(logrus.Fields{"claim_uid": s.Name, "why": st.Why}).Warn("the MPS daemon of a prepared claim does not run: the claim's next prepare restarts it")
		}
	}
	entries, err := os.ReadDir(o.CDIDir)
	if err != nil {
		return nil, fmt.Errorf("--cdi-dir: %w", err)
	}
	for _, e := range entries {
		uid, ok := strings.CutPrefix(e.Name(), cdiFilePrefix)
		uid, isJSON := strings.CutSuffix(uid, ".json")
		if !ok || !isJSON || !e.Type().IsRegular() {
			continue
		}
		if _, prepared := cp.Claims[types.UID(uid)]; !prepared {
			o.Log.WithField("file", e.Name()).Warn("removing the CDI spec of a claim that is not prepared")
			if err := removeFile(filepath.Join(o.CDIDir, e.Name())); err != nil {
				return nil, err
			}
		}
	}
	return d, nil
}

// Resources builds the host view and the devices it publishes; warnings say what of the host
// could not be trusted or read.
func (d *Driver) Resources() (resourceslice.DriverResources, []string, error) {
	res, err := d.o.Host()
	if err != nil {
		return resourceslice.DriverResources{}, res.Warnings, err
	}
	out, warnings := Resources(d.o.NodeName, res.Host, d.o.Config)
	return out, append(res.Warnings, warnings...), nil
}

// Prepared returns the UIDs of the claims prepared, sorted.
func (d *Driver) Prepared() []types.UID {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []types.UID
	for uid := range d.cp.Claims {
		out = append(out, uid)
	}
	slices.Sort(out)
	return out
}

// PrepareResourceClaims prepares each claim: its spec written, then the checkpoint, then the
// answer. A claim already prepared gets the same answer again.
func (d *Driver) PrepareResourceClaims(_ context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	start := time.Now()
	d.mu.Lock()
	defer d.mu.Unlock()
	out := map[types.UID]kubeletplugin.PrepareResult{}
	var host *plan.Host // built once per call, when a claim needs it
	for _, c := range claims {
		if p, ok := d.cp.Claims[c.UID]; ok {
			if p.Share != nil {
				did, err := d.startShare(fmt.Sprintf("ResourceClaim %s/%s", p.Namespace, p.Name), *p.Share)
				if err != nil {
					d.o.Log.WithField("claim", p.Namespace+"/"+p.Name).WithError(err).Error("prepare failed")
					out[c.UID] = kubeletplugin.PrepareResult{Err: err}
					continue
				}
				if did != "running" {
					d.o.Log.WithFields(logrus.Fields{"claim": p.Namespace + "/" + p.Name, "did": did}).Warn("the MPS daemon of a prepared claim had stopped: restarted")
				}
			}
			out[c.UID] = kubeletplugin.PrepareResult{Devices: p.answer()}
			continue
		}
		if host == nil {
			res, err := d.o.Host()
			for _, w := range res.Warnings {
				d.o.Log.Warn(w)
			}
			if err != nil {
				return nil, fmt.Errorf("GPU host: %w", err)
			}
			host = &res.Host
		}
		p, err := d.prepare(c, *host, start)
		if err != nil {
			d.o.Log.WithField("claim", c.Namespace+"/"+c.Name).WithError(err).Error("prepare failed")
			out[c.UID] = kubeletplugin.PrepareResult{Err: err}
			continue
		}
		out[c.UID] = kubeletplugin.PrepareResult{Devices: p.answer()}
	}
	return out, nil
}

// answer is what the kubelet gets for a prepared claim.
func (p preparedClaim) answer() []kubeletplugin.Device {
	out := make([]kubeletplugin.Device, 0, len(p.Devices))
	for _, dev := range p.Devices {
		out = append(out, kubeletplugin.Device{Requests: dev.Requests, PoolName: dev.Pool, DeviceName: dev.Device, CDIDeviceIDs: dev.CDIDeviceIDs})
	}
	return out
}

// prepare writes one claim's CDI spec and checkpoints it; its log line says how long the
// call took since start (the lock, the host view, the spec and the checkpoint: what the
// kubelet waits for), the time bench/cluster reports.
func (d *Driver) prepare(c *resourceapi.ResourceClaim, host plan.Host, start time.Time) (preparedClaim, error) {
	what := fmt.Sprintf("ResourceClaim %s/%s", c.Namespace, c.Name)
	p := preparedClaim{Namespace: c.Namespace, Name: c.Name}
	if c.Status.Allocation == nil {
		return p, fmt.Errorf("%s is not allocated", what)
	}
	alloc := &c.Status.Allocation.Devices
	var uuids, requests []string
	for _, r := range alloc.Results {
		if r.Driver != DriverName {
			continue
		}
		if r.Pool != d.o.NodeName {
			return p, fmt.Errorf("%s was allocated device %s of pool %s, but this node's pool is %s", what, r.Device, r.Pool, d.o.NodeName)
		}
		uuids = append(uuids, uuidOf(r.Device))
		requests = append(requests, r.Request)
		p.Devices = append(p.Devices, preparedDevice{Requests: []string{r.Request}, Pool: r.Pool, Device: r.Device})
	}
	if len(p.Devices) == 0 {
		return p, nil // nothing of ours: nothing to write, nothing to undo
	}
	caps, err := capabilitiesOf(what, alloc, requests)
	if err != nil {
		return p, err
	}
	devices, err := plan.ClaimDevices(what, uuids, host)
	if err != nil {
		return p, err
	}
	var named []cdi.NamedDevice
	ours := slices.DeleteFunc(slices.Clone(alloc.Results), func(r resourceapi.DeviceRequestAllocationResult) bool { return r.Driver != DriverName })
	for i, dev := range devices {
		shared := !dev.IsMIG() && d.o.Config.DRA.Shared(dev.Index, dev.UUID)
		whole, sharers := d.holders(dev.UUID)
		switch {
		case len(whole) > 0:
			return p, fmt.Errorf("%s was allocated %s, which %s holds whole on this node: the scheduler allocated it twice; delete one of the pods",
				what, p.Devices[i].Device, strings.Join(whole, ", "))
		case !shared && sharers > 0:
			return p, fmt.Errorf("%s was allocated %s whole, which %d claims share on this node (it was in dra.shared-gpus when they were prepared): delete their pods or this one",
				what, p.Devices[i].Device, sharers)
		case !shared && ours[i].ShareID != nil:
			return p, fmt.Errorf("%s was allocated a share of %s, which this node does not share (dra.shared-gpus): delete the pod so that the claim is allocated again",
				what, p.Devices[i].Device)
		}
		name := string(c.UID) + "-" + p.Devices[i].Device
		p.Devices[i].UUID = dev.UUID
		p.Devices[i].CDIDeviceIDs = []string{CDIKind + "=" + name}
		nd := cdi.NamedDevice{Name: name, Device: dev}
		if shared {
			if len(devices) > 1 {
				return p, fmt.Errorf("%s was allocated shared GPU %s and %d other devices: a claim of a shared GPU has that one device (an MPS client connects to one daemon, at %s): ask for the other devices in claims of their own",
					what, dev, len(devices)-1, plan.MPSPipeDir)
			}
			share, err := sharedOf(what, ours[i], dev, c.UID)
			if err != nil {
				return p, err
			}
			p.Share = &share
			nd.Share = &plan.ClaimShare{Name: share.Name, Compute: share.Compute, Memory: share.Memory, MemoryBytes: share.MemoryBytes}
		}
		named = append(named, nd)
	}
	// Validated in the state directory: the plugin writes nowhere else.
	opts := cdi.DevicesOptions{Kind: CDIKind, Capabilities: caps, ScratchDir: d.o.StateDir}
	if p.Share != nil {
		opts.MPS = d.mpsConfig(*p.Share)
	}
	spec, warnings, err := cdi.GenerateDevices(host, d.o.Render, opts, named)
	for _, w := range warnings {
		d.o.Log.WithField("claim", c.Namespace+"/"+c.Name).Warn(w)
	}
	if err != nil {
		return p, fmt.Errorf("%s: CDI spec: %w", what, err)
	}
	data, err := cdi.Marshal(spec, "json")
	if err != nil {
		return p, err
	}
	// The daemon runs, with the claim's limits, before any container can name the claim's
	// CDI device; it is stopped again when the claim is not recorded.
	if p.Share != nil {
		did, err := d.startShare(what, *p.Share)
		if err != nil {
			return p, errors.Join(err, d.stopShare(*p.Share))
		}
		d.o.Log.WithFields(logrus.Fields{"claim": c.Namespace + "/" + c.Name, "device": p.Share.Device, "compute": p.Share.Compute, "memory": p.Share.Memory, "did": did}).Info("MPS daemon of the claim")
	}
	undo := func() error {
		if p.Share == nil {
			return nil
		}
		return d.stopShare(*p.Share)
	}
	p.CDIFile = cdiFileName(c.UID)
	if err := atomicfile.Write(filepath.Join(d.o.CDIDir, p.CDIFile), data, 0o644, atomicfile.Options{}); err != nil {
		return p, errors.Join(fmt.Errorf("%s: write CDI spec: %w", what, err), undo())
	}
	d.cp.Claims[c.UID] = p
	if err := d.cp.save(d.o.StateDir); err != nil {
		delete(d.cp.Claims, c.UID)
		return p, errors.Join(fmt.Errorf("%s: write checkpoint: %w", what, err), removeFile(filepath.Join(d.o.CDIDir, p.CDIFile)), undo())
	}
	d.o.Log.WithFields(logrus.Fields{"claim": c.Namespace + "/" + c.Name, "claim_uid": c.UID, "devices": uuids,
		"took": time.Since(start).Round(time.Microsecond).String()}).Info("claim prepared")
	return p, nil
}

// UnprepareResourceClaims removes each claim's CDI spec and checkpoint entry; a claim not
// prepared (or already unprepared) is success.
func (d *Driver) UnprepareResourceClaims(_ context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := map[types.UID]error{}
	for _, c := range claims {
		p, ok := d.cp.Claims[c.UID]
		if !ok {
			out[c.UID] = nil
			continue
		}
		if p.CDIFile != "" {
			if err := removeFile(filepath.Join(d.o.CDIDir, p.CDIFile)); err != nil {
				out[c.UID] = fmt.Errorf("ResourceClaim %s/%s: remove its CDI spec: %w", p.Namespace, p.Name, err)
				continue
			}
		}
		if p.Share != nil {
			if err := d.stopShare(*p.Share); err != nil {
				out[c.UID] = fmt.Errorf("ResourceClaim %s/%s: stop its MPS daemon: %w", p.Namespace, p.Name, err)
				continue
			}
		}
		delete(d.cp.Claims, c.UID)
		if err := d.cp.save(d.o.StateDir); err != nil {
			d.cp.Claims[c.UID] = p
			out[c.UID] = fmt.Errorf("ResourceClaim %s/%s: write checkpoint: %w", p.Namespace, p.Name, err)
			continue
		}
		out[c.UID] = nil
		d.o.Log.WithFields(logrus.Fields{"claim": p.Namespace + "/" + p.Name, "claim_uid": c.UID}).Info("claim unprepared")
	}
	return out, nil
}

// HandleError logs errors of the background work (publishing slices); all of them are
// retried by the helper.
func (d *Driver) HandleError(_ context.Context, err error, msg string) {
	d.o.Log.WithError(err).Error(msg)
}

// WatchHealthStatus: device health reaches Kubernetes as device taints in the slices, not as
// the kubelet's health stream (which the plugin does not offer: HealthService(false)).
func (d *Driver) WatchHealthStatus(context.Context, chan<- kubeletplugin.DeviceHealthReport) error {
	return kubeletplugin.ErrHealthNotSupported
}
