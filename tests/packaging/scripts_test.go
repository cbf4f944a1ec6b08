package packaging

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// These tests run the shell scripts of packaging and installation without installing anything:
// in temporary directories, with fake commands first on PATH. They need no root and run under
// go test ./... like any unit test.

// repoRoot is the repository, two levels up from this package.
func repoRoot(t testing.TB) string {
	t.Helper()
	dir, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// run runs a command and returns its combined output and exit code.
func run(t testing.TB, dir string, env []string, name string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return string(out), 0
	case errors.As(err, &exit):
		return string(out), exit.ExitCode()
	}
	t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	return "", -1
}

func writeFile(t testing.TB, path, content string, mode fs.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
}

func git(t testing.TB, dir string, args ...string) {
	t.Helper()
	env := []string{"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t", "GIT_CONFIG_GLOBAL=/dev/null"}
	if out, code := run(t, dir, env, "git", args...); code != 0 {
		t.Fatalf("git %s: %s", strings.Join(args, " "), out)
	}
}

// TestVersionRule: scripts/version.sh in a scratch repository through its history, each
// version later than the one before for dpkg (and rpm, where installed).
func TestVersionRule(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "scripts", "version.sh"), readFile(t, filepath.Join(repoRoot(t), "scripts", "version.sh")), 0o755)
	version := func(env ...string) (string, int) {
		out, code := run(t, dir, append(env, "GIT_CEILING_DIRECTORIES="+filepath.Dir(dir)), "scripts/version.sh")
		return strings.TrimSpace(out), code
	}
	head := func() string {
		out, _ := run(t, dir, nil, "git", "rev-parse", "--short=12", "HEAD")
		return strings.TrimSpace(out)
	}

	if got, _ := version(); got != "0.0.0~unknown" {
		t.Errorf("outside git: %q, want 0.0.0~unknown", got)
	}
	git(t, dir, "init", "-q")
	git(t, dir, "add", ".")
	git(t, dir, "commit", "-qm", "one")
	var seen []string
	step := func(description, want string) {
		t.Helper()
		got, code := version()
		if code != 0 || got != want {
			t.Errorf("%s: %q (exit %d), want %q", description, got, code, want)
		}
		seen = append(seen, got)
	}
	step("no tag", "0.0.0~git1."+head())
	git(t, dir, "commit", "-q", "--allow-empty", "-m", "two")
	step("no tag, a commit later", "0.0.0~git2."+head())
	git(t, dir, "tag", "v1.2.0-rc1")
	step("on a pre-release tag", "1.2.0~rc1")
	git(t, dir, "commit", "-q", "--allow-empty", "-m", "three")
	git(t, dir, "tag", "v1.2.0")
	step("on a tag", "1.2.0")
	git(t, dir, "commit", "-q", "--allow-empty", "-m", "four")
	step("after a tag", "1.2.0+git1."+head())
	writeFile(t, filepath.Join(dir, "scripts", "version.sh"), readFile(t, filepath.Join(dir, "scripts", "version.sh"))+"\n", 0o755)
	step("uncommitted changes", "1.2.0+git1."+head()+".dirty")
	git(t, dir, "tag", "1.3.0")
	if got, _ := version(); got != "1.3.0.dirty" {
		t.Errorf("a tag without v: %q, want 1.3.0.dirty", got)
	}

	for i := 1; i < len(seen); i++ {
		if _, code := run(t, dir, nil, "dpkg", "--compare-versions", seen[i-1], "lt", seen[i]); code != 0 {
			t.Errorf("dpkg does not order %s before %s", seen[i-1], seen[i])
		}
		if _, err := exec.LookPath("rpm"); err == nil {
			out, _ := run(t, dir, nil, "rpm", "--eval", fmt.Sprintf(`%%{lua:print(rpm.vercmp(%q, %q))}`, seen[i-1], seen[i]))
			if strings.TrimSpace(out) != "-1" {
				t.Errorf("rpm does not order %s before %s: vercmp says %q", seen[i-1], seen[i], out)
			}
		}
	}

	testCases := []struct{ value, want string }{
		{"1.2.3", "1.2.3"},
		{"2.0~beta1+git3.abc", "2.0~beta1+git3.abc"},
		{"v1.2.3", `version.sh: "v1.2.3" is not a package version: it must start with a digit and hold only letters, digits and . + ~`},
		{"1.2-3", `version.sh: "1.2-3" is not a package version: it must start with a digit and hold only letters, digits and . + ~`},
	}
	for _, tc := range testCases {
		got, code := version("VERSION=" + tc.value)
		if got != tc.want || (code != 0) != (got != tc.value) {
			t.Errorf("VERSION=%s: %q (exit %d), want %q", tc.value, got, code, tc.want)
		}
	}
}

