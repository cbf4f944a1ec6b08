// Package cdi is gpu-runtime's side of the Container Device Interface, built on
// tags.cncf.io/container-device-interface: it reads the CDI specs of root's spec directories
// and resolves CDI names into gpu-runtime's device model (Resolver: each device's edits and
// the nodes that say which GPUs it gives, for plan.Build), and writes a CDI spec for this host
// from the same plan the runtime injects (Generate). Only gpu-ctk links it: the library is
// kept out of gpu-runtime's every start.
package cdi

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
	"tags.cncf.io/container-device-interface/pkg/cdi"
	"tags.cncf.io/container-device-interface/pkg/parser"

	"github.com/gpu-runtime/gpu-runtime/internal/quote"
	"github.com/gpu-runtime/gpu-runtime/internal/trustedfile"
	"github.com/gpu-runtime/gpu-runtime/pkg/edits"
	"github.com/gpu-runtime/gpu-runtime/pkg/oci"
	"github.com/gpu-runtime/gpu-runtime/pkg/plan"
)

// ErrUnresolvable marks CDI devices no spec in the spec directories defines.
var ErrUnresolvable = errors.New("unresolvable CDI devices")

// ErrKindNotAllowed marks CDI devices of a kind cdi.allowed-kinds does not list.
var ErrKindNotAllowed = errors.New("CDI device kind not allowed")

// Bounds on what the spec directories may cost a create. The spec gpu-ctk writes for the fake
// host of eight GPUs, four of them split into seven MIG devices, with every capability's
// files is 82 KiB of YAML (95 KiB as JSON); a DRA driver writes one small spec per claim.
const (
	maxSpecSize   = 4 << 20
	maxDirEntries = 4096
)

// specRule is what a spec file must be to be read: root's, writable by no one else, a
// regular file of at most maxSpecSize (internal/trustedfile). A spec directory anyone can
// write to (a world-writable /var/run/cdi) must not hand a user's hooks and mounts to
// containers as root's; a FIFO must not hang a create, nor a link to /dev/zero exhaust it.
var specRule = trustedfile.Rule{What: "CDI spec", Max: maxSpecSize}

// Resolver resolves CDI device names from the specs in a list of directories.
//
// It reads the directories itself rather than through the CDI library's Cache, which reads
// every *.json and *.yaml file by path (os.ReadFile: links followed, FIFOs opened blocking,
// any size, any owner). Each file is checked on a handle (specRule) and the
// library then parses and validates it from /proc/self/fd/<that handle> (cdi.ReadSpec), so
// the bytes it parses are those of the inode checked. The directories' precedence is the
// Cache's (see load), and devices are applied with the library's ContainerEdits as
// Cache.InjectDevices applies them.
type Resolver struct {
	dirs []string
	// kinds are the kinds Resolve resolves names of (cdi.allowed-kinds).
	kinds []string
	// specs are the specs read, in the order read (by directory, then by file name); paths
	// their files (the library knows them by their /proc/self/fd path).
	specs   []*cdi.Spec
	paths   map[*cdi.Spec]string
	devices map[string]*cdi.Device
	// problems say, each as "<file or directory>: <why>", what was not read.
	problems []string
}

// NewResolver reads the specs of dirs (later directories take precedence, as in the CDI
// library). Specs that are not read are reported by Problems, and by Resolve's error when a
// device is missing. Resolve resolves only names of the kinds allowed (cdi.allowed-kinds);
// Devices and CheckSpecs see every kind.
func NewResolver(dirs, allowed []string) *Resolver {
	r := &Resolver{dirs: dirs, kinds: allowed, paths: map[*cdi.Spec]string{}, devices: map[string]*cdi.Device{}}
	r.load()
	return r
}

