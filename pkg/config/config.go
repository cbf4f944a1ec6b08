// Package config loads the gpu-runtime configuration file
// (/etc/gpu-runtime/config.toml, or the file $GPU_RUNTIME_CONFIG names).
//
// A Config it returns is complete and valid: keys missing from the file keep their defaults,
// every path is absolute and cleaned, and the log level is one logrus knows. Problems name the
// file: the first syntax error, redefinition or value of the wrong type with go-toml's line and
// column (types in TOML's words, "an array of strings", not Go's), else every bad value at
// once. Unknown keys are warnings, not errors, so that a newer config file still works with an
// older runtime. The package only reads files.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pelletier/go-toml/v2"
	"github.com/sirupsen/logrus"
	"tags.cncf.io/container-device-interface/pkg/parser"

	"github.com/gpu-runtime/gpu-runtime/internal/quote"
	"github.com/gpu-runtime/gpu-runtime/internal/trustedfile"
)

const (
	// DefaultPath is where the configuration file is installed.
	DefaultPath = "/etc/gpu-runtime/config.toml"
	// EnvPath is the environment variable that names another configuration file.
	EnvPath = "GPU_RUNTIME_CONFIG"
)

// ErrInvalid is wrapped by every error about the contents of a configuration file (bad TOML,
// a value of the wrong type, a bad value); errors reading it wrap the fs error instead.
var ErrInvalid = errors.New("invalid configuration")

// Config is the runtime's configuration; the toml tags are the file's keys.
type Config struct {
	Runtime   RuntimeConfig   `toml:"runtime"`
	Driver    DriverConfig    `toml:"driver"`
	Hook      HookConfig      `toml:"hook"`
	Request   RequestConfig   `toml:"request"`
	Discovery DiscoveryConfig `toml:"discovery"`
	CDI       CDIConfig       `toml:"cdi"`
	MPS       MPSConfig       `toml:"mps"`
	Health    HealthConfig    `toml:"health"`
	// Kubernetes is the [kubernetes] table: what the DRA kubelet plugin publishes.
	Kubernetes KubernetesConfig `toml:"kubernetes"`
	// DRA is the [dra] table: the GPUs the DRA kubelet plugin shares between claims.
	DRA DRAConfig `toml:"dra"`
}

// CDIConfig is the [cdi] table: where CDI specs are read from, and how long resolving may take.
type CDIConfig struct {
	// SpecDirs are the directories of CDI specs, lowest precedence first.
	SpecDirs []string `toml:"spec-dirs"`
	// AllowedKinds are the CDI kinds (vendor.com/class) gpu-runtime resolves for a container
	// that names them: by default those it serves. Another kind fails the create: a container
	// must not pick any vendor's device, one that bind-mounts host data among them.
	AllowedKinds []string `toml:"allowed-kinds"`
	// Timeout bounds gpu-runtime's hand-off of a create naming CDI devices to gpu-ctk, which
	// is killed when it passes (a Go duration, at least 1s).
	Timeout string `toml:"timeout"`
}

// TimeoutDuration is CDI.Timeout parsed (validated by Load/Parse).
func (c CDIConfig) TimeoutDuration() time.Duration { return duration(c.Timeout) }

func duration(s string) time.Duration {
	d, _ := time.ParseDuration(s)
	return d
}

// RuntimeConfig is the [runtime] table: the low-level runtime and logging.
type RuntimeConfig struct {
	// Runtimes are the low-level OCI runtimes to try in order, names looked up in PATH or
	// absolute paths; the first one found is used.
	Runtimes []string `toml:"runtimes"`
	// LogFile is a file to log to besides runc's --log; "" means none.
	LogFile string `toml:"log-file"`
	// LogLevel is a logrus level name; see Level.
	LogLevel string `toml:"log-level"`
	// NoCgroups has every GPU container's device nodes bind-mounted from the device root,
	// without device entries or cgroup rules, as they are wherever gpu-runtime runs rootless
	// (detected without it: internal/gpuhost.Rootless), for a rootless setup that is not
	// detected. NVIDIA's toolkit calls it no-cgroups too.
	NoCgroups bool `toml:"no-cgroups"`
}

