// Package hook is gpu-hook: what must still run in the low-level runtime's lifecycle, after
// its mounts, where gpu-runtime could not do it at create: update-ldcache (internal/ldupdate,
// or where that cannot be done in-process, the host's static ldconfig in a sandbox that sees
// only the container root's own mount) and proc-caps (the MIG capabilities of a driver's
// /proc interface). Everything under the container's root is the image's: it is reached only
// through internal/confined.
package hook

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gpu-runtime/gpu-runtime/internal/confined"
	"github.com/gpu-runtime/gpu-runtime/pkg/oci"
)

// ErrState marks unusable hook input.
var ErrState = errors.New("bad hook input")

// MaxState bounds the container state read from stdin. It carries the spec's annotations,
// which engines bound loosely (a Kubernetes pod may hold 256 KiB, a runc spec more): the limit
// is far above any real state and only stops a runaway writer.
const MaxState = 64 << 20

// ContainerRoot reads the OCI state from r, a hook's stdin, and returns the container's root
// filesystem path from <bundle>/config.json, and the user its image files are read as (nil
// with a user namespace, where the hook already acts as the container's root).
func ContainerRoot(r io.Reader) (string, *confined.Cred, error) {
	data, err := io.ReadAll(io.LimitReader(r, MaxState+1))
	if err != nil {
		return "", nil, fmt.Errorf("%w: read container state from stdin: %w", ErrState, err)
	}
	if len(data) > MaxState {
		return "", nil, fmt.Errorf("%w: container state on stdin is larger than %d MiB", ErrState, MaxState>>20)
	}
	var state struct {
		Bundle string `json:"bundle"`
	}
	if err := json.Unmarshal(data, &state); err != nil {
		if len(bytes.TrimSpace(data)) == 0 {
			err = io.EOF
		}
		return "", nil, fmt.Errorf("%w: decode container state from stdin: %w", ErrState, err)
	}
	if state.Bundle == "" || !filepath.IsAbs(state.Bundle) {
		return "", nil, fmt.Errorf("%w: container state has bundle %q, want an absolute path", ErrState, state.Bundle)
	}
	bundle := filepath.Clean(state.Bundle)
	data, err = os.ReadFile(oci.ConfigPath(bundle))
	if err != nil {
		return "", nil, fmt.Errorf("read spec of bundle %s: %w", bundle, err)
	}
	var spec struct { // only the members the hook needs
		Root    *specs.Root    `json:"root"`
		Process *specs.Process `json:"process"`
		Linux   *specs.Linux   `json:"linux"`
	}
	if err := json.Unmarshal(data, &spec); err != nil {
		return "", nil, fmt.Errorf("decode spec of bundle %s: %w", bundle, err)
	}
	if spec.Root == nil || spec.Root.Path == "" {
		return "", nil, fmt.Errorf("%w: spec of bundle %s has no root.path", ErrState, bundle)
	}
	root := spec.Root.Path
	if !filepath.IsAbs(root) {
		root = filepath.Join(bundle, root)
	}
	return filepath.Clean(root), confined.UserOf(spec.Process, spec.Linux), nil
}
