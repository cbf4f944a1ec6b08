package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestParseFlags(t *testing.T) {
	type gpu struct {
		MIG                   []string // "profile GI/CI"
		Current, Pending      bool
		Excluded, Persistence bool
	}
	testCases := []struct {
		description   string
		args          []string
		want          map[int]gpu // GPUs that differ from Default's
		procInterface bool
	}{
		{description: "defaults", args: nil, want: map[int]gpu{}},
		{description: "one GPU's MIG devices", args: []string{"--mig", "0=3g.40gb,2g.20gb,1g.10gb"},
			want: map[int]gpu{0: {MIG: []string{"3g.40gb 1/0", "2g.20gb 5/0", "1g.10gb 13/0"}, Current: true, Pending: true}}},
		{description: "two GPUs, ;-separated", args: []string{"--gpus", "3", "--mig", "0=7g.80gb;2=1c.3g.40gb,1c.3g.40gb"},
			want: map[int]gpu{0: {MIG: []string{"7g.80gb 0/0"}, Current: true, Pending: true},
				2: {MIG: []string{"1c.3g.40gb 1/0", "1c.3g.40gb 1/1"}, Current: true, Pending: true}}},
		{description: "repeated --mig", args: []string{"--mig", "1=1g.10gb+me", "--mig", "0=4g.40gb,3g.40gb"},
			want: map[int]gpu{0: {MIG: []string{"4g.40gb 1/0", "3g.40gb 2/0"}, Current: true, Pending: true},
				1: {MIG: []string{"1g.10gb+me 7/0"}, Current: true, Pending: true}}},
		{description: "excluded, persistence off, /proc interface",
			args:          []string{"--gpus", "4", "--excluded", "1", "--excluded", "3", "--persistence-off", "0,2", "--proc-interface"},
			want:          map[int]gpu{0: {Persistence: true}, 1: {Excluded: true}, 2: {Persistence: true}, 3: {Excluded: true}},
			procInterface: true},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			cfg, err := parseFlags(append([]string{"--dir", "/nonexistent"}, tc.args...), os.Stderr)
			if err != nil {
				t.Fatal(err)
			}
			got := map[int]gpu{}
			for i, g := range cfg.opts.GPUs {
				var m gpu
				for _, d := range g.MIGDevices {
					m.MIG = append(m.MIG, fmt.Sprintf("%s %d/%d", d.Profile, d.GI, d.CI))
				}
				m.Current, m.Pending, m.Excluded, m.Persistence = g.MIGCurrent, g.MIGPending, g.Excluded, g.PersistenceDisabled
				if !reflect.DeepEqual(m, gpu{}) {
					got[i] = m
				}
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("GPUs = %+v, want %+v", got, tc.want)
			}
			if cfg.opts.MIGCapsProcInterface != tc.procInterface || cfg.dir != "/nonexistent" {
				t.Errorf("proc interface %v, dir %q", cfg.opts.MIGCapsProcInterface, cfg.dir)
			}
		})
	}
}

func TestParseFlagsErrors(t *testing.T) {
	testCases := []struct {
		description string
		args        []string
		want        string // the whole error up to the usage text
	}{
		{"no directory", []string{"--gpus", "1"}, "--dir is required"},
		{"negative GPU count", []string{"--dir", "d", "--gpus", "-1"}, "--gpus -1: the number of GPUs cannot be negative"},
		{"stray argument", []string{"--dir", "d", "extra"}, `unexpected argument "extra"`},
		{"--mig without =", []string{"--dir", "d", "--mig", "3g.40gb"},
			`invalid value "3g.40gb" for flag -mig: "3g.40gb" is not GPU=PROFILE,..., e.g. 0=3g.40gb,1g.10gb`},
		{"--mig GPU not a number", []string{"--dir", "d", "--mig", "a=3g.40gb"},
			`invalid value "a=3g.40gb" for flag -mig: "a=3g.40gb": GPU "a" is not a GPU index`},
		{"--mig empty profile", []string{"--dir", "d", "--mig", "0=3g.40gb,,1g.10gb"},
			`invalid value "0=3g.40gb,,1g.10gb" for flag -mig: "0=3g.40gb,,1g.10gb": empty MIG profile`},
		{"--mig GPU twice", []string{"--dir", "d", "--mig", "0=3g.40gb;0=1g.10gb"},
			`invalid value "0=3g.40gb;0=1g.10gb" for flag -mig: "0=1g.10gb": GPU 0 is given twice`},
		{"--mig a profile of another GPU", []string{"--dir", "d", "--mig", "0=3g.20gb"},
			`--mig 0=3g.20gb: GPU 0: MIG device 0: MIG profile "3g.20gb" does not exist on this GPU (A100-SXM4-80GB, 81920 MiB): ` +
				"its GPU instance profiles are 1g.10gb, 1g.10gb+me, 1g.20gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb"},
		{"--mig too much", []string{"--dir", "d", "--mig", "1=4g.40gb,4g.40gb"},
			"--mig 1=4g.40gb,4g.40gb: GPU 1: MIG devices do not fit: 4g.40gb,4g.40gb on top of 0 existing MIG devices: " +
				"no placement of the GPU instances leaves their memory slices apart"},
		{"--mig and other errors at once", []string{"--dir", "d", "--gpus", "1", "--mig", "0=3g.40gb;3=1g.10gb", "--excluded", "2"},
			"--excluded: GPU 2 does not exist: the host has 1 GPUs (--gpus)\n--mig: GPU 3 does not exist: the host has 1 GPUs (--gpus)"},
		{"--excluded not an index", []string{"--dir", "d", "--excluded", "1,x"}, `invalid value "1,x" for flag -excluded: "x" is not a GPU index`},
		{"--persistence-off negative", []string{"--dir", "d", "--persistence-off", "-1"},
			`invalid value "-1" for flag -persistence-off: "-1" is not a GPU index`},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			_, err := parseFlags(tc.args, os.Stderr)
			if err == nil {
				t.Fatalf("parseFlags(%q) succeeded", tc.args)
			}
			got, _, _ := strings.Cut(err.Error(), "\nusage: ")
			if got != tc.want {
				t.Errorf("error:\n%s\nwant:\n%s", got, tc.want)
			}
		})
	}
}

