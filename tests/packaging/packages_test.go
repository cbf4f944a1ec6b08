// Package packaging tests how gpu-runtime is packaged and installed: the .deb and .rpm that
// `make package` builds, and the scripts behind them and behind make install.
//
// The package tests (TestDeb, TestRPM, TestPackages) take the packages from the directory
// named by GPU_RUNTIME_PACKAGES, and skip, loudly, without it. `make test-packages` builds them
// and runs these tests as root after `go test ./...` — never beside it, because TestPackages
// installs gpu-runtime into /usr/bin, where other suites (TestHookPath in internal/create)
// must not find it while they run, and go test runs packages in parallel.
//
// TestPackages installs, configures, upgrades, removes and purges the .deb on this machine
// with apt-get and dpkg, runs GPU containers through the installed runtime under a private
// dockerd on a fake GPU host (internal/fakehost), runs the .rpm's scriptlets with the
// arguments rpm passes, and stands a package of its own in for NVIDIA's toolkit. It leaves the
// machine as it found it: what it would replace (/etc/docker/daemon.json, /etc/gpu-runtime,
// /run/gpu-runtime) is moved aside first and put back at the end, /etc/containerd is restored
// byte for byte, and every package it installed is purged, also when it fails. It refuses to
// run where gpu-runtime is already installed.
package packaging

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpu-runtime/gpu-runtime/internal/enginetest"
	"github.com/gpu-runtime/gpu-runtime/internal/fakehost"
)

const (
	hookName = "nvidia-container-runtime-hook"
	hookPath = "/usr/bin/" + hookName
	// installedCTK is the package's gpu-ctk, by path: a gpu-ctk earlier in PATH (make install's,
	// in /usr/local/bin) would register the gpu-runtime beside itself instead.
	installedCTK = "/usr/bin/gpu-ctk"
	// systemPath is the PATH systemd gives dockerd, where the package looks for a hook.
	systemPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	// fakeNVIDIA is the package standing in for NVIDIA's toolkit: it ships hookPath.
	fakeNVIDIA = "gpu-runtime-test-nvidia-hook"

	daemonJSON       = "/etc/docker/daemon.json"
	containerdConfig = "/etc/containerd/config.toml"
)

// packages are the .deb and .rpm under test, and their version.
type packages struct {
	dir, deb, rpm, version string
}

// requirePackages finds the packages in $GPU_RUNTIME_PACKAGES, skipping without it. With root
// (a test that installs them) it also skips unless GPU_RUNTIME_E2E=1, and then fails unless root.
func requirePackages(t *testing.T, root bool) packages {
	t.Helper()
	dir := os.Getenv("GPU_RUNTIME_PACKAGES")
	if dir == "" {
		t.Skip("SKIPPED: GPU_RUNTIME_PACKAGES names no directory of packages. `make test-packages` (part of make test) builds them and runs these tests, as root, after go test ./... and never beside it: they install gpu-runtime into /usr/bin")
	}
	if root && os.Getenv("GPU_RUNTIME_E2E") != "1" {
		t.Skip("SKIPPED: this test installs packages on this machine: it runs only under GPU_RUNTIME_E2E=1, as root (make test-packages)")
	}
	if root && os.Geteuid() != 0 {
		t.Fatal("this test installs packages: run it as root (make test-packages)")
	}
	for _, tool := range []string{"dpkg-deb", "rpm", "dash"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is not installed (make deps installs it)", tool)
		}
	}
	if !filepath.IsAbs(dir) {
		dir = filepath.Join(repoRoot(t), dir) // relative to the repository, as make sees it
	}
	debs, _ := filepath.Glob(filepath.Join(dir, "gpu-runtime_*.deb"))
	rpms, _ := filepath.Glob(filepath.Join(dir, "gpu-runtime-*.rpm"))
	if len(debs) != 1 || len(rpms) != 1 {
		t.Fatalf("%s: want one gpu-runtime .deb and one .rpm (make package), found %v and %v", dir, debs, rpms)
	}
	m := regexp.MustCompile(`^gpu-runtime_(.+)_([a-z0-9]+)\.deb$`).FindStringSubmatch(filepath.Base(debs[0]))
	if m == nil {
		t.Fatalf("%s: not named gpu-runtime_<version>_<arch>.deb", debs[0])
	}
	p := packages{dir: dir, deb: debs[0], rpm: rpms[0], version: m[1]}
	if want := fmt.Sprintf("gpu-runtime-%s-1.%s.rpm", p.version, rpmArch(t)); filepath.Base(p.rpm) != want {
		t.Errorf("the .rpm is %s, want %s", filepath.Base(p.rpm), want)
	}
	return p
}

// debArch and rpmArch are this machine's architecture in each format's words.
func debArch(t testing.TB) string {
	out, code := run(t, "", nil, "dpkg", "--print-architecture")
	if code != 0 {
		t.Fatal(out)
	}
	return strings.TrimSpace(out)
}

func rpmArch(t testing.TB) string {
	return map[string]string{"amd64": "x86_64", "arm64": "aarch64", "ppc64el": "ppc64le"}[debArch(t)]
}

// mustRun runs a command, failing t unless it exits 0; it returns the combined output.
func mustRun(t testing.TB, env []string, name string, args ...string) string {
	t.Helper()
	out, code := run(t, "", env, name, args...)
	if code != 0 {
		t.Fatalf("%s %s: exit %d\n%s", name, strings.Join(args, " "), code, out)
	}
	return out
}

// entry is one path of a package: its permissions as ls shows them, owner and group.
type entry struct {
	path, perms, owner string
}

// sharedDirs are directories of the system that the .deb lists and the .rpm does not own.
var sharedDirs = []string{"/etc", "/usr", "/usr/bin", "/usr/lib", "/usr/lib/systemd", "/usr/lib/systemd/system", "/usr/share", "/usr/share/doc"}

// wantEntries is every path of the .deb (the .rpm: all but sharedDirs).
var wantEntries = []entry{
	{"/etc", "drwxr-xr-x", "root/root"},
	{"/etc/gpu-runtime", "drwxr-xr-x", "root/root"},
	{"/etc/gpu-runtime/config.toml", "-rw-r--r--", "root/root"},
	{"/usr", "drwxr-xr-x", "root/root"},
	{"/usr/bin", "drwxr-xr-x", "root/root"},
	{"/usr/bin/gpu-ctk", "-rwxr-xr-x", "root/root"},
	{"/usr/bin/gpu-hook", "-rwxr-xr-x", "root/root"},
	{"/usr/bin/gpu-kubelet-plugin", "-rwxr-xr-x", "root/root"},
	{"/usr/bin/gpu-runtime", "-rwxr-xr-x", "root/root"},
	{"/usr/lib", "drwxr-xr-x", "root/root"},
	{"/usr/lib/gpu-runtime", "drwxr-xr-x", "root/root"},
	{"/usr/lib/gpu-runtime/host-setup", "-rwxr-xr-x", "root/root"},
	{"/usr/lib/systemd", "drwxr-xr-x", "root/root"},
	{"/usr/lib/systemd/system", "drwxr-xr-x", "root/root"},
	{"/usr/lib/systemd/system/gpu-kubelet-plugin.service", "-rw-r--r--", "root/root"},
	{"/usr/lib/systemd/system/gpu-runtime-cdi.service", "-rw-r--r--", "root/root"},
	{"/usr/lib/systemd/system/gpu-runtime-dev-char-symlinks.service", "-rw-r--r--", "root/root"},
	{"/usr/lib/systemd/system/gpu-runtime-health.service", "-rw-r--r--", "root/root"},
	{"/usr/lib/systemd/system/gpu-runtime-mps@.service", "-rw-r--r--", "root/root"},
	{"/usr/share", "drwxr-xr-x", "root/root"},
	{"/usr/share/doc", "drwxr-xr-x", "root/root"},
	{"/usr/share/doc/gpu-runtime", "drwxr-xr-x", "root/root"},
	{"/usr/share/doc/gpu-runtime/README.md", "-rw-r--r--", "root/root"},
	{"/usr/share/doc/gpu-runtime/SECURITY.md", "-rw-r--r--", "root/root"},
	{"/usr/share/doc/gpu-runtime/packaging.md", "-rw-r--r--", "root/root"},
	{"/usr/share/gpu-runtime", "drwxr-xr-x", "root/root"},
	{"/usr/share/gpu-runtime/kubernetes", "drwxr-xr-x", "root/root"},
	{"/usr/share/gpu-runtime/kubernetes/runtimeclass.yaml", "-rw-r--r--", "root/root"},
}

// ownEntries are the paths the package owns alone: what must be gone after a purge.
func ownEntries() []string {
	var out []string
	for _, e := range wantEntries {
		if !slices.Contains(sharedDirs, e.path) {
			out = append(out, e.path)
		}
	}
	return out
}

// debEntries lists the .deb's paths, from dpkg-deb -c.
func debEntries(t testing.TB, deb string) []entry {
	t.Helper()
	var out []entry
	for _, line := range strings.Split(strings.TrimSpace(mustRun(t, nil, "dpkg-deb", "-c", deb)), "\n") {
		// drwxr-xr-x root/root 0 2026-11-24 06:34 ./etc/
		f := strings.Fields(line)
		if len(f) < 6 {
			t.Fatalf("dpkg-deb -c: %q", line)
		}
		out = append(out, entry{path: strings.TrimSuffix(strings.TrimPrefix(f[5], "."), "/"), perms: f[0], owner: f[1]})
	}
	return out
}

