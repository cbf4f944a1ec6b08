package dra

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpu-runtime/gpu-runtime/internal/atomicfile"
	"github.com/gpu-runtime/gpu-runtime/internal/trustedfile"
	"github.com/gpu-runtime/gpu-runtime/pkg/capabilities"
)

// ConfigAPIVersion and ConfigKind may name the opaque configuration of a claim, as
// Kubernetes objects are named; both are optional.
const (
	ConfigAPIVersion = DriverName + "/v1alpha1"
	ConfigKind       = "GPUConfig"
)

// claimConfig is the opaque configuration a claim (or its DeviceClass) gives this driver.
type claimConfig struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	// Capabilities are the driver capabilities whose files the container gets, as
	// NVIDIA_DRIVER_CAPABILITIES writes them: "utility,compute" by default.
	Capabilities *string `json:"capabilities"`
}

// maxConfigSize bounds an opaque configuration (the API server allows 10 KiB).
const maxConfigSize = 64 << 10

// ErrConfig marks a claim whose opaque configuration this driver cannot use.
var ErrConfig = errors.New("invalid opaque configuration")

// capabilitiesOf returns the driver capabilities of a claim's devices of this driver: those
// the opaque configurations for the claim's requests set (the DeviceClass's first, the
// claim's after, the last one winning per request), the union over its requests; by default
// utility,compute. A configuration with an unknown key or capability fails, naming it.
func capabilitiesOf(what string, alloc *resourceapi.DeviceAllocationResult, requests []string) (capabilities.Set, error) {
	perRequest := map[string]capabilities.Set{}
	var errs []error
	for _, src := range []resourceapi.AllocationConfigSource{resourceapi.AllocationConfigSourceClass, resourceapi.AllocationConfigSourceClaim} {
		for _, c := range alloc.Config {
			if c.Source != src || c.Opaque == nil || c.Opaque.Driver != DriverName {
				continue
			}
			from := "the claim"
			if src == resourceapi.AllocationConfigSourceClass {
				from = "its DeviceClass"
			}
			where := fmt.Sprintf("%s: opaque configuration of driver %s (from %s", what, DriverName, from)
			if len(c.Requests) > 0 {
				where += ", for requests " + strings.Join(c.Requests, ", ")
			}
			where += ")"
			caps, err := decodeConfig(where, c.Opaque.Parameters.Raw)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			for _, r := range requests {
				if caps != nil && (len(c.Requests) == 0 || slices.Contains(c.Requests, r) || slices.Contains(c.Requests, parentRequest(r))) {
					perRequest[r] = caps
				}
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	out := capabilities.Set{}
	for _, r := range requests {
		caps := perRequest[r]
		if caps == nil {
			caps = capabilities.Default()
		}
		for c := range caps {
			out[c] = true
		}
	}
	return out, nil
}

// parentRequest is the request of a subrequest ("gpu/large": "gpu").
func parentRequest(r string) string {
	parent, _, _ := strings.Cut(r, "/")
	return parent
}

// decodeConfig reads one opaque configuration strictly: an unknown key, a wrong type or an
// unknown capability is an error naming it; nil capabilities when it sets none.
func decodeConfig(where string, raw []byte) (capabilities.Set, error) {
	if len(raw) > maxConfigSize {
		return nil, fmt.Errorf("%w: %s is %d bytes, more than %d", ErrConfig, where, len(raw), maxConfigSize)
	}
	var c claimConfig
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		var typeErr *json.UnmarshalTypeError
		msg := err.Error()
		switch {
		case strings.HasPrefix(msg, "json: unknown field "):
			return nil, fmt.Errorf("%w: %s: unknown key %s: the keys are capabilities (and apiVersion %s, kind %s)",
				ErrConfig, where, strings.TrimPrefix(msg, "json: unknown field "), ConfigAPIVersion, ConfigKind)
		case errors.As(err, &typeErr):
			return nil, fmt.Errorf("%w: %s: key %q must be a string, such as \"utility,compute\"", ErrConfig, where, typeErr.Field)
		}
		return nil, fmt.Errorf("%w: %s: not a JSON object: %s", ErrConfig, where, msg)
	}
	if dec.More() {
		return nil, fmt.Errorf("%w: %s: more than one JSON object", ErrConfig, where)
	}
	if c.APIVersion != "" && c.APIVersion != ConfigAPIVersion {
		return nil, fmt.Errorf("%w: %s: apiVersion %q: want %s", ErrConfig, where, c.APIVersion, ConfigAPIVersion)
	}
	if c.Kind != "" && c.Kind != ConfigKind {
		return nil, fmt.Errorf("%w: %s: kind %q: want %s", ErrConfig, where, c.Kind, ConfigKind)
	}
	if c.Capabilities == nil {
		return nil, nil
	}
	var unknown []string
	for _, tok := range strings.Split(*c.Capabilities, ",") {
		tok = strings.TrimSpace(tok)
		if tok != "" && tok != "all" && !slices.Contains(capabilities.All, capabilities.Capability(tok)) {
			unknown = append(unknown, fmt.Sprintf("%q", tok))
		}
	}
	if len(unknown) > 0 {
		names := []string{"all"}
		for _, c := range capabilities.All {
			names = append(names, string(c))
		}
		return nil, fmt.Errorf("%w: %s: unknown capability %s in capabilities %q: the capabilities are %s",
			ErrConfig, where, strings.Join(unknown, ", "), *c.Capabilities, strings.Join(names, ", "))
	}
	return capabilities.Parse(*c.Capabilities)
}

// checkpoint is what the plugin keeps in its state directory: every claim it prepared, so
// that a plugin restarted (or a new one in a rolling update) unprepares it.
type checkpoint struct {
	Version int                         `json:"version"`
	Claims  map[types.UID]preparedClaim `json:"claims"`
}

// checkpointVersion changes with checkpoint's format.
const checkpointVersion = 1

// preparedClaim is a claim the plugin prepared: what it answered, and its CDI spec file.
type preparedClaim struct {
	Namespace string           `json:"namespace"`
	Name      string           `json:"name"`
	CDIFile   string           `json:"cdiFile"` // base name, in the CDI directory
	Devices   []preparedDevice `json:"devices"`
	// Share is the claim's MPS share when it was allocated a shared GPU.
	Share *sharedShare `json:"share,omitempty"`
}

type preparedDevice struct {
	Requests     []string `json:"requests"`
	Pool         string   `json:"pool"`
	Device       string   `json:"device"`
	UUID         string   `json:"uuid"`
	CDIDeviceIDs []string `json:"cdiDeviceIDs"`
}

// CheckpointFile is the checkpoint's name in the state directory.
const CheckpointFile = "checkpoint.json"

// checkpointRule is what the checkpoint must be to be read: the plugin's own (root's), 0600,
// at most 16 MiB (a claim's entry is a few hundred bytes).
var checkpointRule = trustedfile.Rule{What: "DRA checkpoint", Mode: 0o600, Max: 16 << 20}

// loadCheckpoint reads the checkpoint; a missing one is empty.
func loadCheckpoint(dir string) (checkpoint, error) {
	cp := checkpoint{Version: checkpointVersion, Claims: map[types.UID]preparedClaim{}}
	p := filepath.Join(dir, CheckpointFile)
	data, err := trustedfile.Read(p, checkpointRule)
	if errors.Is(err, fs.ErrNotExist) {
		return cp, nil
	}
	if err != nil {
		return cp, err
	}
	var got checkpoint
	if err := json.Unmarshal(data, &got); err != nil {
		return cp, fmt.Errorf("read %s: %w: move it away to start without prepared claims (their pods then need restarting)", p, err)
	}
	if got.Version != checkpointVersion {
		return cp, fmt.Errorf("read %s: version %d, this plugin writes %d: move it away to start without prepared claims", p, got.Version, checkpointVersion)
	}
	if got.Claims != nil {
		cp.Claims = got.Claims
	}
	return cp, nil
}

// save writes the checkpoint atomically (synced before it is renamed into place).
func (cp checkpoint) save(dir string) error {
	data, err := json.MarshalIndent(cp, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.Write(filepath.Join(dir, CheckpointFile), append(data, '\n'), 0o600, atomicfile.Options{})
}

// cdiFilePrefix starts the name of every CDI spec file the plugin writes; the claim's UID
// follows.
const cdiFilePrefix = DriverName + "-claim-"

// cdiFileName is the CDI spec file of a claim.
func cdiFileName(uid types.UID) string { return cdiFilePrefix + string(uid) + ".json" }

// removeFile removes p; a file already gone is not an error.
func removeFile(p string) error {
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}