// DriverConfig is the [driver] table: where the NVIDIA driver is installed.
type DriverConfig struct {
	// Root is where driver libraries, binaries and firmware live, e.g. /run/nvidia/driver for
	// a containerized driver.
	Root string `toml:"root"`
	// DevRoot is where the /dev/nvidia* device nodes live.
	DevRoot string `toml:"dev-root"`
	// ProcRoot is where the driver's /proc files (/proc/driver/nvidia*, /proc/devices) are read.
	ProcRoot string `toml:"proc-root"`
	// SysRoot is where sysfs is read (/sys/bus/pci/devices/<bus id>): each GPU's PCIe root
	// and NUMA node, which the DRA kubelet plugin publishes.
	SysRoot string `toml:"sys-root"`
}

// HookConfig is the [hook] table: the gpu-hook createContainer hooks the runtime injects.
type HookConfig struct {
	// Path is the gpu-hook binary; "" means next to the gpu-runtime executable, then PATH.
	Path string `toml:"path"`
	// LDConfig is the host's ldconfig, run confined to the container root.
	LDConfig string `toml:"ldconfig"`
	// Timeout is how long the runtime lets each of our hooks run before it kills the hook and
	// fails the create (a Go duration, whole seconds, at least 1s).
	Timeout string `toml:"timeout"`
	// LDCacheAtCreate has gpu-runtime update the container's loader cache itself at create,
	// wherever that gives what the update-ldcache hook would, and leave that hook out: one
	// process less per GPU container. False leaves it to the hook.
	LDCacheAtCreate bool `toml:"ldcache-at-create"`
}

// TimeoutSeconds is Hook.Timeout in whole seconds, rounded up (validated by Load/Parse).
func (h HookConfig) TimeoutSeconds() int {
	return int((duration(h.Timeout) + time.Second - 1) / time.Second)
}

// DiscoveryConfig controls how the host is discovered on each create.
type DiscoveryConfig struct {
	// Cache keeps discovery results in CacheFile until the host's fingerprint changes.
	Cache     bool   `toml:"cache"`
	CacheFile string `toml:"cache-file"`
	// Timeout bounds the NVML query (a Go duration, e.g. "10s"; "0s" = no bound).
	Timeout string `toml:"timeout"`
}

// TimeoutDuration is Discovery.Timeout parsed (validated by Load/Parse).
func (d DiscoveryConfig) TimeoutDuration() time.Duration { return duration(d.Timeout) }

// RequestConfig says which channels may request GPUs (multi-tenant hardening).
type RequestConfig struct {
	// AcceptEnvvarWhenUnprivileged honours NVIDIA_VISIBLE_DEVICES from containers without
	// CAP_SYS_ADMIN: false on multi-tenant hosts, where images bake NVIDIA_VISIBLE_DEVICES=all.
	AcceptEnvvarWhenUnprivileged bool `toml:"accept-envvar-when-unprivileged"`
	// AcceptDeviceListAsVolumeMounts honours /dev/null mounts at
	// /var/run/nvidia-container-devices/<device> (how a device plugin allocates).
	AcceptDeviceListAsVolumeMounts bool `toml:"accept-device-list-as-volume-mounts"`
}

// logLevels are the accepted values of runtime.log-level, as logrus parses them.
var logLevels = []string{"panic", "fatal", "error", "warn", "warning", "info", "debug", "trace"}