// debDepends returns the .deb's control field.
func debField(t testing.TB, deb, field string) string {
	t.Helper()
	return strings.TrimSpace(mustRun(t, nil, "dpkg-deb", "-f", deb, field))
}

var glibcDepRE = regexp.MustCompile(`^runc \| crun, libc6 \(>= (2\.[0-9]+)\)$`)

// TestDeb inspects the .deb: name, version, architecture, dependencies, every path with its
// mode and owner, the conffile, and the maintainer scripts.
func TestDeb(t *testing.T) {
	p := requirePackages(t, false)
	for field, want := range map[string]string{"Package": "gpu-runtime", "Version": p.version, "Architecture": debArch(t)} {
		if got := debField(t, p.deb, field); got != want {
			t.Errorf("%s: %q, want %q", field, got, want)
		}
	}
	if got := debField(t, p.deb, "Depends"); !glibcDepRE.MatchString(got) {
		t.Errorf("Depends: %q, want runc | crun and libc6 (>= 2.x)", got)
	}
	if got := debEntries(t, p.deb); !slices.Equal(got, wantEntries) {
		t.Errorf("dpkg-deb -c:\n  got  %v\n  want %v", got, wantEntries)
	}
	control := t.TempDir()
	mustRun(t, nil, "dpkg-deb", "-e", p.deb, control)
	if got := readFile(t, filepath.Join(control, "conffiles")); got != "/etc/gpu-runtime/config.toml\n" {
		t.Errorf("conffiles: %q", got)
	}
	scripts := map[string]string{"postinst": "postinstall.sh", "prerm": "preremove.sh", "postrm": "postremove.sh"}
	for name, src := range scripts {
		if got, want := readFile(t, filepath.Join(control, name)), readFile(t, filepath.Join(repoRoot(t), "packaging", "scripts", src)); got != want {
			t.Errorf("%s is not packaging/scripts/%s", name, src)
		}
	}
	names, _ := os.ReadDir(control)
	for _, n := range names {
		if _, script := scripts[n.Name()]; !script && !slices.Contains([]string{"control", "conffiles", "md5sums"}, n.Name()) {
			t.Errorf("unexpected control file %s", n.Name())
		}
	}
}

// TestRPM inspects the .rpm with Debian's rpm (rpm -qp): version, release and architecture,
// its file list against the .deb's, modes, owners and flags, the scriptlets, the requirements.
func TestRPM(t *testing.T) {
	p := requirePackages(t, false)
	rpmq := func(args ...string) string {
		return mustRun(t, nil, "rpm", append([]string{"-qp"}, append(args, p.rpm)...)...)
	}
	if got, want := rpmq("--qf", "%{NAME} %{VERSION} %{RELEASE} %{ARCH}"), fmt.Sprintf("gpu-runtime %s 1 %s", p.version, rpmArch(t)); got != want {
		t.Errorf("rpm: %q, want %q", got, want)
	}

	var debFiles []string
	for _, e := range debEntries(t, p.deb) {
		if !slices.Contains(sharedDirs, e.path) {
			debFiles = append(debFiles, e.path)
		}
	}
	if got := strings.Fields(rpmq("-l")); !slices.Equal(got, debFiles) {
		t.Errorf("rpm -qpl lists\n  %v\nthe .deb (less the system's directories)\n  %v", got, debFiles)
	}
	var want []string
	for _, e := range wantEntries {
		if slices.Contains(sharedDirs, e.path) {
			continue
		}
		flags := ""
		switch {
		case e.path == "/etc/gpu-runtime/config.toml":
			flags = "cn" // %config(noreplace)
		case strings.HasPrefix(e.path, "/usr/share/doc/gpu-runtime/"):
			flags = "d" // %doc
		}
		want = append(want, strings.TrimSpace(fmt.Sprintf("%s %s %s %s", e.path, e.perms, e.owner, flags)))
	}
	got := strings.Split(strings.TrimSpace(rpmq("--qf", `[%{FILENAMES} %{FILEMODES:perms} %{FILEUSERNAME}/%{FILEGROUPNAME} %{FILEFLAGS:fflags}\n]`)), "\n")
	for i := range got {
		got[i] = strings.TrimSpace(got[i])
	}
	if !slices.Equal(got, want) {
		t.Errorf("rpm files:\n  got  %q\n  want %q", got, want)
	}
	if got := strings.Fields(rpmq("-c")); !slices.Equal(got, []string{"/etc/gpu-runtime/config.toml"}) {
		t.Errorf("rpm -qpc: %v", got)
	}

	glibc := glibcDepRE.FindStringSubmatch(debField(t, p.deb, "Depends"))
	if glibc == nil {
		t.Fatalf("the .deb's Depends: %q", debField(t, p.deb, "Depends"))
	}
	if got, want := strings.Split(strings.TrimSpace(rpmq("--requires")), "\n"), []string{"(runc or crun)", "glibc >= " + glibc[1]}; !slices.Equal(got, want) {
		t.Errorf("rpm -qp --requires: %q, want %q", got, want)
	}

	scripts := rpmq("--scripts")
	for _, s := range []struct{ section, file string }{
		{"postinstall scriptlet (using /bin/sh):", "postinstall.sh"},
		{"preuninstall scriptlet (using /bin/sh):", "preremove.sh"},
		{"postuninstall scriptlet (using /bin/sh):", "postremove.sh"},
	} {
		body := readFile(t, filepath.Join(repoRoot(t), "packaging", "scripts", s.file))
		if !strings.Contains(scripts, s.section+"\n"+body) {
			t.Errorf("rpm -qp --scripts lacks %q followed by packaging/scripts/%s:\n%s", s.section, s.file, scripts)
		}
	}
	if n := strings.Count(scripts, "scriptlet (using"); n != 3 {
		t.Errorf("rpm -qp --scripts shows %d scriptlets, want 3:\n%s", n, scripts)
	}
}

// TestPackages installs, uses, upgrades and removes the .deb on this machine, and runs the
// .rpm's scriptlets as rpm would. Each step builds on the one before and the test stops at
// the first that fails.
func TestPackages(t *testing.T) {
	p := requirePackages(t, true)
	m := newMachine(t, p)
	prev := m.buildPrevious(t)

	steps := []struct {
		name string
		run  func(t *testing.T)
	}{
		{"fresh install", m.freshInstall},
		{"configure docker and containerd with the installed gpu-ctk", m.configureEngines},
		{"GPU containers under dockerd through the installed runtime", m.gpuContainers},
		{"removal with dockerd running a GPU container of its default runtime gpu, and an MPS share", m.remove},
		{"purge leaves nothing once dockerd restarted", m.purge},
		{"upgrade from " + prev.version + " keeps config edits, registrations and containers", func(t *testing.T) { m.upgrade(t, prev) }},
		{"rpm's upgrade scriptlets change nothing", m.rpmUpgradeScriptlets},
		{"removal stops, changing nothing, while an engine cannot be unconfigured", m.removalRefused},
		{"purge after the upgrade restores daemon.json byte for byte", m.purgeAfterUpgrade},
		{"NVIDIA's hook installed first: never replaced; rpm's install and erase scriptlets", m.nvidiaFirst},
		{"NVIDIA's hook installed after: it replaces the link, which removal leaves", m.nvidiaAfter},
		{"purge while dockerd has gpu loaded keeps the pass-through and says how to remove it", m.purgeWhileLoaded},
		{"removal of a runtime registered as nvidia, NVIDIA's displaced, while dockerd has it loaded", m.removeOtherName},
	}
	for _, s := range steps {
		if !t.Run(s.name, s.run) {
			t.Fatalf("step %q failed; the steps after it depend on it", s.name)
		}
	}
}

// machine is the host under test and what the test must put back.
type machine struct {
	p        packages
	repo     string
	work     string // everything the test writes, /tmp/grp-*: short, for dockerd's socket path
	host     *fakehost.Host
	rootfs   string // a busybox root filesystem, as a tar
	hookLink bool   // no nvidia-container-runtime-hook on dockerd's PATH before: the package links one

	aside             map[string]string // what was moved aside: original path -> where it is
	containerdBefore  *string           // /etc/containerd/config.toml before (nil: absent)
	containerdMode    os.FileMode
	etcDocker, etcCtd []string // listings of /etc/docker and /etc/containerd before
	config            string   // /etc/gpu-runtime/config.toml as the tests edit it
	userDaemonJSON    string   // the daemon.json the upgrade steps start from
	dockerd           *dockerd
	keep              string // the container that runs across the upgrade
	inode             uint64 // /usr/bin/gpu-runtime's before the upgrade
	crioDir           bool   // /etc/crio/crio.conf.d was there before
}

