package edits

// DeviceMountOptions are the options of a device node's bind mount (NodesAsMounts): never
// nodev, which would make the node useless; nosuid and noexec, as runc gives /dev.
var DeviceMountOptions = []string{"bind", "nosuid", "noexec"}

// NodesAsMounts returns e with its device nodes turned into bind mounts of the host's nodes
// (their HostPath; a CDI node without one is the host's node at its container path) and no
// device entries, so no cgroup rules: for a low-level runtime that can neither create a
// device node nor write a device cgroup (rootless, in a user namespace). why says why, and
// joins each node's own reason. A node's Access (a CDI spec's "r", say) cannot be kept: the
// node's file mode on the host decides. The other edits are e's.
func (e Edits) NodesAsMounts(why string) Edits {
	out := e
	out.DeviceNodes = nil
	out.Mounts = nil
	for _, n := range e.DeviceNodes {
		host := n.HostPath
		if host == "" {
			host = n.Path
		}
		reason := why
		if n.Why != "" {
			reason = n.Why + "; " + why
		}
		out.Mounts = append(out.Mounts, Mount{HostPath: host, ContainerPath: n.Path, Type: "bind",
			Options: append([]string(nil), DeviceMountOptions...), Why: reason})
	}
	// A mount of e at a node's path would be replaced by the node's (Add keeps the first).
	out.Add(Edits{Mounts: e.Mounts})
	return out
}
