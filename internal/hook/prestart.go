package hook

import (
	"fmt"
	"strconv"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gpu-runtime/gpu-runtime/pkg/request"
	"github.com/gpu-runtime/gpu-runtime/pkg/requirements"
)

// ParseGPU reads a --gpu value "INDEX,ARCH,BRAND" (e.g. "1,9.0,nvidia"; a MIG device's
// index is "0:1", its arch and brand its parent's).
func ParseGPU(v string) (requirements.GPU, error) {
	parts := strings.Split(v, ",")
	if len(parts) != 3 {
		return requirements.GPU{}, fmt.Errorf("--gpu %q: want INDEX,ARCH,BRAND", v)
	}
	if !deviceIndex(parts[0]) {
		return requirements.GPU{}, fmt.Errorf("--gpu %q: bad index %q", v, parts[0])
	}
	return requirements.GPU{ID: parts[0], Arch: parts[1], Brand: strings.ToLower(parts[2])}, nil
}

// deviceIndex reports whether s is a GPU index ("1") or a MIG device index ("0:1").
func deviceIndex(s string) bool {
	parts := strings.Split(s, ":")
	if len(parts) > 2 {
		return false
	}
	for _, p := range parts {
		if n, err := strconv.Atoi(p); err != nil || n < 0 || strconv.Itoa(n) != p {
			return false
		}
	}
	return true
}

// CheckRequirements is the prestart check: it reads the container's NVIDIA_REQUIRE_*
// (and legacy CUDA_VERSION) from <bundle>/config.json and evaluates them against the host
// facts the runtime passed. The error text starts with "unsatisfied condition: " when
// the driver is too old. Warnings (unknown keys) are returned for the caller to print.
func CheckRequirements(bundle string, host requirements.Host) ([]string, error) {
	var spec struct {
		Process *specs.Process `json:"process"`
	}
	if err := readBundleSpec(bundle, &spec); err != nil {
		return nil, err
	}
	if spec.Process == nil {
		return nil, nil
	}
	reqs, disabled := request.Requirements(spec.Process.Env)
	if disabled || len(reqs) == 0 {
		return nil, nil
	}
	list := make([]requirements.Requirement, len(reqs))
	for i, r := range reqs {
		list[i] = requirements.Requirement(r)
	}
	return requirements.Check(list, host)
}
