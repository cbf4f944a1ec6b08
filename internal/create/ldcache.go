package create

import (
	"errors"
	"fmt"
	"strings"
	"time"

	securejoin "github.com/cyphar/filepath-securejoin"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/sirupsen/logrus"

	"github.com/gpu-runtime/gpu-runtime/internal/confined"
	"github.com/gpu-runtime/gpu-runtime/internal/ldupdate"
	"github.com/gpu-runtime/gpu-runtime/internal/quote"
	"github.com/gpu-runtime/gpu-runtime/pkg/oci"
	"github.com/gpu-runtime/gpu-runtime/pkg/plan"
)

// The loader cache at create. The plan updates the container's loader cache with a
// createContainer hook (gpu-hook update-ldcache), after the mounts. Its in-process update
// reads only the image's files and the injected libraries', all there before runc starts:
// gpu-runtime can do it at create and leave the hook out — a process start (about 5 ms) less
// per GPU container. It does so only where it sees what the hook would see:
//   - no user namespace: the hook writes as the container's root, gpu-runtime as the host's;
//   - no mount but the injected ones at, above or below a path the update reads or writes
//     (ldupdate.LoaderPaths): the hook sees those mounts, gpu-runtime, before them, would not;
//   - an update the hook would do in-process: where it would run ldconfig, the hook stays
//     and does it all (what was done at create is what it does first anyway).
// Everything else — an error included — leaves the hook in the spec, to do or report it; the
// debug log says why. The update is bounded as the hook's is (confined.DefaultLimits), with
// its own deadline (createDeadline): an image that reaches a limit costs the create at most
// that, then the hook reports it.

// createDeadline bounds the loader-cache update at create: the realistic image's takes about
// a millisecond.
const createDeadline = time.Second

// UpdateLoaderCache does the plan's loader-cache update at create where that gives what the
// hook would (the plan's LoaderCache is then Done: no hook); LoaderCacheWhy and the debug log
// say which, and why. dry (gpu-ctk explain) decides the same without writing anything.
func (in *Injection) UpdateLoaderCache(opts Options, dry bool, log logrus.FieldLogger) {
	if len(in.Plan.LoaderCache.Libraries) == 0 {
		return
	}
	done, why := in.ldcacheAtCreate(opts, dry, log)
	in.Plan.LoaderCache.Done = done
	if done {
		in.LoaderCacheWhy = "loader cache: " + why + "; no " + plan.LDCacheSubcommand + " hook"
	} else {
		in.LoaderCacheWhy = "loader cache: left to the " + plan.LDCacheSubcommand + " hook: " + why
	}
	log.Debug(in.LoaderCacheWhy)
}

// ldcacheAtCreate does the update of the plan's LoaderCache, and says what it did; false and
// why not where the hook must do it.
func (in *Injection) ldcacheAtCreate(opts Options, dry bool, log logrus.FieldLogger) (bool, string) {
	spec := in.File.Spec
	if !opts.Config.Hook.LDCacheAtCreate {
		return false, "hook.ldcache-at-create is false"
	}
	if oci.HasUserNamespace(spec.Linux) {
		return false, "the container has a user namespace (files the hook writes are its root's)"
	}
	root, err := in.rootPath()
	if err != nil {
		return false, err.Error()
	}
	r, err := confined.Open(root, confined.DefaultLimits(createDeadline))
	if err != nil {
		return false, err.Error()
	}
	defer r.Close()
	if dry {
		r.DryRun()
	}
	r.ReadAs(confined.UserOf(spec.Process, spec.Linux))
	lc := in.Plan.LoaderCache
	uo := ldupdate.Options{LDConfig: in.Render.LDConfig, DriverVersion: lc.DriverVersion}
	for _, lib := range lc.Libraries {
		uo.Libraries = append(uo.Libraries, ldupdate.Library{Path: lib.Path, Source: lib.Source})
	}
	loader, err := ldupdate.LoaderPaths(r, uo.Libraries)
	if err != nil {
		return false, err.Error()
	}
	// The plan's mounts are not what the hook would see besides.
	if why := shadowsLoader(root, foreign(spec.Mounts, in.Plan.Edits.Mounts), loader); why != "" {
		return false, why
	}
	res, err := ldupdate.Update(r, uo)
	for _, w := range res.Warnings {
		log.Warn("loader cache: " + w)
	}
	switch {
	case errors.Is(err, confined.ErrBudget):
		return false, err.Error() + " (the hook reports it)"
	case err != nil:
		return false, err.Error()
	case res.Method == ldupdate.MethodLDConfig:
		return false, "ldconfig must run: " + res.Reason
	case res.Method == ldupdate.MethodSkipped:
		return true, "none written because " + res.Reason
	}
	return true, fmt.Sprintf("written at create, in-process (%d libraries)", len(lc.Libraries))
}

// shadowsLoader says which of mounts (their destinations resolved in root as runc resolves
// them) is at, above or below one of the loader paths, "" when none is.
func shadowsLoader(root string, mounts []specs.Mount, loader []string) string {
	type resolved struct{ path, host string }
	var paths []resolved
	for _, p := range loader {
		h, err := securejoin.SecureJoin(root, p)
		if err != nil {
			return fmt.Sprintf("%s cannot be resolved in the container root: %v", quote.Value(p), quote.Error(err))
		}
		paths = append(paths, resolved{p, h})
	}
	for _, m := range mounts {
		d, err := securejoin.SecureJoin(root, m.Destination)
		if err != nil {
			return fmt.Sprintf("mount destination %s cannot be resolved in the container root: %v", quote.Value(m.Destination), quote.Error(err))
		}
		for _, p := range paths {
			if d == p.host || within(p.host, d) || within(d, p.host) {
				return fmt.Sprintf("something is mounted at %s, and the update reads or writes %s: the hook sees the mount", quote.Value(m.Destination), quote.Value(p.path))
			}
		}
	}
	return ""
}

// within says whether p is below dir.
func within(p, dir string) bool {
	return strings.HasPrefix(p, strings.TrimSuffix(dir, "/")+"/")
}