func readFile(t testing.TB, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// fakeBinaries writes gpu-runtime, gpu-hook, gpu-ctk and gpu-kubelet-plugin into dir: native ELF executables (the
// script checks each binary's ELF machine) that print version as make build's do.
func fakeBinaries(t testing.TB, dir, version string) {
	t.Helper()
	for _, b := range []string{"gpu-runtime", "gpu-hook", "gpu-ctk", "gpu-kubelet-plugin"} {
		compileC(t, filepath.Join(dir, b), fmt.Sprintf(`#include <stdio.h>
int main(void) { puts("%s version %s"); puts("spec: 1.2.1"); return 0; }
`, b, version))
	}
}

// compileC compiles src, a C program, into the executable out with the host's cc.
func compileC(t testing.TB, out, src string) {
	t.Helper()
	cc, err := exec.LookPath("cc")
	if err != nil {
		if os.Getenv("GPU_RUNTIME_E2E") != "" {
			t.Fatalf("cc is needed to build the fake binaries (apt-get install gcc; make deps installs it): %v", err)
		}
		t.Skipf("SKIP: cc is needed to build the fake binaries (apt-get install gcc): %v", err)
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(cc, "-x", "c", "-o", out, "-")
	cmd.Stdin = strings.NewReader(src)
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("cc %s: %v\n%s", out, err, msg)
	}
}

// TestPackageRefusesMismatchedBinaries: scripts/package.sh stops, saying why, before building
// anything, when the binaries are missing or carry another version than the packages would.
func TestPackageRefusesMismatchedBinaries(t *testing.T) {
	repo := repoRoot(t)
	bin := t.TempDir()
	out, code := run(t, repo, []string{"VERSION=1.2.3", "BIN=" + bin, "DIST=" + t.TempDir()}, "scripts/package.sh")
	if want := "package: " + bin + "/gpu-runtime is missing: run make build first (make package does)\n"; code != 1 || out != want {
		t.Errorf("no binaries: %q (exit %d), want %q", out, code, want)
	}
	fakeBinaries(t, bin, "1.2.2")
	out, code = run(t, repo, []string{"VERSION=1.2.3", "BIN=" + bin, "DIST=" + t.TempDir()}, "scripts/package.sh")
	want := "package: " + bin + `/gpu-runtime says "gpu-runtime version 1.2.2", but the packages would be version 1.2.3: build with the same VERSION (make package VERSION=1.2.3)` + "\n"
	if code != 1 || out != want {
		t.Errorf("another version: %q (exit %d), want %q", out, code, want)
	}
	compileC(t, filepath.Join(bin, "gpu-runtime"), "int main(void) { return 3; }\n")
	out, code = run(t, repo, []string{"VERSION=1.2.3", "BIN=" + bin, "DIST=" + t.TempDir()}, "scripts/package.sh")
	if want := "package: " + bin + "/gpu-runtime --version failed\n"; code != 1 || out != want {
		t.Errorf("a binary that fails: %q (exit %d), want %q", out, code, want)
	}
	writeFile(t, filepath.Join(bin, "gpu-runtime"), "#!/bin/sh\necho 'gpu-runtime version 1.2.3'\n", 0o755)
	out, code = run(t, repo, []string{"VERSION=1.2.3", "BIN=" + bin, "DIST=" + t.TempDir()}, "scripts/package.sh")
	machine := map[string]int{"amd64": 62, "arm64": 183}[runtime.GOARCH]
	if want := fmt.Sprintf("package: %s/gpu-runtime is not an %s binary (ELF machine 11637, want %d): build it with make build ARCH=%[2]s (make package ARCH=%[2]s does)\n", bin, runtime.GOARCH, machine); code != 1 || out != want {
		t.Errorf("a script, not a binary: %q (exit %d), want %q", out, code, want)
	}
	out, code = run(t, repo, []string{"VERSION=v1", "BIN=" + bin}, "scripts/package.sh")
	if !strings.Contains(out, `version.sh: "v1" is not a package version`) || code != 1 {
		t.Errorf("a bad VERSION: %q (exit %d)", out, code)
	}
}

// TestPackageScript: what scripts/package.sh says and does on the way to nfpm, with fake tools
// (objdump, go, nfpm) in a sandbox; the real build is make package's, under TestDeb and TestRPM.
func TestPackageScript(t *testing.T) {
	const glibc = `echo "0000000000000000      DF *UND*  0000000000000000 (GLIBC_2.34) pthread_create"; echo "(GLIBC_2.2.5) free"`
	testCases := []struct {
		description string
		objdump     string // the fake objdump's body; "" for none
		goBody      string // the fake go's; "" for none
		nfpm        string // the fake nfpm's (NFPM); "" to build one
		stale       bool   // the older package that lies in DIST is removed (once nfpm runs)
		wantCode    int
		want        []string // lines of output, in order; DIR is the sandbox, DIST the packages' directory
		wantNfpm    string   // what the fake nfpm was given
	}{
		{
			description: "no objdump",
			goBody:      `echo amd64`,
			wantCode:    1,
			want:        []string{"package: objdump is needed to read the glibc version gpu-ctk needs (apt-get install binutils)"},
		},
		{
			description: "gpu-ctk needs no glibc symbol",
			objdump:     "true",
			goBody:      `echo amd64`,
			wantCode:    1,
			want:        []string{"package: no glibc symbol version found in DIR/bin/gpu-ctk"},
		},
		{
			description: "no Go to build nfpm with",
			objdump:     glibc,
			wantCode:    1,
			want:        []string{"package: Go is needed to tell the architecture (or set ARCH: amd64, arm64)"},
		},
		{
			description: "the module proxy refuses",
			objdump:     glibc,
			goBody:      `case "$1" in env) echo amd64 ;; get) echo "go: proxy refused"; exit 1 ;; esac`,
			wantCode:    1,
			want: []string{
				"package: building nfpm v2.44.0 from the Go module proxy into DIR/.cache/nfpm (once; about a minute)",
				"go: proxy refused",
				"package: building nfpm v2.44.0 failed",
			},
		},
		{
			description: "nfpm fails",
			objdump:     glibc,
			goBody:      `echo amd64`,
			nfpm:        `echo "nfpm: boom"; exit 1`,
			stale:       true,
			wantCode:    1,
			want:        []string{"nfpm: boom", "package: nfpm deb failed"},
		},
		{
			description: "nfpm writes nothing",
			objdump:     glibc,
			goBody:      `echo amd64`,
			nfpm:        `true`,
			stale:       true,
			wantCode:    1,
			want:        []string{"package: nfpm wrote no DIST/gpu-runtime_1.2.3_amd64.deb"},
		},
		{
			description: "built: stale packages removed, nfpm given the version, arch, binaries and glibc",
			objdump:     glibc,
			goBody:      `echo amd64`,
			nfpm: `echo "$* VERSION=$VERSION ARCH=$ARCH BIN=$BIN GLIBC=$GLIBC MAINTAINER=$MAINTAINER" >>"$NFPM_LOG"
case "$5" in deb) : >"$7/gpu-runtime_${VERSION}_amd64.deb" ;; rpm) : >"$7/gpu-runtime-${VERSION}-1.x86_64.rpm" ;; esac`,
			stale: true,
			want: []string{
				"package: built version 1.2.3 (glibc >= 2.34, nfpm v2.44.0):",
				"  DIST/gpu-runtime_1.2.3_amd64.deb",
				"  DIST/gpu-runtime-1.2.3-1.x86_64.rpm",
			},
			wantNfpm: "package --config packaging/nfpm.yaml --packager deb --target DIST/ VERSION=1.2.3 ARCH=amd64 BIN=DIR/bin GLIBC=2.34 MAINTAINER=gpu-runtime developers <dev@gpu-runtime.local>\n" +
				"package --config packaging/nfpm.yaml --packager rpm --target DIST/ VERSION=1.2.3 ARCH=amd64 BIN=DIR/bin GLIBC=2.34 MAINTAINER=gpu-runtime developers <dev@gpu-runtime.local>\n",
		},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			s := newSandbox(t, "sort", "tail", "mktemp", "od", "tr")
			writeFile(t, filepath.Join(s.dir, "scripts", "version.sh"), readFile(t, filepath.Join(repoRoot(t), "scripts", "version.sh")), 0o755)
			fakeBinaries(t, filepath.Join(s.dir, "bin"), "1.2.3")
			dist := filepath.Join(s.dir, "dist")
			writeFile(t, filepath.Join(dist, "gpu-runtime_1.2.2_amd64.deb"), "", 0o644)
			if tc.objdump != "" {
				s.fake(t, "objdump", tc.objdump)
			}
			if tc.goBody != "" {
				s.fake(t, "go", tc.goBody)
			}
			env := []string{"VERSION=1.2.3", "BIN=" + filepath.Join(s.dir, "bin"), "DIST=" + dist, "NFPM_LOG=" + filepath.Join(s.dir, "nfpm.log")}
			if tc.nfpm != "" {
				s.fake(t, "nfpm", tc.nfpm)
				env = append(env, "NFPM="+filepath.Join(s.bin, "nfpm"))
			}
			out, code := s.exec(t, env, "scripts/package.sh")
			subst := strings.NewReplacer("DIR", s.dir, "DIST", dist)
			if code != tc.wantCode {
				t.Errorf("exit %d, want %d\n%s", code, tc.wantCode, out)
			}
			at := 0
			for _, w := range tc.want {
				w = subst.Replace(w) + "\n"
				i := strings.Index(out[at:], w)
				if i < 0 {
					t.Errorf("output lacks %q (in order):\n%s", w, out)
					break
				}
				at += i + len(w)
			}
			if tc.wantNfpm != "" {
				if got := readFile(t, filepath.Join(s.dir, "nfpm.log")); got != subst.Replace(tc.wantNfpm) {
					t.Errorf("nfpm ran as\n%s\nwant\n%s", got, subst.Replace(tc.wantNfpm))
				}
			}
			if _, err := os.Stat(filepath.Join(dist, "gpu-runtime_1.2.2_amd64.deb")); (err == nil) == tc.stale {
				t.Errorf("the older package in DIST: %v; want it removed: %v", err, tc.stale)
			}
		})
	}
}

