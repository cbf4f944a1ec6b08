package plan

import (
	"cmp"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/gpu-runtime/gpu-runtime/pkg/discover"
	"github.com/gpu-runtime/gpu-runtime/pkg/edits"
	"github.com/gpu-runtime/gpu-runtime/pkg/request"
)

// feature describes the device nodes of a DGX/HGX feature (request.Feature): which host nodes
// are its, in the user's words, and what to do when the host has none.
type feature struct {
	name  string         // what it is, for reasons and messages
	nodes string         // the nodes, as the user would look for them
	match *regexp.Regexp // the container paths of its nodes
	hint  string         // how a host gets the nodes
}

var features = map[request.Feature]feature{
	request.FeatureGDS: {name: "GPUDirect Storage", nodes: "/dev/nvidia-fs*",
		match: regexp.MustCompile(`^/dev/nvidia-fs[0-9]+$`),
		hint:  "load the nvidia-fs module (modprobe nvidia-fs) from NVIDIA's GDS packages"},
	request.FeatureMOFED: {name: "MOFED (InfiniBand verbs and RDMA CM)", nodes: discover.UVerbsPrefix + "* and " + discover.RDMACMNode,
		match: regexp.MustCompile(`^(` + regexp.QuoteMeta(discover.UVerbsPrefix) + `[0-9]+|` + regexp.QuoteMeta(discover.RDMACMNode) + `)$`),
		hint:  "install the InfiniBand stack (MLNX_OFED or DOCA OFED) and load ib_uverbs and rdma_ucm"},
	request.FeatureGDRCopy: {name: "GDRCopy", nodes: discover.GDRCopyNode,
		match: regexp.MustCompile(`^` + regexp.QuoteMeta(discover.GDRCopyNode) + `$`),
		hint:  "load the gdrdrv module (gdrcopy's gdrdrv-dkms package)"},
	request.FeatureNVSwitch: {name: "NVSwitch", nodes: "/dev/nvidia-nvswitch*",
		match: regexp.MustCompile(`^/dev/nvidia-nvswitch([0-9]+|ctl)$`),
		hint:  "this host has no NVSwitch driver nodes: NVSwitch systems (HGX, DGX) create them when the driver loads"},
}

// FeatureNodes returns the device-node edits of a DGX/HGX feature on host, by path, each with
// why: every host node that is the feature's. A feature with no node on the host has none
// (NVIDIA's toolkit skips it too); a path of the feature's that is not a character device is
// an error.
func FeatureNodes(f request.Feature, host Host, why string) ([]edits.DeviceNode, error) {
	ft, ok := features[f]
	if !ok {
		return nil, fmt.Errorf("unknown feature %q", f)
	}
	var out []edits.DeviceNode
	for p, n := range host.Devices.Nodes {
		if ft.match.MatchString(p) {
			out = append(out, nodeEdit(n, why))
		}
	}
	var errs []error
	for p, err := range host.Devices.Invalid {
		if ft.match.MatchString(p) {
			errs = append(errs, fmt.Errorf("%w: %s: %w", ErrMissingNode, request.EnvOf(f)+"="+request.FeatureEnabled, err))
		}
	}
	slices.SortFunc(out, func(a, b edits.DeviceNode) int { return naturalCompare(a.Path, b.Path) })
	slices.SortFunc(errs, func(a, b error) int { return strings.Compare(a.Error(), b.Error()) })
	return out, errors.Join(errs...)
}

// FeatureMissing says that a host has none of a feature's nodes, what follows (outcome), and
// how the host gets them.
func FeatureMissing(f request.Feature, devRoot, outcome string) string {
	ft := features[f]
	return fmt.Sprintf("no %s node (%s) under device root %q, %s: %s", ft.name, ft.nodes, devRoot, outcome, ft.hint)
}

// addFeatures adds the nodes of the features a GPU container enabled, each with its cgroup
// rule (edits.Apply); a feature the host lacks is a warning, as is a feature variable set to
// something other than "enabled".
func (p *Plan) addFeatures(req request.Request, host Host) error {
	p.Warnings = append(p.Warnings, req.FeatureNotes...)
	var errs []error
	for _, f := range req.Features {
		nodes, err := FeatureNodes(f, host, fmt.Sprintf("%s=%s: %s", request.EnvOf(f), request.FeatureEnabled, features[f].name))
		errs = append(errs, err)
		if len(nodes) == 0 && err == nil {
			p.Warnings = append(p.Warnings, request.EnvOf(f)+"="+request.FeatureEnabled+": "+FeatureMissing(f, host.Devices.Root, "nothing injected for it"))
		}
		p.Edits.Add(edits.Edits{DeviceNodes: nodes})
	}
	return errors.Join(errs...)
}

// naturalCompare orders paths with their trailing numbers as numbers: nvidia-fs2 before
// nvidia-fs10.
func naturalCompare(a, b string) int {
	ta, na := splitNumber(a)
	tb, nb := splitNumber(b)
	return cmp.Or(strings.Compare(ta, tb), cmp.Compare(len(na), len(nb)), strings.Compare(na, nb))
}

// splitNumber splits a path's trailing decimal digits off.
func splitNumber(s string) (string, string) {
	i := len(s)
	for i > 0 && s[i-1] >= '0' && s[i-1] <= '9' {
		i--
	}
	return s[:i], s[i:]
}
