package e2e

import (
	"debug/elf"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// TestLDPreloadFromImageNeverRunsOnHost: an image's ENV LD_PRELOAD (CVE-2025-23266) must
// not reach any process gpu-runtime starts on the host. The hook's ldconfig is replaced by a
// dynamically linked shell wrapper so a leaked LD_PRELOAD would really load the library.
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

	envDump := filepath.Join(dir, "ldconfig-env")
	wrapper := filepath.Join(dir, "ldconfig")
	writeFile(t, wrapper, "#!/bin/sh\nenv > "+envDump+"\nexec /sbin/ldconfig \"$@\"\n")
	if err := os.Chmod(wrapper, 0o755); err != nil {
		t.Fatal(err)
	}
	e.writeConfig(t, "")
	replaceInFile(t, e.config, "[hook]\n", "[hook]\nldconfig = \""+wrapper+"\"\n")

	b := e.bundle(t, []string{"NVIDIA_VISIBLE_DEVICES=0", "LD_PRELOAD=" + evil, "LD_LIBRARY_PATH=" + dir}, probe)
	r := e.run(t, b)
	if r.code != 0 || !strings.Contains(r.stdout, "ldcache-libcuda") {
		t.Fatalf("exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	if data, err := os.ReadFile(marker); err == nil {
		t.Fatalf("the image's LD_PRELOAD ran on the host: %q", data)
	}
	dump, err := os.ReadFile(envDump)
	if err != nil {
		t.Fatalf("the ldconfig wrapper did not run: %v", err)
	}
	if strings.Contains(string(dump), "LD_") {
		t.Errorf("ldconfig's env carries loader variables:\n%s", dump)
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
	all := slices.Concat(h.Prestart, h.CreateRuntime, h.CreateContainer, h.StartContainer, h.Poststart, h.Poststop) //nolint:staticcheck
	if len(all) == 0 {
		t.Fatal("the GPU container's spec has no hooks")
	}
	for _, hk := range all {
		if len(hk.Env) == 0 || strings.Contains(strings.Join(hk.Env, " "), "LD_") {
			t.Errorf("hook %s env = %q", hk.Path, hk.Env)
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

// snapshot lists every path under dir with its size and mode.
func snapshot(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	_ = filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err == nil {
			out = append(out, p+" "+fi.Mode().String()+" "+string(rune('0'+fi.Size()%10)))
		}
		return nil
	})
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
