package ctk

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/sirupsen/logrus"

	"github.com/gpu-runtime/gpu-runtime/internal/cdi"
	"github.com/gpu-runtime/gpu-runtime/internal/create"
	"github.com/gpu-runtime/gpu-runtime/internal/gpuhost"
	"github.com/gpu-runtime/gpu-runtime/internal/nvmlinfo"
	"github.com/gpu-runtime/gpu-runtime/pkg/config"
	"github.com/gpu-runtime/gpu-runtime/pkg/edits"
	"github.com/gpu-runtime/gpu-runtime/pkg/oci"
	"github.com/gpu-runtime/gpu-runtime/pkg/plan"
	"github.com/gpu-runtime/gpu-runtime/pkg/request"
	"github.com/gpu-runtime/gpu-runtime/pkg/requirements"
)

const explainUsage = `usage:
  gpu-ctk explain --bundle DIR [--json]
  gpu-ctk explain --env VAR=VALUE... [--annotation KEY=VALUE...] [--privileged] [--json]

explain runs gpu-runtime's own decision and planning code on a container — the bundle's
config.json, or a container with the given environment (and annotations) and docker's default
capabilities (--privileged adds CAP_SYS_ADMIN) — and prints every edit the create would make,
each with why: device nodes (type, major:minor, mode) and their cgroup rules, read-only
mounts with the capability and file that selected them, hooks with their argv, the
requirement checks and their outcome on this host. Nothing is created and no spec is written.
When the create would fail, it prints the error gpu-runtime would give and exits 1. A
container that asks for no GPU but carries requirements (NVIDIA_REQUIRE_*, a legacy
CUDA_VERSION) has them checked against this host's driver too, as a check of the image: explain
exits 1 when one is not satisfied (or malformed), since the image would fail with a GPU.
It reads gpu-runtime's configuration (GPU_RUNTIME_CONFIG works) and, like a create, uses the
discovery cache.
`

// dockerCapabilities is the bounding set docker gives a container by default.
var dockerCapabilities = []string{"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD", "CAP_NET_RAW",
	"CAP_SETGID", "CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE"}

// listFlag collects a repeatable flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, " ") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

// Explanation is gpu-ctk explain's result; --json prints it.
type Explanation struct {
	// Source is what was explained: the bundle's config.json, or "--env".
	Source string `json:"source"`
	// Decision is "inject", "unchanged" or "error".
	Decision string `json:"decision"`
	// Reason says why the spec is left unchanged; Error is the create's error.
	Reason string `json:"reason,omitempty"`
	Error  string `json:"error,omitempty"`
	// Devices are the selected devices: index, UUID, and a MIG device's profile.
	Devices      []ExplainedDevice `json:"devices,omitempty"`
	Capabilities string            `json:"capabilities,omitempty"`
	CDIDevices   []string          `json:"cdiDevices,omitempty"`
	Edits        *edits.Edits      `json:"edits,omitempty"`
	// LoaderCache says where the create updates the loader cache (at create, or the hook),
	// and why.
	LoaderCache  string                `json:"loaderCache,omitempty"`
	Requirements []ExplainedCondition  `json:"requirements,omitempty"`
	Warnings     []string              `json:"warnings,omitempty"`
	Lines        []string              `json:"lines,omitempty"`
	Host         *ExplainedHostSummary `json:"host,omitempty"`
}

// ExplainedDevice is one selected device.
type ExplainedDevice struct {
	Index   string `json:"index"`
	UUID    string `json:"uuid"`
	Profile string `json:"profile,omitempty"`
}

// ExplainedCondition is one requirement variable and its outcome on this host.
type ExplainedCondition struct {
	Name       string `json:"name"`
	Expression string `json:"expression"`
	Satisfied  bool   `json:"satisfied"`
	Detail     string `json:"detail,omitempty"`
}

// ExplainedHostSummary is the driver the plan was made against.
type ExplainedHostSummary struct {
	Driver string `json:"driver"`
	CUDA   string `json:"cuda"`
}