// hostSetup runs packaging/scripts/host-setup under dash, Debian's /bin/sh, which maintainer
// scripts run under, with search as the PATH it searches for an existing hook.
func hostSetup(t testing.TB, search string, args ...string) (string, int) {
	t.Helper()
	return run(t, "", []string{"GPU_RUNTIME_HOOK_SEARCH_PATH=" + search}, "dash", append([]string{filepath.Join(repoRoot(t), "packaging", "scripts", "host-setup")}, args...)...)
}

// TestHostSetupHookLink: docker's hook name is linked to gpu-hook only where no executable of
// that name is on dockerd's PATH and the path is free, and removed only while it is the link
// host-setup made. What it says each time.
func TestHostSetupHookLink(t *testing.T) {
	const hook = "nvidia-container-runtime-hook"
	testCases := []struct {
		description string
		setup       func(t *testing.T, bin, other string) // other is on the search PATH
		wantOut     string                                // BIN and OTHER stand for the directories
		wantLink    bool                                  // bin/<hook> is host-setup's link afterwards
		wantUnlink  string                                // what unlink-hook says then
	}{
		{
			description: "no hook anywhere: linked, then removed",
			wantOut:     "gpu-runtime: linked BIN/" + hook + " -> gpu-hook for docker --gpus (dockerd looks for it when it starts)\n",
			wantLink:    true,
			wantUnlink:  "gpu-runtime: removed BIN/" + hook + "; restart dockerd if it runs (it looked for that hook when it started)\n",
		},
		{
			description: "NVIDIA's hook on dockerd's PATH: left alone, not shadowed",
			setup: func(t *testing.T, bin, other string) {
				writeFile(t, filepath.Join(other, hook), "#!/bin/sh\n", 0o755)
			},
			wantOut: "gpu-runtime: left OTHER/" + hook + " as it is (not gpu-runtime's: NVIDIA Container Toolkit's?). dockerd accepts --gpus with it; " +
				"containers of the gpu runtime get their GPUs from gpu-runtime, containers of runc keep NVIDIA's hook\n",
		},
		{
			description: "another link to gpu-hook on PATH (make install's): none added",
			setup: func(t *testing.T, bin, other string) {
				writeFile(t, filepath.Join(other, "gpu-hook"), "#!/bin/sh\n", 0o755)
				if err := os.Symlink("gpu-hook", filepath.Join(other, hook)); err != nil {
					t.Fatal(err)
				}
			},
			wantOut: "gpu-runtime: docker --gpus will use OTHER/" + hook + ", a link to gpu-hook; none added\n",
		},
		{
			description: "a file of that name that is no executable: left alone",
			setup: func(t *testing.T, bin, other string) {
				writeFile(t, filepath.Join(bin, hook), "not ours\n", 0o644)
			},
			wantOut: "gpu-runtime: left BIN/" + hook + " as it is (not gpu-runtime's); docker --gpus needs an executable of that name on dockerd's PATH\n",
		},
		{
			description: "a link to elsewhere: neither replaced nor removed",
			setup: func(t *testing.T, bin, other string) {
				if err := os.Symlink("/nonexistent/hook", filepath.Join(bin, hook)); err != nil {
					t.Fatal(err)
				}
			},
			wantOut: "gpu-runtime: left BIN/" + hook + " as it is (not gpu-runtime's); docker --gpus needs an executable of that name on dockerd's PATH\n",
		},
		{
			description: "already linked: nothing said",
			setup: func(t *testing.T, bin, other string) {
				if err := os.Symlink("gpu-hook", filepath.Join(bin, hook)); err != nil {
					t.Fatal(err)
				}
			},
			wantLink:   true,
			wantUnlink: "gpu-runtime: removed BIN/" + hook + "; restart dockerd if it runs (it looked for that hook when it started)\n",
		},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			dir := t.TempDir()
			bin, other := filepath.Join(dir, "bin"), filepath.Join(dir, "other")
			writeFile(t, filepath.Join(bin, "gpu-hook"), "#!/bin/sh\n", 0o755)
			if err := os.MkdirAll(other, 0o755); err != nil {
				t.Fatal(err)
			}
			if tc.setup != nil {
				tc.setup(t, bin, other)
			}
			before, _ := os.Readlink(filepath.Join(bin, hook))
			subst := strings.NewReplacer("BIN", bin, "OTHER", other)
			out, code := hostSetup(t, other, "link-hook", bin)
			if want := subst.Replace(tc.wantOut); code != 0 || out != want {
				t.Errorf("link-hook: %q (exit %d), want %q", out, code, want)
			}
			target, _ := os.Readlink(filepath.Join(bin, hook))
			if (target == "gpu-hook") != tc.wantLink {
				t.Errorf("after link-hook, %s links to %q; want the link: %v", hook, target, tc.wantLink)
			}
			out, code = hostSetup(t, other, "unlink-hook", bin)
			if want := subst.Replace(tc.wantUnlink); code != 0 || out != want {
				t.Errorf("unlink-hook: %q (exit %d), want %q", out, code, want)
			}
			after, err := os.Readlink(filepath.Join(bin, hook))
			if tc.wantLink && !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("unlink-hook left %s (%q, %v)", hook, after, err)
			}
			if !tc.wantLink && after != before {
				t.Errorf("unlink-hook changed what was not its own: %q, was %q", after, before)
			}
		})
	}
}

