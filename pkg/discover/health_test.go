package discover

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func TestProcBusID(t *testing.T) {
	testCases := []struct {
		description, in, want string
		ok                    bool
	}{
		{"NVML's form", "00000000:0F:00.0", "0000:0f:00.0", true},
		{"a domain beyond 16 bits", "00010000:3B:1F.7", "10000:3b:1f.7", true},
		{"the legacy form", "0000:0F:00.0", "0000:0f:00.0", true},
		{"empty (an old cache)", "", "", false},
		{"no function", "00000000:0F:00", "", false},
		{"not hex", "0000000g:0F:00.0", "", false},
		{"a path", "../../etc:00:00.0", "", false},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			got, ok := ProcBusID(tc.in)
			if got != tc.want || ok != tc.ok {
				t.Errorf("ProcBusID(%q) = %q, %v; want %q, %v", tc.in, got, ok, tc.want, tc.ok)
			}
		})
	}
}

// healthProc writes the driver's gpus directory under a proc root: one entry per bus id, its
// information file saying whether the GPU is excluded.
func healthProc(t *testing.T, entries map[string]bool) string {
	t.Helper()
	root := t.TempDir()
	for bus, excluded := range entries {
		dir := filepath.Join(root, ProcGPUs, bus)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		word := "No"
		if excluded {
			word = "Yes"
		}
		info := "Model: \t\t NVIDIA A100-SXM4-80GB\nBus Location: \t " + bus + "\nDevice Minor: \t 0\nGPU Excluded:\t " + word + "\n"
		if err := os.WriteFile(filepath.Join(dir, "information"), []byte(info), 0o444); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(root, ProcGPUs), 0o755); err != nil {
		t.Fatal(err)
	}
	return root
}

func writeHealth(t *testing.T, p, content string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, 0o600); err != nil {
		t.Fatal(err)
	}
}

func healthGPUs() []GPU {
	return []GPU{
		{Index: 0, UUID: "GPU-a", BusID: "00000000:07:00.0"},
		{Index: 1, UUID: "GPU-b", BusID: "00000000:08:00.0"},
		{Index: 2, UUID: "GPU-c", BusID: "00000000:09:00.0", MIGCapable: true, MIGCurrent: true, MIGPending: true,
			MIGDevices: []MIGDevice{{Index: 0, UUID: "MIG-x", GI: 1}, {Index: 1, UUID: "MIG-y", GI: 2}}},
		{Index: 3, UUID: "GPU-d", BusID: ""}, // an old cache without bus ids: nothing is known
	}
}

func TestReadHealth(t *testing.T) {
	proc := healthProc(t, map[string]bool{"0000:07:00.0": false, "0000:09:00.0": false, "0000:0a:00.0": true})
	// GPU 1's entry (0000:08:00.0) is gone.
	file := filepath.Join(t.TempDir(), "health.csv")
	writeHealth(t, file, "uuid,reason,xid,since\n"+
		"GPU-a,Xid 79: GPU has fallen off the bus,79,2026-11-25T10:00:00Z\n"+
		"GPU-b,an operator's words,,2026-11-25T10:01:00+01:00\n"+ // also gone: the driver's signal wins
		"mig-y,Xid 94: contained ECC error,94,2026-11-25T10:02:00Z\n"+ // UUIDs match whatever their case
		"GPU-elsewhere,not on this host,,2026-11-25T10:03:00Z\n")
	since := func(s string) time.Time {
		tm, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return tm
	}
	want := healthGPUs()
	want[0].Health = &Health{Signal: HealthRecorded, Reason: "Xid 79: GPU has fallen off the bus", Xid: 79, Since: since("2026-11-25T10:00:00Z"), Source: file}
	want[1].Health = &Health{Signal: HealthGone, Reason: "gone: the driver has no /proc/driver/nvidia/gpus/0000:08:00.0 (the GPU fell off the bus, or was removed)",
		Source: filepath.Join(proc, ProcGPUs, "0000:08:00.0")}
	want[2].MIGDevices[1].Health = &Health{Signal: HealthRecorded, Reason: "Xid 94: contained ECC error", Xid: 94, Since: since("2026-11-25T10:02:00Z"), Source: file}

	gpus := healthGPUs()
	gpus[3].Health = &Health{Signal: HealthRecorded, Reason: "stale"} // reset by every read
	if w := ReadHealth(gpus, HealthOptions{File: file, ProcRoot: proc}); w != nil {
		t.Errorf("warnings %q", w)
	}
	if !reflect.DeepEqual(gpus, want) {
		t.Errorf("got  %s\nwant %s", describeHealth(gpus), describeHealth(want))
	}

	// Excluded: GPU 1 at the excluded entry.
	gpus = healthGPUs()
	gpus[1].BusID = "00000000:0A:00.0"
	ReadHealth(gpus, HealthOptions{ProcRoot: proc})
	if h := gpus[1].Health; h == nil || h.Signal != HealthExcluded || h.Reason != `excluded by the administrator: /proc/driver/nvidia/gpus/0000:0a:00.0/information says "GPU Excluded: Yes" (NVreg_ExcludedGpus)` {
		t.Errorf("excluded: %s", describeHealth(gpus))
	}

	// No gpus directory at all (no driver, another proc root): nothing is known to be gone.
	gpus = healthGPUs()
	if w := ReadHealth(gpus, HealthOptions{ProcRoot: t.TempDir(), File: filepath.Join(t.TempDir(), "none.csv")}); w != nil || !reflect.DeepEqual(gpus, healthGPUs()) {
		t.Errorf("without the driver's /proc: %s, %q", describeHealth(gpus), w)
	}
	// A GPU directory without its information file (not what the driver makes): no signal.
	if err := os.Remove(filepath.Join(proc, ProcGPUs, "0000:07:00.0", "information")); err != nil {
		t.Fatal(err)
	}
	gpus = healthGPUs()
	ReadHealth(gpus, HealthOptions{ProcRoot: proc})
	if gpus[0].Health != nil {
		t.Errorf("no information file: %+v", gpus[0].Health)
	}
}

