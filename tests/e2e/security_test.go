package e2e

import (
	"crypto/sha256"
	"debug/elf"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gpu-runtime/gpu-runtime/internal/fakehost"
)

// TestLDPreloadFromImageNeverRunsOnHost: an image's ENV LD_PRELOAD (CVE-2025-23266) must
// not reach any process gpu-runtime starts. Every hook entry carries an explicit env, gpu-hook
// is static (TestHookIsStatic), and ldconfig runs with a fixed env: here ldconfig is replaced by
// a static stand-in that records the environment it was given inside the container root.
// A dynamic or script ldconfig is refused outright (it would run the image's loader).
func TestLDPreloadFromImageNeverRunsOnHost(t *testing.T) {
	e := newEnv(t, 1)
	dir := t.TempDir()
	marker := filepath.Join(dir, "marker")
	evilSrc := filepath.Join(dir, "evil.c")
	evil := filepath.Join(dir, "evil.so")
	writeFile(t, evilSrc, `#include <stdio.h>
__attribute__((constructor)) static void pwn(void) { FILE *f = fopen("`+marker+`", "a"); if (f) { fputs("loaded\n", f); fclose(f); } }
`)
	if out, err := exec.Command("gcc", "-shared", "-fPIC", "-o", evil, evilSrc).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v: %s", err, out)
	}
	// Prove the library works: a process that inherits LD_PRELOAD writes the marker.
	probeCmd := exec.Command("/bin/true")
	probeCmd.Env = []string{"LD_PRELOAD=" + evil}
	if err := probeCmd.Run(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Fatalf("evil.so does not work, the test would prove nothing: %v", err)
	}
	if err := os.Remove(marker); err != nil {
		t.Fatal(err)
	}

	standIn := filepath.Join(dir, "ldconfig")
	standInSrc := filepath.Join(dir, "ldconfig.c")
	writeFile(t, standInSrc, `#include <stdio.h>
extern char **environ;
int main(void) { FILE *f = fopen("/ldconfig-env", "w"); if (!f) return 1; for (char **e = environ; *e; e++) fprintf(f, "%s\n", *e); return fclose(f) != 0; }
`)
	if out, err := exec.Command("gcc", "-static", "-o", standIn, standInSrc).CombinedOutput(); err != nil {
		t.Fatalf("gcc -static (libc6-dev): %v: %s", err, out)
	}
	replaceInFile(t, e.config, "[hook]\n", "[hook]\nldconfig = \""+standIn+"\"\n")

	b := e.bundle(t, []string{"NVIDIA_VISIBLE_DEVICES=0", "LD_PRELOAD=" + evil, "LD_LIBRARY_PATH=" + dir}, "echo started")
	// A library of the image's own and no ld.so.cache: the cache cannot be updated in-process,
	// so ldconfig (the stand-in) runs.
	buildLib(t, filepath.Join(b, "rootfs/usr/lib/libimage.so.1"), "libimage.so.1")
	r := e.run(t, b)
	if r.code != 0 || !strings.Contains(r.stdout, "started") {
		t.Fatalf("exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	if data, err := os.ReadFile(marker); err == nil {
		t.Fatalf("the image's LD_PRELOAD ran on the host: %q", data)
	}
	dump, err := os.ReadFile(filepath.Join(b, "rootfs", "ldconfig-env"))
	if err != nil {
		t.Fatalf("the ldconfig stand-in did not run inside the container root: %v", err)
	}
	if got := strings.TrimSpace(string(dump)); got != "PATH=/usr/sbin:/usr/bin:/sbin:/bin" {
		t.Errorf("ldconfig's env = %q, want only the fixed PATH", got)
	}
	// Every hook in the spec runc got has an explicit env free of loader variables.
	var spec specs.Spec
	data, _ := os.ReadFile(filepath.Join(b, "config.json"))
	if err := json.Unmarshal(data, &spec); err != nil {
		t.Fatal(err)
	}
	if spec.Hooks == nil {
		t.Fatal("the GPU container's spec has no hooks")
	}
	h := spec.Hooks
	all := slices.Concat(h.Prestart, h.CreateRuntime, h.CreateContainer, h.StartContainer, h.Poststart, h.Poststop) //nolint:staticcheck // every stage, the deprecated one included
	if len(all) == 0 {
		t.Fatal("the GPU container's spec has no hooks")
	}
	for _, hk := range all {
		if len(hk.Env) == 0 || strings.Contains(strings.Join(hk.Env, " "), "LD_") {
			t.Errorf("hook %s env = %q", hk.Path, hk.Env)
		}
	}

	// A script or dynamically linked ldconfig is refused with the fix.
	for _, bad := range []struct{ path, why string }{{"/usr/bin/ldd", "is a script"}, {"/bin/true", "is dynamically linked"}} {
		if _, err := os.Stat(bad.path); err != nil {
			continue
		}
		e.writeConfig(t, "")
		replaceInFile(t, e.config, "[hook]\n", "[hook]\nldconfig = \""+bad.path+"\"\n")
		r := e.run(t, e.bundle(t, []string{"NVIDIA_VISIBLE_DEVICES=0"}, "echo started"))
		want := "hook.ldconfig " + bad.path + " " + bad.why + ": ldconfig runs inside the container root, where a dynamic executable would run the image's loader; set hook.ldconfig to glibc's static ldconfig"
		if r.code == 0 || !strings.Contains(r.stderr, want) {
			t.Errorf("ldconfig %s: exit %d, stderr lacks %q:\n%s", bad.path, r.code, want, r.stderr)
		}
	}
}