func TestHostSetupHint(t *testing.T) {
	dir := t.TempDir()
	engines := filepath.Join(dir, "engines")
	for _, name := range []string{"dockerd", "crio"} {
		writeFile(t, filepath.Join(engines, name), "#!/bin/sh\n", 0o755)
	}
	const intro = "gpu-runtime: no container engine was changed or restarted. To run GPU containers through gpu-runtime, register it:\n"
	testCases := []struct {
		description, search, want string
	}{
		{
			description: "one command per engine found",
			search:      engines,
			want: intro + "  gpu-ctk runtime configure --runtime=docker && systemctl restart docker\n" +
				"  gpu-ctk runtime configure --runtime=crio && systemctl restart crio\n",
		},
		{
			description: "no engine found",
			search:      filepath.Join(dir, "empty"),
			want:        intro + "  gpu-ctk runtime configure --runtime=docker (or containerd, or crio), then restart that engine\n",
		},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			out, code := hostSetup(t, tc.search, "hint")
			if code != 0 || out != tc.want {
				t.Errorf("%q (exit %d), want %q", out, code, tc.want)
			}
		})
	}
}

// TestMaintainerScriptsArguments: every script parses under Debian's sh and bash (rpm's
// /bin/sh on RHEL), and refuses an argument neither dpkg nor rpm passes. (What each does with
// the arguments they do pass is tests/packaging's TestPackages, on the real system.)
func TestMaintainerScriptsArguments(t *testing.T) {
	dir := filepath.Join(repoRoot(t), "packaging", "scripts")
	usage := "usage: host-setup link-hook|unlink-hook|unregister|stop-mps|record-loaded BINDIR, or host-setup hint\n"
	testCases := []struct {
		script, arg, want string
		code              int
	}{
		{"postinstall.sh", "bogus", `gpu-runtime postinst: unknown argument "bogus"` + "\n", 1},
		{"preremove.sh", "bogus", `gpu-runtime prerm: unknown argument "bogus"` + "\n", 1},
		{"postremove.sh", "bogus", `gpu-runtime postrm: unknown argument "bogus"` + "\n", 1},
		{"postinstall.sh", "abort-upgrade", "", 0},
		{"preremove.sh", "upgrade", "", 0},
		{"preremove.sh", "1", "", 0},
		{"postremove.sh", "upgrade", "", 0},
		{"postremove.sh", "1", "", 0},
		{"host-setup", "bogus", usage, 2},
		{"host-setup", "link-hook", usage, 2},
	}
	for _, sh := range []string{"dash", "bash"} {
		for _, script := range []string{"postinstall.sh", "preremove.sh", "postremove.sh", "host-setup"} {
			if out, code := run(t, dir, nil, sh, "-n", script); code != 0 {
				t.Errorf("%s -n %s: %s", sh, script, out)
			}
		}
		for _, tc := range testCases {
			out, code := run(t, dir, nil, sh, tc.script, tc.arg)
			if out != tc.want || code != tc.code {
				t.Errorf("%s %s %s: %q (exit %d), want %q (exit %d)", sh, tc.script, tc.arg, out, code, tc.want, tc.code)
			}
		}
	}
}

