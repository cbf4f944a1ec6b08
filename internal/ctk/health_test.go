package ctk

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/gpu-runtime/gpu-runtime/internal/nvmlinfo"
	"github.com/gpu-runtime/gpu-runtime/pkg/discover"
)

// scripted is an event source that plays a script: each step is an event, a timeout or an
// error; after the last step of the last session it stops the watcher.
type scripted struct {
	steps  []step
	closed *int
	stop   func()
}

type step struct {
	ev  *nvmlinfo.Event
	err error
}

func (s *scripted) GPUs() []discover.GPU {
	return []discover.GPU{{Index: 0, UUID: "GPU-0"}, {Index: 1, UUID: "GPU-1"}}
}
func (s *scripted) Warnings() []string {
	return []string{"GPU 2 (GPU-2) reports no Xid or ECC events (too old a GPU): it is not watched"}
}
func (s *scripted) Close() { *s.closed++ }
func (s *scripted) Wait(time.Duration) (nvmlinfo.Event, bool, error) {
	if len(s.steps) == 0 {
		s.stop()
		return nvmlinfo.Event{}, false, nil
	}
	st := s.steps[0]
	s.steps = s.steps[1:]
	if st.err != nil {
		return nvmlinfo.Event{}, false, st.err
	}
	if st.ev == nil {
		return nvmlinfo.Event{}, false, nil
	}
	return *st.ev, true, nil
}

func xidOn(gpu int, xid uint64) *nvmlinfo.Event {
	return &nvmlinfo.Event{Kind: nvmlinfo.EventXid, Xid: xid, GPU: discover.GPU{Index: gpu, UUID: "GPU-" + string(rune('0'+gpu))}, GI: nvmlinfo.NoInstance, CI: nvmlinfo.NoInstance}
}