// TestHookIsStatic: gpu-hook is built without cgo, so no loader runs at all.
func TestHookIsStatic(t *testing.T) {
	requireE2E(t)
	f, err := elf.Open(filepath.Join(binDir, "gpu-hook"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Fatal("gpu-hook has a program interpreter: it is dynamically linked")
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Fatalf("gpu-hook needs shared libraries: %v", libs)
	}
}

// snapshot lists every path under dir with its mode, owner and, for a file, a hash of its
// content; for a symlink, its target.
func snapshot(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		line := p + " " + fi.Mode().String()
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			line += fmt.Sprintf(" %d:%d", st.Uid, st.Gid)
		}
		switch {
		case fi.Mode()&os.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			line += " -> " + target
		case fi.Mode().IsRegular():
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			line += fmt.Sprintf(" sha256:%x", sha256.Sum256(data))
		}
		out = append(out, line)
		return nil
	})
	if err != nil {
		t.Fatalf("snapshot %s: %v", dir, err)
	}
	sort.Strings(out)
	return out
}

// TestImageSymlinksStayInRoot: an image whose library, config, firmware or CUDA compat
// directories are symlinks to a host directory (absolute and ../ forms) must not get
// anything created, written or mounted outside its rootfs.
func TestImageSymlinksStayInRoot(t *testing.T) {
	for _, dir := range []string{"/usr/lib/x86_64-linux-gnu", "/etc", "/etc/ld.so.conf.d", "/lib/firmware/nvidia", "/usr/local/cuda/compat"} {
		for _, form := range []string{"absolute", "relative"} {
			t.Run(dir+" "+form, func(t *testing.T) {
				e := newEnv(t, 1)
				victim := t.TempDir()
				writeFile(t, filepath.Join(victim, "sentinel"), "host file")
				before := snapshot(t, victim)

				b := e.bundle(t, []string{"NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=all"}, "echo started")
				link := filepath.Join(b, "rootfs", dir)
				if err := os.RemoveAll(link); err != nil {
					t.Fatal(err)
				}
				if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
					t.Fatal(err)
				}
				target := victim
				if form == "relative" {
					target = strings.Repeat("../", 12) + strings.TrimPrefix(victim, "/")
				}
				if err := os.Symlink(target, link); err != nil {
					t.Fatal(err)
				}
				// Paths are resolved inside the root, so the container starts normally: an
				// image symlink is followed within the image, never onto the host.
				r := e.run(t, b)
				if r.code != 0 || !strings.Contains(r.stdout, "started") {
					t.Errorf("container did not start: exit %d\n%s%s", r.code, r.stdout, r.stderr)
				}
				if after := snapshot(t, victim); strings.Join(after, "\n") != strings.Join(before, "\n") {
					t.Fatalf("host directory changed through the image symlink:\nbefore %v\nafter  %v", before, after)
				}
				if data, _ := os.ReadFile(filepath.Join(victim, "sentinel")); string(data) != "host file" {
					t.Fatalf("host file rewritten: %q", data)
				}
				t.Logf("exit %d; %s", r.code, strings.TrimSpace(r.stdout+r.stderr))
			})
		}
	}
}