func runExplain(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("gpu-ctk explain", flag.ContinueOnError)
	bundle := fs.String("bundle", "", "the container's bundle directory (its config.json is read, never written)")
	var envs, annotations listFlag
	fs.Var(&envs, "env", "VAR=VALUE of the container's environment (repeatable)")
	fs.Var(&annotations, "annotation", "KEY=VALUE annotation of the container (repeatable), e.g. cdi.k8s.io/gpu=nvidia.com/gpu=0")
	privileged := fs.Bool("privileged", false, "with --env: the container has CAP_SYS_ADMIN")
	asJSON := fs.Bool("json", false, "print the explanation as JSON")
	if help, err := parseFlags(fs, args, explainUsage, stdout); help || err != nil {
		return err
	}
	switch {
	case fs.NArg() > 0:
		return fmt.Errorf("%w: explain takes no arguments, got %q (gpu-ctk explain --help)", ErrUsage, fs.Args())
	case *bundle != "" && (len(envs) > 0 || len(annotations) > 0 || *privileged):
		return fmt.Errorf("%w: explain takes --bundle or --env, not both: a bundle's config.json already has its environment", ErrUsage)
	case *bundle == "" && len(envs) == 0:
		return fmt.Errorf("%w: explain needs --bundle DIR or at least one --env VAR=VALUE (gpu-ctk explain --help)", ErrUsage)
	}
	path := oci.ConfigPath(*bundle)
	source := path
	if *bundle == "" {
		raw, err := syntheticSpec(envs, annotations, *privileged)
		if err != nil {
			return err
		}
		// The decision reads a spec file, as a create does: a private temporary bundle.
		dir, err := os.MkdirTemp("", "gpu-ctk-explain-")
		if err != nil {
			return err
		}
		defer func() { _ = os.RemoveAll(dir) }()
		path, source = oci.ConfigPath(dir), "--env"
		if err := os.WriteFile(path, raw, 0o600); err != nil {
			return err
		}
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read spec: %w", err)
	}
	ex := explain(source, path, raw, stderr)
	if *asJSON {
		if err := writeJSON(stdout, ex); err != nil {
			return err
		}
	} else if _, err := io.WriteString(stdout, ex.text()); err != nil {
		return err
	}
	if ex.Decision == "error" || !ex.satisfied() {
		return ErrReported
	}
	return nil
}

// satisfied reports whether every requirement shown holds on this host (and could be checked).
func (ex *Explanation) satisfied() bool {
	if ex.Error != "" {
		return false
	}
	for _, c := range ex.Requirements {
		if !c.Satisfied {
			return false
		}
	}
	return true
}

// syntheticSpec is a container with the given environment and annotations, docker's default
// capabilities (and CAP_SYS_ADMIN when privileged).
func syntheticSpec(envs, annotations []string, privileged bool) ([]byte, error) {
	for _, kv := range envs {
		if !strings.Contains(kv, "=") {
			return nil, fmt.Errorf("%w: --env %q: want VAR=VALUE", ErrUsage, kv)
		}
	}
	caps := append([]string(nil), dockerCapabilities...)
	if privileged {
		caps = append(caps, "CAP_SYS_ADMIN")
	}
	s := specs.Spec{Version: specs.Version, Root: &specs.Root{Path: "rootfs"},
		Process: &specs.Process{Args: []string{"sh"}, Cwd: "/", Env: envs, Capabilities: &specs.LinuxCapabilities{Bounding: caps, Effective: caps, Permitted: caps}}}
	s.Annotations = map[string]string{} // written only when not empty (omitempty)
	for _, kv := range annotations {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("%w: --annotation %q: want KEY=VALUE", ErrUsage, kv)
		}
		s.Annotations[k] = v
	}
	return json.Marshal(&s)
}

// explain decides the injection exactly as a create would — the same decision, with
// gpu-ctk's CDI resolver and NVML in this process, the loader-cache choice included (made on
// the bundle's root without writing anything) — and describes it. A failing create is an
// Explanation with Decision "error", not an error.
func explain(source, path string, raw []byte, stderr io.Writer) *Explanation {
	ex := &Explanation{Source: source}
	cfg, err := loadConfig(stderr)
	if err != nil {
		ex.Decision, ex.Error = "error", "gpu-runtime: "+err.Error()
		return ex
	}
	warnings := &collect{}
	log := logrus.New()
	log.SetOutput(io.Discard)
	log.AddHook(warnings)
	self, _ := os.Executable()
	resolver := cdi.NewResolver(cfg.CDI.SpecDirs, cfg.CDI.AllowedKinds)
	opts := create.Options{Config: cfg, Executable: self, Cwd: filepath.Dir(path), Logger: log, CDI: resolver, QueryNVML: nvmlinfo.QueryContext}
	in, err := create.Decide(path, raw, opts, log)
	if in.Request.WantsCDI() { // as gpu-ctk cdi inject warns
		for _, p := range resolver.Problems() {
			warnings.lines = append(warnings.lines, "CDI spec not loaded: "+p)
		}
	}
	var e edits.Edits
	if err == nil && in.Unchanged == "" {
		in.UpdateLoaderCache(opts, true, log)
		// What Apply would do to this very spec (not written).
		e, err = in.Apply()
	}
	ex.Warnings = warnings.lines
	if err != nil {
		ex.Decision, ex.Error = "error", "gpu-runtime: "+err.Error()
		if errors.Is(err, requirements.ErrUnsatisfied) {
			ex.Requirements = conditions(in)
		}
		return ex
	}
	if in.Unchanged != "" {
		ex.Decision, ex.Reason = "unchanged", in.Unchanged
		if in.Unchanged == create.UnchangedNoGPU {
			var problem string
			if ex.Requirements, problem = imageConditions(cfg, raw); problem != "" {
				ex.Warnings = append(ex.Warnings, problem)
			}
		}
		return ex
	}
	ex.Decision = "inject"
	ex.Capabilities = in.Request.Capabilities.String()
	ex.Host = &ExplainedHostSummary{Driver: in.Host.Driver.Version, CUDA: in.Host.Driver.CUDAVersion}
	for _, d := range in.Plan.Devices {
		ed := ExplainedDevice{Index: d.Index, UUID: d.UUID}
		if d.MIG != nil {
			ed.Profile = d.MIG.Profile
		}
		ex.Devices = append(ex.Devices, ed)
	}
	ex.Edits = &e
	ex.CDIDevices = in.CDINames
	ex.LoaderCache = in.LoaderCacheWhy
	ex.Lines = e.Describe()
	ex.Requirements = conditions(in)
	return ex
}

