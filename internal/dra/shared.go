package dra

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpu-runtime/gpu-runtime/internal/mps"
	"github.com/gpu-runtime/gpu-runtime/pkg/config"
	"github.com/gpu-runtime/gpu-runtime/pkg/plan"
)

// A claim of a shared GPU (dra.shared-gpus, published with allowMultipleAllocations) is an
// MPS share of its own: prepare starts an MPS control daemon for the claim — the code of
// gpu-ctk mps start (internal/mps), with the claim's UID as the share's name under
// dra.mps-root — whose server-side defaults are what the scheduler recorded the claim
// consumed (consumedCapacity: compute as the active thread percentage, memory as the pinned
// device memory limit), and the claim's CDI device mounts only that daemon's client view and
// shared memory. All containers that use the claim share its daemon; unprepare stops it.

// sharedShare is the MPS share of a prepared claim of a shared GPU, as checkpointed.
type sharedShare struct {
	// Name is the share's name under dra.mps-root: the claim's UID.
	Name   string `json:"name"`
	UUID   string `json:"uuid"`
	Device string `json:"device"`
	// Compute is the consumed compute (percent), Memory the consumed memory as MPS takes a
	// limit ("60G"; "" for none).
	Compute int    `json:"compute"`
	Memory  string `json:"memory,omitempty"`
	// MemoryBytes is the consumed memory in bytes, for the per-cgroup GPU memory limit.
	MemoryBytes int64 `json:"memoryBytes,omitempty"`
}

// mpsConfig is the MPS configuration of the claims' shares (one share: s).
func (d *Driver) mpsConfig(s sharedShare) config.MPSConfig {
	return config.MPSConfig{Root: d.o.Config.DRA.MPSRoot, Shares: map[string]config.MPSShare{s.Name: {
		Devices: []string{s.UUID}, ActiveThreadPercentage: s.Compute, PinnedMemoryLimit: s.Memory}}}
}

// mpsLimit writes bytes as a limit set_default_device_pinned_mem_limit takes: whole GiB as
// "<n>G", else whole MiB (rounded down: never more than the claim consumed) as "<n>M".
func mpsLimit(bytes int64) string {
	switch {
	case bytes <= 0:
		return ""
	case bytes%(1<<30) == 0:
		return fmt.Sprintf("%dG", bytes>>30)
	case bytes < 1<<20:
		return "1M"
	}
	return fmt.Sprintf("%dM", bytes>>20)
}

// sharedOf reads what a claim consumed of the shared GPU r was allocated: its compute
// (1..100) and memory. A shared device allocated without consumedCapacity (a cluster
// without the DRAConsumableCapacity feature) or beyond the GPU is an error naming the claim.
func sharedOf(what string, r resourceapi.DeviceRequestAllocationResult, dev plan.Device, uid types.UID) (sharedShare, error) {
	s := sharedShare{Name: string(uid), UUID: dev.UUID, Device: r.Device}
	compute, ok := r.ConsumedCapacity[CapacityCompute]
	if !ok || r.ShareID == nil {
		return s, fmt.Errorf("%s was allocated shared GPU %s without a consumed %q capacity or a share ID: the cluster does not do consumable capacity (enable the DRAConsumableCapacity feature gate on Kubernetes 1.34-1.35), or the claim does not use DeviceClass shared-gpu.gpu-runtime.dev",
			what, dev, CapacityCompute)
	}
	c := compute.Value()
	if c < 1 || c > 100 || compute.MilliValue() != c*1000 {
		return s, fmt.Errorf("%s was allocated %s of shared GPU %s's compute: want a whole percent from 1 to 100", what, compute.String(), dev)
	}
	s.Compute = int(c)
	if m, ok := r.ConsumedCapacity[CapacityMemory]; ok {
		if total := int64(dev.GPU.MemoryMiB) << 20; m.Value() <= 0 || total > 0 && m.Value() > total {
			return s, fmt.Errorf("%s was allocated %s of shared GPU %s's memory: want more than 0 and at most its %dMi", what, m.String(), dev, dev.GPU.MemoryMiB)
		}
		s.Memory, s.MemoryBytes = mpsLimit(m.Value()), m.Value()
	}
	return s, nil
}

