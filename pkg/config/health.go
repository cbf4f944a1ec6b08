package config

import "slices"

// HealthConfig is the [health] table: which devices are kept from containers, and what
// gpu-ctk health watch records.
type HealthConfig struct {
	// File is the health file, written by gpu-ctk health and read on every GPU create; "" =
	// none (the driver's /proc signals still count).
	File string `toml:"file"`
	// All says what NVIDIA_VISIBLE_DEVICES=all does with an unhealthy device: HealthAllSkip
	// (leave it out, with a warning) or HealthAllFail (fail the create).
	All string `toml:"all"`
	// IgnoreXids are the Xids the watcher ignores: application errors, not the GPU's.
	IgnoreXids []int `toml:"ignore-xids"`
}

// The values of health.all.
const (
	HealthAllSkip = "skip"
	HealthAllFail = "fail"
)

// clean validates the [health] table.
func (h *HealthConfig) clean(bad func(key string, value any, want string)) {
	if h.All != HealthAllSkip && h.All != HealthAllFail {
		bad("health.all", h.All, `"skip" (leave unhealthy devices out of NVIDIA_VISIBLE_DEVICES=all) or "fail"`)
	}
	if slices.ContainsFunc(h.IgnoreXids, func(x int) bool { return x <= 0 }) {
		bad("health.ignore-xids", h.IgnoreXids, "Xid numbers (positive integers), such as [13, 31, 43, 45, 68, 109]")
	}
}