// Default returns the configuration without a file, and the value of every key a file leaves out.
func Default() Config {
	return Config{
		Runtime: RuntimeConfig{
			Runtimes: []string{"runc", "crun"},
			LogFile:  "",
			LogLevel: "info",
		},
		Driver: DriverConfig{Root: "/", DevRoot: "/", ProcRoot: "/", SysRoot: "/"},
		Hook: HookConfig{
			Path:            "",
			LDConfig:        "/sbin/ldconfig",
			Timeout:         "30s",
			LDCacheAtCreate: true,
		},
		Request: RequestConfig{
			AcceptEnvvarWhenUnprivileged:   true,
			AcceptDeviceListAsVolumeMounts: false,
		},
		Discovery: DiscoveryConfig{
			Cache:     true,
			CacheFile: "/run/gpu-runtime/discovery-cache.csv",
			Timeout:   "10s",
		},
		CDI: CDIConfig{
			SpecDirs:     []string{"/etc/cdi", "/var/run/cdi"},
			AllowedKinds: []string{"nvidia.com/gpu", "k8s.device-plugin.nvidia.com/gpu"},
			Timeout:      "30s",
		},
		MPS: MPSConfig{Root: "/run/gpu-runtime/mps"},
		Health: HealthConfig{
			File: "/run/gpu-runtime/health.csv",
			All:  HealthAllSkip,
			// The Xids NVIDIA's device plugin ignores: 13 (graphics engine exception), 31 (GPU
			// memory page fault), 43 (GPU stopped processing), 45 (preemptive cleanup), 68
			// (NVDEC0 exception) and 109 (context switch timeout), caused by the application,
			// not by the GPU.
			IgnoreXids: []int{13, 31, 43, 45, 68, 109},
		},
		Kubernetes: KubernetesConfig{TaintEffect: TaintNoSchedule},
		DRA:        DRAConfig{SharedGPUs: []string{}, ComputeDefault: 100, ComputeStep: 10, MemoryStep: "1Gi", MPSRoot: "/run/gpu-runtime/dra-mps"},
	}
}

// Path returns the configuration file to load: $GPU_RUNTIME_CONFIG if not empty, else DefaultPath.
func Path(getenv func(string) string) string {
	if p := getenv(EnvPath); p != "" {
		return p
	}
	return DefaultPath
}

// Load reads and parses the configuration file at path; a missing file is Default(). Warnings
// (unknown keys) come back for the caller to log; the rest of the file still applies.
func Load(path string) (Config, []string, error) {
	data, _, err := trustedfile.ReadRegular(path, MaxSize, true)
	if errors.Is(err, fs.ErrNotExist) {
		return Default(), nil, nil
	}
	if err != nil {
		return Config{}, nil, fmt.Errorf("read config %s: %w", path, err)
	}
	return Parse(data, path)
}

// MaxSize is the largest configuration file read. The shipped one is 3 KiB. It is read as
// trustedfile.ReadRegular reads, a link at its path followed: GPU_RUNTIME_CONFIG naming a FIFO,
// /dev/zero or a huge file must neither hang nor bloat any call, delete and kill included.
const MaxSize = 1 << 20

// LoadFromEnv loads Path(getenv). A file named by $GPU_RUNTIME_CONFIG must exist: a typo in
// the variable must not silently mean defaults.
func LoadFromEnv(getenv func(string) string) (Config, []string, error) {
	p := Path(getenv)
	if getenv(EnvPath) != "" {
		if _, err := os.Stat(p); errors.Is(err, fs.ErrNotExist) {
			return Config{}, nil, fmt.Errorf("read config %s (named by %s): %w", p, EnvPath, err)
		}
	}
	return Load(p)
}

// LoadRuntimeFromEnv is LoadFromEnv for the calls that only pass through to the low-level
// runtime (start, delete, kill…): it reads only the [runtime] section, leniently, and leaves
// the rest at its default, since problems elsewhere do not change which runtime a delete must
// reach. A [runtime] section that cannot be read gets LoadFromEnv's error, with Default().
func LoadRuntimeFromEnv(getenv func(string) string) (Config, error) {
	p := Path(getenv)
	data, _, err := trustedfile.ReadRegular(p, MaxSize, true)
	if errors.Is(err, fs.ErrNotExist) && getenv(EnvPath) == "" {
		return Default(), nil
	}
	if err == nil {
		if cfg, ok := parseRuntime(data); ok {
			return cfg, nil
		}
	}
	_, _, err = LoadFromEnv(getenv)
	if err == nil { // the full parse accepts what the lenient one did not: not expected
		err = invalid(nil, "config %s: the [runtime] section cannot be read", p)
	}
	return Default(), err
}