// newMachine checks that the machine can be tested, moves aside what the tests replace and
// registers the cleanup that puts everything back.
func newMachine(t *testing.T, p packages) *machine {
	t.Helper()
	for _, pkg := range []string{"gpu-runtime", fakeNVIDIA} {
		if s := status(pkg); s != "" {
			t.Fatalf("dpkg knows %s here (status %s): purge it first; the tests would replace and remove it", pkg, s)
		}
	}
	for _, b := range []string{"gpu-runtime", "gpu-hook", "gpu-ctk"} {
		if _, err := os.Lstat("/usr/bin/" + b); err == nil {
			t.Fatalf("/usr/bin/%s exists and belongs to no gpu-runtime package: the tests would replace it; remove it first", b)
		}
	}
	work, err := os.MkdirTemp("/tmp", "grp-")
	if err != nil {
		t.Fatal(err)
	}
	m := &machine{p: p, repo: repoRoot(t), work: work, aside: map[string]string{}}
	_, err = exec.LookPath(hookName)
	_, inPath := lookPathIn(hookName, systemPath)
	m.hookLink = err != nil && !inPath

	leftovers := enginetest.RecordLeftovers(enginetest.DockerdHostPaths(), filepath.Join(work, "host-leftovers"))
	if data, err := os.ReadFile(containerdConfig); err == nil {
		s := string(data)
		m.containerdBefore = &s
		if info, err := os.Stat(containerdConfig); err == nil {
			m.containerdMode = info.Mode().Perm()
		}
	}
	m.etcDocker, m.etcCtd = listDir("/etc/docker"), listDir("/etc/containerd")
	_, err = os.Lstat("/etc/crio/crio.conf.d")
	m.crioDir = err == nil
	for _, path := range []string{daemonJSON, "/etc/gpu-runtime", "/run/gpu-runtime"} {
		if _, err := os.Lstat(path); err == nil {
			to := filepath.Join(work, "aside", strings.ReplaceAll(strings.TrimPrefix(path, "/"), "/", "_"))
			if err := os.MkdirAll(filepath.Dir(to), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(path, to); err != nil {
				t.Fatalf("move %s aside: %v", path, err)
			}
			m.aside[path] = to
		}
	}
	t.Cleanup(func() {
		if m.dockerd != nil {
			m.dockerd.stop()
		}
		m.restore(t)
		leftovers.Remove()
		if err := enginetest.RemoveCgroups(cgroupPrefix()); err != nil {
			t.Logf("remove cgroups: %v", err)
		}
		if err := enginetest.Reap(work); err != nil {
			t.Errorf("clean up %s: %v", work, err)
		}
	})

	m.host, err = fakehost.Build(filepath.Join(work, "host"), fakehost.Default(2))
	if err != nil {
		t.Fatalf("build the fake GPU host: %v", err)
	}
	layer, err := enginetest.BusyboxLayer()
	if err != nil {
		t.Fatal(err)
	}
	m.rootfs = filepath.Join(work, "rootfs.tar")
	if err := os.WriteFile(m.rootfs, layer, 0o644); err != nil {
		t.Fatal(err)
	}
	return m
}

// restore puts the machine back: engine files first (so that a purge finds nothing to
// unconfigure), then every package purged, then what was moved aside.
func (m *machine) restore(t *testing.T) {
	for _, dir := range []string{"/etc/docker", "/etc/containerd"} {
		before := m.etcDocker
		if dir == "/etc/containerd" {
			before = m.etcCtd
		}
		for _, name := range listDir(dir) {
			if !slices.Contains(before, name) {
				_ = os.RemoveAll(filepath.Join(dir, name))
			}
		}
	}
	// The tests' daemon.json (the host's, if any, is aside): gone before a purge reads it.
	_ = os.Remove(daemonJSON)
	if m.containerdBefore != nil {
		if err := os.WriteFile(containerdConfig, []byte(*m.containerdBefore), m.containerdMode); err != nil {
			t.Errorf("restore %s: %v", containerdConfig, err)
		}
	}
	for _, pkg := range []string{"gpu-runtime", fakeNVIDIA} {
		if status(pkg) != "" {
			if out, code := run(t, "", aptEnv, "dpkg", "--purge", pkg); code != 0 {
				t.Errorf("purge %s: %s", pkg, out)
			}
		}
	}
	// A pass-through the removal left (a failed step's dockerd was stopped above).
	if data, err := os.ReadFile("/usr/bin/gpu-runtime"); err == nil && strings.Contains(string(data), "# gpu-runtime pass-through: left by") {
		_ = os.Remove("/usr/bin/gpu-runtime")
	}
	if target, err := os.Readlink(hookPath); err == nil && target == "gpu-hook" && m.hookLink {
		_ = os.Remove(hookPath)
	}
	stopShares(t)
	_ = os.RemoveAll("/run/gpu-runtime")
	_ = os.RemoveAll("/etc/gpu-runtime")
	for path, from := range m.aside {
		_ = os.RemoveAll(path)
		if err := os.Rename(from, path); err != nil {
			t.Errorf("put %s back from %s: %v", path, from, err)
		}
	}
}

// aptEnv keeps apt and dpkg from asking anything, and needrestart (where installed) quiet.
var aptEnv = []string{"DEBIAN_FRONTEND=noninteractive", "NEEDRESTART_SUSPEND=1", "APT_LISTCHANGES_FRONTEND=none"}

// apt runs apt-get with args and returns its output and exit code.
func apt(t *testing.T, args ...string) (string, int) {
	t.Helper()
	return run(t, "", aptEnv, "apt-get", append([]string{"-y"}, args...)...)
}

// mustApt runs apt-get, failing t unless it succeeds.
func mustApt(t *testing.T, args ...string) string {
	t.Helper()
	out, code := apt(t, args...)
	if code != 0 {
		t.Fatalf("apt-get %s: exit %d\n%s", strings.Join(args, " "), code, out)
	}
	return out
}

// wantLines checks that out holds each of lines as a whole line.
func wantLines(t *testing.T, what, out string, lines ...string) {
	t.Helper()
	// apt-get runs dpkg on a pseudo-terminal: its scripts' lines end in \r\n.
	have := strings.Split(strings.ReplaceAll(out, "\r\n", "\n"), "\n")
	for _, l := range lines {
		if !slices.Contains(have, l) {
			t.Errorf("%s lacks the line %q:\n%s", what, l, out)
		}
	}
}

// existingHookLine is what the package's hook step says, one line, of a hook that was on
// dockerd's PATH before it (make install's link in /usr/local/bin, or NVIDIA's); "" when there
// is none.
func existingHookLine() string {
	found, ok := lookPathIn(hookName, systemPath)
	if !ok {
		return ""
	}
	if target, err := filepath.EvalSymlinks(found); err == nil && filepath.Base(target) == "gpu-hook" {
		return "gpu-runtime: docker --gpus will use " + found + ", a link to gpu-hook; none added\n"
	}
	return leftHookLine(found) + "\n"
}

// leftHookLine is packaging/scripts/host-setup's line for a hook at path that is not gpu-hook.
func leftHookLine(path string) string {
	return "gpu-runtime: left " + path + " as it is (not gpu-runtime's: NVIDIA Container Toolkit's?). dockerd accepts --gpus with it; " +
		"containers of the gpu runtime get their GPUs from gpu-runtime, containers of runc keep NVIDIA's hook"
}

func lookPathIn(name, path string) (string, bool) {
	for _, dir := range filepath.SplitList(path) {
		p := filepath.Join(dir, name)
		if info, err := os.Stat(p); err == nil && info.Mode().IsRegular() && info.Mode().Perm()&0o111 != 0 {
			return p, true
		}
	}
	return "", false
}

func listDir(dir string) []string {
	entries, _ := os.ReadDir(dir)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// status is dpkg's status of pkg ("ii", "rc"…), or "" when dpkg knows no such package or
// knows it as not installed.
func status(pkg string) string {
	out, _ := exec.Command("dpkg-query", "-W", "-f", "${db:Status-Abbrev}", pkg).Output()
	s := strings.TrimSpace(string(out))
	if strings.HasPrefix(s, "un") || strings.HasPrefix(s, "pn") {
		return ""
	}
	return s
}

const intro = "gpu-runtime: no container engine was changed or restarted. To run GPU containers through gpu-runtime, register it:"

func (m *machine) freshInstall(t *testing.T) {
	out := mustApt(t, "install", m.p.deb)
	wantLines(t, "apt-get install", out, intro)
	if m.hookLink {
		wantLines(t, "apt-get install", out, "gpu-runtime: linked "+hookPath+" -> gpu-hook for docker --gpus (dockerd looks for it when it starts)")
	}
	if _, ok := lookPathIn("dockerd", systemPath); ok { // the hint names the engines found
		wantLines(t, "apt-get install", out, "  gpu-ctk runtime configure --runtime=docker && systemctl restart docker")
	}
	if s := status("gpu-runtime"); s != "ii" {
		t.Fatalf("dpkg status %q after install", s)
	}

	// Every path, with its mode and owner, as the .deb lists it; dpkg -L agrees.
	for _, e := range wantEntries {
		out := mustRun(t, nil, "stat", "-c", "%A %U/%G", e.path)
		if got := strings.TrimSpace(out); got != e.perms+" "+e.owner {
			t.Errorf("%s: %s, want %s %s", e.path, got, e.perms, e.owner)
		}
	}
	var listed []string
	for _, l := range strings.Split(strings.TrimSpace(mustRun(t, nil, "dpkg", "-L", "gpu-runtime")), "\n") {
		if l != "/." {
			listed = append(listed, l)
		}
	}
	var want []string
	for _, e := range wantEntries {
		want = append(want, e.path)
	}
	if !slices.Equal(listed, want) {
		t.Errorf("dpkg -L gpu-runtime:\n  %v\nwant\n  %v", listed, want)
	}
	if out := mustRun(t, nil, "dpkg-query", "-W", "-f", "${Conffiles}", "gpu-runtime"); !regexp.MustCompile(`^\s*/etc/gpu-runtime/config.toml [0-9a-f]{32}\s*$`).MatchString(out) {
		t.Errorf("conffiles: %q", out)
	}
	if got, want := readFile(t, "/etc/gpu-runtime/config.toml"), readFile(t, filepath.Join(m.repo, "config.toml")); got != want {
		t.Errorf("/etc/gpu-runtime/config.toml is not the repository's config.toml")
	}
	for _, b := range []string{"gpu-runtime", "gpu-hook", "gpu-ctk"} {
		if out := mustRun(t, nil, "/usr/bin/"+b, "--version"); !strings.HasPrefix(out, b+" version "+m.p.version+"\n") {
			t.Errorf("%s --version: %q, want the package's version %s", b, out, m.p.version)
		}
	}

	// docker's hook: a link of no package, or none where a hook was there already.
	target, err := os.Readlink(hookPath)
	if m.hookLink {
		if err != nil || target != "gpu-hook" {
			t.Errorf("%s: %q (%v), want a link to gpu-hook", hookPath, target, err)
		}
		if out, code := run(t, "", nil, "dpkg", "-S", hookPath); code == 0 {
			t.Errorf("dpkg -S %s: %s; the link must belong to no package", hookPath, out)
		}
	} else if err == nil && target == "gpu-hook" {
		t.Errorf("%s links to gpu-hook although a hook was on dockerd's PATH", hookPath)
	}
}

func (m *machine) configureEngines(t *testing.T) {
	// gpu as docker's default runtime: the removal step needs a dockerd that runs every
	// container through it.
	out := mustRun(t, nil, installedCTK, "runtime", "configure", "--runtime=docker", "--set-as-default")
	wantLines(t, "gpu-ctk runtime configure --runtime=docker", out, `configured docker: runtime "gpu" -> /usr/bin/gpu-runtime`, "  wrote "+daemonJSON)
	if m.hookLink && strings.Contains(out, "warning:") {
		t.Errorf("configure warns although the package linked the hook:\n%s", out)
	}
	if m.containerdBefore != nil {
		out := mustRun(t, nil, installedCTK, "runtime", "configure", "--runtime=containerd")
		wantLines(t, "gpu-ctk runtime configure --runtime=containerd", out, `configured containerd: runtime "gpu" -> /usr/bin/gpu-runtime`)
	}
	m.editConfig(t)
}

// editConfig points the installed config at the fake GPU host: the user's edit of a conffile.
func (m *machine) editConfig(t *testing.T) {
	t.Helper()
	config := readFile(t, "/etc/gpu-runtime/config.toml")
	for _, r := range []struct{ key, value string }{
		{"root", m.host.DriverRoot}, {"dev-root", m.host.DevRoot},
		{"runtimes", `["runc"]`}, {"log-level", `"debug"`}, {"log-file", fmt.Sprintf("%q", filepath.Join(m.work, "gpu-runtime.log"))},
	} {
		re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(r.key) + ` = .*$`)
		if !re.MatchString(config) {
			t.Fatalf("config.toml has no line %q = …: edit this test along with it", r.key)
		}
		value := r.value
		if !strings.HasPrefix(value, `"`) && !strings.HasPrefix(value, "[") {
			value = fmt.Sprintf("%q", value)
		}
		// The first only: [driver]'s root, not [mps]'s.
		loc := re.FindStringIndex(config)
		config = config[:loc[0]] + r.key + " = " + value + config[loc[1]:]
	}
	writeFile(t, "/etc/gpu-runtime/config.toml", config, 0o644)
	m.config = config
}

func (m *machine) gpuContainers(t *testing.T) {
	d := m.startDockerd(t)
	r := d.docker(t, "run", "--rm", "--network", "none", "--runtime=gpu", "--gpus", "all", "img:1", "sh", "-c", enginetest.Probe)
	if r.Code != 0 {
		m.logRuntime(t)
		t.Fatalf("docker run --runtime=gpu --gpus all: %s", r)
	}
	enginetest.WantGPUs(t, m.host, r.Stdout, 0, 1)
	r = d.docker(t, "run", "--rm", "--network", "none", "--runtime=gpu", "-e", "NVIDIA_VISIBLE_DEVICES=1", "img:1", "sh", "-c", enginetest.Probe)
	if r.Code != 0 {
		t.Fatalf("docker run --runtime=gpu -e NVIDIA_VISIBLE_DEVICES=1: %s", r)
	}
	enginetest.WantGPUs(t, m.host, r.Stdout, 1)
	if t.Failed() {
		m.logRuntime(t)
	}
	d.stop()
	m.dockerd = nil
}

// remove removes the package while a private dockerd, started with gpu as its default runtime,
// runs a GPU container, and an MPS share runs. The share is stopped; dockerd keeps its
// runtimes until it restarts, so the removal leaves a pass-through at /usr/bin/gpu-runtime,
// through which the container is stopped and deleted and a new container without a GPU runs,
// while a GPU container fails with the message; the removal says to restart docker.
func (m *machine) remove(t *testing.T) {
	d := m.startDockerd(t)
	const running = "grp-running"
	if r := d.docker(t, "run", "-d", "--name", running, "--network", "none", "--gpus", "all", "img:1", "sleep", "600"); r.Code != 0 {
		m.logRuntime(t)
		t.Fatalf("docker run -d --gpus all (gpu: the default runtime): %s", r)
	}
	pid := strings.TrimSpace(readFile(t, filepath.Join(d.dir, "docker.pid")))
	// The live engines removal asks: this dockerd and a private containerd with a CRI pod of
	// the runtime gpu (dockerd's own containerd is not asked: dockerd is).
	t.Setenv("DOCKER_HOST", "unix://"+d.sock)
	c := m.startContainerd(t)
	t.Setenv("CONTAINERD_ADDRESS", c.sock)
	t.Setenv("GPU_RUNTIME_CRICTL", c.crictlPath) // dpkg gives the scripts a PATH of its own
	pod := c.crictlMust(t, "runp", "--runtime", "gpu", c.podConfig(t))
	mpsPID := m.startShare(t)
	mustRun(t, nil, installedCTK, "health", "mark", m.host.Options.GPUs[1].UUID, "--reason", "package test")

	out := mustApt(t, "remove", "gpu-runtime")
	wantLines(t, "apt-get remove", out, `unconfigured docker: runtime "gpu" removed`, "  removed "+daemonJSON,
		"note: "+daemonJSON+" held only what configure wrote (configure created it): removed",
		fmt.Sprintf("pkg: stopped (pid %d)", mpsPID),
		"gpu-runtime: the running dockerd (pid "+pid+`) has the runtime "gpu" loaded as its default runtime until it restarts: left /usr/bin/gpu-runtime, a pass-through to runc, so that its containers still stop and containers without a GPU still start; a GPU container fails until then. Restart it: systemctl restart docker`,
		fmt.Sprintf(`gpu-runtime: the running containerd (pid %d) has the runtime "gpu" loaded until it restarts: left /usr/bin/gpu-runtime, a pass-through to runc, so that its containers still stop and containers without a GPU still start; a GPU container fails until then. Restart it: systemctl restart containerd`, c.pid))
	if stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", mpsPID)); err == nil && !strings.Contains(string(stat), ") Z ") {
		t.Errorf("the MPS share's daemon (pid %d) still runs after removal: %s", mpsPID, stat)
	}
	if mounts := readFile(t, "/proc/self/mountinfo"); strings.Contains(mounts, " /run/gpu-runtime/mps/") {
		t.Errorf("an MPS tmpfs is still mounted after removal:\n%s", mounts)
	}
	if data, err := os.ReadFile("/usr/bin/gpu-runtime"); err != nil || !strings.Contains(string(data), "# gpu-runtime pass-through: left by the removal of gpu-runtime's package\n") {
		t.Errorf("/usr/bin/gpu-runtime after removal is not the pass-through (%v):\n%s", err, data)
	}
	if r := d.docker(t, "rm", "-f", running); r.Code != 0 {
		t.Errorf("docker rm -f of the GPU container after removal: %s", r)
	}
	if r := d.docker(t, "ps", "-aq"); r.Code != 0 || strings.TrimSpace(r.Stdout) != "" {
		t.Errorf("docker ps -a after docker rm -f: %s", r)
	}
	// No task left behind in dockerd's containerd.
	ctdSock := filepath.Join(d.dir, "exec", "containerd", "containerd.sock")
	if r := enginetest.Run(t, d.dir, 30*time.Second, nil, "", "ctr", "--address", ctdSock, "--namespace", "moby", "tasks", "ls", "-q"); r.Code != 0 || strings.TrimSpace(r.Stdout) != "" {
		t.Errorf("ctr tasks ls in dockerd's containerd after docker rm -f: %s", r)
	}
	if r := d.docker(t, "run", "--rm", "--network", "none", "img:1", "echo", "no GPU, still runs"); r.Code != 0 || r.Stdout != "no GPU, still runs\n" {
		t.Errorf("docker run of a container without a GPU (default runtime gpu) after removal: %s", r)
	}
	r := d.docker(t, "run", "--rm", "--network", "none", "-e", "NVIDIA_VISIBLE_DEVICES=0", "img:1", "true")
	if want := `gpu-runtime was removed: this container asks for a GPU, which nothing gives it now. Restart the engine, so that it stops using the runtime "gpu": systemctl restart docker && systemctl restart containerd; then install gpu-runtime again, or run the container without a GPU`; r.Code == 0 || !strings.Contains(r.Stderr, want) {
		t.Errorf("docker run -e NVIDIA_VISIBLE_DEVICES=0 after removal: %s\nwant it to fail with %s", r, want)
	}
	// The CRI pod of the runtime gpu stops and is removed.
	if r := c.crictl(t, "stopp", pod); r.Code != 0 {
		t.Errorf("crictl stopp of the gpu pod after removal: %s", r)
	}
	if r := c.crictl(t, "rmp", pod); r.Code != 0 {
		t.Errorf("crictl rmp of the gpu pod after removal: %s", r)
	}
	if r := c.crictl(t, "pods", "-q"); r.Code != 0 || strings.TrimSpace(r.Stdout) != "" {
		t.Errorf("crictl pods after crictl rmp: %s", r)
	}
	c.daemon.Stop()
	d.stop()
	m.dockerd = nil
	if m.containerdBefore != nil {
		wantLines(t, "apt-get remove", out, `unconfigured containerd: runtime "gpu" removed`)
	}
	if m.hookLink {
		wantLines(t, "apt-get remove", out, "gpu-runtime: removed "+hookPath+"; restart dockerd if it runs (it looked for that hook when it started)")
	}
	if s := status("gpu-runtime"); s != "rc" {
		t.Errorf("dpkg status %q after remove, want rc (config files kept)", s)
	}
	for _, path := range []string{"/usr/bin/gpu-hook", "/usr/bin/gpu-ctk", "/usr/lib/gpu-runtime"} {
		if _, err := os.Lstat(path); err == nil {
			t.Errorf("%s is still there after removal", path)
		}
	}
	// Kept until purge: the health file (a record of the GPUs, not of the package), its lock,
	// the stopped share's directories.
	if got := listDir("/run/gpu-runtime"); !slices.Equal(got, []string{"health.csv", "health.csv.lock", "mps"}) {
		t.Errorf("/run/gpu-runtime after removal: %v, want the health file, its lock and mps", got)
	}
	if _, err := os.Lstat(hookPath); err == nil && m.hookLink {
		t.Errorf("%s is still there after removal", hookPath)
	}
	if got := readFile(t, "/etc/gpu-runtime/config.toml"); got != m.config {
		t.Errorf("removal changed the edited config.toml")
	}
	m.checkEnginesRestored(t, nil)
}

