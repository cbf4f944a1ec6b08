// Package clustertest runs a single-node Kubernetes cluster for tests and developers: etcd,
// kube-apiserver, kube-controller-manager, kube-scheduler and the kubelet at the version
// scripts/build-kubernetes.sh builds, with a private containerd 2.x as the CRI (CDI on), and
// gpu-runtime registered with it as the runtime handler "gpu" for a fake GPU host — the way
// Kubernetes' hack/local-up-cluster.sh runs built binaries.
//
// Everything lives under one directory: certificates (a CA made for the cluster), kubeconfigs,
// etcd's data, containerd's root, state and socket, the kubelet's root and pod logs, the CNI
// state and gpu-runtime's configuration, log and health file. Every component listens on
// 127.0.0.1 only, on ports picked free at start; images are imported, never pulled.
//
// A few things the components put outside that directory, whatever their flags: the kubelet's
// device-plugin socket directory (/var/lib/kubelet/device-plugins, fixed in the kubelet), the
// cgroups of the pods (under a cgroup root named for the cluster, in every hierarchy), the CNI
// bridge (named for the cluster), the shims' sockets (/run/containerd/s), libcni's result cache
// (/var/lib/cni), the iptables chains the kubelet makes for its own monitoring (KUBE-*), and
// host sysctls the kubelet sets (vm.overcommit_memory, kernel.panic, …). Stop removes or
// restores each of them, and Leftovers reports any that remain. It needs root.
package clustertest

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/gpu-runtime/gpu-runtime/internal/enginetest"
	"github.com/gpu-runtime/gpu-runtime/internal/fakehost"
)

// Images imported into the cluster's containerd: Pause is the pods' sandbox, Busybox what the
// tests' containers run (pods must say imagePullPolicy: Never: there is no registry).
const (
	Pause   = "gpu-runtime.test/pause:1"
	Busybox = "gpu-runtime.test/busybox:1"
)

// RuntimeHandler is the containerd runtime gpu-runtime is registered as, the handler of the
// RuntimeClass in packaging/kubernetes/runtimeclass.yaml.
const RuntimeHandler = "gpu"

// featureGates are the gates of the DRA features the cluster's users build on (consumable
// capacity, partitionable devices, device taints), given to every component.
const featureGates = "DRAConsumableCapacity=true,DRAPartitionableDevices=true,DRADeviceTaints=true"

// kubeletSysctls are the host sysctls the kubelet sets at start (protectKernelDefaults false
// means "set them"); Start saves them and Stop puts them back.
var kubeletSysctls = []string{
	"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
	"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes",
}

// Options say where the cluster's pieces are.
type Options struct {
	Dir           string // everything the cluster writes; short (unix socket paths ≤ 107 bytes)
	KubeBin       string // kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kubectl, etcd
	ContainerdBin string // containerd, ctr, containerd-shim-runc-v2 (2.x)
	GPUBin        string // gpu-runtime, gpu-hook, gpu-ctk
	Crictl        string // optional: removes the CRI's pods before containerd stops
	RuntimeClass  string // the RuntimeClass manifest applied once the cluster is up
	DeviceClasses string // the DRA DeviceClasses' manifest, applied by StartDRAPlugin
	Host          *fakehost.Host
	Progress      io.Writer // a line per step; nil: none
}

// Cluster is a running cluster.
type Cluster struct {
	Options
	Kubeconfig string // the admin's (system:masters)
	// NodeKubeconfig is the node's credentials (system:node:<NodeName>, the kubelet's): the
	// node authorizer lets them write only this node's ResourceSlices.
	NodeKubeconfig string
	KubeletDir     string // the kubelet's root directory (--root-dir)
	NodeName       string
	CDIDir         string // containerd's (and gpu-runtime's) CDI spec directory
	RuntimeConfig  string // gpu-runtime's configuration (GPU_RUNTIME_CONFIG for gpu-ctk too)
	RuntimeLog     string // gpu-runtime's log file
	HealthFile     string
	PodLogs        string // the kubelet's pod log directory
	Socket         string // containerd's
	Runc           string

	host    hostState
	began   time.Time
	daemons []*enginetest.Daemon
	stopped bool
}