func describeHealth(gpus []GPU) string {
	var b strings.Builder
	for _, g := range gpus {
		fmt.Fprintf(&b, "\n  %s: %+v", g.UUID, g.Health)
		for _, m := range g.MIGDevices {
			fmt.Fprintf(&b, "\n    %s: %+v", m.UUID, m.Health)
		}
	}
	return b.String()
}

// TestHealthFileTrust: a health file is believed only as a root-owned regular file of mode
// 0600 that parses; anything else is ignored with a warning naming why.
func TestHealthFileTrust(t *testing.T) {
	valid := "uuid,reason,xid,since\nGPU-a,Xid 79,79,2026-11-25T10:00:00Z\n"
	testCases := []struct {
		description string
		make        func(p string) error
		want        string // the warning; "" = trusted
	}{
		{"valid", func(p string) error { return os.WriteFile(p, []byte(valid), 0o600) }, ""},
		{"group-readable", func(p string) error { return os.WriteFile(p, []byte(valid), 0o640) }, "health file {P} ignored: mode 0640, not 0600"},
		{"world-writable", func(p string) error {
			if err := os.WriteFile(p, []byte(valid), 0o600); err != nil {
				return err
			}
			return os.Chmod(p, 0o666)
		}, "health file {P} ignored: mode 0666, not 0600"},
		{"a symlink to a valid file", func(p string) error {
			if err := os.WriteFile(p+".real", []byte(valid), 0o600); err != nil {
				return err
			}
			return os.Symlink(p+".real", p)
		}, "health file {P} ignored: it is a symbolic link"},
		{"a FIFO (must not hang)", func(p string) error { return syscall.Mkfifo(p, 0o600) }, "health file {P} ignored: not a regular file"},
		{"a directory", func(p string) error { return os.Mkdir(p, 0o700) }, "health file {P} ignored: not a regular file"},
		{"another format", func(p string) error { return os.WriteFile(p, []byte("GPU-a,Xid 79\n"), 0o600) },
			`health file {P} ignored: not a health file: the first line is not "uuid,reason,xid,since"`},
		{"a short record", func(p string) error { return os.WriteFile(p, []byte(valid+"GPU-b,Xid 79\n"), 0o600) },
			"health file {P} ignored: not a health file: line 3: 2 fields, want 4 (uuid, reason, xid, since)"},
		{"bad CSV", func(p string) error { return os.WriteFile(p, []byte(valid+"GPU-b,\"unterminated\n"), 0o600) },
			`health file {P} ignored: not a health file: parse error on line 3, column 21: extraneous or missing " in quoted-field`},
		{"not a UUID", func(p string) error {
			return os.WriteFile(p, []byte(valid+"1,Xid 79,79,2026-11-25T10:00:00Z\n"), 0o600)
		},
			`health file {P} ignored: not a health file: line 3: "1" is not a GPU or MIG device UUID`},
		{"a UUID twice", func(p string) error {
			return os.WriteFile(p, []byte(valid+"gpu-A,Xid 48,48,2026-11-25T10:00:00Z\n"), 0o600)
		},
			`health file {P} ignored: not a health file: line 3: gpu-A already has a record on line 2`},
		{"the same UUID twice", func(p string) error {
			return os.WriteFile(p, []byte(valid+"GPU-a,Xid 48,48,2026-11-25T10:00:00Z\n"), 0o600)
		},
			`health file {P} ignored: not a health file: line 3: GPU-a already has a record on line 2`},
		{"a bad Xid", func(p string) error {
			return os.WriteFile(p, []byte(valid+"GPU-b,Xid 79,x79,2026-11-25T10:00:00Z\n"), 0o600)
		},
			`health file {P} ignored: not a health file: line 3: xid "x79" is not an Xid number`},
		{"a long bad time, cut", func(p string) error {
			return os.WriteFile(p, []byte(valid+"GPU-b,Xid 79,79,"+strings.Repeat("y", 1000)+"\n"), 0o600)
		},
			`health file {P} ignored: not a health file: line 3: since "` + strings.Repeat("y", 256) + `"… (1000 bytes) is not an RFC 3339 time`},
		{"a bad time", func(p string) error { return os.WriteFile(p, []byte(valid+"GPU-b,Xid 79,79,yesterday\n"), 0o600) },
			`health file {P} ignored: not a health file: line 3: since "yesterday" is not an RFC 3339 time`},
		{"a time before year 0 in UTC", func(p string) error {
			return os.WriteFile(p, []byte(valid+"GPU-b,Xid 79,79,0000-01-01T00:00:00+01:00\n"), 0o600)
		},
			`health file {P} ignored: not a health file: line 3: since "0000-01-01T00:00:00+01:00" is outside the years 0000–9999 in UTC`},
		{"an empty reason", func(p string) error { return os.WriteFile(p, []byte(valid+"GPU-b,,79,2026-11-25T10:00:00Z\n"), 0o600) },
			`health file {P} ignored: not a health file: line 3: the reason of GPU-b is not valid: it is empty`},
		{"a reason of two lines", func(p string) error {
			return os.WriteFile(p, []byte(valid+"GPU-b,\"two\nlines\",79,2026-11-25T10:00:00Z\n"), 0o600)
		}, `health file {P} ignored: not a health file: line 3: the reason of GPU-b is not valid: it holds a control character (one line of printable text expected)`},
	}
	if os.Geteuid() == 0 { // only root can give a file away
		testCases = append(testCases, struct {
			description string
			make        func(p string) error
			want        string
		}{"owned by another user", func(p string) error {
			if err := os.WriteFile(p, []byte(valid), 0o600); err != nil {
				return err
			}
			return os.Chown(p, 1000, 1000)
		}, "health file {P} ignored: owned by uid 1000, not 0"})
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "health.csv")
			if err := tc.make(p); err != nil {
				t.Fatal(err)
			}
			gpus := []GPU{{UUID: "GPU-a"}}
			done := make(chan []string, 1)
			go func() { done <- ReadHealth(gpus, HealthOptions{File: p, ProcRoot: t.TempDir()}) }()
			var warnings []string
			select {
			case warnings = <-done:
			case <-time.After(5 * time.Second):
				t.Fatal("ReadHealth blocked")
			}
			if tc.want == "" {
				if warnings != nil || gpus[0].Health == nil || gpus[0].Health.Xid != 79 {
					t.Errorf("not trusted: %q %+v", warnings, gpus[0].Health)
				}
				return
			}
			want := strings.ReplaceAll(tc.want, "{P}", p) + "; no device is held back by it until it is fixed (gpu-ctk health clear all rewrites it)"
			if len(warnings) != 1 || warnings[0] != want {
				t.Errorf("warnings %q\nwant %q", warnings, want)
			}
			if gpus[0].Health != nil {
				t.Errorf("an untrusted file was believed: %+v", gpus[0].Health)
			}
		})
	}
}