// checkEnginesRestored checks that docker's and containerd's files are as they were before
// configure: daemon.json as given (nil: absent), /etc/containerd byte for byte, no backups.
func (m *machine) checkEnginesRestored(t *testing.T, daemon *string) {
	t.Helper()
	data, err := os.ReadFile(daemonJSON)
	switch {
	case daemon == nil && err == nil:
		t.Errorf("%s is left after removal:\n%s", daemonJSON, data)
	case daemon != nil && string(data) != *daemon:
		t.Errorf("%s after removal (err %v):\n%s\nwant, as before configure:\n%s", daemonJSON, err, data, *daemon)
	}
	var added []string
	for _, name := range listDir("/etc/docker") {
		// key.json is dockerd's own, written where daemon.json has no deprecated-key-path.
		if !slices.Contains(m.etcDocker, name) && name != "key.json" && name != "daemon.json" {
			added = append(added, name)
		}
	}
	if len(added) != 0 {
		t.Errorf("/etc/docker holds %v after removal that it did not before", added)
	}
	if m.containerdBefore != nil {
		if got := readFile(t, containerdConfig); got != *m.containerdBefore {
			t.Errorf("%s after removal:\n%s\nwant, as before configure:\n%s", containerdConfig, got, *m.containerdBefore)
		}
	}
	if got := listDir("/etc/containerd"); !slices.Equal(got, m.etcCtd) {
		t.Errorf("/etc/containerd holds %v after removal, %v before", got, m.etcCtd)
	}
}