// hostState is what the cluster changes outside its directory, saved in Dir/host-state.json so
// that ReapStale can undo it when the process that started the cluster was killed.
type hostState struct {
	Owner      int               // the pid of the process that started the cluster
	CgroupRoot string            // the kubelet's cgroup root, a top-level cgroup named for the cluster
	Bridge     string            // the pods' CNI bridge
	Socket     string            // containerd's, which names its shims' sockets
	Sysctls    map[string]string // the kubelet's sysctls as they were before it started
	Firewall   firewall          // the iptables chains and rules and nftables tables there before
	Leftovers  enginetest.HostLeftovers
}

const hostStateFile = "host-state.json"

func (h *hostState) save(dir string) error {
	data, err := json.Marshal(h)
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, hostStateFile+".new")
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, hostStateFile))
}

// undo removes what the cluster in dir changed on the host, once its processes are gone:
// cgroups, the bridge, the kubelet's iptables chains and the tables it made, the sysctls, the
// shims' sockets and the host paths it created.
func (h *hostState) undo(dir string) {
	if h.CgroupRoot != "" {
		_ = enginetest.RemoveCgroups(h.CgroupRoot)
	}
	if h.Bridge != "" {
		if err := exec.Command("ip", "link", "show", h.Bridge).Run(); err == nil {
			_ = exec.Command("ip", "link", "delete", h.Bridge).Run()
		}
	}
	h.Firewall.restore()
	for s, v := range h.Sysctls {
		_ = os.WriteFile(filepath.Join("/proc/sys", s), []byte(v), 0o644)
	}
	for _, sock := range enginetest.ShimSockets(h.Socket, filepath.Join(dir, "containerd", "state")) {
		_ = os.Remove(sock)
	}
	h.Leftovers.Remove()
}

// ReapStale cleans up after clusters whose starting process is gone (a test binary killed by
// -timeout or a signal): in each /tmp/grc-* directory with a host state whose owner is dead, it
// kills every process and unmounts everything under the directory, undoes the host changes and
// removes the directory. It writes a line per directory to progress (nil: none).
func ReapStale(progress io.Writer) {
	dirs, _ := filepath.Glob("/tmp/grc-*")
	for _, dir := range dirs {
		data, err := os.ReadFile(filepath.Join(dir, hostStateFile))
		if err != nil {
			continue
		}
		var h hostState
		if json.Unmarshal(data, &h) != nil || h.Owner <= 0 || syscall.Kill(h.Owner, 0) == nil {
			continue
		}
		if progress != nil {
			fmt.Fprintf(progress, "cluster: cleaning up %s, left by process %d\n", dir, h.Owner)
		}
		_ = enginetest.Release(dir)
		h.undo(dir)
		_ = os.RemoveAll(dir)
	}
}

// hostPaths are the host paths the cluster's components create whatever their flags,
// children before parents.
func hostPaths() []enginetest.HostPath {
	return []enginetest.HostPath{
		{Path: "/var/lib/kubelet/device-plugins", Tree: true}, // the kubelet's, fixed: only its socket and checkpoint
		{Path: "/var/lib/kubelet"},
		{Path: "/var/lib/cni/results", Tree: true}, // libcni's cache of our pods' results
		{Path: "/var/lib/cni"},
		{Path: "/run/containerd/s"},
		{Path: "/run/containerd"},
	}
}

// progress writes a line, with the time since the cluster's start began.
func (c *Cluster) progress(format string, args ...any) {
	if c.Progress != nil {
		fmt.Fprintf(c.Progress, "cluster: %5.1fs "+format+"\n", append([]any{time.Since(c.began).Seconds()}, args...)...)
	}
}