// imageConditions checks the requirements of a container that asks for no GPU against the
// host's driver (no GPU selected), as a check of its image: the create does not check them,
// but the same image with a GPU would fail. problem says why they could not be checked.
func imageConditions(cfg config.Config, raw []byte) (out []ExplainedCondition, problem string) {
	var s struct {
		Process *struct {
			Env []string `json:"env"`
		} `json:"process"`
	}
	if json.Unmarshal(raw, &s) != nil || s.Process == nil {
		return nil, ""
	}
	reqs, disabled := request.EnvRequirements(request.ParseEnv(s.Process.Env))
	if len(reqs) == 0 || disabled {
		return nil, ""
	}
	res, err := gpuhost.Build(cfg, gpuhost.Options{Query: nvmlinfo.QueryContext, Cache: true})
	if err != nil {
		return nil, "the image's requirements are not checked: " + err.Error()
	}
	return evaluate(reqs, plan.RequirementHost(res.Host.Driver, nil)), ""
}

// conditions evaluates each requirement on its own against what a create checks it against,
// so that every outcome is shown, not only the first failure's.
func conditions(in create.Injection) []ExplainedCondition {
	req := in.Request
	if !req.ChecksRequirements() {
		return nil
	}
	return evaluate(req.Requirements, plan.RequirementHost(in.Host.Driver, in.Plan.Devices))
}

// evaluate checks each requirement on its own against host.
func evaluate(reqs []requirements.Requirement, host requirements.Host) []ExplainedCondition {
	var out []ExplainedCondition
	for _, r := range reqs {
		c := ExplainedCondition{Name: r.Name, Expression: r.Expression, Satisfied: true}
		if _, err := requirements.Check([]requirements.Requirement{r}, host); err != nil {
			c.Satisfied, c.Detail = false, err.Error()
		}
		out = append(out, c)
	}
	return out
}

// text renders the explanation for people.
func (ex *Explanation) text() string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	switch ex.Decision {
	case "error":
		w("the create would fail (%s):\n  %s\n", ex.Source, ex.Error)
		ex.requirementLines(w)
	case "unchanged":
		w("the create would leave the spec unchanged (%s): %s\n", ex.Source, strings.TrimSuffix(ex.Reason, "; spec unchanged"))
		if len(ex.Requirements) > 0 {
			w("requirements (not checked for a container without GPUs; the image's, on this host's driver):\n")
			for _, c := range ex.Requirements {
				if c.Satisfied {
					w("  %s=%q: satisfied on this host\n", c.Name, c.Expression)
				} else {
					w("  %s=%q: NOT satisfied, the image would not start with a GPU here: %s\n", c.Name, c.Expression, c.Detail)
				}
			}
		}
	default:
		w("the create would inject (%s), against driver %s (CUDA %s):\n", ex.Source, ex.Host.Driver, ex.Host.CUDA)
		var devs []string
		for _, d := range ex.Devices {
			s := d.Index + " (" + d.UUID
			if d.Profile != "" {
				s += ", " + d.Profile
			}
			devs = append(devs, s+")")
		}
		if len(devs) == 0 {
			devs = []string{"none (driver files only)"}
		}
		w("devices: %s\n", strings.Join(devs, ", "))
		if len(ex.CDIDevices) > 0 {
			w("CDI devices: %s\n", strings.Join(ex.CDIDevices, ", "))
		}
		w("capabilities: %s\n", ex.Capabilities)
		if ex.LoaderCache != "" {
			w("%s\n", ex.LoaderCache)
		}
		w("edits:\n")
		for _, l := range ex.Lines {
			w("  %s\n", l)
		}
		ex.requirementLines(w)
	}
	for _, warning := range ex.Warnings {
		w("warning: %s\n", warning)
	}
	return b.String()
}

// requirementLines writes each requirement's outcome.
func (ex *Explanation) requirementLines(w func(string, ...any)) {
	if len(ex.Requirements) == 0 {
		return
	}
	w("requirements (checked at create):\n")
	for _, c := range ex.Requirements {
		if c.Satisfied {
			w("  %s=%q: satisfied on this host\n", c.Name, c.Expression)
		} else {
			w("  %s=%q: NOT satisfied, the container would not start: %s\n", c.Name, c.Expression, c.Detail)
		}
	}
}

// collect keeps the warnings a decision logs.
type collect struct{ lines []string }

func (c *collect) Levels() []logrus.Level { return []logrus.Level{logrus.WarnLevel} }
func (c *collect) Fire(e *logrus.Entry) error {
	c.lines = append(c.lines, e.Message)
	return nil
}