func (m *machine) purge(t *testing.T) {
	out := mustApt(t, "purge", "gpu-runtime")
	if strings.Contains(out, "kept /usr/bin/gpu-runtime") {
		t.Errorf("purge kept the pass-through although dockerd was restarted (stopped):\n%s", out)
	}
	m.checkNothingLeft(t)
}

// startShare adds an MPS share to the installed configuration, starts it with the installed
// gpu-ctk and returns its daemon's pid.
func (m *machine) startShare(t *testing.T) int {
	t.Helper()
	m.config += "\n[mps.shares.pkg]\ndevices = [\"0\"]\n"
	writeFile(t, "/etc/gpu-runtime/config.toml", m.config, 0o644)
	out := mustRun(t, nil, installedCTK, "mps", "start", "pkg")
	var pid int
	if _, err := fmt.Sscanf(out, "pkg: started (pid %d)", &pid); err != nil {
		t.Fatalf("gpu-ctk mps start pkg: %q", out)
	}
	return pid
}

func (m *machine) checkNothingLeft(t *testing.T) {
	t.Helper()
	if s := status("gpu-runtime"); s != "" {
		t.Errorf("dpkg status %q after purge", s)
	}
	for _, path := range append(ownEntries(), "/run/gpu-runtime") {
		if _, err := os.Lstat(path); err == nil {
			t.Errorf("%s is left after purge", path)
		}
	}
	if _, err := os.Lstat(hookPath); err == nil && m.hookLink {
		t.Errorf("%s is left after purge", hookPath)
	}
	// The engines' backups and directories configure or unconfigure made.
	for _, pattern := range []string{daemonJSON + ".bak.*", containerdConfig + ".bak.*", "/etc/gpu-runtime/*.bak.*"} {
		if left, _ := filepath.Glob(pattern); len(left) != 0 {
			t.Errorf("left after purge: %v", left)
		}
	}
	if _, err := os.Lstat("/etc/crio/crio.conf.d"); err == nil && !m.crioDir {
		t.Errorf("/etc/crio/crio.conf.d is left after purge; it was not there before")
	}
}

// buildPrevious builds the packages once more, as a version before the one under test.
func (m *machine) buildPrevious(t *testing.T) packages {
	t.Helper()
	prev := packages{version: "0~test.previous", dir: filepath.Join(m.work, "previous")}
	if _, code := run(t, "", nil, "dpkg", "--compare-versions", prev.version, "lt", m.p.version); code != 0 {
		t.Fatalf("%s does not sort before %s", prev.version, m.p.version)
	}
	start := time.Now()
	out := mustRun(t, nil, "make", "-C", m.repo, "--no-print-directory", "package", "VERSION="+prev.version, "BIN="+filepath.Join(prev.dir, "bin"), "DIST="+prev.dir)
	if !regexp.MustCompile(`(?m)^package: built version ` + regexp.QuoteMeta(prev.version) + ` \(glibc >= 2\.[0-9]+, nfpm v[0-9.]+\):$`).MatchString(out) {
		t.Errorf("make package does not say what it built:\n%s", out)
	}
	t.Logf("built the previous version's packages in %v", time.Since(start).Round(100*time.Millisecond))
	prev.deb = filepath.Join(prev.dir, fmt.Sprintf("gpu-runtime_%s_%s.deb", prev.version, debArch(t)))
	return prev
}

func (m *machine) upgrade(t *testing.T, prev packages) {
	// The user's daemon.json, in their layout; deprecated-key-path keeps dockerd's key out of /etc/docker.
	m.userDaemonJSON = fmt.Sprintf("{\n  \"deprecated-key-path\": %q,\n  \"shutdown-timeout\": 5\n}\n", filepath.Join(m.work, "key.json"))
	writeFile(t, daemonJSON, m.userDaemonJSON, 0o644)
	mustApt(t, "install", prev.deb)
	if out := mustRun(t, nil, "/usr/bin/gpu-runtime", "--version"); !strings.HasPrefix(out, "gpu-runtime version "+prev.version+"\n") {
		t.Fatalf("the previous version installed says %q", out)
	}
	mustRun(t, nil, installedCTK, "runtime", "configure", "--runtime=docker", "--set-as-default")
	if m.containerdBefore != nil {
		mustRun(t, nil, installedCTK, "runtime", "configure", "--runtime=containerd")
	}
	m.editConfig(t)

	// A GPU container started before the upgrade (gpu is docker's default runtime).
	d := m.startDockerd(t)
	m.keep = "grp-keep"
	if r := d.docker(t, "run", "-d", "--name", m.keep, "--network", "none", "--gpus", "all", "img:1", "sleep", "600"); r.Code != 0 {
		m.logRuntime(t)
		t.Fatalf("docker run -d: %s", r)
	}
	daemonBefore := readFile(t, daemonJSON)
	var ctdBefore string
	if m.containerdBefore != nil {
		ctdBefore = readFile(t, containerdConfig)
	}
	m.inode = inode(t, "/usr/bin/gpu-runtime")

	out := mustApt(t, "install", m.p.deb)
	wantLines(t, "apt-get install (upgrade)", out, "gpu-runtime: upgraded from "+prev.version+"; engine registrations are unchanged and need no restart: new containers run the new gpu-runtime")
	if strings.Contains(out, intro) {
		t.Errorf("the upgrade repeats the install hint:\n%s", out)
	}
	if out := mustRun(t, nil, "/usr/bin/gpu-runtime", "--version"); !strings.HasPrefix(out, "gpu-runtime version "+m.p.version+"\n") {
		t.Errorf("after the upgrade: %q", out)
	}
	if inode(t, "/usr/bin/gpu-runtime") == m.inode {
		t.Errorf("/usr/bin/gpu-runtime was rewritten in place, not replaced by a rename")
	}
	if got := readFile(t, "/etc/gpu-runtime/config.toml"); got != m.config {
		t.Errorf("the upgrade changed the edited config.toml")
	}
	if left, _ := filepath.Glob("/etc/gpu-runtime/config.toml.dpkg-*"); len(left) != 0 {
		t.Errorf("the upgrade left %v", left)
	}
	if got := readFile(t, daemonJSON); got != daemonBefore {
		t.Errorf("the upgrade changed daemon.json:\n%s\nwas\n%s", got, daemonBefore)
	}
	if m.containerdBefore != nil && readFile(t, containerdConfig) != ctdBefore {
		t.Errorf("the upgrade changed %s", containerdConfig)
	}
	if m.hookLink {
		if target, err := os.Readlink(hookPath); err != nil || target != "gpu-hook" {
			t.Errorf("%s after the upgrade: %q (%v)", hookPath, target, err)
		}
	}

	// The container kept running; exec, stop and remove go through the new binary; a new
	// container gets its GPUs from it.
	if r := d.docker(t, "inspect", "-f", "{{.State.Running}}", m.keep); strings.TrimSpace(r.Stdout) != "true" {
		t.Errorf("the container stopped during the upgrade: %s", r)
	}
	if r := d.docker(t, "exec", m.keep, "ls", "/dev/nvidia0", "/dev/nvidia1"); r.Code != 0 {
		t.Errorf("docker exec after the upgrade: %s", r)
	}
	if r := d.docker(t, "rm", "-f", m.keep); r.Code != 0 {
		t.Errorf("docker rm -f after the upgrade: %s", r)
	}
	r := d.docker(t, "run", "--rm", "--network", "none", "--gpus", `"device=1"`, "img:1", "sh", "-c", enginetest.Probe)
	if r.Code != 0 {
		m.logRuntime(t)
		t.Fatalf("docker run --gpus device=1 after the upgrade: %s", r)
	}
	enginetest.WantGPUs(t, m.host, r.Stdout, 1)
	d.stop()
	m.dockerd = nil
}