// TestLDConfigCannotReachHost: the loader-cache update must not be able to leave the
// container root through /proc/1/root (runc init's root is the host's / until pivot_root).
// An image can point a library directory, ldconfig's aux-cache directory or an ld.so.conf
// entry there, or give a library a SONAME that walks there; each form must leave the host
// directory byte-for-byte as it was, and the container must start.
func TestLDConfigCannotReachHost(t *testing.T) {
	viaProc := func(hostDir string) string { return "/proc/1/root" + hostDir }
	testCases := []struct {
		description string
		// image prepares the rootfs given two host directories the attack aims at.
		image func(t *testing.T, rootfs, victim, victim2 string)
		// victim prepares the first host directory.
		victim func(t *testing.T, dir string)
	}{
		{description: "library and aux-cache directories linked through /proc/1/root",
			victim: func(t *testing.T, dir string) {
				// A pinned SONAME link that ldconfig would "fix" to the newest version.
				buildLib(t, filepath.Join(dir, "libz.so.1.2.11"), "libz.so.1")
				buildLib(t, filepath.Join(dir, "libz.so.1.2.13"), "libz.so.1")
				if err := os.Symlink("libz.so.1.2.11", filepath.Join(dir, "libz.so.1")); err != nil {
					t.Fatal(err)
				}
			},
			image: func(t *testing.T, rootfs, victim, victim2 string) {
				symlink(t, viaProc(victim), filepath.Join(rootfs, "lib"))
				symlink(t, viaProc(victim2), filepath.Join(rootfs, "var/cache/ldconfig"))
			}},
		{description: "ld.so.conf entry through /proc/1/root",
			victim: func(t *testing.T, dir string) {
				buildLib(t, filepath.Join(dir, "libhostonly.so.1.0"), "libhostonly.so.1") // ldconfig would add the SONAME link
			},
			image: func(t *testing.T, rootfs, victim, _ string) {
				writeFile(t, filepath.Join(rootfs, "etc/ld.so.conf"), viaProc(victim)+"\n")
			}},
		{description: "SONAME that walks out through /proc/1/root",
			victim: func(t *testing.T, dir string) {},
			image: func(t *testing.T, rootfs, victim, _ string) {
				buildLib(t, filepath.Join(rootfs, "usr/lib/libevil.so.1"), "../.."+viaProc(victim)+"/pwned")
			}},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			e := newEnv(t, 1)
			victim, victim2 := t.TempDir(), t.TempDir()
			tc.victim(t, victim)
			writeFile(t, filepath.Join(victim2, "sentinel"), "host file")
			before, before2 := snapshot(t, victim), snapshot(t, victim2)

			b := e.bundle(t, []string{"NVIDIA_VISIBLE_DEVICES=0"}, "grep -c libcuda.so.1 /etc/ld.so.cache; grep -c libhostonly /etc/ld.so.cache || echo no-host-names")
			tc.image(t, filepath.Join(b, "rootfs"), victim, victim2)
			r := e.run(t, b)
			if after := snapshot(t, victim); strings.Join(after, "\n") != strings.Join(before, "\n") {
				t.Errorf("host directory changed:\nbefore %v\nafter  %v", before, after)
			}
			if after := snapshot(t, victim2); strings.Join(after, "\n") != strings.Join(before2, "\n") {
				t.Errorf("host directory changed:\nbefore %v\nafter  %v", before2, after)
			}
			if r.code != 0 || !strings.Contains(r.stdout, "no-host-names") {
				t.Errorf("container: exit %d\n%s%s", r.code, r.stdout, r.stderr)
			}
		})
	}
}

// buildLib writes a tiny real shared library with the given SONAME.
func buildLib(t *testing.T, path, soname string) {
	t.Helper()
	if err := fakehost.BuildLibrary(path, soname); err != nil {
		t.Fatal(err)
	}
}

// symlink replaces whatever is at link with a symlink to target, creating parents.
func symlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.RemoveAll(link); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

