package cdi

import (
	"cmp"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"

	specsgo "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpu-runtime/gpu-runtime/internal/quote"
	"github.com/gpu-runtime/gpu-runtime/pkg/discover"
	"github.com/gpu-runtime/gpu-runtime/pkg/plan"
)

// CheckSpecs checks the specs of kind (vendor/class) in the resolver's directories against
// the host's GPUs, whoever wrote them (gpu-ctk, nvidia-ctk, a device plugin): every host path they name
// still exists (a driver upgrade renames the libraries), each device of the host is named by
// its index or UUID, and no name but "all" is for a device the host no longer has (a MIG
// reconfiguration replaces MIG devices and their UUIDs). It returns the kind's spec files, in
// the order the CDI library reads them, and the problems, one each, of those that no longer
// describe the host.
func (r *Resolver) CheckSpecs(kind string, gpus []discover.GPU) (files, problems []string) {
	vendor, class, _ := strings.Cut(kind, "/")
	devices := plan.Devices(gpus)
	known := map[string]bool{AllDevice: true}
	for _, d := range devices {
		known[d.Index], known[d.UUID] = true, true
	}
	for _, s := range r.specs {
		if s.GetVendor() != vendor || s.GetClass() != class {
			continue
		}
		path := r.paths[s]
		files = append(files, path)
		named := map[string]bool{}
		missing := map[string]bool{}
		checkPath := func(p string) {
			if _, err := os.Stat(p); p != "" && err != nil {
				missing[p] = true
			}
		}
		checkEdits := func(e specsgo.ContainerEdits) {
			for _, n := range e.DeviceNodes {
				if n.Major == 0 { // a node with numbers is made from them; a missing host node is the device check's to report
					checkPath(cmp.Or(n.HostPath, n.Path))
				}
			}
			for _, m := range e.Mounts {
				checkPath(m.HostPath)
			}
			for _, h := range e.Hooks {
				checkPath(h.Path)
			}
		}
		checkEdits(s.ContainerEdits)
		for _, d := range s.Devices {
			named[d.Name] = true
			checkEdits(d.ContainerEdits)
			if !known[d.Name] {
				problems = append(problems, fmt.Sprintf("%s: device %s: this host has no such device now (a MIG reconfiguration, a GPU removed, or a GPU put in MIG mode)", path, d.Name))
			}
		}
		for _, d := range devices {
			if !named[d.Index] && !named[d.UUID] {
				problems = append(problems, fmt.Sprintf("%s: no device for %s", path, d))
			}
		}
		if len(missing) > 0 {
			problems = append(problems, fmt.Sprintf("%s: names host files that no longer exist (a driver upgrade?): %s", path, quote.Join(slices.Sorted(maps.Keys(missing)), 3)))
		}
	}
	return files, problems
}
