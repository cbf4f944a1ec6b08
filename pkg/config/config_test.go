package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"

	"github.com/pelletier/go-toml/v2"
	"github.com/sirupsen/logrus"
)

// shippedConfig is the repository's reference config, installed as
// DefaultPath.
const shippedConfig = "../../config.toml"

func TestShippedConfigIsDefault(t *testing.T) {
	got, warnings, err := Load(shippedConfig)
	if err != nil {
		t.Fatalf("Load(%s): %v", shippedConfig, err)
	}
	if len(warnings) != 0 {
		t.Errorf("Load(%s) warnings: %q", shippedConfig, warnings)
	}
	if want := Default(); !reflect.DeepEqual(got, want) {
		t.Errorf("Load(%s) = %+v, want Default() = %+v", shippedConfig, got, want)
	}
}

// TestShippedConfigSetsEveryKey makes sure the reference config documents
// every key: a key left out would still parse to the default.
func TestShippedConfigSetsEveryKey(t *testing.T) {
	data, err := os.ReadFile(shippedConfig)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := toml.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	keys := Keys()
	for _, key := range keys {
		var v any = doc
		for _, part := range strings.Split(key, ".") {
			m, _ := v.(map[string]any)
			v = m[part]
		}
		if v == nil {
			t.Errorf("%s does not set %s", shippedConfig, key)
		}
	}
	if len(keys) != 31 {
		t.Errorf("Config has %d keys, want 31: %v", len(keys), keys)
	}
}