// TestImageFilesCannotHangCreate: a FIFO the image places where the hook or ldconfig would
// read (the loader configuration, an included file, the aux cache, a CUDA compat library)
// must not block the create; what is not read by the hook itself (a FIFO among the
// libraries, which ldconfig opens) is bounded by hook.timeout, fails the create cleanly and
// leaves no process behind. Every hook entry carries that timeout.
func TestImageFilesCannotHangCreate(t *testing.T) {
	mkfifo := func(t *testing.T, p string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Mkfifo(p, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	testCases := []struct {
		description string
		image       func(t *testing.T, rootfs string)
		wantErr     string // "" = the container starts
	}{
		{description: "FIFO at /etc/ld.so.conf", image: func(t *testing.T, rootfs string) {
			mkfifo(t, filepath.Join(rootfs, "etc/ld.so.conf"))
		}},
		{description: "FIFO included from ld.so.conf", image: func(t *testing.T, rootfs string) {
			writeFile(t, filepath.Join(rootfs, "etc/ld.so.conf"), "include /etc/ld.so.conf.d/*.conf\n")
			mkfifo(t, filepath.Join(rootfs, "etc/ld.so.conf.d/evil.conf"))
		}},
		{description: "FIFO at ldconfig's aux cache", image: func(t *testing.T, rootfs string) {
			mkfifo(t, filepath.Join(rootfs, "var/cache/ldconfig/aux-cache"))
		}},
		{description: "FIFO as a CUDA compat library", image: func(t *testing.T, rootfs string) {
			mkfifo(t, filepath.Join(rootfs, "usr/local/cuda/compat/libcuda.so.999.1"))
		}},
		{description: "FIFO among the libraries ldconfig scans", image: func(t *testing.T, rootfs string) {
			mkfifo(t, filepath.Join(rootfs, "fifo"))
			if err := os.Symlink("/fifo", filepath.Join(rootfs, "usr/lib/libfifo.so.1")); err != nil {
				t.Fatal(err)
			}
		}, wantErr: "gpu-hook: update the container's loader cache: /sbin/ldconfig did not finish within 2s (hook.timeout): a file in the image blocks it, such as a FIFO among its libraries"},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			e := newEnv(t, 1)
			replaceInFile(t, e.config, "[hook]\n", "[hook]\ntimeout = \"3s\"\n")
			b := e.bundle(t, []string{"NVIDIA_VISIBLE_DEVICES=0"}, "echo started")
			tc.image(t, filepath.Join(b, "rootfs"))
			start := time.Now()
			r := e.run(t, b)
			elapsed := time.Since(start)
			if tc.wantErr == "" {
				if r.code != 0 || !strings.Contains(r.stdout, "started") {
					t.Fatalf("container did not start: exit %d\n%s%s", r.code, r.stdout, r.stderr)
				}
			} else if r.code == 0 || !strings.Contains(r.stderr, tc.wantErr) {
				t.Fatalf("exit %d; stderr lacks %q:\n%s", r.code, tc.wantErr, r.stderr)
			}
			if elapsed > 15*time.Second {
				t.Errorf("create took %s", elapsed)
			}
			for _, p := range sandboxProcesses(t, filepath.Join(b, "rootfs")) {
				t.Errorf("process left behind: %s", p)
			}
			var spec specs.Spec
			data, _ := os.ReadFile(filepath.Join(b, "config.json"))
			if err := json.Unmarshal(data, &spec); err != nil {
				t.Fatalf("spec: %v", err)
			}
			if spec.Hooks == nil { // the update was made at create: no hook at all
				return
			}
			for _, h := range slices.Concat(spec.Hooks.Prestart, spec.Hooks.CreateContainer) { //nolint:staticcheck // docker's hook is in prestart
				if h.Timeout == nil || *h.Timeout != 3 {
					t.Errorf("hook %v has timeout %v, want 3", h.Args, h.Timeout)
				}
			}
		})
	}
}

// sandboxProcesses lists running ldconfig sandboxes (gpu-hook's re-execution and the
// ldconfig it becomes).
func sandboxProcesses(t *testing.T, rootfs string) []string {
	t.Helper()
	// Only this container's: other tests (and other suites on the machine) run ldconfig too.
	// The sandbox names the root it works on; ldconfig itself runs with it as its root.
	root, err := os.Stat(rootfs)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		cmdline, err := os.ReadFile(filepath.Join(d, "cmdline"))
		if err != nil {
			continue
		}
		args := strings.ReplaceAll(string(cmdline), "\x00", " ")
		sandbox := strings.Contains(args, "__ldconfig-in-root "+rootfs+" ")
		ldconfig := false
		if strings.HasPrefix(args, "ldconfig -i -f /proc/self/fd/3") {
			fi, err := os.Stat(filepath.Join(d, "root"))
			ldconfig = err == nil && os.SameFile(fi, root)
		}
		if sandbox || ldconfig {
			out = append(out, d+": "+args)
		}
	}
	return out
}