func TestRun(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("SKIPPED: building a fake host needs root (mknod, ldconfig -r); run these tests as root")
	}
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("SKIPPED: building a fake host needs gcc; install it (apt-get install gcc)")
	}
	dir := filepath.Join(t.TempDir(), "host")
	var stdout, stderr strings.Builder
	code := run([]string{"--dir", dir, "--gpus", "3", "--mig", "0=3g.40gb,2g.20gb,1g.10gb", "--excluded", "2", "--persistence-off", "1"}, &stdout, &stderr)
	if code != 0 || stderr.Len() > 0 {
		t.Fatalf("run: exit %d, stderr %s", code, stderr.String())
	}
	vars := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(stdout.String()))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), "=")
		if !ok {
			t.Fatalf("output line %q is not KEY=value", sc.Text())
		}
		vars[k] = v
	}
	for k, want := range map[string]string{"FAKEHOST_DIR": dir, "PROC_ROOT": dir + "/procroot", "SYS_ROOT": dir + "/sysroot", "NVML_EVENTS": dir + "/nvml-events",
		"GPU_COUNT": "3", "CAPS_MAJOR": "237", "UVM_MAJOR": "235"} {
		if vars[k] != want {
			t.Errorf("%s=%q, want %q", k, vars[k], want)
		}
	}
	for _, p := range []string{vars["PROC_ROOT"] + "/proc/driver/nvidia-caps/mig-minors", vars["NVML_EVENTS"]} {
		if _, err := os.Stat(p); err != nil {
			t.Error(err)
		}
	}
	// GPU 2 hangs under the second PCIe root, as sysfs lays it out.
	if target, err := os.Readlink(filepath.Join(vars["SYS_ROOT"], "sys/bus/pci/devices/0000:47:00.0")); err != nil || target != "../../../devices/pci0000:40/0000:40:03.0/0000:47:00.0" {
		t.Errorf("GPU 2's sysfs link: %q, %v", target, err)
	}
	info, err := os.ReadFile(filepath.Join(vars["PROC_ROOT"], "proc/driver/nvidia/gpus/0000:47:00.0/information"))
	if err != nil || !strings.Contains(string(info), "GPU Excluded:\t Yes\n") {
		t.Errorf("GPU 2's information: %v\n%s", err, info)
	}
	// MIG_UUIDS lists GPU 0's three MIG devices, which nvidia-smi -L shows under it.
	migs := strings.Split(vars["MIG_UUIDS"], ",")
	out, err := exec.Command(filepath.Join(vars["DRIVER_ROOT"], "usr/bin/nvidia-smi"), "-L").Output()
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(migs) != 3 || len(lines) != 5 {
		t.Fatalf("MIG_UUIDS=%q, nvidia-smi -L:\n%s", vars["MIG_UUIDS"], out)
	}
	for i, profile := range []string{"3g.40gb", "2g.20gb", "1g.10gb"} {
		if want := fmt.Sprintf("  MIG %-11s Device %2d: (UUID: %s)", profile, i, migs[i]); lines[1+i] != want {
			t.Errorf("nvidia-smi -L line %d = %q, want %q", 2+i, lines[1+i], want)
		}
	}
}

func TestRunUsage(t *testing.T) {
	testCases := []struct {
		description string
		args        []string
		wantCode    int
		wantStderr  string
	}{
		{"help", []string{"-h"}, 0, "usage: fakehost --dir DIR"},
		{"unknown flag", []string{"--bogus"}, 2, "fakehost: flag provided but not defined: -bogus\nusage: fakehost --dir DIR"},
		{"bad --mig", []string{"--dir", "d", "--mig", "0=3g.40gb,9g.90gb"}, 2, `fakehost: --mig 0=3g.40gb,9g.90gb: GPU 0: MIG device 1: MIG profile "9g.90gb" does not exist`},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			var stdout, stderr strings.Builder
			if code := run(tc.args, &stdout, &stderr); code != tc.wantCode || !strings.HasPrefix(stderr.String(), tc.wantStderr) || stdout.Len() > 0 {
				t.Errorf("run(%q) = %d, stdout %q, stderr %q; want %d and stderr starting %q", tc.args, code, stdout.String(), stderr.String(), tc.wantCode, tc.wantStderr)
			}
		})
	}
}