// load reads every spec of r.dirs and decides which spec's device each qualified name is,
// by the rules of the CDI library's Cache.refresh
// (https://github.com/cncf-tags/container-device-interface/blob/v1.1.1/pkg/cdi/cache.go),
// so that gpu-runtime resolves a name to the device podman or containerd would: a later
// directory's device replaces an earlier one's; two specs of one directory that define the
// same name are a conflict, reported for both, and the name resolves to nothing (even where
// a later directory defines it too, as in the library).
func (r *Resolver) load() {
	for priority, dir := range r.dirs {
		names, err := specFiles(dir)
		if err != nil {
			r.problems = append(r.problems, err.Error())
			continue
		}
		for _, name := range names {
			r.read(filepath.Join(dir, name), priority)
		}
	}
	conflicts := map[string]bool{}
	for _, s := range r.specs {
		for _, d := range s.Devices {
			dev := s.GetDevice(d.Name)
			name := dev.GetQualifiedName()
			if old := r.devices[name]; old != nil && s.GetPriority() <= old.GetSpec().GetPriority() {
				if s.GetPriority() == old.GetSpec().GetPriority() {
					msg := fmt.Sprintf("conflicting device %q (specs %q, %q)", name, r.paths[s], r.paths[old.GetSpec()])
					r.problems = append(r.problems, r.paths[s]+": "+msg, r.paths[old.GetSpec()]+": "+msg)
					conflicts[name] = true
				}
				continue
			}
			r.devices[name] = dev
		}
	}
	for name := range conflicts {
		delete(r.devices, name)
	}
	slices.Sort(r.problems)
}