// TestMakeInstallDestdir: make install installs what BIN holds, builds nothing, makes no hook
// link under DESTDIR (saying so), and make uninstall removes it all but an edited config.
func TestMakeInstallDestdir(t *testing.T) {
	repo := repoRoot(t)
	bin := t.TempDir()
	dest := t.TempDir()
	make := func(args ...string) (string, int) {
		// GO=false: anything that would build fails.
		return run(t, repo, nil, "make", append([]string{"--no-print-directory", "GO=false", "BIN=" + bin, "DESTDIR=" + dest, "PREFIX=/usr/local"}, args...)...)
	}
	out, code := make("install")
	if want := "make install: " + bin + "/gpu-runtime is missing: run make build first (as yourself; then sudo make install)\n"; code == 0 || !strings.Contains(out, want) {
		t.Errorf("make install without binaries: %q (exit %d), want %q", out, code, want)
	}
	fakeBinaries(t, bin, "1.2.3")
	out, code = make("install")
	if code != 0 || !strings.Contains(out, "make install: DESTDIR is set: no nvidia-container-runtime-hook link (whether one is safe is for the target host to tell: packaging/scripts/host-setup link-hook)\n") {
		t.Fatalf("make install: %s (exit %d)", out, code)
	}
	want := map[string]fs.FileMode{
		"etc/gpu-runtime/config.toml":                              0o644,
		"usr/local/bin/gpu-ctk":                                    0o755,
		"usr/local/bin/gpu-hook":                                   0o755,
		"usr/local/bin/gpu-runtime":                                0o755,
		"usr/local/share/gpu-runtime/kubernetes/runtimeclass.yaml": 0o644,
	}
	if got := listFiles(t, dest); !equalModes(got, want) {
		t.Errorf("installed %v, want %v", got, want)
	}
	config := filepath.Join(dest, "etc", "gpu-runtime", "config.toml")
	if readFile(t, config) != readFile(t, filepath.Join(repo, "config.toml")) {
		t.Errorf("the installed config is not the default config.toml")
	}
	writeFile(t, config, readFile(t, config)+"# edited\n", 0o644)
	out, code = make("uninstall")
	if want := "make uninstall: kept " + config + ": it differs from the default (remove it by hand when you are done with it)\n"; code != 0 || !strings.Contains(out, want) {
		t.Errorf("make uninstall: %q (exit %d), want %q", out, code, want)
	}
	if got := listFiles(t, dest); !equalModes(got, map[string]fs.FileMode{"etc/gpu-runtime/config.toml": 0o644}) {
		t.Errorf("after make uninstall: %v; want only the edited config", got)
	}
	if err := os.Remove(config); err != nil {
		t.Fatal(err)
	}
	if out, code := make("install"); code != 0 {
		t.Fatalf("make install: %s", out)
	}
	if out, code := make("uninstall"); code != 0 || strings.Contains(out, "kept") {
		t.Errorf("make uninstall with the default config: %s (exit %d)", out, code)
	}
	if got := listFiles(t, dest); len(got) != 0 {
		t.Errorf("after make uninstall: %v left", got)
	}
}

