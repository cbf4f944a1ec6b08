package fakehost

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// eventsHost is Default(2) with two MIG devices on GPU 0.
func eventsHost(t *testing.T) Options {
	t.Helper()
	opts := Default(2)
	if err := opts.GPUs[0].AddMIGDevices("3g.40gb", "3g.40gb"); err != nil {
		t.Fatal(err)
	}
	return opts
}

// runEvents is the "events" child: a health watcher's use of NVML events, appending to the
// events file as a test would. It reports one line per step.
func runEvents(t *testing.T, path string) any {
	events := os.Getenv(childEventsEnv)
	appendLines := func(lines ...string) {
		f, err := os.OpenFile(events, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.WriteString(strings.Join(lines, "\n") + "\n"); err != nil {
			t.Fatal(err)
		}
	}
	lib := nvml.New(nvml.WithLibraryPath(path))
	if ret := lib.Init(); ret != nvml.SUCCESS {
		t.Fatalf("init: %v", ret)
	}
	defer lib.Shutdown()
	gpu0, _ := lib.DeviceGetHandleByIndex(0)
	gpu1, _ := lib.DeviceGetHandleByIndex(1)
	mig, ret := gpu0.GetMigDeviceHandleByIndex(1)
	if ret != nvml.SUCCESS {
		t.Fatalf("MIG device: %v", ret)
	}
	uuid0, _ := gpu0.GetUUID()
	uuid1, _ := gpu1.GetUUID()
	migUUID, _ := mig.GetUUID()

	var steps []string
	step := func(format string, args ...any) { steps = append(steps, fmt.Sprintf(format, args...)) }
	wait := func(set nvml.EventSet, what string, timeout uint32) time.Duration {
		start := time.Now()
		e, ret := set.Wait(timeout)
		took := time.Since(start)
		if ret != nvml.SUCCESS {
			step("%s: %v", what, ret)
			return took
		}
		uuid, _ := e.Device.GetUUID()
		step("%s: %s type %#x data %d instances %#x %#x", what, uuid, e.EventType, e.EventData, e.GpuInstanceId, e.ComputeInstanceId)
		return took
	}

	appendLines(uuid1 + " xid 13") // before any registration: never delivered
	set, ret := lib.EventSetCreate()
	step("create: %v", ret)
	wait(set, "wait before registering", 0)
	supported, ret := gpu1.GetSupportedEventTypes()
	step("supported on GPU 1: %v %#x", ret, supported)
	step("register GPU 1 for Xid and DBE: %v", gpu1.RegisterEvents(nvml.EventTypeXidCriticalError|nvml.EventTypeDoubleBitEccError, set))
	step("register GPU 0 for Xid: %v", gpu0.RegisterEvents(nvml.EventTypeXidCriticalError, set))
	step("register a MIG device: %v", mig.RegisterEvents(nvml.EventTypeXidCriticalError, set))
	step("register GPU 0 for power source changes: %v", gpu0.RegisterEvents(nvml.EventTypePowerSourceChange, set))
	step("register GPU 0 for an unknown type: %v", gpu0.RegisterEvents(1<<40, set))
	if took := wait(set, "wait with nothing new", 100); took < 100*time.Millisecond {
		t.Errorf("a 100 ms wait without events returned after %v", took)
	}
	other, ret := lib.EventSetCreate()
	step("create another: %v", ret)
	step("register GPU 1 for Xid there: %v", gpu1.RegisterEvents(nvml.EventTypeXidCriticalError, other))

	appendLines(
		uuid1+" xid 79",
		uuid0+" dbe",      // GPU 0 is registered for Xids only
		uuid1+" sbe",      // nor GPU 1 for single bit errors
		migUUID+" xid 43", // on GPU 0, with the MIG device's instance ids
		"# a comment",
		"",
		"GPU-00000000-0000-0000-0000-000000000000 xid 79", // malformed lines are skipped, loudly
		uuid0+" xid",
		uuid0+" reboot",
		migUUID+" xid 79 0 0",
		uuid0+" xid 31 2 0", // on GPU 0, ids given
		uuid1+" dbe",
	)
	for i := 0; i < 5; i++ {
		wait(set, "wait", 200)
	}
	wait(other, "other set", 200)
	wait(other, "other set", 0)

	// A device registered later than the set's first registration gets only its later events.
	third, _ := lib.EventSetCreate()
	step("register GPU 1 in a third set: %v", gpu1.RegisterEvents(nvml.EventTypeXidCriticalError, third))
	appendLines(uuid0 + " xid 94")
	step("then GPU 0: %v", gpu0.RegisterEvents(nvml.EventTypeXidCriticalError, third))
	appendLines(uuid0 + " xid 95")
	wait(third, "third set", 200)
	wait(third, "third set", 0)
	step("free the third: %v", third.Free())
	wait(set, "first set, registered for GPU 0 all along", 200)
	wait(set, "first set, registered for GPU 0 all along", 200)

	go func() {
		time.Sleep(200 * time.Millisecond)
		appendLines(uuid0 + " xid 48")
	}()
	if took := wait(set, "wait for a late event", 10000); took > 5*time.Second {
		t.Errorf("a late event took %v to arrive", took)
	}
	step("free: %v", set.Free())
	step("free the other: %v", other.Free())
	return steps
}

func TestNVMLEvents(t *testing.T) {
	requireBuildable(t)
	h := buildHost(t, eventsHost(t))
	var got []string
	stderr := runChild(t, &got, childLibsEnv+"="+h.NVMLPath(), childScenarioEnv+"=events", childEventsEnv+"="+h.NVMLEvents)
	// The library names the default events file by its real path.
	skipped := regexp.MustCompile(`^fakehost: NVML events file /\S*/nvml-events: line at byte \d+ skipped: (.*)$`)
	var reasons []string
	for _, line := range strings.Split(strings.TrimSpace(stderr), "\n") {
		sub := skipped.FindStringSubmatch(line)
		if sub == nil {
			t.Errorf("unexpected child stderr line %q", line)
			continue
		}
		reasons = append(reasons, sub[1])
	}
	wantReasons := []string{"no GPU or MIG device of this host has this UUID", "an xid event needs the Xid number",
		"the event type is not xid, sbe or dbe", "a MIG device's event takes no instance ids"}
	if !reflect.DeepEqual(reasons, wantReasons) {
		t.Errorf("skipped lines: %q, want %q", reasons, wantReasons)
	}
	uuid0, uuid1 := h.Options.GPUs[0].UUID, h.Options.GPUs[1].UUID
	mig := h.MIGDevices()[1]
	want := []string{
		"create: Success",
		"wait before registering: Timeout",
		"supported on GPU 1: Success 0x11f",
		"register GPU 1 for Xid and DBE: Success",
		"register GPU 0 for Xid: Success",
		"register a MIG device: Not Supported",
		"register GPU 0 for power source changes: Not Supported",
		"register GPU 0 for an unknown type: Invalid Argument",
		"wait with nothing new: Timeout",
		"create another: Success",
		"register GPU 1 for Xid there: Success",
		"wait: " + uuid1 + " type 0x8 data 79 instances 0xffffffff 0xffffffff",
		fmt.Sprintf("wait: %s type 0x8 data 43 instances %#x %#x", uuid0, mig.GI, mig.CI),
		"wait: " + uuid0 + " type 0x8 data 31 instances 0x2 0x0",
		"wait: " + uuid1 + " type 0x2 data 0 instances 0xffffffff 0xffffffff",
		"wait: Timeout",
		"other set: " + uuid1 + " type 0x8 data 79 instances 0xffffffff 0xffffffff",
		"other set: Timeout",
		"register GPU 1 in a third set: Success",
		"then GPU 0: Success",
		"third set: " + uuid0 + " type 0x8 data 95 instances 0xffffffff 0xffffffff",
		"third set: Timeout",
		"free the third: Success",
		"first set, registered for GPU 0 all along: " + uuid0 + " type 0x8 data 94 instances 0xffffffff 0xffffffff",
		"first set, registered for GPU 0 all along: " + uuid0 + " type 0x8 data 95 instances 0xffffffff 0xffffffff",
		"wait for a late event: " + uuid0 + " type 0x8 data 48 instances 0xffffffff 0xffffffff",
		"free: Success",
		"free the other: Success",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("events:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestAppendNVMLEvent(t *testing.T) {
	requireBuildable(t)
	h := buildHost(t, Default(2))
	if err := h.AppendXid(h.Options.GPUs[1].UUID, 13); err != nil {
		t.Fatal(err)
	}
	if err := h.AppendNVMLEvent(h.Options.GPUs[0].UUID + " dbe"); err != nil {
		t.Fatal(err)
	}
	if err := h.AppendNVMLEvent("two\nlines"); err == nil {
		t.Errorf("AppendNVMLEvent accepted two lines")
	}
	data, err := os.ReadFile(h.NVMLEvents)
	if want := h.Options.GPUs[1].UUID + " xid 13\n" + h.Options.GPUs[0].UUID + " dbe\n"; err != nil || string(data) != want {
		t.Errorf("events file = %q, %v; want %q", data, err, want)
	}
	if h.NVMLEvents != h.Dir+"/nvml-events" {
		t.Errorf("NVMLEvents = %s, want the default in %s", h.NVMLEvents, h.Dir)
	}
}

// runReload is the "reload" child: a health watcher's NVML while the driver is unloaded and
// loaded again, one line per step.
func runReload(t *testing.T, path string) any {
	h := &Host{Dir: os.Getenv(childHostDirEnv), NVMLEvents: os.Getenv(childEventsEnv)}
	h.ProcRoot = filepath.Join(h.Dir, "procroot")
	var steps []string
	step := func(format string, args ...any) { steps = append(steps, fmt.Sprintf(format, args...)) }
	lib := nvml.New(nvml.WithLibraryPath(path))
	watch := func() nvml.EventSet {
		step("init: %v", lib.Init())
		gpu1, _ := lib.DeviceGetHandleByIndex(1)
		set, _ := lib.EventSetCreate()
		step("register: %v", gpu1.RegisterEvents(nvml.EventTypeXidCriticalError, set))
		return set
	}
	wait := func(set nvml.EventSet) {
		e, ret := set.Wait(2000)
		if ret != nvml.SUCCESS {
			step("wait: %v", ret)
			return
		}
		step("wait: Xid %d", e.EventData)
	}
	set := watch()
	uuid1 := os.Getenv("FAKEHOST_TEST_UUID1")
	if err := h.AppendXid(uuid1, 79); err != nil {
		t.Fatal(err)
	}
	wait(set)
	if err := h.UnloadDriver(); err != nil {
		t.Fatal(err)
	}
	wait(set)
	wait(set)
	if err := h.LoadDriver(); err != nil {
		t.Fatal(err)
	}
	if err := h.AppendXid(uuid1, 31); err != nil {
		t.Fatal(err)
	}
	wait(set) // the driver is back, but not for this set: the client must initialise NVML again
	if err := h.UnloadDriver(); err != nil {
		t.Fatal(err)
	}
	step("free: %v", set.Free())
	step("shutdown: %d", lib.Shutdown()) // a number: go-nvml names returns through the library, unloaded by then
	step("init while unloaded: %v", lib.Init())
	if err := h.LoadDriver(); err != nil {
		t.Fatal(err)
	}
	set = watch()
	if err := h.AppendXid(uuid1, 48); err != nil {
		t.Fatal(err)
	}
	wait(set)
	step("shutdown: %d", lib.Shutdown())
	return steps
}

// TestNVMLDriverReload: NVML of a driver that goes away and comes back, as a health watcher
// sees it.
func TestNVMLDriverReload(t *testing.T) {
	requireBuildable(t)
	h := buildHost(t, Default(2))
	var got []string
	if stderr := runChild(t, &got, childLibsEnv+"="+h.NVMLPath(), childScenarioEnv+"=reload", childEventsEnv+"="+h.NVMLEvents,
		childHostDirEnv+"="+h.Dir, "FAKEHOST_TEST_UUID1="+h.Options.GPUs[1].UUID); stderr != "" {
		t.Errorf("child stderr: %s", stderr)
	}
	want := []string{
		"init: Success", "register: Success", "wait: Xid 79",
		"wait: GPU is lost", "wait: GPU is lost", "wait: GPU is lost", "free: Success", "shutdown: 0",
		"init while unloaded: Driver Not Loaded",
		"init: Success", "register: Success", "wait: Xid 48", "shutdown: 0",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("steps:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if _, err := os.Stat(filepath.Join(h.ProcRoot, ProcVersionRel)); err != nil {
		t.Errorf("the driver is not back: %v", err)
	}
}

// TestProcGPUSignals: a GPU's /proc directory can go and come back excluded, as the driver
// shows it.
func TestProcGPUSignals(t *testing.T) {
	requireBuildable(t)
	h := buildHost(t, Default(2))
	dir, err := h.ProcGPUDir(1)
	if err != nil || dir != filepath.Join(h.ProcRoot, "proc/driver/nvidia/gpus/0000:"+strings.ToLower(h.Options.GPUs[1].BusID[9:])) {
		t.Fatalf("ProcGPUDir(1) = %s, %v", dir, err)
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := h.SetGPUExcluded(1, true); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(dir, "information"))
	if err != nil || !strings.HasSuffix(string(data), "GPU Excluded:\t Yes\n") || strings.Contains(string(data), "GPU UUID") {
		t.Errorf("information = %q, %v", data, err)
	}
	if err := h.SetGPUExcluded(1, false); err != nil {
		t.Fatal(err)
	}
	if data, _ := os.ReadFile(filepath.Join(dir, "information")); !strings.HasSuffix(string(data), "GPU Excluded:\t No\n") {
		t.Errorf("information = %q", data)
	}
	if _, err := h.ProcGPUDir(7); err == nil {
		t.Error("ProcGPUDir(7) of a 2-GPU host")
	}
}