func TestHealthWatch(t *testing.T) {
	file := filepath.Join(t.TempDir(), "run", "health.csv")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var logs bytes.Buffer
	log := logrus.New()
	log.SetOutput(&logs)
	log.SetFormatter(&logrus.TextFormatter{DisableTimestamp: true, DisableQuote: true})
	at := time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)
	mig := func(gi, ci uint32, devices ...string) *nvmlinfo.Event {
		ev := &nvmlinfo.Event{Kind: nvmlinfo.EventXid, Xid: 94, GPU: discover.GPU{Index: 0, UUID: "GPU-0"}, GI: gi, CI: ci}
		for _, d := range devices {
			ev.MIGDevices = append(ev.MIGDevices, discover.MIGDevice{UUID: d, GI: int(gi)})
		}
		return ev
	}
	opens, closed := 0, 0
	sessions := [][]step{
		{
			{ev: xidOn(1, 79)},
			{}, // a timeout
			{ev: xidOn(1, 13)},
			{ev: &nvmlinfo.Event{Kind: nvmlinfo.EventDBE, GPU: discover.GPU{Index: 0, UUID: "GPU-0"}, GI: nvmlinfo.NoInstance, CI: nvmlinfo.NoInstance}},
			{ev: xidOn(1, 48)}, // already recorded: kept as it was
			{err: errors.New("NVML query failed: wait for events: GPU is lost")},
		},
		{
			{ev: mig(3, 0, "MIG-3")},
			{ev: mig(4, nvmlinfo.NoInstance, "MIG-4a", "MIG-4b")},
			{ev: mig(5, 0)}, // an instance that is gone
		},
	}
	failures := 3 // the driver is not there at first
	w := &watcher{root: "/drv", file: file, ignore: []int{13, 31, 43, 45, 68, 109}, log: log, now: func() time.Time { return at },
		backoff: time.Millisecond, maxBackoff: 4 * time.Millisecond, waitSlice: time.Millisecond,
		open: func(root string) (eventSource, error) {
			opens++
			if failures > 0 {
				failures--
				return nil, errors.New("NVML query failed: initialize NVML from /drv/libnvidia-ml.so.1: Driver Not Loaded")
			}
			if len(sessions) == 0 {
				t.Fatal("opened once too often")
			}
			s := &scripted{steps: sessions[0], closed: &closed, stop: func() {}}
			sessions = sessions[1:]
			if len(sessions) == 0 {
				s.stop = cancel
			}
			return s, nil
		},
	}
	done := make(chan error, 1)
	go func() { done <- w.run(ctx) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("watch did not stop")
	}
	if opens != 5 || closed != 2 {
		t.Errorf("%d opens, %d closes; want 5, 2", opens, closed)
	}
	records, err := discover.ReadHealthFile(file)
	if err != nil {
		t.Fatal(err)
	}
	want := []discover.HealthRecord{
		{UUID: "GPU-0", Reason: "double-bit ECC error", Since: at},
		{UUID: "GPU-1", Reason: "Xid 79: GPU has fallen off the bus", Xid: 79, Since: at},
		{UUID: "MIG-3", Reason: "Xid 94: contained ECC error", Xid: 94, Since: at},
		{UUID: "MIG-4a", Reason: "Xid 94: contained ECC error", Xid: 94, Since: at},
		{UUID: "MIG-4b", Reason: "Xid 94: contained ECC error", Xid: 94, Since: at},
	}
	if !reflect.DeepEqual(records, want) {
		t.Errorf("records:\n%+v\nwant\n%+v", records, want)
	}
	wantLogs := []string{
		"level=info msg=health watch: starting driver_root=/drv health_file=" + file + " ignore_xids=[13 31 43 45 68 109]",
		"level=warning msg=health watch: NVML cannot be initialised; trying again in 1ms error=NVML query failed: initialize NVML from /drv/libnvidia-ml.so.1: Driver Not Loaded",
		"level=warning msg=health watch: NVML cannot be initialised; trying again in 2ms error=NVML query failed: initialize NVML from /drv/libnvidia-ml.so.1: Driver Not Loaded",
		"level=warning msg=health watch: NVML cannot be initialised; trying again in 4ms error=NVML query failed: initialize NVML from /drv/libnvidia-ml.so.1: Driver Not Loaded",
		"level=info msg=health watch: watching 2 GPU(s) for Xid and double-bit ECC errors gpus=[0=GPU-0 1=GPU-1]",
		"level=warning msg=health watch: GPU 2 (GPU-2) reports no Xid or ECC events (too old a GPU): it is not watched",
		"level=warning msg=health watch: Xid 79: GPU has fallen off the bus: recorded GPU-1 as unhealthy in " + file + "; gpu-runtime gives it to no container until gpu-ctk health clear GPU-1 device=GPU-1 gpu=GPU-1 gpu_index=1 xid=79",
		"level=info msg=health watch: Xid 13 ignored: an application's error, not the GPU's (health.ignore-xids) gpu=GPU-1 gpu_index=1 xid=13",
		"level=warning msg=health watch: double-bit ECC error: recorded GPU-0 as unhealthy in " + file + "; gpu-runtime gives it to no container until gpu-ctk health clear GPU-0 device=GPU-0 gpu=GPU-0 gpu_index=0",
		"level=info msg=health watch: Xid 48: double-bit ECC error: GPU-1 was already recorded as unhealthy device=GPU-1 gpu=GPU-1 gpu_index=1 xid=48",
		"level=warning msg=health watch: NVML stopped answering (the driver or a GPU went away?); releasing it and initialising it again error=NVML query failed: wait for events: GPU is lost",
		"level=info msg=health watch: watching 2 GPU(s) for Xid and double-bit ECC errors gpus=[0=GPU-0 1=GPU-1]",
		"level=warning msg=health watch: GPU 2 (GPU-2) reports no Xid or ECC events (too old a GPU): it is not watched",
		"level=warning msg=health watch: Xid 94: contained ECC error: recorded MIG-3 as unhealthy in " + file + "; gpu-runtime gives it to no container until gpu-ctk health clear MIG-3 compute_instance=0 device=MIG-3 gpu=GPU-0 gpu_index=0 gpu_instance=3 xid=94",
		"level=warning msg=health watch: Xid 94: contained ECC error: recorded MIG-4a as unhealthy in " + file + "; gpu-runtime gives it to no container until gpu-ctk health clear MIG-4a compute_instance=all device=MIG-4a gpu=GPU-0 gpu_index=0 gpu_instance=4 xid=94",
		"level=warning msg=health watch: Xid 94: contained ECC error: recorded MIG-4b as unhealthy in " + file + "; gpu-runtime gives it to no container until gpu-ctk health clear MIG-4b compute_instance=all device=MIG-4b gpu=GPU-0 gpu_index=0 gpu_instance=4 xid=94",
		"level=warning msg=health watch: Xid 94: contained ECC error on GPU instance 5 of GPU GPU-0, which holds no such MIG device now: nothing recorded compute_instance=0 gpu=GPU-0 gpu_index=0 gpu_instance=5 xid=94",
		"level=info msg=health watch: stopped",
	}
	if got := strings.Split(strings.TrimSuffix(logs.String(), "\n"), "\n"); !reflect.DeepEqual(got, wantLogs) {
		t.Errorf("logs:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(wantLogs, "\n"))
	}
}

