package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gpu-runtime/gpu-runtime/internal/testimage"
)

// hostileImages are images made to have the loader-cache update (at create, or in the hook)
// use unbounded memory and time, and the realistic image beside them: what each does to
// the rootfs of a bundle, and what the create must say.
var hostileImages = []struct {
	description string
	image       func(t *testing.T, e *env) string // returns the bundle
	want        string                            // in the create's error; "" for a container that runs
}{
	{
		description: "40,000 files in the CUDA compat directory, with a cache",
		image: func(t *testing.T, e *env) string {
			b, _ := imageBundle(t, testimage.Options{Libraries: 20, UsrMerge: true}, "NVIDIA_VISIBLE_DEVICES=0")
			compat := filepath.Join(b, "rootfs/usr/local/cuda/compat")
			if err := os.MkdirAll(compat, 0o755); err != nil {
				t.Fatal(err)
			}
			for i := range 40000 {
				if err := os.WriteFile(filepath.Join(compat, fmt.Sprintf("libcuda.so.%d.%d", 500+i%100, i)), nil, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			return b
		},
		want: "gpu-hook: /usr/local/cuda/compat: more than 4096 entries: gpu-runtime reads at most 4096 names of the CUDA compat directory",
	},
	{
		description: "no cache, a 1 MiB loader configuration included 255 times",
		image: func(t *testing.T, e *env) string {
			b := e.bundle(t, []string{"NVIDIA_VISIBLE_DEVICES=0"}, "echo started")
			var big strings.Builder
			for i := 0; big.Len()+17 <= 1<<20; i++ { // lines of 17 bytes, 1 MiB in all
				fmt.Fprintf(&big, "/opt/lib/d%07d\n", i)
			}
			writeFile(t, filepath.Join(b, "rootfs/etc/big.conf"), big.String())
			writeFile(t, filepath.Join(b, "rootfs/etc/ld.so.conf"), strings.Repeat("include /etc/big.conf\n", 255))
			return b
		},
		want: "gpu-hook: the container's loader cache cannot be updated: /opt/lib/d0016", // …: reached the limit of 16384 paths resolved
	},
	{
		description: "no cache, include globs over 70,000 names, 100 times",
		image: func(t *testing.T, e *env) string {
			b := e.bundle(t, []string{"NVIDIA_VISIBLE_DEVICES=0"}, "echo started")
			// 64 directories of 1,100 names: one directory, and 63 links to it.
			dir := filepath.Join(b, "rootfs/d/00")
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			for f := range 1100 {
				if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("x%04d", f)), nil, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			for d := 1; d < 64; d++ {
				must(t, os.Symlink("00", filepath.Join(b, fmt.Sprintf("rootfs/d/%02d", d))))
			}
			writeFile(t, filepath.Join(b, "rootfs/etc/ld.so.conf"), strings.Repeat("include /d/*/x*\n", 100))
			return b
		},
		want: "gpu-hook: the container's loader cache cannot be updated: /d/", // …: reached the limit of 65536 directory entries listed
	},
	{
		// A listing over the per-directory limit is refused: it must still spend the budget
		// and heed the deadline, or each include lists 4,097 names for free (24 s at create
		// before the fix, with 20,000 warnings).
		description: "no cache, a directory of 4,097 names included 20,000 times",
		image: func(t *testing.T, e *env) string {
			b := e.bundle(t, []string{"NVIDIA_VISIBLE_DEVICES=0"}, "echo started")
			dir := filepath.Join(b, "rootfs/big")
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			for f := range 4097 {
				if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("x%04d", f)), nil, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			writeFile(t, filepath.Join(b, "rootfs/etc/ld.so.conf"), strings.Repeat("include /big/*\n", 20000))
			return b
		},
		want: "gpu-hook: the container's loader cache cannot be updated: /big: reached the limit of 65536 directory entries listed",
	},
	{
		description: "the realistic image",
		image: func(t *testing.T, e *env) string {
			b, _ := imageBundle(t, testimage.Default(), "NVIDIA_VISIBLE_DEVICES=0")
			return b
		},
	},
}

// maxCreateRSS bounds the peak resident memory of a create: gpu-runtime, then runc (the
// same process, exec'd), with the hook and its ldconfig among runc's descendants. runc alone
// peaks at about 15 MiB here.
const maxCreateRSS = 100 << 20

// TestCreateBounded: no image makes a create use unbounded memory or time. Each of the
// review's hostile images runs through a create in bounded memory and fails with a message
// naming the image path and the limit it reached; the realistic image runs. The address
// space is capped at 2 GiB so that a regression fails the test, not the machine. The peak
// RSS and time of each are logged (go test -v) for the record.
func TestCreateBounded(t *testing.T) {
	for _, tc := range hostileImages {
		t.Run(tc.description, func(t *testing.T) {
			e := newEnv(t, 1)
			b := tc.image(t, e)
			e.capKiB = 2 << 20
			start := time.Now()
			r := e.run(t, b)
			took := time.Since(start)
			t.Logf("%s: exit %d, peak RSS %.1f MiB, %s", tc.description, r.code, float64(r.maxRSS)/(1<<20), took.Round(time.Millisecond))
			switch {
			case tc.want == "" && r.code != 0:
				t.Errorf("exit %d, want the container to run:\n%s", r.code, r.stderr)
			case tc.want != "" && (r.code == 0 || !strings.Contains(r.stderr, tc.want)):
				t.Errorf("exit %d; stderr lacks %q:\n%s", r.code, tc.want, tail(r.stderr, 2000))
			}
			if r.maxRSS > maxCreateRSS {
				t.Errorf("peak RSS %d MiB, want at most %d MiB", r.maxRSS>>20, maxCreateRSS>>20)
			}
		})
	}
}

// TestHookStaysOnRootMount: the hook runs as the host's root in the container's mount
// namespace, after the low-level runtime's mounts. Nothing it reaches across a mount point
// inside the root is written, and no image configuration is read there; the image's files
// are read with the container user's credentials; no file's content reaches a message or a
// log. The host directories behind the volumes are byte-for-byte unchanged.
func TestHookStaysOnRootMount(t *testing.T) {
	const secret = "root:$6$saltsalt$5fXHnKb0QMD3aNbZsmbNQXSxmCBh2K3ZB0oTx9BJ4sLdbkmMdKm1tG2nm0ktcfFqGHM2bLe9V1fXmFnd1D:19000:0:99999:7:::"
	type setup struct {
		bundle, volume string
	}
	testCases := []struct {
		description string
		env         []string
		prepare     func(t *testing.T, e *env, s *setup)
		want        string // in stderr; "" for a container that runs
		absent      []string
	}{
		{
			description: "uid 1000, /etc a link to a root-owned volume: the hook writes nothing there",
			env:         []string{"NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=utility"},
			prepare: func(t *testing.T, e *env, s *setup) {
				relink(t, filepath.Join(s.bundle, "rootfs/etc"), "/data")
				addMount(t, s.bundle, specs.Mount{Destination: "/data", Type: "bind", Source: s.volume, Options: []string{"rbind", "rw"}})
				runAs(t, s.bundle, 1000)
			},
			want: "gpu-hook: the container's loader cache cannot be updated: /etc is on another mount than the container root (a volume, a bind mount or a kernel file system): gpu-runtime does not act there",
		},
		{
			description: "/etc a link to a volume where a GPU mount goes: the create refuses before runc",
			env:         []string{"NVIDIA_VISIBLE_DEVICES=0"},
			prepare: func(t *testing.T, e *env, s *setup) {
				relink(t, filepath.Join(s.bundle, "rootfs/etc"), "/data")
				addMount(t, s.bundle, specs.Mount{Destination: "/data", Type: "bind", Source: s.volume, Options: []string{"rbind", "rw"}})
			},
			want: "the image leads a GPU mount into a volume: the image's links lead /etc/OpenCL/vendors/nvidia.icd to /data/OpenCL/vendors/nvidia.icd, inside /data",
		},
		{
			description: "include of a root-only file in a read-only volume",
			env:         []string{"NVIDIA_VISIBLE_DEVICES=0"},
			prepare: func(t *testing.T, e *env, s *setup) {
				writeFileMode(t, filepath.Join(s.volume, "shadow"), secret+"\n", 0o600)
				writeFile(t, filepath.Join(s.bundle, "rootfs/etc/ld.so.conf"), "include /hostetc/shadow\n")
				addMount(t, s.bundle, specs.Mount{Destination: "/hostetc", Type: "bind", Source: s.volume, Options: []string{"rbind", "ro"}})
			},
			absent: []string{secret, "$6$"},
		},
		{
			description: "include of a kernel file",
			env:         []string{"NVIDIA_VISIBLE_DEVICES=0"},
			prepare: func(t *testing.T, e *env, s *setup) {
				writeFile(t, filepath.Join(s.bundle, "rootfs/etc/ld.so.conf"), "include /proc/vmallocinfo /proc/self/mountinfo\n")
			},
			absent: []string{"pages=", "vmap", "relatime", "shared:"}, // vmallocinfo's and mountinfo's lines
		},
		{
			description: "uid 1000, include of the image's own root-only file",
			env:         []string{"NVIDIA_VISIBLE_DEVICES=0"},
			prepare: func(t *testing.T, e *env, s *setup) {
				writeFileMode(t, filepath.Join(s.bundle, "rootfs/etc/secret.conf"), secret+"\n", 0o600)
				writeFile(t, filepath.Join(s.bundle, "rootfs/etc/ld.so.conf"), "include /etc/secret.conf\n")
				runAs(t, s.bundle, 1000)
			},
			absent: []string{secret, "$6$"},
		},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			e := newEnv(t, 1)
			// The update is the hook's: the create leaves it (as it does for a user namespace).
			replaceInFile(t, e.config, "[hook]\n", "[hook]\nldcache-at-create = false\n")
			s := &setup{bundle: e.bundle(t, tc.env, "echo started"), volume: t.TempDir()}
			must(t, os.Chmod(s.volume, 0o755))
			// The image has a library of its own and no cache: the hook reads its loader
			// configuration, then runs ldconfig.
			buildLib(t, filepath.Join(s.bundle, "rootfs/usr/lib/libimage.so.1"), "libimage.so.1")
			tc.prepare(t, e, s)
			before := snapshot(t, s.volume)
			logPath := filepath.Join(t.TempDir(), "log.json")
			r := e.run(t, s.bundle, "--log", logPath, "--log-format", "json")
			switch {
			case tc.want == "" && (r.code != 0 || !strings.Contains(r.stdout, "started")):
				t.Errorf("exit %d, want the container to run:\n%s%s", r.code, r.stdout, r.stderr)
			case tc.want != "" && (r.code == 0 || !strings.Contains(r.stderr, tc.want)):
				t.Errorf("exit %d; stderr lacks %q:\n%s", r.code, tc.want, tail(r.stderr, 2000))
			}
			if after := snapshot(t, s.volume); strings.Join(after, "\n") != strings.Join(before, "\n") {
				t.Errorf("the volume's host directory changed:\nbefore %v\nafter  %v", before, after)
			}
			log, _ := os.ReadFile(logPath)
			for _, a := range tc.absent {
				for where, text := range map[string]string{"stdout": r.stdout, "stderr": r.stderr, "the runtime's log": string(log)} {
					if strings.Contains(text, a) {
						t.Errorf("%s quotes %q:\n%.3000s", where, a, text)
					}
				}
			}
		})
	}
}

// relink replaces the directory p with a symbolic link to target.
func relink(t *testing.T, p, target string) {
	t.Helper()
	must(t, os.RemoveAll(p))
	must(t, os.Symlink(target, p))
}

// runAs makes the bundle's process run as uid and gid id.
func runAs(t *testing.T, bundle string, id uint32) {
	t.Helper()
	editSpec(t, bundle, func(s map[string]any) {
		s["process"].(map[string]any)["user"] = map[string]any{"uid": id, "gid": id}
	})
}

// tail is the last n bytes of s (the error after a create's debug lines).
func tail(s string, n int) string { return s[max(0, len(s)-n):] }
