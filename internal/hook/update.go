package hook

import (
	"time"

	"github.com/gpu-runtime/gpu-runtime/internal/confined"
	"github.com/gpu-runtime/gpu-runtime/internal/ldupdate"
)

// LDCacheOptions are the arguments of `gpu-hook update-ldcache`.
type LDCacheOptions struct {
	ldupdate.Options
	// Deadline bounds the whole update, ldconfig included: the hook's timeout less a margin.
	Deadline time.Duration
	// User, when not nil, is the container's user (no user namespace): the image's files are
	// read with its credentials, so that what it could not read is not read for it either.
	User *confined.Cred
}

// DefaultDeadline bounds the update when no deadline is given.
const DefaultDeadline = 25 * time.Second

// LDCacheResult says what UpdateLDCache did.
type LDCacheResult struct {
	ldupdate.Result
	// LDConfigOutput is what ldconfig printed, when it ran: it names the image's paths and
	// quotes its configuration, so it goes to the runtime's log, never into a message.
	LDConfigOutput string
}

// UpdateLDCache makes the injected libraries loadable inside the container root, after the
// low-level runtime's mounts: in-process where it can, otherwise with the host's ldconfig in
// a sandbox, within one budget on one handle of the root; the result says which and why.
func UpdateLDCache(root string, opts LDCacheOptions) (LDCacheResult, error) {
	deadline := opts.Deadline
	if deadline <= 0 {
		deadline = DefaultDeadline
	}
	r, err := confined.Open(root, confined.DefaultLimits(deadline))
	if err != nil {
		return LDCacheResult{}, err
	}
	defer r.Close()
	r.ReadAs(opts.User)
	res, err := ldupdate.Update(r, opts.Options)
	out := LDCacheResult{Result: res}
	if err == nil && res.Method == ldupdate.MethodLDConfig {
		var warnings []string
		out.LDConfigOutput, warnings, err = runLDConfig(r, opts.LDConfig, res.LDConfig, deadline)
		out.Warnings = append(out.Warnings, warnings...)
	}
	return out, err
}