// Start starts the cluster and waits until a pod can run on its node. On error, what was
// started is stopped.
func Start(opts Options) (c *Cluster, err error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("the cluster needs root (it starts containerd and the kubelet)")
	}
	for _, b := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kubectl", "etcd"} {
		if _, err := os.Stat(filepath.Join(opts.KubeBin, b)); err != nil {
			return nil, fmt.Errorf("%s is missing from %s (scripts/build-kubernetes.sh builds it)", b, opts.KubeBin)
		}
	}
	runc, err := exec.LookPath("runc")
	if err != nil {
		return nil, errors.New("runc is not installed (apt-get install runc)")
	}
	cni := "/usr/lib/cni"
	if _, err := os.Stat(filepath.Join(cni, "bridge")); err != nil {
		return nil, errors.New("the CNI plugins are not installed in /usr/lib/cni (apt-get install containernetworking-plugins)")
	}
	name, err := os.Hostname()
	if err != nil {
		return nil, err
	}
	pid := os.Getpid()
	ReapStale(opts.Progress)
	c = &Cluster{
		Options:       opts,
		NodeName:      strings.ToLower(name),
		CDIDir:        filepath.Join(opts.Dir, "cdi"),
		RuntimeConfig: filepath.Join(opts.Dir, "gpu-runtime.toml"),
		RuntimeLog:    filepath.Join(opts.Dir, "gpu-runtime.log"),
		HealthFile:    filepath.Join(opts.Dir, "health.csv"),
		PodLogs:       filepath.Join(opts.Dir, "kubelet", "pod-logs"),
		Socket:        filepath.Join(opts.Dir, "containerd", "containerd.sock"),
		Runc:          runc,
		began:         time.Now(),
		host: hostState{
			Owner:      pid,
			CgroupRoot: fmt.Sprintf("grc-%d-k8s", pid),       // no other cluster's name starts with it (RemoveCgroups)
			Bridge:     fmt.Sprintf("grcbr%d", pid%10000000), // at most 15 bytes
		},
	}
	c.host.Socket = c.Socket
	c.host.Leftovers = enginetest.RecordLeftovers(hostPaths(), filepath.Join(opts.Dir, "host-leftovers"))
	c.host.Firewall = snapshotFirewall()
	if err := c.host.save(opts.Dir); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			c.Stop()
		}
	}()
	start := time.Now()
	if err := c.start(cni); err != nil {
		return nil, err
	}
	c.progress("up in %.1f s; KUBECONFIG=%s", time.Since(start).Seconds(), c.Kubeconfig)
	return c, nil
}