// parseRuntime decodes only the [runtime] section of data over Default(); false when it is
// bad. For a file Parse accepts, it gives Parse's [runtime] section (FuzzParse checks).
func parseRuntime(data []byte) (Config, bool) {
	cfg := Default()
	doc := struct {
		Runtime *RuntimeConfig `toml:"runtime"`
	}{Runtime: &cfg.Runtime}
	if decode(data, &doc, false) != nil || len(cfg.clean()) > 0 {
		return Config{}, false
	}
	return cfg, true
}

// Parse parses a configuration file named name in messages over Default(). Errors wrap
// ErrInvalid; warnings name the unknown keys ignored, even with an error about a bad value.
func Parse(data []byte, name string) (Config, []string, error) {
	cfg := Default()
	var warnings []string
	var strict *toml.StrictMissingError
	switch err := decode(data, &cfg, true); {
	case errors.As(err, &strict):
		// Known keys are decoded even when unknown ones are present.
		warnings = unknownKeyWarnings(name, strict)
	case err != nil:
		return Config{}, nil, decodeError(data, name, err)
	}

	if problems := cfg.clean(); len(problems) > 0 {
		return Config{}, warnings, invalid(nil, "config %s: %s", name, strings.Join(problems, "; "))
	}
	return cfg, warnings, nil
}

// decode decodes data into v; strict reports keys v lacks (a *toml.StrictMissingError, the
// known ones decoded).
func decode(data []byte, v any, strict bool) error {
	// dra.shared-gpus (GPUList) decodes an array or the string "all" itself.
	dec := toml.NewDecoder(bytes.NewReader(data)).EnableUnmarshalerInterface()
	if strict {
		dec.DisallowUnknownFields()
	}
	return dec.Decode(v)
}

// Level returns the logrus level of Runtime.LogLevel; logrus.InfoLevel when it is not one.
func (c Config) Level() logrus.Level {
	l, err := logrus.ParseLevel(c.Runtime.LogLevel)
	if err != nil {
		return logrus.InfoLevel
	}
	return l
}

