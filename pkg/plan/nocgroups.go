package plan

// noCgroups turns the plan's device nodes, native and CDI alike, into bind mounts of the
// host's nodes where host.NoCgroups says the low-level runtime can neither mknod them nor
// allow them in a device cgroup: rootless, in a user namespace, runc and crun cannot create
// a device node, and neither can write the device cgroup (runc skips its device rules there;
// on cgroup v2 it refuses rules it cannot load unless every rule allows rwm, which a CDI
// node's Access may not). Without a cgroup rule the node's host file mode is what limits
// access. runc would bind-mount a device entry itself in a user namespace, but from the
// host's node at the container path, not from the device root.
func (p *Plan) noCgroups(host Host) {
	if host.NoCgroups == "" || len(p.Edits.DeviceNodes) == 0 {
		return
	}
	p.Edits = p.Edits.NodesAsMounts("bind-mounted, no device cgroup rule: " + host.NoCgroups)
}
