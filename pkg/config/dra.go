package config

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"github.com/pelletier/go-toml/v2"

	"github.com/gpu-runtime/gpu-runtime/internal/quote"
)

// DRAConfig is the [dra] table: how gpu-kubelet-plugin, the DRA driver, shares GPUs between
// claims (Kubernetes' consumable capacity), each share served by an MPS control daemon of its
// own with the claim's consumed compute and memory as its server-side limits.
type DRAConfig struct {
	// SharedGPUs are the whole GPUs, by index or UUID, published as shareable
	// (allowMultipleAllocations) instead of whole; "all" (or ["all"]) means every whole GPU. A shared GPU
	// is never also published whole. MIG devices are never shareable (MPS on MIG is not
	// supported). The file may write "all" as the plain string, shared-gpus = "all".
	SharedGPUs GPUList `toml:"shared-gpus"`
	// ComputeDefault is the compute (percent of the GPU's SMs) a claim consumes that asks
	// for none; ComputeStep the granularity of what claims may ask (the published
	// requestPolicy: step..100 in steps of ComputeStep).
	ComputeDefault int `toml:"compute-default"`
	ComputeStep    int `toml:"compute-step"`
	// MemoryStep is the granularity of the memory a claim may ask, "1Gi" or "512Mi"; a claim
	// that asks for none consumes the whole GPU's memory.
	MemoryStep string `toml:"memory-step"`
	// MPSRoot holds <root>/<claim UID>/{pipe,client,log,shm}: the MPS control daemon of each
	// prepared shared claim.
	MPSRoot string `toml:"mps-root"`
}

// AllGPUs is the value of dra.shared-gpus (its only element) that shares every whole GPU.
const AllGPUs = "all"

// GPUList is dra.shared-gpus: an array of GPU indices or UUIDs, or the plain string "all"
// (decoded as ["all"]), as the issue and the docs write it.
type GPUList []string

// UnmarshalTOML decodes data, the raw TOML value of dra.shared-gpus: an array of strings, or
// the string "all". Any other value is an error naming the key and both forms.
func (l *GPUList) UnmarshalTOML(data []byte) error {
	var v struct {
		V any `toml:"v"`
	}
	if len(data) > 1<<20 {
		return fmt.Errorf("dra.shared-gpus is %d bytes long; want an array of GPU indices or UUIDs, or \"all\"", len(data))
	}
	if err := toml.Unmarshal(append([]byte("v = "), data...), &v); err != nil {
		return fmt.Errorf("dra.shared-gpus: %w", err)
	}
	const want = `an array of GPU indices or UUIDs, such as ["0", "GPU-8f3a…"], or "all"`
	switch x := v.V.(type) {
	case string:
		if x != AllGPUs {
			return fmt.Errorf("invalid dra.shared-gpus %q: want %s; one GPU is an array too: shared-gpus = [%q]", x, want, x)
		}
		*l = GPUList{AllGPUs}
		return nil
	case []any:
		out := make(GPUList, 0, len(x))
		for i, e := range x {
			s, ok := e.(string)
			if !ok {
				return fmt.Errorf("invalid dra.shared-gpus[%d]: %s; want a string, the GPU's index or UUID in quotes (\"0\")", i, quote.TOMLType(e))
			}
			out = append(out, s)
		}
		*l = out
		return nil
	default:
		return fmt.Errorf("dra.shared-gpus must be %s, not %s", want, quote.TOMLType(x))
	}
}

// Shared says whether the GPU with index and uuid is shareable by dra.shared-gpus.
func (d DRAConfig) Shared(index, uuid string) bool {
	for _, s := range d.SharedGPUs {
		if s == AllGPUs || s == index || strings.EqualFold(s, uuid) {
			return true
		}
	}
	return false
}

// memoryStepRE: a Kubernetes binary quantity of MiB or GiB.
var memoryStepRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^([1-9][0-9]{0,6})(Mi|Gi)$`) })

// MemoryStepBytes is dra.memory-step in bytes (validated by Load/Parse).
func (d DRAConfig) MemoryStepBytes() int64 {
	m := memoryStepRE().FindStringSubmatch(d.MemoryStep)
	if m == nil {
		return 0
	}
	n, _ := strconv.ParseInt(m[1], 10, 64)
	if m[2] == "Gi" {
		return n << 30
	}
	return n << 20
}

// clean validates the [dra] table.
func (d *DRAConfig) clean(bad func(key string, value any, want string)) {
	for i, s := range d.SharedGPUs {
		key := fmt.Sprintf("dra.shared-gpus[%d]", i)
		switch {
		case strings.Contains(s, ":") || strings.HasPrefix(strings.ToUpper(s), "MIG-"):
			bad(key, s, "a whole GPU, by index or UUID: MIG devices are never shareable (NVIDIA's driver refuses MPS on MIG); share the MIG device's GPU with MIG mode off, or give MIG devices whole (mig.gpu-runtime.dev)")
		case s == AllGPUs && len(d.SharedGPUs) > 1:
			bad(key, s, `"all" alone: dra.shared-gpus = "all"`)
		case s == "" || strings.ContainsAny(s, ", "):
			bad(key, s, `one GPU index or UUID, or "all"`)
		}
	}
	step := d.ComputeStep
	if step < 1 || step > 100 || 100%step != 0 {
		bad("dra.compute-step", strconv.Itoa(step), "a divisor of 100: 1, 2, 4, 5, 10, 20, 25, 50 or 100")
		step = 0
	}
	if c := d.ComputeDefault; c < 1 || c > 100 || step > 0 && c%step != 0 {
		want := "1 to 100"
		if step > 0 {
			want = fmt.Sprintf("a multiple of dra.compute-step (%d) from %d to 100", step, step)
		}
		bad("dra.compute-default", strconv.Itoa(c), want)
	}
	if d.MemoryStepBytes() == 0 {
		bad("dra.memory-step", d.MemoryStep, `a size in Mi or Gi, such as "1Gi" or "512Mi"`)
	}
}