func inode(t *testing.T, path string) uint64 {
	t.Helper()
	out := mustRun(t, nil, "stat", "-c", "%i", path)
	var n uint64
	if _, err := fmt.Sscan(out, &n); err != nil {
		t.Fatalf("stat %s: %q", path, out)
	}
	return n
}

// scriptlet writes the .rpm's scriptlet (POSTIN, PREUN or POSTUN) to a file and returns it.
func (m *machine) scriptlet(t *testing.T, tag string) string {
	t.Helper()
	body := mustRun(t, nil, "rpm", "-qp", "--qf", "%{"+tag+"}", m.p.rpm)
	if prog := mustRun(t, nil, "rpm", "-qp", "--qf", "%{"+tag+"PROG}", m.p.rpm); prog != "/bin/sh" {
		t.Errorf("%s runs under %q, want /bin/sh", tag, prog)
	}
	path := filepath.Join(m.work, strings.ToLower(tag))
	writeFile(t, path, body, 0o755)
	return path
}

// engineFiles is what the engines' registration and docker's hook look like now.
func (m *machine) engineFiles(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	for _, f := range []string{daemonJSON, containerdConfig, "/etc/containerd/conf.d/99-gpu-runtime.toml"} {
		data, _ := os.ReadFile(f)
		fmt.Fprintf(&b, "%s:\n%s\n", f, data)
	}
	target, _ := os.Readlink(hookPath)
	fmt.Fprintf(&b, "%s -> %s\n", hookPath, target)
	return b.String()
}

// rpmUpgradeScriptlets runs the .rpm's scriptlets as an rpm upgrade does — the new %post with
// 2, then the old %preun and %postun with 1 — under bash, /bin/sh on RHEL.
func (m *machine) rpmUpgradeScriptlets(t *testing.T) {
	before := m.engineFiles(t)
	out := mustRun(t, nil, "bash", m.scriptlet(t, "POSTIN"), "2")
	want := "gpu-runtime: upgraded; engine registrations are unchanged and need no restart: new containers run the new gpu-runtime\n"
	if !m.hookLink {
		want = existingHookLine() + want
	}
	if out != want {
		t.Errorf("%%post 2: %q, want %q", out, want)
	}
	for _, tag := range []string{"PREUN", "POSTUN"} {
		if out := mustRun(t, nil, "bash", m.scriptlet(t, tag), "1"); out != "" {
			t.Errorf("%%%s 1 said %q", strings.ToLower(tag), out)
		}
	}
	if after := m.engineFiles(t); after != before {
		t.Errorf("the upgrade scriptlets changed the engines' files:\n%s\nwere\n%s", after, before)
	}
	for _, path := range []string{"/etc/gpu-runtime/config.toml", "/usr/bin/gpu-runtime"} {
		if _, err := os.Stat(path); err != nil {
			t.Errorf("after the upgrade scriptlets: %v", err)
		}
	}
}

func (m *machine) removalRefused(t *testing.T) {
	good := readFile(t, daemonJSON)
	before := m.engineFiles(t)
	writeFile(t, daemonJSON, "{\n  \"debug\": yes\n}\n", 0o644)
	out, code := apt(t, "remove", "gpu-runtime")
	if code == 0 {
		t.Fatalf("apt-get remove succeeded with a daemon.json gpu-ctk cannot read:\n%s", out)
	}
	wantLines(t, "apt-get remove", out,
		"gpu-ctk: unconfigure docker: parse "+daemonJSON+" at line 2, column 12: invalid character 'y' looking for beginning of value",
		`gpu-runtime: cannot unregister gpu-runtime's runtimes from: docker (see above), so no engine was changed. Fix that configuration, or remove the runtime from it by hand, then remove gpu-runtime again: removing it now would leave an engine pointing at a missing binary`)
	if s := status("gpu-runtime"); s != "ii" {
		t.Errorf("dpkg status %q after the refused removal, want ii", s)
	}
	writeFile(t, daemonJSON, good, 0o644)
	if after := m.engineFiles(t); after != before {
		t.Errorf("the refused removal changed an engine:\n%s\nwas\n%s", after, before)
	}
}

func (m *machine) purgeAfterUpgrade(t *testing.T) {
	out := mustApt(t, "purge", "gpu-runtime")
	wantLines(t, "apt-get purge", out, `unconfigured docker: runtime "gpu" removed`)
	if !regexp.MustCompile(`(?m)^  restored /etc/docker/daemon\.json as it was before configure, from /etc/docker/daemon\.json\.bak\.[0-9T]+Z(\.[0-9]+)? \(removed\)\r?$`).MatchString(out) {
		t.Errorf("apt-get purge does not say daemon.json was restored:\n%s", out)
	}
	m.checkEnginesRestored(t, &m.userDaemonJSON)
	m.checkNothingLeft(t)
	if err := os.Remove(daemonJSON); err != nil {
		t.Fatal(err)
	}
}

// buildFakeNVIDIA builds a package that ships hookPath, as NVIDIA's toolkit does.
func (m *machine) buildFakeNVIDIA(t *testing.T) string {
	t.Helper()
	nfpms, _ := filepath.Glob(filepath.Join(m.repo, ".cache", "nfpm", "nfpm-*"))
	if len(nfpms) == 0 {
		t.Fatal("no nfpm in .cache/nfpm: make package builds it")
	}
	dir := filepath.Join(m.work, "nvidia")
	writeFile(t, filepath.Join(dir, "hook"), "#!/bin/sh\necho \"NVIDIA's hook (a stand-in)\"\n", 0o755)
	writeFile(t, filepath.Join(dir, "nfpm.yaml"), fmt.Sprintf(`name: %s
arch: all
version: 1.0
maintainer: gpu-runtime tests <dev@gpu-runtime.local>
description: stands in for NVIDIA's nvidia-container-toolkit in gpu-runtime's package tests
contents:
  - src: %s
    dst: %s
    file_info: {mode: 0755}
`, fakeNVIDIA, filepath.Join(dir, "hook"), hookPath), 0o644)
	deb := filepath.Join(dir, fakeNVIDIA+".deb")
	mustRun(t, nil, nfpms[len(nfpms)-1], "package", "--config", filepath.Join(dir, "nfpm.yaml"), "--packager", "deb", "--target", deb)
	return deb
}

// nvidiaHookIntact checks that hookPath is the stand-in's, owned by its package.
func nvidiaHookIntact(t *testing.T) {
	t.Helper()
	if data, err := os.ReadFile(hookPath); err != nil || !strings.Contains(string(data), "NVIDIA's hook (a stand-in)") {
		t.Errorf("%s is no longer NVIDIA's (%v):\n%s", hookPath, err, data)
	}
	if out := mustRun(t, nil, "dpkg", "-S", hookPath); !strings.HasPrefix(out, fakeNVIDIA+": ") {
		t.Errorf("dpkg -S %s: %s", hookPath, out)
	}
}

