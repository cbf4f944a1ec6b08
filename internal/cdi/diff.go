package cdi

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	specsgo "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpu-runtime/gpu-runtime/internal/quote"
)

// Diff says how spec got differs from want, one line per difference: kind, devices that
// appeared or went, and the edits that changed (the spec's common edits or a device's).
func Diff(got, want *specsgo.Spec) []string {
	var out []string
	if got.Kind != want.Kind {
		out = append(out, fmt.Sprintf("kind %s, this host's spec is %s", got.Kind, want.Kind))
	}
	out = append(out, editsDiff("common edits", got.ContainerEdits, want.ContainerEdits)...)
	gotDevices, wantDevices := map[string]specsgo.ContainerEdits{}, map[string]specsgo.ContainerEdits{}
	for _, d := range got.Devices {
		gotDevices[d.Name] = d.ContainerEdits
	}
	for _, d := range want.Devices {
		wantDevices[d.Name] = d.ContainerEdits
	}
	for _, name := range onlyIn(wantDevices, gotDevices) {
		out = append(out, fmt.Sprintf("device %s is missing (it exists on this host)", name))
	}
	for _, name := range slices.Sorted(maps.Keys(gotDevices)) {
		w, ok := wantDevices[name]
		if !ok {
			out = append(out, fmt.Sprintf("device %s no longer exists on this host", name))
			continue
		}
		out = append(out, editsDiff("device "+name, gotDevices[name], w)...)
	}
	return out
}

// editsDiff describes what is only in got (gone from the host) and only in want (new).
func editsDiff(what string, got, want specsgo.ContainerEdits) []string {
	g, w := editItems(got), editItems(want)
	var out []string
	if gone := onlyIn(g, w); len(gone) > 0 {
		out = append(out, fmt.Sprintf("%s: %s no longer on this host", what, quote.Join(gone, 5)))
	}
	if added := onlyIn(w, g); len(added) > 0 {
		out = append(out, fmt.Sprintf("%s: %s new on this host", what, quote.Join(added, 5)))
	}
	return out
}

// onlyIn lists, sorted, the keys of a that b lacks.
func onlyIn[V any](a, b map[string]V) []string {
	var out []string
	for k := range a {
		if _, ok := b[k]; !ok {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// editItems flattens edits into comparable one-line items.
func editItems(e specsgo.ContainerEdits) map[string]bool {
	items := map[string]bool{}
	for _, v := range e.Env {
		items["env "+v] = true
	}
	for _, n := range e.DeviceNodes {
		items[fmt.Sprintf("node %s (%s %d:%d)", n.Path, n.Type, n.Major, n.Minor)] = true
	}
	for _, m := range e.Mounts {
		items[fmt.Sprintf("mount %s from %s", m.ContainerPath, m.HostPath)] = true
	}
	for _, h := range e.Hooks {
		items[fmt.Sprintf("%s hook %s", h.HookName, strings.Join(append([]string{h.Path}, h.Args...), " "))] = true
	}
	return items
}
