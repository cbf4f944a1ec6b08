package request

import (
	"strings"

	"github.com/gpu-runtime/gpu-runtime/internal/quote"
)

// Feature is a DGX/HGX device set beside the GPUs that a GPU container enables by setting its
// variable to "enabled", as with NVIDIA's toolkit: GPUDirect Storage, MOFED's InfiniBand
// verbs, GDRCopy, NVSwitch.
type Feature string

// The features, named as NVIDIA's toolkit names their CDI kinds (nvidia.com/gds, …).
const (
	FeatureGDS      Feature = "gds"
	FeatureMOFED    Feature = "mofed"
	FeatureGDRCopy  Feature = "gdrcopy"
	FeatureNVSwitch Feature = "nvswitch"
)

// The variables that enable the features.
const (
	EnvGDS      = "NVIDIA_GDS"
	EnvMOFED    = "NVIDIA_MOFED"
	EnvGDRCopy  = "NVIDIA_GDRCOPY"
	EnvNVSwitch = "NVIDIA_NVSWITCH"
)

// FeatureEnabled is the one value of a feature variable that enables it.
const FeatureEnabled = "enabled"

// Features are every feature with its variable, in the order a plan adds them.
var Features = []struct {
	Feature Feature
	Env     string
}{{FeatureGDS, EnvGDS}, {FeatureMOFED, EnvMOFED}, {FeatureGDRCopy, EnvGDRCopy}, {FeatureNVSwitch, EnvNVSwitch}}

// EnvOf returns the variable that enables a feature.
func EnvOf(f Feature) string {
	for _, x := range Features {
		if x.Feature == f {
			return x.Env
		}
	}
	return ""
}

// parseFeatures reads the feature variables: "enabled" enables one; unset, empty and
// "disabled" leave it off; any other value leaves it off too (NVIDIA's toolkit ignores it, and
// images that set NVIDIA_GDRCOPY=1 run there), with a note saying what to write.
func parseFeatures(env Env) ([]Feature, []string) {
	var on []Feature
	var notes []string
	for _, f := range Features {
		v, set := env[f.Env]
		switch strings.TrimSpace(v) {
		case FeatureEnabled:
			on = append(on, f.Feature)
		case "", "disabled":
		default:
			if set {
				notes = append(notes, quote.Var(f.Env, v)+` is not "enabled": its devices are not injected (to have them, set `+f.Env+"=enabled)")
			}
		}
	}
	return on, notes
}
