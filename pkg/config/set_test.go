package config

import (
	"os"
	"strings"
	"testing"
)

func TestSet(t *testing.T) {
	shipped, err := os.ReadFile("../../config.toml")
	if err != nil {
		t.Fatal(err)
	}
	testCases := []struct {
		description string
		data        string
		key, value  string
		want        string // the whole result; "" with wantErr
		wantErr     string
	}{
		{description: "a string in place, comments kept", data: "# top\n[driver]\n# where\nroot = \"/\" # trailing\ndev-root = \"/\"\n",
			key: "driver.root", value: "/run/nvidia/driver", want: "# top\n[driver]\n# where\nroot = \"/run/nvidia/driver\"\ndev-root = \"/\"\n"},
		{description: "a key the section lacks goes after its last key", data: "[driver]\nroot = \"/\"\n\n[hook]\npath = \"\"\n",
			key: "driver.dev-root", value: "/host", want: "[driver]\nroot = \"/\"\ndev-root = \"/host\"\n\n[hook]\npath = \"\"\n"},
		{description: "a missing section is added at the end", data: "# only a comment",
			key: "request.accept-device-list-as-volume-mounts", value: "true", want: "# only a comment\n\n[request]\naccept-device-list-as-volume-mounts = true\n"},
		{description: "an empty file", data: "", key: "hook.timeout", value: "45s", want: "[hook]\ntimeout = \"45s\"\n"},
		{description: "a list from commas, replacing a multi-line array", data: "[runtime]\nruntimes = [\n  \"runc\", # the usual\n  \"crun\",\n]\nlog-level = \"info\"\n",
			key: "runtime.runtimes", value: "crun, /usr/local/bin/runc", want: "[runtime]\nruntimes = [\"crun\", \"/usr/local/bin/runc\"]\nlog-level = \"info\"\n"},
		{description: "a TOML array as typed", data: "[cdi]\nspec-dirs = []\n", key: "cdi.spec-dirs", value: `["/etc/cdi"]`, want: "[cdi]\nspec-dirs = [\"/etc/cdi\"]\n"},
		{description: "quotes and backslashes are escaped", data: "", key: "runtime.log-file", value: `/var/log/a"b\c`, want: "[runtime]\nlog-file = \"/var/log/a\\\"b\\\\c\"\n"},
		{description: "a list of integers from commas", data: "[health]\nignore-xids = [13]\n", key: "health.ignore-xids", value: "13, 31,43",
			want: "[health]\nignore-xids = [13, 31, 43]\n"},
		{description: "a key after a last line without a newline", data: "[driver]\nroot = \"/\"",
			key: "driver.dev-root", value: "/host", want: "[driver]\nroot = \"/\"\ndev-root = \"/host\"\n"},
		{description: "a file that is not TOML is refused, not edited: an unclosed array does not swallow the rest",
			data: "[runtime]\nruntimes = [\"runc\",\n\n[driver]\nroot = \"/run/nvidia/driver\"\n", key: "runtime.runtimes", value: "crun",
			wantErr: "parse config f.toml: line 4, column 2: unexpected character"},
		{description: "a syntax error after the key is refused too", data: "[driver]\nroot = \"/\"\n[hook\n", key: "driver.root", value: "/x",
			wantErr: "parse config f.toml: line 3, column 6: "},
		{description: "a list of integers with a word", data: "", key: "health.ignore-xids", value: "13,thirty", wantErr: `health.ignore-xids: "thirty" is not an integer`},
		{description: "an unknown key", data: "", key: "driver.rooot", value: "/", wantErr: `unknown key "driver.rooot" (did you mean "driver.root"?): the keys are runtime.runtimes, `},
		{description: "a key spelled in other case", data: "", key: "Driver.Root", value: "/", wantErr: `unknown key "Driver.Root" (did you mean "driver.root"?): the keys are runtime.runtimes, `},
		{description: "a key below a value", data: "", key: "driver.root.x", value: "/", wantErr: `unknown key "driver.root.x" (did you mean "driver.root"?): the keys are runtime.runtimes, `},
		{description: "a bad boolean", data: "", key: "discovery.cache", value: "yes", wantErr: `discovery.cache: "yes" is not true or false`},
		{description: "a table is not a key", data: "", key: "mps.shares", value: "x", wantErr: `unknown key "mps.shares": the keys are runtime.runtimes, `},
		{description: "a share's key alone: a new share needs its devices", data: "", key: "mps.shares.a.uid", value: "1",
			wantErr: `mps.shares.a.uid = 1: config f.toml: invalid mps.shares.a.devices []: want the share's GPUs, by index or UUID`},
		{description: "a share's key, in its table", data: "[mps]\nroot = \"/run/mps\"\n\n[mps.shares.a]\ndevices = [\"0\"]\n\n[health]\nall = \"skip\"\n", key: "mps.shares.a.active-thread-percentage", value: "40",
			want: "[mps]\nroot = \"/run/mps\"\n\n[mps.shares.a]\ndevices = [\"0\"]\nactive-thread-percentage = 40\n\n[health]\nall = \"skip\"\n"},
		{description: "a share's devices replaced in place", data: "[mps.shares.a]\ndevices = [\"0\"] # the first\nuid = 1000\n", key: "mps.shares.a.devices", value: "0,1",
			want: "[mps.shares.a]\ndevices = [\"0\", \"1\"]\nuid = 1000\n"},
		{description: "a new share is a new table", data: "[mps]\nroot = \"/run/mps\"\n", key: "mps.shares.small.devices", value: "1",
			want: "[mps]\nroot = \"/run/mps\"\n\n[mps.shares.small]\ndevices = [\"1\"]\n"},
		{description: "a share's unknown key suggests the nearest", data: "", key: "mps.shares.a.devics", value: "0",
			wantErr: `unknown key "mps.shares.a.devics" (did you mean "mps.shares.a.devices"?): the keys are runtime.runtimes, `},
		{description: "a share's integer that is not one", data: "", key: "mps.shares.a.uid", value: "root", wantErr: `mps.shares.a.uid: "root" is not an integer`},
		{description: "a share's bad name", data: "", key: "mps.shares.a b.uid", value: "1", wantErr: `mps.shares.a b.uid: share name "a b": want letters, digits`},
		{description: "a share without a key", data: "", key: "mps.shares.a", value: "1", wantErr: `unknown key "mps.shares.a": the keys are`},
		{description: "a far-off key gets no suggestion", data: "", key: "frobnicate.level", value: "1", wantErr: `unknown key "frobnicate.level": the keys are`},
		{description: "a bad value is refused by validation", data: "", key: "driver.root", value: "relative/path", wantErr: `driver.root = "relative/path": config f.toml: invalid driver.root "relative/path": want an absolute path`},
		{description: "a bad duration", data: "", key: "hook.timeout", value: "soon", wantErr: `hook.timeout = "soon": config f.toml: invalid hook.timeout "soon"`},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			got, err := Set([]byte(tc.data), "f.toml", tc.key, tc.value)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %q (result %q)", err, tc.wantErr, got)
				}
				return
			}
			if err != nil || string(got) != tc.want {
				t.Fatalf("Set = %q, %v\nwant %q", got, err, tc.want)
			}
		})
	}
	// Every key of the shipped file can be set to its own default, changing nothing else.
	def, err := Marshal(Default())
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range Keys() {
		if !strings.Contains(string(def), strings.SplitN(key, ".", 2)[1]+" = ") {
			t.Errorf("Marshal lacks %s:\n%s", key, def)
		}
	}
	out, err := Set(shipped, "config.toml", "driver.root", "/run/nvidia/driver")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Replace(string(shipped), `root = "/"`, `root = "/run/nvidia/driver"`, 1) != string(out) {
		t.Errorf("setting driver.root in the shipped file changed more than its line")
	}
	cfg, _, err := Parse(out, "config.toml")
	if err != nil || cfg.Driver.Root != "/run/nvidia/driver" || cfg.Driver.DevRoot != "/" {
		t.Errorf("parsed back: %+v, %v", cfg.Driver, err)
	}
}