func (m *machine) nvidiaFirst(t *testing.T) {
	if !m.hookLink {
		t.Skipf("SKIPPED: this machine has an %s on dockerd's PATH already; the stand-in package would conflict with it", hookName)
	}
	mustApt(t, "install", m.buildFakeNVIDIA(t))
	out := mustApt(t, "install", m.p.deb)
	left := leftHookLine(hookPath)
	wantLines(t, "apt-get install", out, left)
	nvidiaHookIntact(t)
	out = mustRun(t, nil, installedCTK, "runtime", "configure", "--runtime=docker")
	wantLines(t, "gpu-ctk runtime configure", out, "note: "+hookPath+" is not gpu-hook (NVIDIA Container Toolkit's?); leave it: dockerd accepts --gpus with it, containers of the gpu runtime get their GPUs from gpu-runtime, and containers of runc keep NVIDIA's hook")

	// rpm's fresh install (%post 1), then its erase: %preun 0, the files, %postun 0.
	out = mustRun(t, nil, "dash", m.scriptlet(t, "POSTIN"), "1")
	wantLines(t, "%post 1", out, left, intro)
	out = mustRun(t, nil, "dash", m.scriptlet(t, "PREUN"), "0")
	wantLines(t, "%preun 0", out, `unconfigured docker: runtime "gpu" removed`, "  removed "+daemonJSON)
	if strings.Contains(out, "gpu-runtime: removed") {
		t.Errorf("%%preun 0 removed a hook:\n%s", out)
	}
	nvidiaHookIntact(t)
	mustRun(t, aptEnv, "dpkg", "--remove", "gpu-runtime")
	// As containers and an MPS share leave it: the cache goes, a share's files stay (a
	// daemon may be using them; removing them would fail the scriptlet on its mount). The
	// package's prerm stops the shares; these files stand for one started after it.
	share := "/run/gpu-runtime/mps/train/daemon.pid"
	if err := os.MkdirAll(filepath.Dir(share), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"/run/gpu-runtime/discovery-cache.csv", share} {
		if err := os.WriteFile(f, []byte("x\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if out := mustRun(t, nil, "dash", m.scriptlet(t, "POSTUN"), "0"); out != "" {
		t.Errorf("%%postun 0 said %q", out)
	}
	if _, err := os.Stat("/run/gpu-runtime/discovery-cache.csv"); err == nil {
		t.Errorf("the discovery cache is left after %%postun 0")
	}
	if _, err := os.Stat(share); err != nil {
		t.Errorf("%%postun 0 removed an MPS share's file: %v", err)
	}
	if err := os.RemoveAll("/run/gpu-runtime/mps"); err != nil {
		t.Fatal(err)
	}
	if out := mustRun(t, nil, "dash", m.scriptlet(t, "POSTUN"), "0"); out != "" {
		t.Errorf("%%postun 0 said %q", out)
	}
	if _, err := os.Stat("/run/gpu-runtime"); err == nil {
		t.Errorf("/run/gpu-runtime is left after %%postun 0, empty")
	}
	mustApt(t, "purge", "gpu-runtime")
	nvidiaHookIntact(t)
	m.checkEnginesRestored(t, nil)
	mustApt(t, "purge", fakeNVIDIA)
	m.checkNothingLeft(t)
}

func (m *machine) nvidiaAfter(t *testing.T) {
	if !m.hookLink {
		t.Skipf("SKIPPED: this machine has an %s on dockerd's PATH already", hookName)
	}
	mustApt(t, "install", m.p.deb)
	if target, err := os.Readlink(hookPath); err != nil || target != "gpu-hook" {
		t.Fatalf("%s: %q (%v), want the link", hookPath, target, err)
	}
	mustApt(t, "install", filepath.Join(m.work, "nvidia", fakeNVIDIA+".deb"))
	nvidiaHookIntact(t)
	out := mustApt(t, "purge", "gpu-runtime")
	if strings.Contains(out, "gpu-runtime: removed "+hookPath) {
		t.Errorf("removal says it removed NVIDIA's hook:\n%s", out)
	}
	nvidiaHookIntact(t)
	mustApt(t, "purge", fakeNVIDIA)
	m.checkNothingLeft(t)
}

// cgroupPrefix names the parent cgroups of the test's containers, removed at its end.
func cgroupPrefix() string { return fmt.Sprintf("grp-%d-", os.Getpid()) }

// dockerd is a private dockerd on /etc/docker/daemon.json — the file gpu-ctk configures and
// package removal restores — with its own data root, exec root, socket and pid file, and the
// PATH systemd would give it, so that it finds the package's hook link.
type dockerd struct {
	dir, sock string
	daemon    *enginetest.Daemon
	stopped   bool
}

func (m *machine) startDockerd(t *testing.T) *dockerd {
	t.Helper()
	if _, err := os.Stat(enginetest.Dockerd()); err != nil {
		t.Fatalf("no dockerd (make deps installs docker.io): %v", err)
	}
	dir, err := os.MkdirTemp(m.work, "d")
	if err != nil {
		t.Fatal(err)
	}
	d := &dockerd{dir: dir, sock: filepath.Join(dir, "docker.sock")}
	ready := func() error {
		out, err := exec.Command(enginetest.DockerClient, "-H", "unix://"+d.sock, "version").CombinedOutput()
		if err != nil {
			return fmt.Errorf("%w: %s", err, out)
		}
		return nil
	}
	d.daemon, err = enginetest.StartDaemon("dockerd", dir, []string{"PATH=" + systemPath}, ready,
		enginetest.Dockerd(), "--config-file", daemonJSON,
		"--data-root", filepath.Join(dir, "data"), "--exec-root", filepath.Join(dir, "exec"),
		"--pidfile", filepath.Join(dir, "docker.pid"), "-H", "unix://"+d.sock,
		"--bridge", "none", "--iptables=false", "--ip6tables=false", "--cgroup-parent", "/"+cgroupPrefix()+"dockerd")
	if err != nil {
		t.Fatal(err)
	}
	m.dockerd = d
	d.daemon.BeforeStop = func() {
		out, _ := exec.Command(enginetest.DockerClient, "-H", "unix://"+d.sock, "ps", "-aq").Output()
		if ids := strings.Fields(string(out)); len(ids) > 0 {
			_ = exec.Command(enginetest.DockerClient, append([]string{"-H", "unix://" + d.sock, "rm", "-f"}, ids...)...).Run()
		}
	}
	if r := enginetest.Run(t, m.work, 60*time.Second, d.env(), m.rootfs, enginetest.DockerClient, "-H", "unix://"+d.sock, "import", "--change", `CMD ["/bin/sh"]`, "-", "img:1"); r.Code != 0 {
		t.Fatalf("docker import: %s", r)
	}
	return d
}

func (d *dockerd) env() []string { return []string{"DOCKER_CONFIG=" + filepath.Join(d.dir, "client")} }

func (d *dockerd) docker(t *testing.T, args ...string) enginetest.Result {
	t.Helper()
	return enginetest.Run(t, d.dir, 90*time.Second, d.env(), "", enginetest.DockerClient, append([]string{"-H", "unix://" + d.sock}, args...)...)
}

func (d *dockerd) stop() {
	if !d.stopped {
		d.stopped = true
		d.daemon.Stop()
	}
}

// logRuntime logs the end of gpu-runtime's log, for failures.
func (m *machine) logRuntime(t *testing.T) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(m.work, "gpu-runtime.log"))
	if len(data) > 4000 {
		data = data[len(data)-4000:]
	}
	t.Logf("end of gpu-runtime's log (%v):\n%s", err, data)
}

// purgeWhileLoaded purges the package while a dockerd that loaded the runtime gpu still runs:
// the pass-through stays, and the purge says to restart docker and then remove it.
func (m *machine) purgeWhileLoaded(t *testing.T) {
	mustApt(t, "install", m.p.deb)
	mustRun(t, nil, installedCTK, "runtime", "configure", "--runtime=docker")
	m.editConfig(t)
	d := m.startDockerd(t)
	pid := strings.TrimSpace(readFile(t, filepath.Join(d.dir, "docker.pid")))
	t.Setenv("DOCKER_HOST", "unix://"+d.sock)
	t.Setenv("CONTAINERD_ADDRESS", filepath.Join(m.work, "no-containerd.sock"))
	out := mustApt(t, "purge", "gpu-runtime")
	wantLines(t, "apt-get purge", out,
		"gpu-runtime: the running dockerd (pid "+pid+`) has the runtime "gpu" loaded until it restarts: left /usr/bin/gpu-runtime, a pass-through to runc, so that its containers still stop and containers without a GPU still start; a GPU container fails until then. Restart it: systemctl restart docker`,
		"gpu-runtime: kept /usr/bin/gpu-runtime, the pass-through to runc: the running dockerd (pid "+pid+`) still has gpu-runtime loaded as a runtime. Restart it, then remove the pass-through: systemctl restart docker && rm /usr/bin/gpu-runtime`)
	if r := d.docker(t, "run", "--rm", "--network", "none", "--runtime=gpu", "img:1", "echo", "through the pass-through"); r.Code != 0 || r.Stdout != "through the pass-through\n" {
		t.Errorf("docker run --runtime=gpu of a container without a GPU after purge: %s", r)
	}
	d.stop()
	m.dockerd = nil
	if err := os.Remove("/usr/bin/gpu-runtime"); err != nil {
		t.Errorf("the pass-through, to be removed by hand after the restart: %v", err)
	}
	m.checkNothingLeft(t)
}