func TestPath(t *testing.T) {
	testCases := []struct {
		description string
		env         map[string]string
		want        string
	}{
		{description: "unset", env: nil, want: DefaultPath},
		{description: "empty", env: map[string]string{EnvPath: ""}, want: DefaultPath},
		{description: "set", env: map[string]string{EnvPath: "/opt/gpu/config.toml"}, want: "/opt/gpu/config.toml"},
		{description: "other variables ignored", env: map[string]string{"NVIDIA_CONFIG": "/x.toml"}, want: DefaultPath},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			getenv := func(k string) string { return tc.env[k] }
			if got := Path(getenv); got != tc.want {
				t.Errorf("Path() = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestParse(t *testing.T) {
	withDefaults := func(edit func(*Config)) Config {
		c := Default()
		edit(&c)
		return c
	}
	testCases := []struct {
		description  string
		data         string
		want         Config
		wantWarnings []string
	}{
		{
			description: "empty file is the default",
			data:        "",
			want:        Default(),
		},
		{
			description: "comments only",
			data:        "# nothing here\n\n[runtime]\n# runtimes = []\n",
			want:        Default(),
		},
		{
			description: "partial file keeps other defaults",
			data:        "[driver]\nroot = \"/run/nvidia/driver\"\n",
			want:        withDefaults(func(c *Config) { c.Driver.Root = "/run/nvidia/driver" }),
		},
		{
			description: "every key set; paths cleaned",
			data: `[runtime]
runtimes = ["/usr/local/sbin//runc/", "crun", "youki"]
log-file = "/var/log/gpu-runtime/../gpu-runtime.log"
log-level = "debug"
no-cgroups = true
[driver]
root = "/run/nvidia/driver/"
dev-root = "/run/nvidia/driver/./"
[hook]
path = "/usr/local/bin/gpu-hook"
ldconfig = "/usr/sbin/ldconfig"
timeout = "1m30s"
ldcache-at-create = false
[request]
accept-envvar-when-unprivileged = false
accept-device-list-as-volume-mounts = true
[discovery]
cache = false
cache-file = "/var/cache//gpu.json"
timeout = "250ms"
[cdi]
spec-dirs = ["/etc/cdi/", "/opt/cdi"]
allowed-kinds = ["nvidia.com/gpu", "example.com/fpga"]
timeout = "2m"
[mps]
root = "/run//mps/"
share = "large"
[mps.shares.large]
devices = ["0", "GPU-8f3a"]
active-thread-percentage = 80
pinned-memory-limit = "60GiB"
uid = 1000
[health]
file = "/var/run//gpu-health.csv"
all = "fail"
ignore-xids = [13, 43]
[kubernetes]
taint-effect = "NoExecute"
[dra]
shared-gpus = ["0", "GPU-8f3a"]
compute-default = 50
compute-step = 5
memory-step = "512Mi"
mps-root = "/run//dra-mps"
`,
			want: Config{
				Runtime: RuntimeConfig{
					Runtimes:  []string{"/usr/local/sbin/runc", "crun", "youki"},
					LogFile:   "/var/log/gpu-runtime.log",
					LogLevel:  "debug",
					NoCgroups: true,
				},
				Driver:    DriverConfig{Root: "/run/nvidia/driver", DevRoot: "/run/nvidia/driver", ProcRoot: "/", SysRoot: "/"},
				Hook:      HookConfig{Path: "/usr/local/bin/gpu-hook", LDConfig: "/usr/sbin/ldconfig", Timeout: "1m30s"},
				Request:   RequestConfig{AcceptEnvvarWhenUnprivileged: false, AcceptDeviceListAsVolumeMounts: true},
				Discovery: DiscoveryConfig{Cache: false, CacheFile: "/var/cache/gpu.json", Timeout: "250ms"},
				CDI:       CDIConfig{SpecDirs: []string{"/etc/cdi", "/opt/cdi"}, AllowedKinds: []string{"nvidia.com/gpu", "example.com/fpga"}, Timeout: "2m"},
				MPS: MPSConfig{Root: "/run/mps", Share: "large", Shares: map[string]MPSShare{
					"large": {Devices: []string{"0", "GPU-8f3a"}, ActiveThreadPercentage: 80, PinnedMemoryLimit: "60GiB", UID: 1000}}},
				Health:     HealthConfig{File: "/var/run/gpu-health.csv", All: "fail", IgnoreXids: []int{13, 43}},
				Kubernetes: KubernetesConfig{TaintEffect: TaintNoExecute},
				DRA:        DRAConfig{SharedGPUs: []string{"0", "GPU-8f3a"}, ComputeDefault: 50, ComputeStep: 5, MemoryStep: "512Mi", MPSRoot: "/run/dra-mps"},
			},
		},
		{
			description: "cdi allowed-kinds empty: no CDI device is resolved",
			data:        "[cdi]\nallowed-kinds = []\n",
			want:        withDefaults(func(c *Config) { c.CDI.AllowedKinds = []string{} }),
		},
		{
			description: "dra.shared-gpus the plain string all, as the issue writes it",
			data:        "[dra]\nshared-gpus = \"all\"\n",
			want:        withDefaults(func(c *Config) { c.DRA.SharedGPUs = GPUList{AllGPUs} }),
		},
		{
			description: "dra.shared-gpus an array with all, inline",
			data:        "dra = { shared-gpus = [\"all\"] }\n",
			want:        withDefaults(func(c *Config) { c.DRA.SharedGPUs = GPUList{AllGPUs} }),
		},
		{
			description: "dotted keys and inline tables",
			data:        "driver.root = \"/drv\"\nhook = { path = \"/bin/gpu-hook\" }\n[runtime]\n'log-level' = \"trace\"\n",
			want: withDefaults(func(c *Config) {
				c.Driver.Root = "/drv"
				c.Hook.Path = "/bin/gpu-hook"
				c.Runtime.LogLevel = "trace"
			}),
		},
		{
			description: "unknown keys are warnings and the rest applies",
			data: `[runtime]
runtims = ["crun"]
log-level = "warn"
[driver]
root = "/drv"
extra.deep = 1
[nvidia]
x = 1
[nvidia.sub]
y = 2
["odd.key"]
`,
			want: withDefaults(func(c *Config) {
				c.Runtime.LogLevel = "warn"
				c.Driver.Root = "/drv"
			}),
			wantWarnings: []string{
				`config /x.toml: unknown key "runtime.runtims" ignored (did you mean "runtime.runtimes"?)`,
				`config /x.toml: unknown key "driver.extra.deep" ignored`,
				`config /x.toml: unknown key "nvidia" ignored`,
				`config /x.toml: unknown key "\"odd.key\"" ignored`,
			},
		},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			got, warnings, err := Parse([]byte(tc.data), "/x.toml")
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Parse:\n got %+v\nwant %+v", got, tc.want)
			}
			if !reflect.DeepEqual(warnings, tc.wantWarnings) {
				t.Errorf("Parse warnings:\n got %q\nwant %q", warnings, tc.wantWarnings)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	testCases := []struct {
		description  string
		data         string
		wantErr      string
		wantWarnings []string
	}{
		// Syntax.
		{
			description: "syntax error",
			data:        "[runtime]\nruntimes = [\"runc\"]\nlog-level \"debug\"\n",
			wantErr:     `parse config /x.toml: line 3, column 11: expected '=' after key`,
		},
		{
			description: "unterminated string",
			data:        "[driver]\nroot = \"/run/nvidia\n",
			wantErr:     `parse config /x.toml: line 2, column 20: basic strings cannot have new lines`,
		},
		{
			description: "unclosed table header",
			data:        "[runtime\n",
			wantErr:     `parse config /x.toml: line 1, column 9: expected ']' to close table name`,
		},
		{
			description: "not UTF-8",
			data:        "\xff\xfe",
			wantErr:     `parse config /x.toml: line 1, column 1: invalid character at start of key: U+00FF 'ÿ'`,
		},
		{
			description: "key defined twice",
			data:        "[runtime]\nlog-level = \"info\"\n\nlog-level = \"debug\"\n",
			wantErr:     `parse config /x.toml: line 4, column 1: key log-level is already defined`,
		},
		{
			// go-toml matches keys to fields ignoring case, and panicked on this.
			description: "table below a string key spelled in other case",
			data:        "[hook.ldConfig.0]\n",
			wantErr:     `parse config /x.toml: line 1, column 2: hook.ldconfig must be a string, not a table`,
		},
		{
			description: "string key spelled in other case, wrong type",
			data:        "[Driver]\nRoot = 1\n",
			wantErr:     `parse config /x.toml: line 2, column 8: driver.root must be a string, not an integer`,
		},
		{
			description: "table defined twice",
			data:        "[driver]\nroot = \"/a\"\n[hook]\n[driver]\n",
			wantErr:     `parse config /x.toml: line 4, column 2: table driver already exists`,
		},
		{
			description: "syntax error is reported before type errors",
			data:        "[runtime]\nlog-level = 5\n[driver\n",
			wantErr:     `parse config /x.toml: line 3, column 8: expected ']' to close table name`,
		},

		// Types.
		{
			description: "bad duration",
			data:        "[discovery]\ntimeout = \"soon\"\n",
			wantErr:     `config /x.toml: invalid discovery.timeout "soon": want a duration such as "10s" ("0s" = no limit)`,
		},
		{
			description: "hook timeout under a second",
			data:        "[hook]\ntimeout = \"500ms\"\n",
			wantErr:     `config /x.toml: invalid hook.timeout "500ms": want a duration of at least one second, such as "30s"`,
		},
		{
			description: "cdi allowed-kinds that are not kinds",
			data:        "[cdi]\nallowed-kinds = [\"nvidia.com/gpu\", \"nvidia.com\", \"nvidia.com/gpu=0\", \"/gpu\", \"nvidia.com/gpu/mig\"]\n",
			wantErr: `config /x.toml: invalid cdi.allowed-kinds[1] "nvidia.com": want a CDI kind, vendor.com/class, such as "nvidia.com/gpu"; ` +
				`invalid cdi.allowed-kinds[2] "nvidia.com/gpu=0": want a CDI kind, vendor.com/class, such as "nvidia.com/gpu"; ` +
				`invalid cdi.allowed-kinds[3] "/gpu": want a CDI kind, vendor.com/class, such as "nvidia.com/gpu"; ` +
				`invalid cdi.allowed-kinds[4] "nvidia.com/gpu/mig": want a CDI kind, vendor.com/class, such as "nvidia.com/gpu"`,
		},
		{
			description: "cdi timeout under a second",
			data:        "[cdi]\ntimeout = \"0s\"\n",
			wantErr:     `config /x.toml: invalid cdi.timeout "0s": want a duration of at least one second, such as "30s"`,
		},
		{
			description: "string for a boolean",
			data:        "[request]\naccept-envvar-when-unprivileged = \"no\"\n",
			wantErr:     `parse config /x.toml: line 2, column 35: request.accept-envvar-when-unprivileged must be a boolean, not a string`,
		},
		{
			description: "integer for a string",
			data:        "[runtime]\nlog-level = 5\n",
			wantErr:     `parse config /x.toml: line 2, column 13: runtime.log-level must be a string, not an integer`,
		},
		{
			description: "string for an array",
			data:        "[runtime]\n  runtimes = \"runc\"\n",
			wantErr:     `parse config /x.toml: line 2, column 14: runtime.runtimes must be an array of strings, not a string`,
		},
		{
			description: "kubernetes.taint-effect neither NoSchedule nor NoExecute",
			data:        "[kubernetes]\ntaint-effect = \"noexecute\"\n",
			wantErr:     `config /x.toml: invalid kubernetes.taint-effect "noexecute": want "NoSchedule" (unhealthy devices get no new pods) or "NoExecute" (pods using them are evicted too)`,
		},
		{
			description: "dra.shared-gpus naming MIG devices",
			data:        "[dra]\nshared-gpus = [\"0\", \"MIG-4a2f\", \"1:0\"]\n",
			wantErr:     `config /x.toml: invalid dra.shared-gpus[1] "MIG-4a2f": want a whole GPU, by index or UUID: MIG devices are never shareable (NVIDIA's driver refuses MPS on MIG); share the MIG device's GPU with MIG mode off, or give MIG devices whole (mig.gpu-runtime.dev); invalid dra.shared-gpus[2] "1:0": want a whole GPU, by index or UUID: MIG devices are never shareable (NVIDIA's driver refuses MPS on MIG); share the MIG device's GPU with MIG mode off, or give MIG devices whole (mig.gpu-runtime.dev)`,
		},
		{
			description: "dra: all among others, steps and default that do not fit",
			data:        "[dra]\nshared-gpus = [\"all\", \"0\"]\ncompute-step = 30\ncompute-default = 0\nmemory-step = \"1G\"\n",
			wantErr:     `config /x.toml: invalid dra.shared-gpus[0] "all": want "all" alone: dra.shared-gpus = "all"; invalid dra.compute-step "30": want a divisor of 100: 1, 2, 4, 5, 10, 20, 25, 50 or 100; invalid dra.compute-default "0": want 1 to 100; invalid dra.memory-step "1G": want a size in Mi or Gi, such as "1Gi" or "512Mi"`,
		},
		{
			description: "dra.shared-gpus a string other than all",
			data:        "[dra]\nshared-gpus = \"0\"\n",
			wantErr:     `parse config /x.toml: invalid dra.shared-gpus "0": want an array of GPU indices or UUIDs, such as ["0", "GPU-8f3a…"], or "all"; one GPU is an array too: shared-gpus = ["0"]`,
		},
		{
			description: "dra.shared-gpus with an unquoted index",
			data:        "[dra]\nshared-gpus = [\"1\", 0]\n",
			wantErr:     `parse config /x.toml: invalid dra.shared-gpus[1]: an integer; want a string, the GPU's index or UUID in quotes ("0")`,
		},
		{
			description: "dra.shared-gpus an integer",
			data:        "[dra]\nshared-gpus = 0\n",
			wantErr:     `parse config /x.toml: dra.shared-gpus must be an array of GPU indices or UUIDs, such as ["0", "GPU-8f3a…"], or "all", not an integer`,
		},
		{
			description: "dra.shared-gpus an inline table",
			data:        "[dra]\nshared-gpus = { all = true }\n",
			wantErr:     `parse config /x.toml: dra.shared-gpus must be an array of GPU indices or UUIDs, such as ["0", "GPU-8f3a…"], or "all", not a table`,
		},
		{
			description: "dra.shared-gpus a table",
			data:        "[dra.shared-gpus]\nall = true\n",
			wantErr:     `parse config /x.toml: line 1, column 5: dra.shared-gpus must be an array of strings, not a table`,
		},
		{
			description: "dra.compute-default not a multiple of the step",
			data:        "[dra]\ncompute-default = 15\n",
			wantErr:     `config /x.toml: invalid dra.compute-default "15": want a multiple of dra.compute-step (10) from 10 to 100`,
		},
		{
			description: "driver.sys-root relative",
			data:        "[driver]\nsys-root = \"sys\"\n",
			wantErr:     `config /x.toml: invalid driver.sys-root "sys": want an absolute path`,
		},
		{
			description: "health.all neither skip nor fail",
			data:        "[health]\nall = \"ignore\"\n",
			wantErr:     `config /x.toml: invalid health.all "ignore": want "skip" (leave unhealthy devices out of NVIDIA_VISIBLE_DEVICES=all) or "fail"`,
		},
		{
			description: "health.ignore-xids with a string",
			data:        "[health]\nignore-xids = [13, \"31\"]\n",
			wantErr:     `parse config /x.toml: line 2, column 20: health.ignore-xids must be an array of integers, not an array containing a string`,
		},
		{
			description: "health.ignore-xids not an array",
			data:        "[health]\nignore-xids = 13\n",
			wantErr:     `parse config /x.toml: line 2, column 15: health.ignore-xids must be an array of integers, not an integer`,
		},
		{
			description: "health.ignore-xids with a negative number",
			data:        "[health]\nignore-xids = [13, -1]\n",
			wantErr:     `config /x.toml: invalid health.ignore-xids [13, -1]: want Xid numbers (positive integers), such as [13, 31, 43, 45, 68, 109]`,
		},
		{
			description: "health.file relative",
			data:        "[health]\nfile = \"health.csv\"\n",
			wantErr:     `config /x.toml: invalid health.file "health.csv": want an absolute path or ""`,
		},
		{
			description: "array of integers",
			data:        "[runtime]\nruntimes = [\"runc\", 2]\n",
			wantErr:     `parse config /x.toml: line 2, column 21: runtime.runtimes must be an array of strings, not an array containing an integer`,
		},
		{
			description: "value for a table",
			data:        "driver = \"/run/nvidia/driver\"\n",
			wantErr:     `parse config /x.toml: line 1, column 10: driver must be a table, not a string`,
		},
		{
			description: "array of tables for a table",
			data:        "[[hook]]\npath = \"/x\"\n",
			wantErr:     `parse config /x.toml: line 1, column 3: hook must be a table, not an array of tables`,
		},
		{
			// An empty array holds no tables: it is not "an array of tables".
			description: "empty array for a table",
			data:        "hook = []\n",
			wantErr:     `parse config /x.toml: line 1, column 8: hook must be a table, not an array`,
		},
		{
			description: "empty array for a string",
			data:        "[runtime]\nlog-level = []\n",
			wantErr:     `parse config /x.toml: line 2, column 13: runtime.log-level must be a string, not an array`,
		},
		{
			description: "table for a string",
			data:        "[hook.ldconfig]\npath = \"/sbin/ldconfig\"\n",
			wantErr:     `parse config /x.toml: line 1, column 2: hook.ldconfig must be a string, not a table`,
		},
		{
			description: "dotted key under a string",
			data:        "[driver]\nroot.path = \"/x\"\n",
			wantErr:     `parse config /x.toml: line 2, column 6: driver.root must be a string, not a table`,
		},
		{
			description: "wrong type inside an inline table",
			data:        "hook = { path = true }\n",
			wantErr:     `parse config /x.toml: line 1, column 17: hook.path must be a string, not a boolean`,
		},
		{
			// go-toml stops at the first value of the wrong type.
			description: "the first type error",
			data:        "[runtime]\nlog-file = 1.5\nlog-level = 2024-01-01\n[driver]\ndev-root = [\"/\"]\n",
			wantErr:     `parse config /x.toml: line 2, column 12: runtime.log-file must be a string, not a float`,
		},
		{
			description: "a date",
			data:        "[runtime]\nlog-level = 2024-01-01\n",
			wantErr:     `parse config /x.toml: line 2, column 13: runtime.log-level must be a string, not a date or time`,
		},
		{
			description: "an array for a string",
			data:        "[driver]\ndev-root = [\"/\"]\n",
			wantErr:     `parse config /x.toml: line 2, column 12: driver.dev-root must be a string, not an array`,
		},
		{
			description: "wrong type two inline tables down",
			data:        "[mps]\nshares = { a = { devices = [\"0\"], uid = \"root\" } }\n",
			wantErr:     `parse config /x.toml: line 2, column 41: mps.shares.a.uid must be an integer, not a string`,
		},

		// Values.
		{
			description: "bad log level",
			data:        "[runtime]\nlog-level = \"verbose\"\n",
			wantErr:     `config /x.toml: invalid runtime.log-level "verbose": want one of panic, fatal, error, warn, warning, info, debug, trace`,
		},
		{
			description: "log level is case-sensitive",
			data:        "[runtime]\nlog-level = \"INFO\"\n",
			wantErr:     `config /x.toml: invalid runtime.log-level "INFO": want one of panic, fatal, error, warn, warning, info, debug, trace`,
		},
		{
			description: "no runtimes",
			data:        "[runtime]\nruntimes = []\n",
			wantErr:     `config /x.toml: invalid runtime.runtimes []: want at least one runtime`,
		},
		{
			description: "empty and relative runtimes",
			data:        "[runtime]\nruntimes = [\"runc\", \"\", \"bin/crun\"]\n",
			wantErr: `config /x.toml: invalid runtime.runtimes[1] "": want a name to look up in PATH or an absolute path; ` +
				`invalid runtime.runtimes[2] "bin/crun": want a name to look up in PATH or an absolute path`,
		},
		{
			description: "relative driver root",
			data:        "[driver]\nroot = \"run/nvidia/driver\"\n",
			wantErr:     `config /x.toml: invalid driver.root "run/nvidia/driver": want an absolute path`,
		},
		{
			description: "every bad value at once, with unknown-key warnings",
			data: `[runtime]
log-file = "gpu.log"
log-level = ""
[driver]
root = ""
dev-root = "dev"
typo = 1
[hook]
path = "./gpu-hook"
ldconfig = "ldconfig"
`,
			wantErr: `config /x.toml: invalid runtime.log-level "": want one of panic, fatal, error, warn, warning, info, debug, trace; ` +
				`invalid runtime.log-file "gpu.log": want an absolute path or ""; ` +
				`invalid driver.root "": want an absolute path; ` +
				`invalid driver.dev-root "dev": want an absolute path; ` +
				`invalid hook.path "./gpu-hook": want an absolute path or ""; ` +
				`invalid hook.ldconfig "ldconfig": want an absolute path`,
			wantWarnings: []string{`config /x.toml: unknown key "driver.typo" ignored`},
		},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			got, warnings, err := Parse([]byte(tc.data), "/x.toml")
			if err == nil {
				t.Fatalf("Parse = %+v, want error %s", got, tc.wantErr)
			}
			if err.Error() != tc.wantErr {
				t.Errorf("Parse error:\n got %s\nwant %s", err, tc.wantErr)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("Parse error %v does not wrap ErrInvalid", err)
			}
			if !reflect.DeepEqual(got, Config{}) {
				t.Errorf("Parse returned %+v with an error, want the zero Config", got)
			}
			if !reflect.DeepEqual(warnings, tc.wantWarnings) {
				t.Errorf("Parse warnings:\n got %q\nwant %q", warnings, tc.wantWarnings)
			}
		})
	}
}

func TestParseSyntaxErrorWrapsDecodeError(t *testing.T) {
	_, _, err := Parse([]byte("[runtime\n"), "/x.toml")
	var de *toml.DecodeError
	if !errors.As(err, &de) {
		t.Fatalf("Parse error %v (%T) does not wrap *toml.DecodeError", err, err)
	}
	if line, col := de.Position(); line != 1 || col != 9 {
		t.Errorf("DecodeError.Position() = %d, %d; want 1, 9", line, col)
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	valid := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(valid, []byte("[runtime]\nlog-level = \"debug\"\nlog-levle = \"x\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.toml")
	if err := os.Symlink(valid, link); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad.toml")
	if err := os.WriteFile(bad, []byte("[driver]\nroot = \"drv\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo.toml")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	huge := filepath.Join(dir, "huge.toml")
	if err := os.WriteFile(huge, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(huge, 1<<30); err != nil { // sparse: costs nothing unless read
		t.Fatal(err)
	}
	debug := Default()
	debug.Runtime.LogLevel = "debug"

	testCases := []struct {
		description  string
		path         string
		want         Config
		wantWarnings []string
		wantErr      string
		wantIs       error
	}{
		{
			description: "missing file is the default",
			path:        filepath.Join(dir, "missing.toml"),
			want:        Default(),
		},
		{
			description: "missing directory is the default",
			path:        filepath.Join(dir, "missing", "config.toml"),
			want:        Default(),
		},
		{
			description:  "file",
			path:         valid,
			want:         debug,
			wantWarnings: []string{`config ` + valid + `: unknown key "runtime.log-levle" ignored (did you mean "runtime.log-level"?)`},
		},
		{
			description:  "a link to the file is followed",
			path:         link,
			want:         debug,
			wantWarnings: []string{`config ` + link + `: unknown key "runtime.log-levle" ignored (did you mean "runtime.log-level"?)`},
		},
		{
			description: "bad value names the file",
			path:        bad,
			wantErr:     `config ` + bad + `: invalid driver.root "drv": want an absolute path`,
			wantIs:      ErrInvalid,
		},
		{
			description: "directory",
			path:        dir,
			wantErr:     `read config ` + dir + `: ` + dir + ` is a directory, not a regular file`,
		},
		{
			description: "FIFO: not opened for reading, never blocks",
			path:        fifo,
			wantErr:     `read config ` + fifo + `: ` + fifo + ` is a FIFO, not a regular file`,
		},
		{
			description: "device",
			path:        "/dev/zero",
			wantErr:     `read config /dev/zero: /dev/zero is a character device, not a regular file`,
		},
		{
			description: "huge file: not read",
			path:        huge,
			wantErr:     `read config ` + huge + `: ` + huge + ` is 1073741824 bytes, more than the 1048576 allowed`,
		},
		{
			description: "parent is a file",
			path:        filepath.Join(valid, "config.toml"),
			wantErr:     `read config ` + valid + `/config.toml: open ` + valid + `/config.toml: not a directory`,
		},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			got, warnings, err := Load(tc.path)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("Load(%s) error:\n got %v\nwant %s", tc.path, err, tc.wantErr)
				}
				if tc.wantIs != nil && !errors.Is(err, tc.wantIs) {
					t.Errorf("Load(%s) error %v does not wrap %v", tc.path, err, tc.wantIs)
				}
				if errors.Is(err, fs.ErrNotExist) {
					t.Errorf("Load(%s) error %v wraps fs.ErrNotExist", tc.path, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Load(%s): %v", tc.path, err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Load(%s):\n got %+v\nwant %+v", tc.path, got, tc.want)
			}
			if !reflect.DeepEqual(warnings, tc.wantWarnings) {
				t.Errorf("Load(%s) warnings:\n got %q\nwant %q", tc.path, warnings, tc.wantWarnings)
			}
		})
	}
}

func TestLoadUnreadable(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("SKIP: root reads files whatever their mode; the unreadable-file case needs a non-root user")
	}
	path := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(path, []byte(""), 0o000); err != nil {
		t.Fatal(err)
	}
	_, _, err := Load(path)
	want := `read config ` + path + `: open ` + path + `: permission denied`
	if err == nil || err.Error() != want {
		t.Errorf("Load error:\n got %v\nwant %s", err, want)
	}
	if !errors.Is(err, fs.ErrPermission) {
		t.Errorf("Load error %v does not wrap fs.ErrPermission", err)
	}
}

func TestLevel(t *testing.T) {
	testCases := []struct {
		description string
		level       string
		want        logrus.Level
	}{
		{description: "default", level: Default().Runtime.LogLevel, want: logrus.InfoLevel},
		{description: "warning", level: "warning", want: logrus.WarnLevel},
		{description: "warn", level: "warn", want: logrus.WarnLevel},
		{description: "trace", level: "trace", want: logrus.TraceLevel},
		{description: "panic", level: "panic", want: logrus.PanicLevel},
		{description: "unvalidated bad level falls back to info", level: "verbose", want: logrus.InfoLevel},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			c := Default()
			c.Runtime.LogLevel = tc.level
			if got := c.Level(); got != tc.want {
				t.Errorf("Level() for %q = %v, want %v", tc.level, got, tc.want)
			}
		})
	}
	// Every level Parse accepts must be one logrus knows.
	for _, l := range logLevels {
		if _, err := logrus.ParseLevel(l); err != nil {
			t.Errorf("accepted log level %q: %v", l, err)
		}
	}
}