// clean validates every value and cleans paths in place: one message per bad value.
func (c *Config) clean() []string {
	var problems []string
	bad := func(key string, value any, want string) {
		problems = append(problems, fmt.Sprintf("invalid %s %s: want %s", key, formatValue(value), want))
	}

	if len(c.Runtime.Runtimes) == 0 {
		bad("runtime.runtimes", c.Runtime.Runtimes, "at least one runtime")
	}
	for i, r := range c.Runtime.Runtimes {
		switch {
		case r != "" && !strings.Contains(r, "/"):
			// A name, looked up in PATH.
		case filepath.IsAbs(r):
			c.Runtime.Runtimes[i] = filepath.Clean(r)
		default:
			bad(fmt.Sprintf("runtime.runtimes[%d]", i), r, "a name to look up in PATH or an absolute path")
		}
	}
	if !slices.Contains(logLevels, c.Runtime.LogLevel) {
		bad("runtime.log-level", c.Runtime.LogLevel, "one of "+strings.Join(logLevels, ", "))
	}

	optionalPath := func(key string, p *string) {
		switch {
		case *p == "":
		case filepath.IsAbs(*p):
			*p = filepath.Clean(*p)
		default:
			bad(key, *p, `an absolute path or ""`)
		}
	}
	requiredPath := func(key string, p *string) {
		if !filepath.IsAbs(*p) {
			bad(key, *p, "an absolute path")
			return
		}
		*p = filepath.Clean(*p)
	}
	optionalPath("runtime.log-file", &c.Runtime.LogFile)
	requiredPath("driver.root", &c.Driver.Root)
	requiredPath("driver.dev-root", &c.Driver.DevRoot)
	requiredPath("driver.proc-root", &c.Driver.ProcRoot)
	requiredPath("driver.sys-root", &c.Driver.SysRoot)
	optionalPath("hook.path", &c.Hook.Path)
	requiredPath("hook.ldconfig", &c.Hook.LDConfig)
	requiredPath("discovery.cache-file", &c.Discovery.CacheFile)
	for i := range c.CDI.SpecDirs {
		requiredPath(fmt.Sprintf("cdi.spec-dirs[%d]", i), &c.CDI.SpecDirs[i])
	}
	for i, k := range c.CDI.AllowedKinds {
		vendor, class := parser.ParseQualifier(k)
		if parser.ValidateVendorName(vendor) != nil || parser.ValidateClassName(class) != nil {
			bad(fmt.Sprintf("cdi.allowed-kinds[%d]", i), k, `a CDI kind, vendor.com/class, such as "nvidia.com/gpu"`)
		}
	}
	requiredPath("mps.root", &c.MPS.Root)
	c.MPS.clean(bad)
	optionalPath("health.file", &c.Health.File)
	c.Health.clean(bad)
	c.Kubernetes.clean(bad)
	requiredPath("dra.mps-root", &c.DRA.MPSRoot)
	c.DRA.clean(bad)
	if d, err := time.ParseDuration(c.Hook.Timeout); err != nil || d < time.Second {
		bad("hook.timeout", c.Hook.Timeout, `a duration of at least one second, such as "30s"`)
	}
	if d, err := time.ParseDuration(c.Discovery.Timeout); err != nil || d < 0 {
		bad("discovery.timeout", c.Discovery.Timeout, `a duration such as "10s" ("0s" = no limit)`)
	}
	if d, err := time.ParseDuration(c.CDI.Timeout); err != nil || d < time.Second {
		bad("cdi.timeout", c.CDI.Timeout, `a duration of at least one second, such as "30s"`)
	}
	return problems
}

// formatValue writes a value as it would appear in the file.
func formatValue(v any) string {
	switch v := v.(type) {
	case []string:
		return array(v, strconv.Quote)
	case []int:
		return array(v, strconv.Itoa)
	default:
		return fmt.Sprintf("%q", v)
	}
}