func TestHealthRoundTrip(t *testing.T) {
	at := time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)
	records := []HealthRecord{
		{UUID: "MIG-b", Reason: `quoted "words", with a comma`, Since: at.Add(time.Hour)},
		{UUID: "GPU-a", Reason: "Xid 79: GPU has fallen off the bus", Xid: 79, Since: at},
	}
	data := EncodeHealth(records)
	want := "uuid,reason,xid,since\nGPU-a,Xid 79: GPU has fallen off the bus,79,2026-11-25T10:00:00Z\nMIG-b,\"quoted \"\"words\"\", with a comma\",,2026-11-25T11:00:00Z\n"
	if string(data) != want {
		t.Errorf("encoded:\n%s\nwant\n%s", data, want)
	}
	got, err := DecodeHealth(data)
	if err != nil || !reflect.DeepEqual(got, []HealthRecord{records[1], records[0]}) {
		t.Errorf("decoded %+v, %v", got, err)
	}
	if got, err := DecodeHealth([]byte("uuid,reason,xid,since\n")); err != nil || got != nil {
		t.Errorf("no records: %+v, %v", got, err)
	}
}

// TestUpdateHealthFile: concurrent updates lose nothing; the file is root's, 0600; an
// untrusted file is replaced with a warning.
func TestUpdateHealthFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "run", "health.csv")
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := UpdateHealthFile(p, func(r []HealthRecord) ([]HealthRecord, error) {
				return append(r, HealthRecord{UUID: fmt.Sprintf("GPU-%02d", i), Reason: "test", Since: time.Now()}), nil
			})
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	records, err := ReadHealthFile(p)
	if err != nil || len(records) != 20 {
		t.Fatalf("%d records, %v", len(records), err)
	}
	if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("mode: %v %v", fi, err)
	}
	if fi, err := os.Stat(filepath.Dir(p)); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("directory mode: %v %v", fi, err)
	}

	// An update that fails leaves the file as it was.
	before, _ := os.ReadFile(p)
	if _, err := UpdateHealthFile(p, func([]HealthRecord) ([]HealthRecord, error) { return nil, errors.New("no") }); err == nil || err.Error() != "no" {
		t.Errorf("err = %v", err)
	}
	if after, _ := os.ReadFile(p); string(after) != string(before) {
		t.Error("a failed update changed the file")
	}

	// A symlink at the path is replaced, not followed.
	target := filepath.Join(t.TempDir(), "elsewhere")
	if err := os.WriteFile(target, []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, p); err != nil {
		t.Fatal(err)
	}
	warning, err := UpdateHealthFile(p, func(r []HealthRecord) ([]HealthRecord, error) {
		if r != nil {
			t.Errorf("records of an untrusted file: %+v", r)
		}
		return []HealthRecord{{UUID: "GPU-a", Reason: "x", Since: time.Now()}}, nil
	})
	if err != nil || warning != "health file "+p+" ignored: it is a symbolic link; it is replaced" {
		t.Errorf("warning %q, %v", warning, err)
	}
	if data, _ := os.ReadFile(target); string(data) != "keep" {
		t.Errorf("the link's target was written: %q", data)
	}
	if fi, err := os.Lstat(p); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("not replaced by a regular file: %v %v", fi, err)
	}
	if _, err := ReadHealthFile(filepath.Join(t.TempDir(), "none")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
}

// FuzzDecodeHealth: any input decodes or is refused, never panics; what decodes encodes
// back to a file that decodes to the same records.
func FuzzDecodeHealth(f *testing.F) {
	f.Add([]byte("uuid,reason,xid,since\nGPU-a,Xid 79,79,2026-11-25T10:00:00Z\nMIG-b,\"a, b\",,2026-11-25T10:00:00+02:00\n"))
	f.Add([]byte("uuid,reason,xid,since\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		records, err := DecodeHealth(data)
		if err != nil {
			if !errors.Is(err, ErrHealthFormat) {
				t.Fatalf("error %v does not wrap ErrHealthFormat", err)
			}
			return
		}
		again, err := DecodeHealth(EncodeHealth(records))
		if err != nil || len(again) != len(records) {
			t.Fatalf("round trip: %v, %d records of %d", err, len(again), len(records))
		}
		for _, r := range again {
			if !ValidHealthUUID(r.UUID) || ValidHealthReason(r.Reason) != "" {
				t.Fatalf("decoded an invalid record %+v", r)
			}
		}
	})
}