// TestHealthWatchReload: SIGHUP (the reload channel) re-initialises NVML at once, also while
// it waits between failed tries.
func TestHealthWatchReload(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reload := make(chan os.Signal, 1)
	opens, closed := 0, 0
	log := logrus.New()
	log.SetOutput(&bytes.Buffer{})
	w := &watcher{file: filepath.Join(t.TempDir(), "h.csv"), log: log, now: time.Now, reload: reload,
		backoff: time.Hour, maxBackoff: time.Hour, waitSlice: time.Millisecond,
		open: func(string) (eventSource, error) {
			opens++
			switch opens {
			case 1:
				reload <- os.Interrupt // as SIGHUP arrives
				return nil, errors.New("no driver")
			case 2:
				reload <- os.Interrupt
				return &scripted{steps: []step{{}, {}, {}}, closed: &closed, stop: func() {}}, nil
			}
			return &scripted{closed: &closed, stop: cancel}, nil
		}}
	done := make(chan error, 1)
	go func() { done <- w.run(ctx) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("a reload did not cut the hour's wait short")
	}
	if opens != 3 || closed != 2 {
		t.Errorf("%d opens, %d closes; want 3, 2", opens, closed)
	}
}

// TestHealthCommands: mark and clear change the file (NVML is not there: a warning says the
// device was not checked); usage errors say what is wrong.
func TestHealthCommands(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "health.csv")
	config := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(config, []byte("[driver]\nroot = \""+dir+"\"\n[health]\nfile = \""+file+"\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("GPU_RUNTIME_CONFIG", config)
	run := func(args ...string) (string, string, error) {
		var out, errb strings.Builder
		err := Run(append([]string{"health"}, args...), &out, &errb)
		return out.String(), errb.String(), err
	}
	out, errOut, err := run("mark", "GPU-1234", "--reason", "fan failure", "--xid", "79")
	if err != nil || out != "recorded GPU-1234 as unhealthy: fan failure (in "+file+"); gpu-runtime gives it to no container until gpu-ctk health clear GPU-1234\n" ||
		!strings.HasPrefix(errOut, "gpu-ctk: warning: NVML library not found") || !strings.HasSuffix(errOut, "; GPU-1234 is recorded without checking that this host has it\n") {
		t.Errorf("mark: %q %q %v", out, errOut, err)
	}
	out, _, err = run("mark", "--reason", "again", "gpu-1234")
	if err != nil || out != "gpu-1234 was already recorded as unhealthy (gpu-ctk health shows why); its record is kept\n" {
		t.Errorf("mark again: %q %v", out, err)
	}
	if _, _, err := run("mark", "MIG-abcd", "--reason", "maintenance"); err != nil {
		t.Fatal(err)
	}
	records, err := discover.ReadHealthFile(file)
	if err != nil || len(records) != 2 || records[0].UUID != "GPU-1234" || records[0].Xid != 79 || records[0].Reason != "fan failure" || records[1].UUID != "MIG-abcd" {
		t.Errorf("records %+v, %v", records, err)
	}
	out, _, err = run("clear", "GPU-1234")
	if err != nil || out != "cleared GPU-1234: gpu-runtime gives it to containers again\n" {
		t.Errorf("clear: %q %v", out, err)
	}
	_, _, err = run("clear", "GPU-1234")
	if !errors.Is(err, ErrNoRecord) || err.Error() != "no health record: GPU-1234 is not marked unhealthy: the health file "+file+" has no record of it, so there is nothing to clear; gpu-ctk health shows why a device is held back (the driver's /proc may say so: that clears when the driver does)" || ExitCode(err) != 1 {
		t.Errorf("clear again: %v", err)
	}
	out, _, err = run("clear", "all")
	if err != nil || out != "cleared MIG-abcd: gpu-runtime gives it to containers again\n" {
		t.Errorf("clear all: %q %v", out, err)
	}
	if records, err := discover.ReadHealthFile(file); err != nil || len(records) != 0 {
		t.Errorf("after clear all: %+v %v", records, err)
	}

	usage := []struct {
		args []string
		want string
	}{
		{[]string{"frob"}, `usage: unknown health command "frob": the commands are watch, mark and clear (gpu-ctk health --help)`},
		{[]string{"mark"}, "usage: health mark needs a GPU or MIG device: its index or UUID, as gpu-ctk health lists them (gpu-ctk health mark --help)"},
		{[]string{"mark", "GPU-1"}, "usage: health mark needs --reason TEXT: it is what a container asking for the device is told"},
		{[]string{"mark", "1:", "--reason", "x"}, `usage: "1:" is not a device index (0, 1:0) or UUID (GPU-…, MIG-…), as gpu-ctk health lists them`},
		{[]string{"mark", "gpu1", "--reason", "x"}, `usage: "gpu1" is not a device index (0, 1:0) or UUID (GPU-…, MIG-…), as gpu-ctk health lists them`},
		{[]string{"mark", "GPU-1", "GPU-2", "--reason", "x"}, `usage: health mark takes one device, got also ["GPU-2" "--reason" "x"]`},
		{[]string{"mark", "GPU-1", "--reason", "two\nlines"}, "usage: --reason \"two\\nlines\": it holds a control character (one line of printable text expected)"},
		{[]string{"mark", "GPU-1", "--bogus"}, "usage: flag provided but not defined: -bogus (gpu-ctk health mark --help)"},
		{[]string{"clear"}, "usage: health clear takes one device (its index or UUID), or all (gpu-ctk health clear --help)"},
		{[]string{"clear", "everything"}, `usage: "everything" is not a device index (0, 1:0) or UUID (GPU-…, MIG-…), as gpu-ctk health lists them, nor all`},
		{[]string{"watch", "now"}, `usage: health watch takes no arguments, got ["now"] (gpu-ctk health watch --help)`},
	}
	for _, u := range usage {
		_, _, err := run(u.args...)
		if !errors.Is(err, ErrUsage) || err.Error() != u.want {
			t.Errorf("health %q: %v\nwant %s", u.args, err, u.want)
		}
	}
	// An index names a device only through NVML, which this test host lacks: mark and clear
	// say so and record nothing (the fake host's e2e test marks and clears by index).
	for _, args := range [][]string{{"mark", "1:0", "--reason", "x"}, {"clear", "0"}} {
		_, _, err := run(args...)
		want := "device " + args[1] + ": an index names a device only through NVML, which failed: NVML library not found"
		if err == nil || errors.Is(err, ErrUsage) || !strings.HasPrefix(err.Error(), want) || !strings.HasSuffix(err.Error(), "; give its UUID instead (gpu-ctk health lists them)") {
			t.Errorf("health %q: %v\nwant %s…", args, err, want)
		}
	}
	for _, sub := range []string{"watch", "mark", "clear"} {
		out, _, err := run(sub, "--help")
		if err != nil || !strings.HasPrefix(out, "usage:\n  gpu-ctk health "+sub) {
			t.Errorf("health %s --help: %q %v", sub, out, err)
		}
	}
}