// listFiles returns the files (not directories) under dir with their permissions.
func listFiles(t testing.TB, dir string) map[string]fs.FileMode {
	t.Helper()
	files := map[string]fs.FileMode{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		files[rel] = info.Mode().Perm()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

func equalModes(a, b map[string]fs.FileMode) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// sandbox is a directory of fake commands, each a shell script, and of links to the real
// tools a script under test needs; PATH is only that directory. The fakes of apt-get and sudo
// record their arguments in the log.
type sandbox struct {
	dir, bin, log string
}

func newSandbox(t *testing.T, realTools ...string) *sandbox {
	t.Helper()
	dir := t.TempDir()
	s := &sandbox{dir: dir, bin: filepath.Join(dir, "bin"), log: filepath.Join(dir, "log")}
	tools := []string{"bash", "env", "cat", "sed", "awk", "head", "grep", "dirname", "mkdir", "mv", "rm", "sh"}
	for _, tool := range realTools {
		if !slices.Contains(tools, tool) {
			tools = append(tools, tool)
		}
	}
	for _, tool := range tools {
		p, err := exec.LookPath(tool)
		if err != nil {
			t.Skipf("SKIPPED: %s is not installed", tool)
		}
		writeFile(t, filepath.Join(s.bin, ".keep"), "", 0o644)
		if err := os.Symlink(p, filepath.Join(s.bin, tool)); err != nil {
			t.Fatal(err)
		}
	}
	s.fake(t, "apt-get", `echo "apt-get $*" >>`+s.log)
	s.fake(t, "id", "echo 0")
	return s
}

func (s *sandbox) fake(t *testing.T, name, body string) {
	t.Helper()
	writeFile(t, filepath.Join(s.bin, name), "#!/bin/sh\n"+body+"\n", 0o755)
}

// exec runs a copy of the repository's script (under dir/scripts, so that it finds dir as the
// repository) with PATH the sandbox, and returns its output and exit code.
func (s *sandbox) exec(t *testing.T, env []string, script string, args ...string) (string, int) {
	t.Helper()
	copyPath := filepath.Join(s.dir, "scripts", filepath.Base(script))
	writeFile(t, copyPath, readFile(t, filepath.Join(repoRoot(t), script)), 0o755)
	cmd := exec.Command(copyPath, args...)
	cmd.Env = append([]string{"PATH=" + s.bin}, env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("%s %v: %v", script, args, err)
	}
	return out.String(), cmd.ProcessState.ExitCode()
}

// run is exec for a script that must succeed; it also returns what apt-get was asked.
func (s *sandbox) run(t *testing.T, env []string, script string, args ...string) (string, string) {
	t.Helper()
	out, code := s.exec(t, env, script, args...)
	if code != 0 {
		t.Fatalf("%s %v: exit %d\n%s", script, args, code, out)
	}
	log, _ := os.ReadFile(s.log)
	return out, string(log)
}

// TestInstallDepsSaysWhatItInstalls: what scripts/install-deps.sh installs for make test and
// for make demo, said before apt-get runs.
func TestInstallDepsSaysWhatItInstalls(t *testing.T) {
	testCases := []struct {
		description string
		args        []string
		present     []string // fake commands that exist
		wantOut     []string // in this order
		wantApt     string
	}{
		{
			description: "make demo: only what the demo needs",
			args:        []string{"--demo"},
			present:     []string{"go", "file"},
			wantOut: []string{
				"install-deps: installing with apt-get (no recommends): runc busybox-static gcc libc6-dev\n",
				"install-deps: installed runc busybox-static gcc libc6-dev\n",
			},
			wantApt: "apt-get update -qq\napt-get install -y -qq --no-install-recommends runc busybox-static gcc libc6-dev\n",
		},
		{
			description: "make test: the test tools too",
			present:     []string{"go", "file", "runc", "gcc", "crun", "ldconfig", "dash"},
			wantOut:     []string{"install-deps: installing with apt-get (no recommends): busybox-static binutils rpm containernetworking-plugins iproute2\n"},
			wantApt:     "apt-get update -qq\napt-get install -y -qq --no-install-recommends busybox-static binutils rpm containernetworking-plugins iproute2\n",
		},
		{
			description: "all there: nothing installed",
			args:        []string{"--demo"},
			present:     []string{"go", "file", "runc", "gcc"},
			wantOut:     []string{"install-deps: ok (runc 1.1.5, busybox static, gcc)\n"},
		},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			s := newSandbox(t)
			for _, name := range tc.present {
				s.fake(t, name, `[ "$1" = --version ] && echo "$(basename "$0") version 1.1.5"; exit 0`)
			}
			s.fake(t, "basename", `echo "${1##*/}"`)
			if tc.wantApt == "" {
				// All there, /bin/busybox included: the host's, which must exist.
				if _, err := os.Stat("/bin/busybox"); err != nil {
					t.Skip("SKIPPED: this host has no /bin/busybox (apt-get install busybox-static)")
				}
				s.fake(t, "file", `echo "$2: ELF 64-bit LSB executable, statically linked"`)
			}
			// The cluster tests' CNI bridge plugin: absent here whatever the host has.
			env := []string{"CNI_BRIDGE=" + filepath.Join(s.dir, "no-cni-bridge")}
			out, apt := s.run(t, env, "scripts/install-deps.sh", tc.args...)
			at := 0
			for _, w := range tc.wantOut {
				i := strings.Index(out[at:], w)
				if i < 0 {
					t.Errorf("output lacks %q (in order):\n%s", w, out)
					break
				}
				at += i + len(w)
			}
			if apt != tc.wantApt {
				t.Errorf("apt-get ran as\n%s\nwant\n%s", apt, tc.wantApt)
			}
		})
	}
}