func (c *Cluster) start(cniDir string) error {
	dir := c.Dir
	for _, d := range []string{"cdi", "cni/net.d", "cni/ipam", "kubelet/pod-logs", "etcd", "apiserver", "kcm", "scheduler", "containerd"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return err
		}
	}
	ports, err := freePorts(6)
	if err != nil {
		return err
	}
	etcdClient, etcdPeer, apiPort, kubeletPort, kcmPort, schedPort := ports[0], ports[1], ports[2], ports[3], ports[4], ports[5]
	server := fmt.Sprintf("https://127.0.0.1:%d", apiPort)

	c.progress("certificates and kubeconfigs")
	p, err := newPKI(filepath.Join(dir, "pki"))
	if err != nil {
		return err
	}
	loopback := []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("10.0.0.1")}
	issues := []struct {
		name, cn string
		groups   []string
		ips      []net.IP
		dns      []string
	}{
		{"apiserver", "kube-apiserver", nil, loopback, []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"}},
		{"admin", "admin", []string{"system:masters"}, nil, nil},
		{"kcm", "system:kube-controller-manager", nil, nil, nil},
		{"scheduler", "system:kube-scheduler", nil, nil, nil},
		{"kubelet", "system:node:" + c.NodeName, []string{"system:nodes"}, nil, nil},
		{"apiserver-kubelet-client", "kube-apiserver-kubelet-client", []string{"system:masters"}, nil, nil},
	}
	for _, i := range issues {
		if err := p.issue(i.name, i.cn, i.groups, i.ips, i.dns); err != nil {
			return err
		}
	}
	if err := p.serviceAccountKey(); err != nil {
		return err
	}
	kubeconfigs := map[string]string{}
	for _, n := range []string{"admin", "kcm", "scheduler", "kubelet"} {
		if kubeconfigs[n], err = p.kubeconfig(n, server); err != nil {
			return err
		}
	}
	c.Kubeconfig, c.NodeKubeconfig = kubeconfigs["admin"], kubeconfigs["kubelet"]
	c.KubeletDir = filepath.Join(dir, "kubelet", "root")

	bin := func(name string) string { return filepath.Join(c.KubeBin, name) }
	c.progress("etcd")
	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", etcdClient)
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", etcdPeer)
	if err := c.daemon("etcd", nil, httpReady(etcdURL+"/health", nil),
		bin("etcd"), "--name", "node", "--data-dir", filepath.Join(dir, "etcd", "data"),
		"--listen-client-urls", etcdURL, "--advertise-client-urls", etcdURL,
		"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", "node="+peerURL, "--unsafe-no-fsync", "--log-level", "warn"); err != nil {
		return err
	}

	c.progress("kube-apiserver")
	tlsConfig, err := c.adminTLS(p)
	if err != nil {
		return err
	}
	if err := c.daemon("apiserver", nil, httpReady(server+"/readyz", tlsConfig),
		bin("kube-apiserver"), "--etcd-servers", etcdURL,
		"--bind-address", "127.0.0.1", "--secure-port", fmt.Sprint(apiPort), "--advertise-address", "127.0.0.1",
		"--endpoint-reconciler-type", "none",
		"--tls-cert-file", p.path("apiserver.crt"), "--tls-private-key-file", p.path("apiserver.key"),
		"--client-ca-file", p.path("ca.crt"),
		"--kubelet-client-certificate", p.path("apiserver-kubelet-client.crt"),
		"--kubelet-client-key", p.path("apiserver-kubelet-client.key"),
		"--kubelet-preferred-address-types", "Hostname",
		"--service-account-key-file", p.path("sa.pub"), "--service-account-signing-key-file", p.path("sa.key"),
		"--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
		"--service-cluster-ip-range", "10.0.0.0/24",
		"--authorization-mode", "Node,RBAC", "--enable-admission-plugins", "NodeRestriction",
		"--allow-privileged=true", "--runtime-config", "resource.k8s.io/v1=true",
		"--feature-gates", featureGates); err != nil {
		return err
	}

	c.progress("containerd (CRI, CDI) with gpu-runtime as runtime %q", RuntimeHandler)
	if err := c.startContainerd(cniDir); err != nil {
		return err
	}

	c.progress("kube-controller-manager, kube-scheduler")
	if err := c.daemon("kcm", nil, alive,
		bin("kube-controller-manager"), "--kubeconfig", kubeconfigs["kcm"],
		"--authentication-kubeconfig", kubeconfigs["kcm"], "--authorization-kubeconfig", kubeconfigs["kcm"],
		"--bind-address", "127.0.0.1", "--secure-port", fmt.Sprint(kcmPort), "--leader-elect=false",
		"--cert-dir", filepath.Join(dir, "kcm"),
		"--service-account-private-key-file", p.path("sa.key"), "--root-ca-file", p.path("ca.crt"),
		"--use-service-account-credentials=true", "--controllers", "*,-bootstrapsigner,-tokencleaner",
		"--feature-gates", featureGates); err != nil {
		return err
	}
	if err := c.daemon("scheduler", nil, alive,
		bin("kube-scheduler"), "--kubeconfig", kubeconfigs["scheduler"],
		"--authentication-kubeconfig", kubeconfigs["scheduler"], "--authorization-kubeconfig", kubeconfigs["scheduler"],
		"--bind-address", "127.0.0.1", "--secure-port", fmt.Sprint(schedPort), "--leader-elect=false",
		"--cert-dir", filepath.Join(dir, "scheduler"),
		"--feature-gates", featureGates); err != nil {
		return err
	}

	c.progress("kubelet")
	if err := c.prepareCgroups(); err != nil {
		return err
	}
	c.host.Sysctls = map[string]string{}
	for _, s := range kubeletSysctls {
		if v, err := os.ReadFile(filepath.Join("/proc/sys", s)); err == nil {
			c.host.Sysctls[s] = strings.TrimSpace(string(v))
		}
	}
	if err := c.host.save(dir); err != nil {
		return err
	}
	kubeletConfig := filepath.Join(dir, "kubelet", "config.yaml")
	if err := os.WriteFile(kubeletConfig, []byte(c.kubeletConfig(p, kubeletPort)), 0o644); err != nil {
		return err
	}
	if err := c.daemon("kubelet", nil, alive,
		bin("kubelet"), "--config", kubeletConfig, "--kubeconfig", kubeconfigs["kubelet"],
		"--root-dir", c.KubeletDir, "--cert-dir", filepath.Join(dir, "kubelet", "pki"),
		"--hostname-override", c.NodeName, "--v", "2"); err != nil {
		return err
	}

	c.progress("waiting for the node, the default service account and the root CA")
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	waits := []struct {
		what string
		args []string
		want string
	}{
		{"node " + c.NodeName + " Ready", []string{"get", "node", c.NodeName, "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`}, "True"},
		{"serviceaccount default", []string{"get", "serviceaccount", "default", "-o", "name"}, "serviceaccount/default"},
		{"configmap kube-root-ca.crt", []string{"get", "configmap", "kube-root-ca.crt", "-o", "name"}, "configmap/kube-root-ca.crt"},
	}
	for _, w := range waits {
		if err := c.waitFor(ctx, w.want, w.args...); err != nil {
			return fmt.Errorf("waiting for %s: %w\nkubelet log:\n%s", w.what, err, c.daemonLog("kubelet"))
		}
		c.progress("%s", w.what)
	}
	if c.RuntimeClass != "" {
		if out, err := c.Kubectl(ctx, "", "apply", "-f", c.RuntimeClass); err != nil {
			return fmt.Errorf("apply %s: %w: %s", c.RuntimeClass, err, out)
		}
	}
	return nil
}

// adminTLS is the TLS configuration the readiness checks reach the apiserver with.
func (c *Cluster) adminTLS(p *pki) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(p.path("admin.crt"), p.path("admin.key"))
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AddCert(p.caCert)
	return &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}

// containerdConfig is containerd 2.x's main configuration (version 3) before gpu-ctk adds the
// gpu runtime: private root, state and sockets; what the CRI needs on hosts without
// CAP_SYS_RESOURCE (restrict_oom_score_adj); a pinned local sandbox image; CDI from the
// cluster's spec directory; network namespaces under the state directory; NRI off (its socket
// path is fixed); the CRI's streaming server on 127.0.0.1.
const containerdConfig = `version = 3
root = %[1]q
state = %[2]q

[grpc]
  address = %[3]q
[ttrpc]
  address = %[4]q

[plugins]
  [plugins.'io.containerd.cri.v1.images']
    snapshotter = 'overlayfs'
    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = %[5]q
  [plugins.'io.containerd.cri.v1.runtime']
    restrict_oom_score_adj = true
    enable_cdi = true
    cdi_spec_dirs = [%[6]q]
    netns_mounts_under_state_dir = true
    [plugins.'io.containerd.cri.v1.runtime'.containerd]
      default_runtime_name = 'runc'
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
        runtime_type = 'io.containerd.runc.v2'
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
          BinaryName = %[7]q
          SystemdCgroup = false
    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = [%[8]q]
      conf_dir = %[9]q
  [plugins.'io.containerd.grpc.v1.cri']
    stream_server_address = '127.0.0.1'
    stream_server_port = '0'
  [plugins.'io.containerd.nri.v1.nri']
    disable = true
`

// cniConfig is an isolated bridge: no gateway, no masquerading, no route out.
const cniConfig = `{"cniVersion": "1.0.0", "name": %[1]q, "plugins": [
  {"type": "bridge", "bridge": %[1]q, "isGateway": false, "ipMasq": false, "hairpinMode": false,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.253.0.0/24"}]], "dataDir": %[2]q}}]}
`

func (c *Cluster) startContainerd(cniDir string) error {
	dir := filepath.Join(c.Dir, "containerd")
	config := filepath.Join(dir, "config.toml")
	netd := filepath.Join(c.Dir, "cni", "net.d")
	content := fmt.Sprintf(containerdConfig, filepath.Join(dir, "root"), filepath.Join(dir, "state"), c.Socket, c.Socket+".ttrpc",
		Pause, c.CDIDir, c.Runc, cniDir, netd)
	if err := os.WriteFile(config, []byte(content), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(netd, "10-gpu-runtime-test.conflist"), []byte(fmt.Sprintf(cniConfig, c.host.Bridge, filepath.Join(c.Dir, "cni", "ipam"))), 0o644); err != nil {
		return err
	}
	if err := c.writeRuntimeConfig(); err != nil {
		return err
	}
	// The node's CDI spec, as a GPU node's boot writes it (gpu-runtime-cdi.service): what
	// containerd's CDI, and gpu-runtime for annotations, resolve nvidia.com/gpu names from.
	gen := exec.Command(filepath.Join(c.GPUBin, "gpu-ctk"), "cdi", "generate", "--output", filepath.Join(c.CDIDir, "nvidia.yaml"))
	gen.Env = append(os.Environ(), "GPU_RUNTIME_CONFIG="+c.RuntimeConfig)
	if out, err := gen.CombinedOutput(); err != nil {
		return fmt.Errorf("gpu-ctk cdi generate: %w\n%s", err, out)
	}
	// Registered as users register it: gpu-ctk runtime configure, here against private files.
	wrapper := filepath.Join(c.Dir, "gpu-runtime")
	args := []string{"runtime", "configure", "--runtime=containerd", "--config", config,
		"--drop-in", filepath.Join(dir, "conf.d", "99-gpu-runtime.toml"), "--runtime-path", wrapper}
	if out, err := exec.Command(filepath.Join(c.GPUBin, "gpu-ctk"), args...).CombinedOutput(); err != nil {
		return fmt.Errorf("gpu-ctk %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	ctr := filepath.Join(c.ContainerdBin, "ctr")
	ready := func() error {
		return exec.Command(ctr, "--address", c.Socket, "version").Run()
	}
	// containerd finds its shim on PATH: its own 2.x shim first (Debian's is 1.6's).
	env := []string{"PATH=" + c.ContainerdBin + ":" + os.Getenv("PATH")}
	if err := c.daemon("containerd", env, ready, filepath.Join(c.ContainerdBin, "containerd"), "--config", config); err != nil {
		return err
	}
	c.daemons[len(c.daemons)-1].BeforeStop = c.removeSandboxes
	archive := filepath.Join(dir, "images.tar")
	if err := writeImages(archive); err != nil {
		return fmt.Errorf("build the images: %w", err)
	}
	if out, err := exec.Command(ctr, "--address", c.Socket, "-n", "k8s.io", "images", "import", archive).CombinedOutput(); err != nil {
		return fmt.Errorf("import the images: %w: %s", err, out)
	}
	return nil
}

// writeRuntimeConfig writes gpu-runtime's configuration for the fake host and the wrapper
// containerd runs as the gpu runtime: containerd gives a runtime no environment of its own, so
// a two-line script sets GPU_RUNTIME_CONFIG and execs gpu-runtime (which then execs runc).
// Volume mounts are accepted, as a node running a device plugin's volume-mounts strategy sets.
func (c *Cluster) writeRuntimeConfig() error {
	if err := c.SetMultiTenant(false); err != nil {
		return err
	}
	script := fmt.Sprintf("#!/bin/sh\nGPU_RUNTIME_CONFIG=%s exec %s \"$@\"\n", shellQuote(c.RuntimeConfig), shellQuote(filepath.Join(c.GPUBin, "gpu-runtime")))
	return os.WriteFile(filepath.Join(c.Dir, "gpu-runtime"), []byte(script), 0o755)
}

// SetMultiTenant rewrites gpu-runtime's configuration (atomically: containers may be created
// meanwhile) for a multi-tenant node, request.accept-envvar-when-unprivileged = false, or back.
// gpu-runtime reads it at every create.
func (c *Cluster) SetMultiTenant(on bool) error {
	h := c.Host
	content := fmt.Sprintf(`[runtime]
runtimes = [%q]
log-level = "debug"
log-file = %q
[driver]
root = %q
dev-root = %q
proc-root = %q
sys-root = %q
[hook]
path = %q
[request]
accept-device-list-as-volume-mounts = true
accept-envvar-when-unprivileged = %t
[discovery]
cache-file = %q
[cdi]
spec-dirs = [%q]
[health]
file = %q
`, c.Runc, c.RuntimeLog, h.DriverRoot, h.DevRoot, h.ProcRoot, h.SysRoot, filepath.Join(c.GPUBin, "gpu-hook"), !on,
		filepath.Join(c.Dir, "discovery-cache.csv"), c.CDIDir, c.HealthFile)
	tmp := c.RuntimeConfig + ".new"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, c.RuntimeConfig)
}

func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// writeImages writes a docker-save archive of the pause image (busybox sleeping: containerd
// stops a sandbox with SIGKILL) and the busybox image.
func writeImages(path string) error {
	layer, err := enginetest.BusyboxLayer()
	if err != nil {
		return err
	}
	archive, err := enginetest.DockerArchive(layer, map[string][]string{
		Pause:   {"sleep", "2147483647"},
		Busybox: {"sh"},
	})
	if err != nil {
		return err
	}
	return os.WriteFile(path, archive, 0o644)
}

// removeSandboxes removes the CRI's pod sandboxes while containerd runs, so that their shims
// exit by themselves.
func (c *Cluster) removeSandboxes() {
	if c.Crictl == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_ = exec.CommandContext(ctx, c.Crictl, "--runtime-endpoint", "unix://"+c.Socket, "--timeout", "30s", "rmp", "--all", "--force").Run()
}

// kubeletConfig is the kubelet's configuration: 127.0.0.1 only; cgroupfs under the cluster's
// cgroup root; what cgroup v1 hosts without CAP_SYS_RESOURCE need (failCgroupV1: false,
// oomScoreAdj: 0); no image garbage collection (the imported images could not be pulled back).
func (c *Cluster) kubeletConfig(p *pki, port int) string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: %d
readOnlyPort: 0
healthzPort: 0
authentication: {anonymous: {enabled: false}, webhook: {enabled: true}, x509: {clientCAFile: %q}}
authorization: {mode: Webhook}
containerRuntimeEndpoint: unix://%s
imageServiceEndpoint: unix://%s
cgroupDriver: cgroupfs
cgroupRoot: /%s
failCgroupV1: false
failSwapOn: false
oomScoreAdj: 0
podLogsDir: %q
resolvConf: /etc/resolv.conf
clusterDomain: cluster.local
serializeImagePulls: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: 100Mi, nodefs.available: "1%%", imagefs.available: "1%%", nodefs.inodesFree: "1%%"}
enforceNodeAllocatable: [pods]
featureGates: {DRAConsumableCapacity: true, DRAPartitionableDevices: true, DRADeviceTaints: true}
`, port, p.path("ca.crt"), c.Socket, c.Socket, c.host.CgroupRoot, c.PodLogs)
}

// prepareCgroups makes the kubelet's cgroup root in every hierarchy (the cgroupfs driver
// needs it), with cpuset's cpus and mems copied from the top.
func (c *Cluster) prepareCgroups() error {
	hierarchies, _ := filepath.Glob("/sys/fs/cgroup/*")
	for _, h := range hierarchies {
		if fi, err := os.Lstat(h); err != nil || !fi.IsDir() {
			continue
		}
		d := filepath.Join(h, c.host.CgroupRoot)
		if err := os.Mkdir(d, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("make cgroup %s: %w", d, err)
		}
		if filepath.Base(h) == "cpuset" {
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				v, err := os.ReadFile(filepath.Join(h, f))
				if err != nil {
					return err
				}
				if err := os.WriteFile(filepath.Join(d, f), v, 0o644); err != nil {
					return fmt.Errorf("write %s: %w", filepath.Join(d, f), err)
				}
			}
		}
	}
	return nil
}

// daemon starts a component with its working directory, log and files under Dir/<name>.
func (c *Cluster) daemon(name string, env []string, ready func() error, argv ...string) error {
	d, err := enginetest.StartDaemon(name, filepath.Join(c.Dir, name), env, ready, argv...)
	if err != nil {
		return err
	}
	c.daemons = append(c.daemons, d)
	return nil
}

func (c *Cluster) daemonLog(name string) string {
	for _, d := range c.daemons {
		if d.Name == name {
			return d.LogTail()
		}
	}
	return ""
}

// DaemonLog returns the end of a component's log (etcd, apiserver, containerd, kcm, scheduler,
// kubelet).
func (c *Cluster) DaemonLog(name string) string { return c.daemonLog(name) }

func alive() error { return nil }

func httpReady(url string, tlsConfig *tls.Config) func() error {
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsConfig}}
	return func() error {
		resp, err := client.Get(url)
		if err != nil {
			return err
		}
		defer func() { _ = resp.Body.Close() }()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: %s: %s", url, resp.Status, body)
		}
		return nil
	}
}

// freePorts returns n distinct TCP ports of 127.0.0.1 that were free a moment ago.
func freePorts(n int) ([]int, error) {
	var ports []int
	var listeners []net.Listener
	defer func() {
		for _, l := range listeners {
			_ = l.Close()
		}
	}()
	for len(ports) < n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		listeners = append(listeners, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// Kubectl runs the cluster's kubectl as the admin with stdin; it returns stdout (and stderr on
// error).
func (c *Cluster) Kubectl(ctx context.Context, stdin string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(c.KubeBin, "kubectl"), append([]string{"--kubeconfig", c.Kubeconfig}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String() + stderr.String(), fmt.Errorf("kubectl %s: %w", strings.Join(args, " "), err)
	}
	return stdout.String(), nil
}

// waitFor polls kubectl args until its output is want.
func (c *Cluster) waitFor(ctx context.Context, want string, args ...string) error {
	var last string
	for {
		out, err := c.Kubectl(ctx, "", args...)
		last = strings.TrimSpace(out)
		if err == nil && last == want {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("last answer %q: %w", last, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Stop deletes the pods, stops every component (the kubelet first, etcd last), kills and
// unmounts whatever is left under Dir, and removes or restores what the components changed on
// the host (cgroups, bridge, iptables chains, sysctls, host paths). It is idempotent; Leftovers
// then says whether anything remains.
func (c *Cluster) Stop() {
	if c.stopped {
		return
	}
	c.stopped = true
	start := time.Now()
	if c.Kubeconfig != "" && len(c.daemons) >= 6 {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		_, _ = c.Kubectl(ctx, "", "delete", "pods", "--all", "--all-namespaces", "--grace-period=1", "--wait=true")
		cancel()
	}
	for i := len(c.daemons) - 1; i >= 0; i-- {
		c.daemons[i].Stop()
	}
	_ = enginetest.Release(c.Dir)
	c.host.undo(c.Dir)
	_ = os.Remove(filepath.Join(c.Dir, hostStateFile)) // nothing left for ReapStale
	c.progress("stopped in %.1f s", time.Since(start).Seconds())
}

// Leftovers lists what Stop did not remove: processes and mounts under Dir, the cgroup root,
// the bridge, iptables chains the cluster added, sysctls not restored, host paths it created.
func (c *Cluster) Leftovers() []string {
	var out []string
	for _, pid := range enginetest.ProcessesUnder(c.Dir) {
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		out = append(out, fmt.Sprintf("process %d: %s", pid, strings.ReplaceAll(string(cmdline), "\x00", " ")))
	}
	for _, m := range enginetest.MountsUnder(c.Dir) {
		out = append(out, "mount "+m)
	}
	if cgs, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", "*", c.host.CgroupRoot)); len(cgs) > 0 {
		out = append(out, "cgroups "+strings.Join(cgs, " "))
	}
	if err := exec.Command("ip", "link", "show", c.host.Bridge).Run(); err == nil {
		out = append(out, "network interface "+c.host.Bridge)
	}
	out = append(out, c.host.Firewall.added()...)
	for s, v := range c.host.Sysctls {
		if now, err := os.ReadFile(filepath.Join("/proc/sys", s)); err == nil && strings.TrimSpace(string(now)) != v {
			out = append(out, fmt.Sprintf("sysctl %s = %s, was %s", strings.ReplaceAll(s, "/", "."), strings.TrimSpace(string(now)), v))
		}
	}
	for _, p := range c.host.Leftovers {
		if _, err := os.Lstat(p.Path); err == nil {
			out = append(out, "host path "+p.Path)
		}
	}
	for _, sock := range enginetest.ShimSockets(c.Socket, filepath.Join(c.Dir, "containerd", "state")) {
		if _, err := os.Lstat(sock); err == nil {
			out = append(out, "shim socket "+sock)
		}
	}
	return out
}