func TestLoadFromEnv(t *testing.T) {
	dir := t.TempDir()
	present := filepath.Join(dir, "c.toml")
	if err := os.WriteFile(present, []byte("[runtime]\nlog-level = \"debug\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.toml")
	testCases := []struct {
		description string
		env         string
		wantErr     string
		wantLevel   string
	}{
		{description: "named file is read", env: present, wantLevel: "debug"},
		{description: "named file must exist", env: missing, wantErr: "read config " + missing + " (named by GPU_RUNTIME_CONFIG): stat " + missing + ": no such file or directory"},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			cfg, _, err := LoadFromEnv(func(k string) string {
				if k == EnvPath {
					return tc.env
				}
				return ""
			})
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("error = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || cfg.Runtime.LogLevel != tc.wantLevel {
				t.Fatalf("cfg %+v, err %v", cfg.Runtime, err)
			}
		})
	}
}

// TestLoadRuntimeFromEnv: the pass-through reads [runtime] only; a file it cannot read that
// way gets the full diagnosis and the default runtimes.
func TestLoadRuntimeFromEnv(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	missing := filepath.Join(dir, "missing.toml")
	fifo := filepath.Join(dir, "fifo.toml")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	badDriver := write("bad-driver.toml", "[runtime]\nruntimes = [\"crun\"]\nlog-level = \"debug\"\n[driver]\nroot = \"relative\"\n")
	syntax := write("syntax.toml", "[runtime]\nruntimes = [\"crun\"\n")
	badLevel := write("bad-level.toml", "[runtime]\nruntimes = [\"crun\"]\nlog-level = \"loud\"\n")
	testCases := []struct {
		description  string
		env          string
		wantRuntimes []string
		wantLevel    string
		wantErr      string
	}{
		{description: "a problem outside [runtime] does not stop a delete reaching crun", env: badDriver, wantRuntimes: []string{"crun"}, wantLevel: "debug"},
		{description: "named file must exist", env: missing, wantRuntimes: []string{"runc", "crun"}, wantLevel: "info",
			wantErr: "read config " + missing + " (named by GPU_RUNTIME_CONFIG): stat " + missing + ": no such file or directory"},
		{description: "a FIFO neither hangs nor blocks a delete: defaults", env: fifo, wantRuntimes: []string{"runc", "crun"}, wantLevel: "info",
			wantErr: "read config " + fifo + ": " + fifo + " is a FIFO, not a regular file"},
		{description: "syntax error: full diagnosis, defaults", env: syntax, wantRuntimes: []string{"runc", "crun"}, wantLevel: "info",
			wantErr: "parse config " + syntax + ": line 2, column 19: array is incomplete"},
		{description: "bad [runtime] value: full diagnosis, defaults", env: badLevel, wantRuntimes: []string{"runc", "crun"}, wantLevel: "info",
			wantErr: "config " + badLevel + `: invalid runtime.log-level "loud": want one of panic, fatal, error, warn, warning, info, debug, trace`},
	}
	// An empty file (as a missing default one) is the defaults.
	if cfg, ok := parseRuntime(nil); !ok || !reflect.DeepEqual(cfg, Default()) {
		t.Fatalf("parseRuntime(empty) = %+v, %v", cfg, ok)
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			getenv := func(k string) string {
				if k == EnvPath {
					return tc.env
				}
				return ""
			}
			cfg, err := LoadRuntimeFromEnv(getenv)
			if fmt.Sprint(err) != fmt.Sprint(errOrNil(tc.wantErr)) {
				t.Fatalf("error = %v\nwant    %s", err, tc.wantErr)
			}
			if !reflect.DeepEqual(cfg.Runtime.Runtimes, tc.wantRuntimes) || cfg.Runtime.LogLevel != tc.wantLevel {
				t.Errorf("runtime section = %+v", cfg.Runtime)
			}
			if cfg.Driver != Default().Driver {
				t.Errorf("driver section read: %+v", cfg.Driver)
			}
		})
	}
}

func errOrNil(msg string) error {
	if msg == "" {
		return nil
	}
	return errors.New(msg)
}

// TestDecodeErrorWithoutPosition: an error go-toml gives without a position (none seen from
// v2.4.3, but its API allows one) is reported with the file name and without "toml: ".
func TestDecodeErrorWithoutPosition(t *testing.T) {
	cause := errors.New("toml: something new")
	err := decodeError([]byte("[runtime]\n"), "/x.toml", cause)
	if want := "parse config /x.toml: something new"; err.Error() != want {
		t.Errorf("decodeError = %q, want %q", err, want)
	}
	if !errors.Is(err, ErrInvalid) || !errors.Is(err, cause) {
		t.Errorf("decodeError = %v: wraps neither ErrInvalid nor the cause", err)
	}
}