func TestInstallDepsArguments(t *testing.T) {
	for _, script := range []string{"scripts/install-deps.sh", "scripts/install-engine-deps.sh"} {
		s := newSandbox(t)
		out, code := s.exec(t, nil, script, "--bogus")
		name := strings.TrimSuffix(filepath.Base(script), ".sh")
		if want := name + ": unknown argument --bogus (see --help)\n"; code != 2 || out != want {
			t.Errorf("%s --bogus: %q (exit %d), want %q", script, out, code, want)
		}
	}
}

// TestInstallEngineDepsKeepsTheHostsEngines: an engine is installed from Debian only where no
// engine of its kind is; docker-ce's /usr/bin/dockerd and containerd.io's containerd count.
func TestInstallEngineDepsKeepsTheHostsEngines(t *testing.T) {
	testCases := []struct {
		description string
		dockerd     bool     // a dockerd exists (docker-ce's place)
		client      bool     // /usr/bin/docker exists
		present     []string // fake commands
		wantOut     string
		wantApt     string
		wantAfter   string // said after apt-get
	}{
		{
			description: "docker-ce and containerd.io, podman: nothing installed",
			dockerd:     true, client: true,
			present: []string{"containerd", "ctr", "containerd-shim-runc-v2", "podman", "conmon", "runc", "newuidmap"},
			wantOut: "install-engine-deps: engines present: dockerd, containerd, podman, runc (and newuidmap)\n",
		},
		{
			description: "engines present, rootless podman's newuidmap missing: uidmap installed",
			dockerd:     true, client: true,
			present:   []string{"containerd", "ctr", "containerd-shim-runc-v2", "podman", "conmon", "runc"},
			wantOut:   "install-engine-deps: missing here (engines only where none of their kind is); installing with apt-get (with recommends): uidmap\n",
			wantApt:   "apt-get update -qq\napt-get install -y -qq uidmap\n",
			wantAfter: "install-engine-deps: installed uidmap\n",
		},
		{
			description: "a bare host: Debian's engines",
			wantOut:     "install-engine-deps: missing here (engines only where none of their kind is); installing with apt-get (with recommends): docker.io containerd podman uidmap runc\n",
			wantApt:     "apt-get update -qq\napt-get install -y -qq docker.io containerd podman uidmap runc\n",
			wantAfter:   "install-engine-deps: installed docker.io containerd podman uidmap runc\n",
		},
		{
			description: "docker-ce without its client, containerd without ctr: reported, not replaced",
			dockerd:     true,
			present:     []string{"containerd", "containerd-shim-runc-v2", "podman", "conmon", "runc", "newuidmap"},
			wantOut: "install-engine-deps: an engine is installed without what its tests need, and is left as it is: " +
				"DIR/docker (the docker client of your dockerd) ctr (containerd's client)\n",
		},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			s := newSandbox(t)
			for _, name := range tc.present {
				s.fake(t, name, "exit 0")
			}
			// crictl and containerd 2.x are built already: the script only checks their versions.
			writeFile(t, filepath.Join(s.dir, ".cache", "crictl", "crictl"), "#!/bin/sh\necho 'crictl version v1.34.0'\n", 0o755)
			ctd2 := filepath.Join(s.dir, ".cache", "containerd2")
			writeFile(t, filepath.Join(ctd2, "containerd"), "#!/bin/sh\necho 'containerd github.com/containerd/containerd/v2 v2.1.4'\n", 0o755)
			writeFile(t, filepath.Join(s.dir, "scripts", "build-containerd2.sh"), "#!/bin/sh\necho "+ctd2+"\n", 0o755)
			engines := filepath.Join(s.dir, "usr-bin")
			if tc.dockerd {
				writeFile(t, filepath.Join(engines, "dockerd"), "#!/bin/sh\n", 0o755)
			}
			if tc.client {
				writeFile(t, filepath.Join(engines, "docker"), "#!/bin/sh\n", 0o755)
			}
			env := []string{"DOCKERD_CANDIDATES=" + filepath.Join(s.dir, "usr-sbin", "dockerd") + " " + filepath.Join(engines, "dockerd"), "DOCKER_CLIENT=" + filepath.Join(engines, "docker")}
			out, apt := s.run(t, env, "scripts/install-engine-deps.sh")
			if want := strings.ReplaceAll(tc.wantOut, "DIR", engines); !strings.Contains(out, want) {
				t.Errorf("output lacks %q:\n%s", want, out)
			}
			if want := "install-engine-deps: containerd 2.x present: " + ctd2 + " (containerd github.com/containerd/containerd/v2 v2.1.4)\n"; !strings.Contains(out, want) {
				t.Errorf("output lacks %q:\n%s", want, out)
			}
			if !strings.Contains(out, tc.wantAfter) {
				t.Errorf("output lacks %q:\n%s", tc.wantAfter, out)
			}
			if apt != tc.wantApt {
				t.Errorf("apt-get ran as\n%s\nwant\n%s", apt, tc.wantApt)
			}
		})
	}
}