// specFiles lists the spec files of dir (*.json and *.yaml, as the CDI library), sorted; a
// missing directory has none. A directory of more than maxDirEntries entries is an error:
// which of them a bounded read saw would be arbitrary.
func specFiles(dir string) ([]string, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	d := os.NewFile(uintptr(fd), dir)
	defer d.Close()
	entries, err := d.Readdirnames(maxDirEntries + 1)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	if len(entries) > maxDirEntries {
		return nil, fmt.Errorf("%s: more than %d entries: none of its specs is read", dir, maxDirEntries)
	}
	var names []string
	for _, name := range entries {
		if ext := filepath.Ext(name); ext == ".json" || ext == ".yaml" {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names, nil
}

// read reads the spec file at path if it passes specRule.
func (r *Resolver) read(path string, priority int) {
	h, err := trustedfile.Open(path, specRule)
	var untrusted *trustedfile.Error
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return // removed since the directory was listed
	case errors.As(err, &untrusted):
		r.problems = append(r.problems, path+": "+untrusted.Reason)
		return
	case err != nil:
		r.problems = append(r.problems, err.Error())
		return
	}
	defer h.Close()
	fdPath := trustedfile.FDPath(h)
	spec, err := cdi.ReadSpec(fdPath, priority)
	if err != nil {
		// The library's message names the file by the path it was given; path already says it.
		r.problems = append(r.problems, path+": "+strings.ReplaceAll(err.Error(), " "+strconv.Quote(fdPath), ""))
		return
	}
	r.specs = append(r.specs, spec)
	r.paths[spec] = path
}

// Devices lists the qualified names of every device the specs define, sorted.
func (r *Resolver) Devices() []string {
	return slices.Sorted(maps.Keys(r.devices))
}

// Problems lists, sorted, each spec file or directory that was not read and why.
func (r *Resolver) Problems() []string {
	return r.problems
}

// Resolve implements create.CDI: names, then those the cdi.k8s.io/ annotations name, each
// once; every one must be of an allowed kind and resolve before anything is applied. A name
// of a kind not allowed is an error (ErrKindNotAllowed) whether or not a spec defines it.
func (r *Resolver) Resolve(names []string, annotations map[string]string, user specs.User) ([]plan.CDIDevice, error) {
	if len(annotations) > 0 {
		if err := checkAnnotations(annotations); err != nil {
			return nil, err
		}
		_, annotated, err := cdi.ParseAnnotations(annotations)
		if err != nil { // checkAnnotations refused what the library refuses; bounded all the same
			return nil, fmt.Errorf("CDI annotations: %w", quote.Error(err))
		}
		slices.Sort(annotated) // map order: keep the result stable
		names = append(append([]string(nil), names...), annotated...)
	}
	seen := map[string]bool{}
	var resolved, refused, refusedKinds, unresolved []string
	for _, n := range names {
		if seen[n] {
			continue
		}
		seen[n] = true
		vendor, class, _ := parser.ParseDevice(n)
		if kind := vendor + "/" + class; !slices.Contains(r.kinds, kind) {
			refused = append(refused, n)
			if !slices.Contains(refusedKinds, kind) {
				refusedKinds = append(refusedKinds, kind)
			}
			continue
		}
		if r.devices[n] == nil {
			unresolved = append(unresolved, n)
			continue
		}
		resolved = append(resolved, n)
	}
	var errs []error
	if len(refused) > 0 {
		errs = append(errs, r.notAllowed(refused, refusedKinds))
	}
	if len(unresolved) > 0 {
		errs = append(errs, r.unresolvable(unresolved))
	}
	switch len(errs) {
	case 0:
		return r.inModel(resolved, user)
	case 1:
		return nil, errs[0]
	}
	return nil, fmt.Errorf("%w; %w", errs[0], errs[1])
}

// notAllowed says which names are of kinds not allowed, which kinds are, and the setting.
// The names come from the container: they are quoted, and bounded (internal/quote).
func (r *Resolver) notAllowed(names, kinds []string) error {
	kind := "kind"
	if len(kinds) > 1 {
		kind = "kinds"
	}
	allowed := "resolves no CDI devices (cdi.allowed-kinds is empty)"
	if len(r.kinds) > 0 {
		allowed = "resolves CDI devices of kinds " + strings.Join(r.kinds, ", ") + " only"
	}
	return fmt.Errorf("%w: %s (%s %s): gpu-runtime %s; to allow a kind, add it to cdi.allowed-kinds in the gpu-runtime config",
		ErrKindNotAllowed, quote.List(names), kind, quote.List(kinds), allowed)
}

// checkAnnotations refuses a cdi.k8s.io/ annotation whose value is not a comma-separated list
// of qualified CDI device names, as cdi.ParseAnnotations does, naming the first such
// annotation by key and the name, each quoted cut: the library's error quotes the name whole
// and names no key (a megabyte annotation made a megabyte message).
func checkAnnotations(annotations map[string]string) error {
	for _, k := range slices.Sorted(maps.Keys(annotations)) {
		if !strings.HasPrefix(k, cdi.AnnotationPrefix) {
			continue
		}
		for _, d := range strings.Split(annotations[k], ",") {
			if !parser.IsQualifiedName(d) {
				return fmt.Errorf("CDI annotation %s: %s is not a CDI device name (vendor.com/class=name)", quote.Value(k), quote.Value(d))
			}
		}
	}
	return nil
}

// unresolvable says which names did not resolve, what the specs offer, and which specs did
// not load.
func (r *Resolver) unresolvable(names []string) error {
	offer := "offer no devices"
	if all := r.Devices(); len(all) > 0 {
		offer = "offer " + quote.Join(all, 20)
	}
	msg := fmt.Sprintf("%s: the CDI specs in %s %s; generate a spec for this host with gpu-ctk cdi generate --output /etc/cdi/nvidia.yaml",
		quote.List(names), strings.Join(r.dirs, ", "), offer)
	if p := r.Problems(); len(p) > 0 {
		msg += "; specs that did not load: " + strings.Join(p, "; ")
	}
	return fmt.Errorf("%w %s", ErrUnresolvable, msg)
}

// inModel turns resolved CDI device names into gpu-runtime's model: each device's edits, each
// spec's common edits with the first of its devices (as the CDI library injects them: once),
// applied by the CDI library to an empty spec whose process runs as user (node numbers and
// owners filled in as the library fills them), every edit saying which spec or device brought
// it; and the nodes each device injects with its spec's common ones. Each spec's common
// edits are read once, however many of its devices are asked for.
func (r *Resolver) inModel(names []string, user specs.User) ([]plan.CDIDevice, error) {
	out := make([]plan.CDIDevice, len(names))
	commons := map[*cdi.Spec]edits.Edits{}
	for i, name := range names {
		dev := r.devices[name]
		s := dev.GetSpec()
		common, seen := commons[s]
		if !seen {
			var err error
			common, err = editsOf(s.ApplyEdits, fmt.Sprintf("CDI spec %s (kind %s): common edits", r.paths[s], s.GetVendor()+"/"+s.GetClass()), user)
			if err != nil {
				return nil, err
			}
			commons[s] = common
		}
		own, err := editsOf(dev.ApplyEdits, "CDI device "+name, user)
		if err != nil {
			return nil, err
		}
		out[i] = plan.CDIDevice{Name: name}
		for _, n := range append(own.DeviceNodes, common.DeviceNodes...) {
			out[i].Nodes = append(out[i].Nodes, n.Path)
		}
		if !seen {
			out[i].Edits.Add(common)
		}
		out[i].Edits.Add(own)
	}
	return out, nil
}

// ErrUnsupportedEdit: a CDI spec edits what gpu-runtime's model does not carry.
var ErrUnsupportedEdit = errors.New("CDI edit not supported by gpu-runtime")

// editsOf applies one set of CDI edits to an empty spec whose process runs as user and reads
// them back in gpu-runtime's model. Bind mounts are ID-mapped (a container with a user
// namespace gets its mappings on them, as the library gives them); a hook without an
// environment gets gpu-runtime's hooks' (plan.HookEnv): one without inherits the container's
// at createContainer (CVE-2025-23266). Network devices and Intel RDT are refused: no GPU's
// spec has them.
func editsOf(apply func(*specs.Spec) error, why string, user specs.User) (edits.Edits, error) {
	s := &specs.Spec{Process: &specs.Process{User: user}}
	if err := apply(s); err != nil {
		return edits.Edits{}, fmt.Errorf("%s: %w", why, err)
	}
	var e edits.Edits
	e.Env = s.Process.Env
	for _, g := range s.Process.User.AdditionalGids {
		if !slices.Contains(user.AdditionalGids, g) {
			e.AdditionalGIDs = append(e.AdditionalGIDs, g)
		}
	}
	if l := s.Linux; l != nil {
		if len(l.NetDevices) > 0 || l.IntelRdt != nil {
			return edits.Edits{}, fmt.Errorf("%w: %s: network devices or Intel RDT; use an engine with CDI of its own for this spec", ErrUnsupportedEdit, why)
		}
		for _, n := range l.Devices {
			e.DeviceNodes = append(e.DeviceNodes, edits.DeviceNode{Path: n.Path, Type: n.Type, Major: n.Major, Minor: n.Minor,
				FileMode: value(n.FileMode), UID: value(n.UID), GID: value(n.GID), Why: why, Access: access(l, n)})
		}
	}
	for _, m := range s.Mounts {
		typ := m.Type
		if typ == "bind" {
			typ = ""
		}
		e.Mounts = append(e.Mounts, edits.Mount{HostPath: m.Source, ContainerPath: m.Destination, Type: typ, Options: m.Options, IDMapped: typ == "", Why: why})
	}
	if s.Hooks != nil {
		for i, list := range oci.HookLists(s.Hooks) {
			for _, h := range *list {
				hook := edits.Hook{Stage: oci.Stages[i], Path: h.Path, Args: h.Args, Env: h.Env, Timeout: value(h.Timeout), Why: why}
				if len(hook.Env) == 0 {
					hook.Env = plan.HookEnv
				}
				e.Hooks = append(e.Hooks, hook)
			}
		}
	}
	return e, nil
}

// access is the access the cgroup rule the library added for node n allows, "" for "rwm".
func access(l *specs.Linux, n specs.LinuxDevice) string {
	if l.Resources == nil {
		return ""
	}
	for _, r := range l.Resources.Devices {
		if r.Type == n.Type && r.Major != nil && *r.Major == n.Major && r.Minor != nil && *r.Minor == n.Minor && r.Access != "rwm" {
			return r.Access
		}
	}
	return ""
}

// value is *p, or the zero value when p is nil (a field the spec leaves out).
func value[T any](p *T) T {
	var v T
	if p != nil {
		v = *p
	}
	return v
}
