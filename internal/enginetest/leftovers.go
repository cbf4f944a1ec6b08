package enginetest

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// HostPath is a host path an engine creates whatever its private directories are.
type HostPath struct {
	Path string
	Tree bool // remove with its content; else only an empty directory (or a file)
}

// HostLeftovers are the HostPaths that did not exist when a suite started, to be removed when it
// ends: trees only where nothing else can have put anything, directories only when empty.
type HostLeftovers []HostPath

// RecordLeftovers returns those of paths (children before parents) absent now, and lists them
// in file, so that a later run can remove them when this one is killed (ReadLeftovers).
func RecordLeftovers(paths []HostPath, file string) HostLeftovers {
	var absent HostLeftovers
	var list strings.Builder
	for _, p := range paths {
		if _, err := os.Lstat(p.Path); errors.Is(err, fs.ErrNotExist) {
			absent = append(absent, p)
			fmt.Fprintf(&list, "%t %s\n", p.Tree, p.Path)
		}
	}
	_ = os.WriteFile(file, []byte(list.String()), 0o644)
	return absent
}

// ReadLeftovers reads the list RecordLeftovers wrote in file; it keeps only paths of known.
func ReadLeftovers(file string, known []HostPath) HostLeftovers {
	data, _ := os.ReadFile(file)
	isKnown := map[string]bool{}
	for _, p := range known {
		isKnown[p.Path] = true
	}
	var l HostLeftovers
	for _, line := range strings.Split(string(data), "\n") {
		tree, path, ok := strings.Cut(line, " ")
		if ok && isKnown[path] {
			l = append(l, HostPath{Path: path, Tree: tree == "true"})
		}
	}
	return l
}

// Remove removes the leftovers, in their order.
func (l HostLeftovers) Remove() {
	for _, p := range l {
		if p.Tree {
			_ = os.RemoveAll(p.Path)
		} else {
			_ = os.Remove(p.Path) // fails on a directory another user has put something in
		}
	}
}

// DockerdHostPaths are the host paths a private dockerd 20.10 and its own containerd create
// whatever their private directories are, children before parents.
func DockerdHostPaths() []HostPath {
	return []HostPath{
		{Path: "/run/containerd/s"}, // containerd shims' sockets, wherever the state dir is
		{Path: "/run/containerd"},
		{Path: "/opt/containerd/bin"}, // the opt plugin of dockerd's own containerd
		{Path: "/opt/containerd/lib"},
		{Path: "/opt/containerd"},
		{Path: "/run/docker/plugins"}, // dockerd's plugin socket directory
		{Path: "/run/docker"},
		{Path: "/etc/docker"}, // key.json, unless daemon.json's deprecated-key-path puts it elsewhere
	}
}

// ShimSockets returns the sockets the shims of a containerd (1.6 or 2.x) with grpc address
// and state directory listen on: /run/containerd/s/<sha256 of address/namespace/id>, whatever
// the state directory, one per task under state/io.containerd.runtime.v2.task/<namespace>/.
// A shim removes its socket when it exits; one killed (a suite killed by -timeout) leaves it.
func ShimSockets(address, state string) []string {
	var out []string
	tasks, _ := filepath.Glob(filepath.Join(state, "io.containerd.runtime.v2.task", "*", "*"))
	for _, task := range tasks {
		ns, id := filepath.Base(filepath.Dir(task)), filepath.Base(task)
		sum := sha256.Sum256([]byte(filepath.Join(address, ns, id)))
		out = append(out, filepath.Join("/run/containerd/s", hex.EncodeToString(sum[:])))
	}
	return out
}
