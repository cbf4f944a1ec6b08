package nvmlinfo

import (
	"errors"
	"fmt"
	"time"

	"github.com/NVIDIA/go-nvlib/pkg/nvlib/device"
	"github.com/NVIDIA/go-nvml/pkg/dl"
	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpu-runtime/gpu-runtime/pkg/discover"
)

// NoInstance is the GPU or compute instance id of an event that concerns the whole GPU
// (NVML's 0xFFFFFFFF).
const NoInstance = 0xFFFFFFFF

// The kinds of Event.
const (
	EventXid = "xid" // nvmlEventTypeXidCriticalError; Event.Xid says which
	EventDBE = "dbe" // nvmlEventTypeDoubleBitEccError
)

// Event is an NVML event that may make a device unhealthy.
type Event struct {
	Kind string
	Xid  uint64
	// GPU is the GPU it was reported on (index and UUID). NVML reports a MIG device's events
	// on its GPU, with the instance ids: GI and CI are NoInstance for the whole GPU.
	GPU    discover.GPU
	GI, CI uint32
	// MIGDevices are the MIG devices the instance ids name now (they come and go): a compute
	// instance's, or each of a GPU instance's; none for the whole GPU or ids naming none.
	MIGDevices []discover.MIGDevice
}

// ErrEventsNotSupported: no GPU of the host can report the events.
var ErrEventsNotSupported = errors.New("NVML events not supported")

// Events waits on NVML's Xid critical error and double-bit ECC error events of every GPU of a
// driver root. A process holds one at a time (go-nvml binds NVML process-wide); Close releases
// NVML, so that a driver can be reloaded.
type Events struct {
	lib      nvml.Interface
	devs     device.Interface
	set      nvml.EventSet
	probe    *dl.DynamicLibrary
	gpus     []discover.GPU // index and UUID, by NVML index
	warnings []string
}

// watchedEvents are the event types a watcher registers for.
const watchedEvents = uint64(nvml.EventTypeXidCriticalError | nvml.EventTypeDoubleBitEccError)

// OpenEvents initialises NVML from the driver root and registers every GPU for the events
// (MIG devices' come on their GPU). An error means NVML or the driver is not there, or no GPU
// can report events.
func OpenEvents(root string) (*Events, error) {
	lib, probe, _, err := load(root)
	if err != nil {
		return nil, err
	}
	e := &Events{lib: lib, devs: device.New(lib), probe: probe}
	fail := func(err error) (*Events, error) {
		e.Close()
		return nil, err
	}
	q := &queries{lib: lib}
	e.set = get(q, "create an event set", lib.EventSetCreate)
	count := get(q, "count devices", lib.DeviceGetCount)
	if q.err != nil {
		return fail(q.err)
	}
	for i := 0; i < count; i++ {
		dev, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			return fail(nvmlErr(lib, fmt.Sprintf("get GPU %d", i), ret))
		}
		uuid, ret := dev.GetUUID()
		if ret != nvml.SUCCESS {
			return fail(nvmlErr(lib, fmt.Sprintf("get UUID of GPU %d", i), ret))
		}
		supported, ret := dev.GetSupportedEventTypes()
		if ret == nvml.SUCCESS && supported&watchedEvents != 0 {
			ret = dev.RegisterEvents(watchedEvents&supported, e.set)
		} else if ret == nvml.SUCCESS {
			ret = nvml.ERROR_NOT_SUPPORTED
		}
		switch ret {
		case nvml.SUCCESS:
			e.gpus = append(e.gpus, discover.GPU{Index: i, UUID: uuid})
		case nvml.ERROR_NOT_SUPPORTED:
			e.warnings = append(e.warnings, fmt.Sprintf("GPU %d (%s) reports no Xid or ECC events (too old a GPU): it is not watched", i, uuid))
		default:
			return fail(nvmlErr(lib, fmt.Sprintf("register GPU %d (%s) for events", i, uuid), ret))
		}
	}
	if len(e.gpus) == 0 && count > 0 {
		return fail(fmt.Errorf("%w: none of the %d GPUs reports Xid or ECC events", ErrEventsNotSupported, count))
	}
	return e, nil
}

// Warnings name the GPUs that take no event registration (too old): they are not watched.
func (e *Events) Warnings() []string { return e.warnings }

// GPUs are the GPUs watched: index and UUID.
func (e *Events) GPUs() []discover.GPU { return e.gpus }

// Wait waits up to timeout for the next event; false when none came. After an error (the GPU
// or the driver went away), Close and open again.
func (e *Events) Wait(timeout time.Duration) (ev Event, ok bool, err error) {
	ms := uint32(min(max(timeout.Milliseconds(), 0), int64(^uint32(0)>>1)))
	data, ret := e.set.Wait(ms)
	switch ret {
	case nvml.SUCCESS:
	case nvml.ERROR_TIMEOUT:
		return Event{}, false, nil
	default:
		return Event{}, false, nvmlErr(e.lib, "wait for events", ret)
	}
	ev = Event{Xid: data.EventData, GI: data.GpuInstanceId, CI: data.ComputeInstanceId}
	switch data.EventType {
	case nvml.EventTypeXidCriticalError:
		ev.Kind = EventXid
	case nvml.EventTypeDoubleBitEccError:
		ev.Kind, ev.Xid = EventDBE, 0
	default:
		return Event{}, false, nil // not registered for: not expected
	}
	uuid, ret := data.Device.GetUUID()
	if ret != nvml.SUCCESS {
		return Event{}, false, nvmlErr(e.lib, "get the UUID of an event's GPU", ret)
	}
	ev.GPU = discover.GPU{Index: -1, UUID: uuid}
	for _, g := range e.gpus {
		if g.UUID == uuid {
			ev.GPU = g
		}
	}
	if ev.GI != NoInstance {
		ev.MIGDevices = migDevicesOf(e.devs, data.Device, ev.GI, ev.CI)
	}
	return ev, true, nil
}

// migDevicesOf returns the MIG devices of a GPU in GPU instance gi and, unless ci is
// NoInstance, compute instance ci. A device NVML cannot describe is left out; a failed walk
// gives the devices found before.
func migDevicesOf(devs device.Interface, gpu nvml.Device, gi, ci uint32) []discover.MIGDevice {
	var out []discover.MIGDevice
	_ = visitMIGDevices(devs, gpu, -1, func(i int, mig device.MigDevice) error {
		g, ret1 := mig.GetGpuInstanceId()
		c, ret2 := mig.GetComputeInstanceId()
		uuid, ret3 := mig.GetUUID()
		if ret1 != nvml.SUCCESS || ret2 != nvml.SUCCESS || ret3 != nvml.SUCCESS {
			return nil
		}
		if g >= 0 && c >= 0 && int64(g) == int64(gi) && (ci == NoInstance || int64(c) == int64(ci)) {
			out = append(out, discover.MIGDevice{Index: i, UUID: uuid, GI: g, CI: c})
		}
		return nil
	})
	return out
}

// Close frees the event set and shuts NVML down.
func (e *Events) Close() {
	if e.set != nil {
		_ = e.set.Free()
		e.set = nil
	}
	if e.lib != nil {
		_ = e.lib.Shutdown()
		e.lib = nil
	}
	if e.probe != nil {
		_ = e.probe.Close()
		e.probe = nil
	}
}