// removeOtherName removes the package from a host migrated from NVIDIA's toolkit: daemon.json
// had NVIDIA's runtime "nvidia" as the default, and gpu-ctk runtime configure --runtime-name
// nvidia --set-as-default put gpu-runtime in its place. A private dockerd runs with that
// loaded. The removal tells gpu-runtime's runtime by its path, not its name: daemon.json is put
// back byte for byte (NVIDIA's entry and the default), and the pass-through is left for the
// dockerd, the message naming "nvidia".
func (m *machine) removeOtherName(t *testing.T) {
	before := fmt.Sprintf("{\n  \"deprecated-key-path\": %q,\n  \"default-runtime\": \"nvidia\",\n  \"runtimes\": {\n    \"nvidia\": {\"path\": \"nvidia-container-runtime\", \"runtimeArgs\": []}\n  }\n}\n",
		filepath.Join(m.work, "key.json"))
	mustApt(t, "install", m.p.deb)
	writeFile(t, daemonJSON, before, 0o644)
	out := mustRun(t, nil, installedCTK, "runtime", "configure", "--runtime=docker", "--runtime-name=nvidia", "--set-as-default")
	wantLines(t, "gpu-ctk runtime configure --runtime=docker --runtime-name=nvidia --set-as-default", out, `configured docker: runtime "nvidia" -> /usr/bin/gpu-runtime`)
	m.editConfig(t)
	d := m.startDockerd(t)
	pid := strings.TrimSpace(readFile(t, filepath.Join(d.dir, "docker.pid")))
	if r := d.docker(t, "info", "--format", "{{.DefaultRuntime}}"); r.Code != 0 || r.Stdout != "nvidia\n" {
		t.Fatalf("docker info: default runtime %s, want nvidia", r)
	}
	t.Setenv("DOCKER_HOST", "unix://"+d.sock)
	t.Setenv("CONTAINERD_ADDRESS", filepath.Join(m.work, "no-containerd.sock"))
	out = mustApt(t, "remove", "gpu-runtime")
	wantLines(t, "apt-get remove", out, `unconfigured docker: runtime "nvidia" removed`,
		`note: docker runtime "nvidia" is again what it was before configure: {"path":"nvidia-container-runtime","runtimeArgs":[]}`,
		`note: docker default-runtime is again "nvidia", as before configure`,
		"gpu-runtime: the running dockerd (pid "+pid+`) has the runtime "nvidia" loaded as its default runtime until it restarts: left /usr/bin/gpu-runtime, a pass-through to runc, so that its containers still stop and containers without a GPU still start; a GPU container fails until then. Restart it: systemctl restart docker`)
	m.checkEnginesRestored(t, &before)
	if r := d.docker(t, "run", "--rm", "--network", "none", "img:1", "echo", "no GPU, still runs"); r.Code != 0 || r.Stdout != "no GPU, still runs\n" {
		t.Errorf("docker run of a container without a GPU (default runtime nvidia, gpu-runtime's) after removal: %s", r)
	}
	r := d.docker(t, "run", "--rm", "--network", "none", "-e", "NVIDIA_VISIBLE_DEVICES=0", "img:1", "true")
	if want := `gpu-runtime was removed: this container asks for a GPU, which nothing gives it now. Restart the engine, so that it stops using the runtime "nvidia": systemctl restart docker; then install gpu-runtime again, or run the container without a GPU`; r.Code == 0 || !strings.Contains(r.Stderr, want) {
		t.Errorf("docker run -e NVIDIA_VISIBLE_DEVICES=0 after removal: %s\nwant it to fail with %s", r, want)
	}
	d.stop()
	m.dockerd = nil
	mustApt(t, "purge", "gpu-runtime")
	if err := os.Remove(daemonJSON); err != nil {
		t.Errorf("remove the test's daemon.json: %v", err)
	}
	m.checkNothingLeft(t)
}

// stopShares ends what a failed step left of the MPS share it started: the daemon its pid file
// names (only if it is nvidia-cuda-mps-control) and the mounts under /run/gpu-runtime.
func stopShares(t *testing.T) {
	pidFiles, _ := filepath.Glob("/run/gpu-runtime/mps/*/daemon.pid")
	for _, f := range pidFiles {
		var pid int
		if data, err := os.ReadFile(f); err == nil {
			_, _ = fmt.Sscan(string(data), &pid)
		}
		if cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); pid > 0 && err == nil && strings.Contains(string(cmdline), "nvidia-cuda-mps-control") {
			t.Logf("stopping the MPS daemon a failed step left (pid %d)", pid)
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	mounts, _ := os.ReadFile("/proc/self/mountinfo")
	for _, l := range strings.Split(string(mounts), "\n") {
		if f := strings.Fields(l); len(f) > 4 && strings.HasPrefix(f[4], "/run/gpu-runtime/") {
			t.Logf("unmounting %s, left by a failed step", f[4])
			_ = syscall.Unmount(f[4], syscall.MNT_DETACH)
		}
	}
}

// privateContainerd is a containerd of the test's own, with the CRI, on private paths, gpu
// registered by the installed gpu-ctk in a configuration of its own (package removal leaves
// that one: what matters is that this containerd loaded the runtime).
type privateContainerd struct {
	dir, sock, crictlConfig, crictlPath string
	pid                                 int
	daemon                              *enginetest.Daemon
}

// containerdMain: private paths; what the CRI needs on these machines (restrict_oom_score_adj,
// a local sandbox image, CNI directories of its own: pods use the host network).
const containerdMain = `version = 2
root = %[1]q
state = %[2]q

[grpc]
  address = %[3]q

[plugins]
  [plugins."io.containerd.internal.v1.opt"]
    path = %[4]q
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = "docker.io/library/pause:1"
    restrict_oom_score_adj = true
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = %[5]q
      conf_dir = %[5]q
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        Root = %[6]q
`

func (m *machine) startContainerd(t *testing.T) *privateContainerd {
	t.Helper()
	crictl := filepath.Join(m.repo, ".cache", "crictl", "crictl")
	if _, err := os.Stat(crictl); err != nil {
		t.Fatalf("no crictl in .cache/crictl (make deps builds it): %v", err)
	}
	for _, tool := range []string{"containerd", "ctr", "containerd-shim-runc-v2"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is not installed (make deps installs it)", tool)
		}
	}
	dir := filepath.Join(m.work, "c")
	c := &privateContainerd{dir: dir, sock: filepath.Join(dir, "containerd.sock"), crictlConfig: filepath.Join(dir, "crictl.yaml"), crictlPath: crictl}
	config := filepath.Join(dir, "config.toml")
	writeFile(t, config, fmt.Sprintf(containerdMain, filepath.Join(dir, "root"), filepath.Join(dir, "state"), c.sock,
		filepath.Join(dir, "opt"), filepath.Join(dir, "cni"), filepath.Join(dir, "runc")), 0o644)
	writeFile(t, c.crictlConfig, fmt.Sprintf("runtime-endpoint: unix://%s\nimage-endpoint: unix://%s\ntimeout: 30\n", c.sock, c.sock), 0o644)
	mustRun(t, nil, installedCTK, "runtime", "configure", "--runtime=containerd", "--config", config, "--drop-in", filepath.Join(dir, "conf.d", "99-gpu-runtime.toml"))
	layer, err := enginetest.BusyboxLayer()
	if err != nil {
		t.Fatal(err)
	}
	archive, err := enginetest.DockerArchive(layer, map[string][]string{"pause:1": {"/bin/sleep", "2147483647"}})
	if err != nil {
		t.Fatal(err)
	}
	images := filepath.Join(dir, "images.tar")
	if err := os.WriteFile(images, archive, 0o644); err != nil {
		t.Fatal(err)
	}
	ready := func() error {
		out, err := exec.Command("ctr", "--address", c.sock, "version").CombinedOutput()
		if err != nil {
			return fmt.Errorf("%w: %s", err, out)
		}
		return nil
	}
	c.daemon, err = enginetest.StartDaemon("containerd", dir, []string{"PATH=" + systemPath}, ready, "containerd", "--config", config)
	if err != nil {
		t.Fatal(err)
	}
	c.daemon.BeforeStop = func() {
		_ = exec.Command(crictl, "--config", c.crictlConfig, "rmp", "--all", "--force").Run()
	}
	t.Cleanup(c.daemon.Stop)
	mustRun(t, nil, "ctr", "--address", c.sock, "-n", "k8s.io", "images", "import", images)
	// Its pid, as the removal names it: the process running containerd with this config.
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		if data, err := os.ReadFile(p); err == nil && string(data) == "containerd\x00--config\x00"+config+"\x00" {
			_, _ = fmt.Sscanf(p, "/proc/%d/cmdline", &c.pid)
		}
	}
	if c.pid == 0 {
		t.Fatal("cannot find the private containerd's pid")
	}
	return c
}

func (c *privateContainerd) crictl(t *testing.T, args ...string) enginetest.Result {
	t.Helper()
	return enginetest.Run(t, c.dir, 90*time.Second, nil, "", c.crictlPath, append([]string{"--config", c.crictlConfig}, args...)...)
}

func (c *privateContainerd) crictlMust(t *testing.T, args ...string) string {
	t.Helper()
	r := c.crictl(t, args...)
	if r.Code != 0 {
		t.Fatalf("crictl %s: %s", strings.Join(args, " "), r)
	}
	return strings.TrimSpace(r.Stdout)
}

// podConfig writes a pod sandbox config: host network, so no CNI is needed.
func (c *privateContainerd) podConfig(t *testing.T) string {
	t.Helper()
	logDir := filepath.Join(c.dir, "pods")
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(c.dir, "pod.json")
	writeFile(t, p, fmt.Sprintf(`{"metadata":{"name":"gpu-pod","namespace":"grp","uid":"grp-%d","attempt":0},"log_directory":%q,
"linux":{"cgroup_parent":"/%scri","security_context":{"namespace_options":{"network":2}}}}`, os.Getpid(), logDir, cgroupPrefix()), 0o644)
	return p
}