// startShare starts (or, when it runs, checks) the daemon of a claim's share and reports what
// it did; an error names the claim and the daemon's log directory.
func (d *Driver) startShare(what string, s sharedShare) (string, error) {
	cfg := d.mpsConfig(s)
	if st := mps.Check(cfg, s.Name); st.Running {
		return "running", nil
	}
	o, err := d.mpsOptions(s.UUID)
	if err != nil {
		return "", fmt.Errorf("%s: MPS control daemon of shared GPU %s: %w", what, s.UUID, err)
	}
	did, err := mps.Start(cfg, s.Name, o)
	if err != nil {
		return "", fmt.Errorf("%s: MPS control daemon of shared GPU %s (%s): %w", what, s.UUID, cfg.PipeDir(s.Name), err)
	}
	return did, nil
}

// stopShare stops the daemon of a claim's share, unmounts its tmpfs and removes its
// directory; a share already stopped is success.
func (d *Driver) stopShare(s sharedShare) error {
	cfg := d.mpsConfig(s)
	o, _ := d.mpsOptions(s.UUID) // without the driver, the daemon is ended by signal
	if _, err := mps.Stop(cfg, s.Name, o); err != nil {
		return err
	}
	if err := os.RemoveAll(filepath.Join(cfg.Root, s.Name)); err != nil {
		return fmt.Errorf("remove the directory of MPS share %s: %w", s.Name, err)
	}
	return nil
}

// mpsOptions finds the driver's MPS control program on the host as it is now.
func (d *Driver) mpsOptions(uuid string) (mps.Options, error) {
	res, err := d.o.Host()
	if err != nil {
		return mps.Options{}, err
	}
	self := d.o.MPSLauncher
	o := mps.DriverOptions(res.Host.Files, d.o.Config.Driver.Root, self)
	o.UUIDs = []string{uuid}
	if o.Control == "" {
		return o, fmt.Errorf("%s not found under driver root %q: install the driver's MPS programs (shared GPUs need them), or set driver.root", mps.ControlName, d.o.Config.Driver.Root)
	}
	if self == "" {
		return o, errors.New("gpu-ctk, which starts the MPS daemons, not found: install it next to gpu-kubelet-plugin")
	}
	return o, nil
}

// stopOrphans stops the daemons under dra.mps-root of claims that are not prepared (a plugin
// killed between starting a claim's daemon and checkpointing the claim): none is left running
// that no claim owns.
func (d *Driver) stopOrphans() error {
	found, err := mps.Found(config.MPSConfig{Root: d.o.Config.DRA.MPSRoot})
	if err != nil {
		return err
	}
	var errs []error
	for _, name := range found {
		if slices.ContainsFunc(d.preparedShares(), func(s sharedShare) bool { return s.Name == name }) {
			continue
		}
		d.o.Log.WithField("share", name).Warn("stopping the MPS daemon of a claim that is not prepared")
		if err := d.stopShare(sharedShare{Name: name}); err != nil {
			errs = append(errs, fmt.Errorf("stop MPS daemon %s: %w", filepath.Join(d.o.Config.DRA.MPSRoot, name), err))
		}
	}
	return errors.Join(errs...)
}

// preparedShares lists the shares of the prepared claims.
func (d *Driver) preparedShares() []sharedShare {
	var out []sharedShare
	for _, p := range d.cp.Claims {
		if p.Share != nil {
			out = append(out, *p.Share)
		}
	}
	return out
}

// sharedHolders says which other prepared claims hold uuid, and whether any holds it whole.
func (d *Driver) holders(uuid string) (whole []string, shared int) {
	for uid, p := range d.cp.Claims {
		for _, x := range p.Devices {
			if !strings.EqualFold(x.UUID, uuid) {
				continue
			}
			if p.Share != nil {
				shared++
			} else {
				whole = append(whole, fmt.Sprintf("ResourceClaim %s/%s (UID %s)", p.Namespace, p.Name, uid))
			}
		}
	}
	return whole, shared
}