func array[T any](v []T, format func(T) string) string {
	q := make([]string, len(v))
	for i, e := range v {
		q[i] = format(e)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// configError reads as msg and wraps ErrInvalid and the go-toml error behind it, if any.
type configError struct {
	msg string
	err error
}

func (e *configError) Error() string { return e.msg }

func (e *configError) Unwrap() []error {
	if e.err == nil {
		return []error{ErrInvalid}
	}
	return []error{ErrInvalid, e.err}
}

func invalid(cause error, format string, args ...any) error {
	return &configError{msg: fmt.Sprintf(format, args...), err: cause}
}

// decodeError reports go-toml's error with its line and column. The file not being TOML comes
// first, wherever it is; a value of the wrong type is worded in TOML's words, not Go's.
func decodeError(data []byte, name string, err error) error {
	var doc map[string]any
	if syntax := toml.Unmarshal(data, &doc); syntax != nil {
		err, doc = syntax, nil
	}
	var de *toml.DecodeError
	if !errors.As(err, &de) {
		return invalid(err, "parse config %s: %s", name, strings.TrimPrefix(err.Error(), "toml: "))
	}
	msg, ok := typeMismatch(doc, de.Key())
	if !ok {
		msg = strings.TrimPrefix(de.Error(), "toml: ")
	}
	line, col := de.Position()
	return invalid(err, "parse config %s: line %d, column %d: %s", name, line, col, msg)
}

// unknownKeyWarnings turns go-toml's strict-mode report into one warning per unknown key;
// keys inside an unknown table are not repeated.
func unknownKeyWarnings(name string, strict *toml.StrictMissingError) []string {
	var warnings, seen []string
next:
	for _, e := range strict.Errors {
		key := quote.TOMLKey(e.Key()...)
		for _, s := range seen {
			if strings.HasPrefix(key, s+".") {
				continue next
			}
		}
		seen = append(seen, key)
		warnings = append(warnings, fmt.Sprintf("config %s: unknown key %q ignored%s", name, key, didYouMean(key)))
	}
	return warnings
}

// valueKind is the TOML type a known key takes, in TOML's words.
type valueKind string

const (
	kindTable   valueKind = "a table"
	kindString  valueKind = "a string"
	kindStrings valueKind = "an array of strings"
	kindBool    valueKind = "a boolean"
	kindInt     valueKind = "an integer"
	kindInts    valueKind = "an array of integers"
)

// kindOf is the kind of a Config field's type.
func kindOf(t reflect.Type) valueKind {
	switch t.Kind() {
	case reflect.String:
		return kindString
	case reflect.Bool:
		return kindBool
	case reflect.Int:
		return kindInt
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Int {
			return kindInts
		}
		return kindStrings
	default: // a struct, or a map of tables named by the user ([mps.shares.<name>])
		return kindTable
	}
}

// field finds the Config field at key as go-toml matches keys (toml tag, any case; any name
// below a map): its type and the key as Config spells it; n < len(key) when key goes on below
// a value.
func field(key []string) (t reflect.Type, spelled []string, n int, ok bool) {
	t = reflect.TypeFor[Config]()
	for n = 0; n < len(key); n++ {
		part := key[n]
		switch t.Kind() {
		case reflect.Map:
			t = t.Elem()
		case reflect.Struct:
			found := false
			for i := range t.NumField() {
				if f := t.Field(i); strings.EqualFold(f.Tag.Get("toml"), part) {
					t, part, found = f.Type, f.Tag.Get("toml"), true
					break
				}
			}
			if !found {
				return nil, nil, 0, false
			}
		default:
			return t, spelled, n, true
		}
		spelled = append(spelled, part)
	}
	return t, spelled, n, true
}

// typeMismatch words go-toml's error at key about a value of the wrong type as "<key> must
// be <kind>, not <kind>"; doc is the file decoded. In an inline table it names the first wrong
// key in sorted order, as go-toml does.
func typeMismatch(doc map[string]any, key []string) (string, bool) {
	t, spelled, n, ok := field(key)
	if !ok || doc == nil {
		return "", false
	}
	want := kindOf(t)
	got := "a table" // key goes on below a value
	if n == len(key) {
		var v any = doc
		for _, part := range key {
			m, _ := v.(map[string]any)
			v = m[part]
		}
		if got = mismatch(v, want); got == "" {
			// go-toml names the key of an inline table, not the key inside it that is wrong.
			table, _ := v.(map[string]any)
			for _, k := range slices.Sorted(maps.Keys(table)) {
				if msg, ok := typeMismatch(doc, append(slices.Clip(key), k)); ok {
					return msg, true
				}
			}
			return "", false
		}
	}
	return fmt.Sprintf("%s must be %s, not %s", quote.TOMLKey(spelled...), want, got), true
}

// mismatch names the TOML type of v, decoded into an any, when it is not want; "" when it is
// or v is nil.
func mismatch(v any, want valueKind) string {
	list, isList := v.([]any)
	switch {
	case v == nil:
		return ""
	case isList && (want == kindStrings || want == kindInts):
		elem := kindString
		if want == kindInts {
			elem = kindInt
		}
		for _, e := range list {
			if m := mismatch(e, elem); m != "" {
				return "an array containing " + m
			}
		}
		return ""
	case isList && len(list) > 0 && !slices.ContainsFunc(list, func(e any) bool { _, ok := e.(map[string]any); return !ok }):
		return "an array of tables"
	}
	if got := quote.TOMLType(v); got != string(want) {
		return got
	}
	return ""
}
