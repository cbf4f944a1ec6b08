package hook

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/gpu-runtime/gpu-runtime/internal/ldcache"
	"github.com/gpu-runtime/gpu-runtime/internal/ldupdate"
	"github.com/gpu-runtime/gpu-runtime/internal/testimage"
)

// hostTree returns a digest of every name, link target and file content under dir.
func hostTree(t *testing.T, dir string) string {
	t.Helper()
	var lines []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		line := p
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			line += " -> " + target
		case d.Type().IsRegular():
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			line += fmt.Sprintf(" %x", sha256.Sum256(data))
		}
		lines = append(lines, line)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// hostCache writes, in dir, a valid cache naming a library that exists only there.
func hostCache(t *testing.T, dir string) {
	t.Helper()
	flags, err := ldcache.FlagsFor(64, uint16(testimage.AMD64.Machine))
	if err != nil {
		t.Fatal(err)
	}
	c := &ldcache.Cache{}
	if err := c.Add(ldcache.Library{Name: "libhostonly.so.1", Path: "/host/libhostonly.so.1", Flags: flags}); err != nil {
		t.Fatal(err)
	}
	data, err := c.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "ld.so.cache"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	lib, err := testimage.SharedObject(testimage.AMD64, "libhostonly.so.1", "libc.so.6")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "libhostonly.so.1"), lib, 0o644); err != nil {
		t.Fatal(err)
	}
}

func writeLib(t *testing.T, p, soname string) {
	t.Helper()
	data, err := testimage.SharedObject(testimage.AMD64, soname, "libc.so.6")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestLDCacheFallback: what the image can put in the in-process update's way. A hostile
// cache (a FIFO, a gigabyte, garbage, entries out of order), an image link where the hook
// makes a SONAME or development link, an injected library that is a link out of the root or
// no ELF file, an odd compat directory, a cache-less image with libraries of its own: each
// makes gpu-hook run the sandboxed ldconfig instead — without hanging, reading the host,
// or writing there — and say why, in these words. /etc or the cache linked to a host path
// resolves inside the root, where there is no cache: the host's is never read. A musl image
// gets no cache.
// longConfLine is a line of an image's ld.so.conf of 900 KB (the hook reads 1 MiB of a file).
var longConfLine = "/opt/" + strings.Repeat("x", 900000-len("/opt/"))

func TestLDCacheFallback(t *testing.T) {
	requireRoot(t)
	small := testimage.Options{Libraries: 20, UsrMerge: true}
	bare := testimage.Options{NoConfig: true, NoCache: true}
	testCases := []struct {
		description string
		opts        testimage.Options
		image       func(t *testing.T, root, host string)
		libs        []driverLib
		wantMethod  string
		wantReason  string
		wantErr     string
		check       func(t *testing.T, root, host string)
	}{
		{
			description: "FIFO at /etc/ld.so.cache",
			opts:        small,
			image: func(t *testing.T, root, _ string) {
				if err := os.Remove(filepath.Join(root, "etc/ld.so.cache")); err != nil {
					t.Fatal(err)
				}
				testimage.Mkfifo(t, filepath.Join(root, "etc/ld.so.cache"))
			},
			wantMethod: ldupdate.MethodLDConfig,
			wantReason: "the image's /etc/ld.so.cache is not a regular file",
		},
		{
			description: "/etc/ld.so.cache of a gigabyte (sparse)",
			opts:        small,
			image: func(t *testing.T, root, _ string) {
				if err := os.Truncate(filepath.Join(root, "etc/ld.so.cache"), 1<<30); err != nil {
					t.Fatal(err)
				}
			},
			wantMethod: ldupdate.MethodLDConfig,
			wantReason: "the image's /etc/ld.so.cache cannot be read: larger than 8388608 bytes",
		},
		{
			description: "/etc/ld.so.cache that is not a cache",
			opts:        small,
			image: func(t *testing.T, root, _ string) {
				if err := os.WriteFile(filepath.Join(root, "etc/ld.so.cache"), []byte("garbage, not a cache"), 0o644); err != nil {
					t.Fatal(err)
				}
			},
			wantMethod: ldupdate.MethodLDConfig,
			wantReason: `the image's /etc/ld.so.cache is in a form gpu-hook does not rewrite: malformed ld.so.cache: unknown magic "garbage, not a cache"`,
		},
		{
			description: "/etc/ld.so.cache with entries out of ldconfig's order",
			opts:        small,
			image: func(t *testing.T, root, _ string) {
				p := filepath.Join(root, "etc/ld.so.cache")
				data, err := os.ReadFile(p)
				if err != nil {
					t.Fatal(err)
				}
				// Swap the first two 24-byte entries after the 48-byte header.
				a := append([]byte(nil), data[48:72]...)
				copy(data[48:72], data[72:96])
				copy(data[72:96], a)
				if err := os.WriteFile(p, data, 0o644); err != nil {
					t.Fatal(err)
				}
			},
			wantMethod: ldupdate.MethodLDConfig,
			wantReason: `the image's /etc/ld.so.cache is in a form gpu-hook does not rewrite: malformed ld.so.cache: entries 0 ("libcurl-gnutls.so" => "/lib/x86_64-linux-gnu/libcurl-gnutls.so") and 1 ("libcurl-gnutls.so.13" => "/lib/x86_64-linux-gnu/libcurl-gnutls.so.13") are not in ldconfig's order`,
		},
		{
			// Confined, the link dangles inside the root: the hook refuses, as before.
			description: "/etc a link to a host directory holding a cache",
			opts:        bare,
			image: func(t *testing.T, root, host string) {
				hostCache(t, host)
				if err := os.RemoveAll(filepath.Join(root, "etc")); err != nil {
					t.Fatal(err)
				}
				testimage.Symlink(t, host, filepath.Join(root, "etc"))
			},
			wantErr: "create /etc in container root ROOT: openat2 ROOT/etc: not a directory",
		},
		{
			description: "/etc a link to a host directory holding a cache, the same path inside the root",
			opts:        bare,
			image: func(t *testing.T, root, host string) {
				hostCache(t, host)
				if err := os.RemoveAll(filepath.Join(root, "etc")); err != nil {
					t.Fatal(err)
				}
				testimage.Symlink(t, host, filepath.Join(root, "etc"))
				if err := os.MkdirAll(filepath.Join(root, host), 0o755); err != nil {
					t.Fatal(err)
				}
			},
			wantMethod: ldupdate.MethodInProcess,
			check: func(t *testing.T, root, host string) {
				// /etc resolved inside the root: the cache is there, made from nothing of the host's.
				c := readCache(t, root)
				for _, e := range c.Entries {
					if strings.Contains(e.Name, "hostonly") {
						t.Errorf("the container's cache has the host's entry %v", e)
					}
				}
			},
		},
		{
			description: "/etc/ld.so.cache a link to a host cache (absolute)",
			opts:        bare,
			image: func(t *testing.T, root, host string) {
				hostCache(t, host)
				testimage.Symlink(t, filepath.Join(host, "ld.so.cache"), filepath.Join(root, "etc/ld.so.cache"))
			},
			wantMethod: ldupdate.MethodInProcess,
			check: func(t *testing.T, root, _ string) {
				if fi, err := os.Lstat(filepath.Join(root, "etc/ld.so.cache")); err != nil || !fi.Mode().IsRegular() {
					t.Fatalf("/etc/ld.so.cache: %v, %v; want the link replaced by a regular file", fi, err)
				}
				for _, e := range readCache(t, root).Entries {
					if strings.Contains(e.Name, "hostonly") {
						t.Errorf("the container's cache has the host's entry %v", e)
					}
				}
			},
		},
		{
			description: "/etc/ld.so.cache a link to a host cache (../ form)",
			opts:        bare,
			image: func(t *testing.T, root, host string) {
				hostCache(t, host)
				testimage.Symlink(t, "../../../../../../../.."+host+"/ld.so.cache", filepath.Join(root, "etc/ld.so.cache"))
			},
			wantMethod: ldupdate.MethodInProcess,
		},
		{
			description: "injected library named by a link out of the root",
			opts:        small,
			image: func(t *testing.T, root, host string) {
				hostCache(t, host)
				testimage.Symlink(t, filepath.Join(host, "libhostonly.so.1"), filepath.Join(root, libDir64, "libcuda.so.550.54.15"))
			},
			libs:       []driverLib{},
			wantMethod: ldupdate.MethodLDConfig,
			wantReason: "injected library /usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15: not a regular file",
			check: func(t *testing.T, root, _ string) {
				for _, e := range readCache(t, root).Entries {
					if strings.Contains(e.Name, "hostonly") {
						t.Errorf("the container's cache has the host's library %v", e)
					}
				}
			},
		},
		{
			description: "injected library that is not ELF",
			opts:        small,
			image: func(t *testing.T, root, _ string) {
				if err := os.WriteFile(filepath.Join(root, libDir64, "libcuda.so.550.54.15"), []byte("not ELF"), 0o644); err != nil {
					t.Fatal(err)
				}
			},
			libs:       []driverLib{},
			wantMethod: ldupdate.MethodLDConfig,
			wantReason: "injected library /usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15: not a readable ELF file: no ELF header",
		},
		{
			description: "the image's own SONAME link, to an older library",
			opts:        small,
			image: func(t *testing.T, root, _ string) {
				writeLib(t, filepath.Join(root, libDir64, "libcuda.so.535.104.05"), "libcuda.so.1")
				testimage.Symlink(t, "libcuda.so.535.104.05", filepath.Join(root, libDir64, "libcuda.so.1"))
			},
			wantMethod: ldupdate.MethodLDConfig,
			wantReason: "/usr/lib/x86_64-linux-gnu/libcuda.so.1 is the image's link to libcuda.so.535.104.05, not to the injected libcuda.so.550.54.15",
			check: func(t *testing.T, root, _ string) {
				// ldconfig chose, as it always did: the newer library.
				if got, _ := os.Readlink(filepath.Join(root, libDir64, "libcuda.so.1")); got != "libcuda.so.550.54.15" {
					t.Errorf("libcuda.so.1 -> %q, want the injected library", got)
				}
			},
		},
		{
			description: "the image's own development link",
			opts:        small,
			image: func(t *testing.T, root, _ string) {
				testimage.Symlink(t, "image-choice", filepath.Join(root, libDir64, "libnvidia-ml.so"))
			},
			wantMethod: ldupdate.MethodLDConfig,
			wantReason: "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so is the image's link to image-choice, not to the injected libnvidia-ml.so.550.54.15",
		},
		{
			description: "no cache, libraries of the image's own",
			opts:        testimage.Options{Libraries: 1, LibDir: "/lib", NoConfig: true, NoCache: true},
			wantMethod:  ldupdate.MethodLDConfig,
			wantReason:  "the image has no /etc/ld.so.cache and has libraries of its own, such as /lib/libacl.so.0",
		},
		{
			description: "no cache, a glibc-hwcaps directory",
			opts:        bare,
			image: func(t *testing.T, root, _ string) {
				if err := os.MkdirAll(filepath.Join(root, "usr/lib/glibc-hwcaps/x86-64-v3"), 0o755); err != nil {
					t.Fatal(err)
				}
			},
			wantMethod: ldupdate.MethodLDConfig,
			wantReason: "the image has no /etc/ld.so.cache and has /usr/lib/glibc-hwcaps",
		},
		{
			description: "no cache, a FIFO in the loader configuration",
			opts:        bare,
			image: func(t *testing.T, root, _ string) {
				testimage.Mkfifo(t, filepath.Join(root, "etc/ld.so.conf"))
			},
			wantMethod: ldupdate.MethodLDConfig,
			wantReason: "the image has no /etc/ld.so.cache and loader configuration /etc/ld.so.conf skipped: not a regular file",
		},
		{
			description: "compat libraries sharing a SONAME",
			opts:        small,
			image: func(t *testing.T, root, _ string) {
				writeLib(t, filepath.Join(root, ldupdate.CompatDir, "libcuda.so.560.35.03"), "libcuda.so.1")
				writeLib(t, filepath.Join(root, ldupdate.CompatDir, "libcuda.so.561.0"), "libcuda.so.1")
			},
			wantMethod: ldupdate.MethodLDConfig,
			wantReason: "/usr/local/cuda/compat: libcuda.so.560.35.03 and libcuda.so.561.0 share the SONAME libcuda.so.1",
		},
		{
			description: "compat link out of the directory",
			opts:        small,
			image: func(t *testing.T, root, host string) {
				hostCache(t, host)
				writeLib(t, filepath.Join(root, ldupdate.CompatDir, "libcuda.so.560.35.03"), "libcuda.so.1")
				testimage.Symlink(t, filepath.Join(host, "libhostonly.so.1"), filepath.Join(root, ldupdate.CompatDir, "libcuda.so.1"))
			},
			wantMethod: ldupdate.MethodLDConfig,
			wantReason: "/usr/local/cuda/compat: libcuda.so.1 links out of the directory, to HOST/libhostonly.so.1",
		},
		{
			description: "FIFO in the compat directory",
			opts:        small,
			image: func(t *testing.T, root, _ string) {
				writeLib(t, filepath.Join(root, ldupdate.CompatDir, "libcuda.so.560.35.03"), "libcuda.so.1")
				testimage.Mkfifo(t, filepath.Join(root, ldupdate.CompatDir, "libnvidia-nvvm.so.4"))
			},
			wantMethod: ldupdate.MethodLDConfig,
			wantReason: "/usr/local/cuda/compat: libnvidia-nvvm.so.4 is neither a library nor a link",
		},
		{
			description: "the image's own file at a SONAME link's name",
			opts:        small,
			image: func(t *testing.T, root, _ string) {
				writeLib(t, filepath.Join(root, libDir64, "libcuda.so.1"), "libcuda.so.1")
			},
			wantMethod: ldupdate.MethodLDConfig,
			wantReason: "/usr/lib/x86_64-linux-gnu/libcuda.so.1 is the image's, not a link to the injected libcuda.so.550.54.15",
		},
		{
			description: "injected libraries sharing a SONAME",
			opts:        small,
			libs: []driverLib{
				{libDir64, "libcuda.so.550.54.15", "libcuda.so.1", testimage.AMD64},
				{libDir64, "libcuda.so.550.54.16", "libcuda.so.1", testimage.AMD64},
			},
			wantMethod: ldupdate.MethodLDConfig,
			wantReason: "injected libraries in /usr/lib/x86_64-linux-gnu share the SONAME libcuda.so.1",
		},
		{
			description: "no cache, a loader configuration line of several directories",
			opts:        bare,
			image: func(t *testing.T, root, _ string) {
				if err := os.WriteFile(filepath.Join(root, "etc/ld.so.conf"), []byte("/opt/lib:/opt/more\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			},
			wantMethod: ldupdate.MethodLDConfig,
			wantReason: "the image has no /etc/ld.so.cache and its loader configuration has a line gpu-hook does not read (/etc/ld.so.conf line 1)",
		},
		{
			description: "no cache, a loader configuration line of 900 KB: named by place, not quoted",
			opts:        bare,
			image: func(t *testing.T, root, _ string) {
				if err := os.WriteFile(filepath.Join(root, "etc/ld.so.conf"), []byte(longConfLine+":/opt/more\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			},
			wantMethod: ldupdate.MethodLDConfig,
			wantReason: "the image has no /etc/ld.so.cache and its loader configuration has a line gpu-hook does not read (/etc/ld.so.conf line 1)",
		},
		{
			description: "no cache, an include of 900 KB that is no pattern: named by place, not quoted",
			opts:        bare,
			image: func(t *testing.T, root, _ string) {
				if err := os.WriteFile(filepath.Join(root, "etc/ld.so.conf"), []byte("include /opt/["+longConfLine+"\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			},
			wantMethod: ldupdate.MethodLDConfig,
			wantReason: "the image has no /etc/ld.so.cache and /etc/ld.so.conf line 1: include: bad pattern: syntax error in pattern",
		},
		{
			description: "no cache, a directory of 900 KB: cut",
			opts:        bare,
			image: func(t *testing.T, root, _ string) {
				if err := os.WriteFile(filepath.Join(root, "etc/ld.so.conf"), []byte(longConfLine+"\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			},
			wantMethod: ldupdate.MethodLDConfig,
			// securejoin's error names the path twice: cut too
			wantReason: "the image has no /etc/ld.so.cache and " + longConfLine[:256] + "… (900000 bytes) cannot be opened: securejoin.OpenInRoot " +
				longConfLine[:256-len("securejoin.OpenInRoot ")] + "… (1800052 bytes)",
		},
		{
			description: "no cache, a library directory too large to list",
			opts:        bare,
			image: func(t *testing.T, root, _ string) {
				dir := filepath.Join(root, "usr/lib")
				for i := range 4097 {
					if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("data%d", i)), nil, 0o644); err != nil {
						t.Fatal(err)
					}
				}
			},
			wantMethod: ldupdate.MethodLDConfig,
			wantReason: "the image has no /etc/ld.so.cache and /usr/lib cannot be listed: more than 4096 entries",
		},
		{
			description: "compat link to nothing",
			opts:        small,
			image: func(t *testing.T, root, _ string) {
				writeLib(t, filepath.Join(root, ldupdate.CompatDir, "libcuda.so.560.35.03"), "libcuda.so.1")
				testimage.Symlink(t, "libcuda.so.9", filepath.Join(root, ldupdate.CompatDir, "libcuda.so"))
			},
			wantMethod: ldupdate.MethodLDConfig,
			wantReason: "/usr/local/cuda/compat: libcuda.so links to libcuda.so.9, which is no library here",
		},
		{
			description: "compat link that is neither a SONAME nor a development link",
			opts:        small,
			image: func(t *testing.T, root, _ string) {
				writeLib(t, filepath.Join(root, ldupdate.CompatDir, "libcuda.so.560.35.03"), "libcuda.so.1")
				testimage.Symlink(t, "libcuda.so.560.35.03", filepath.Join(root, ldupdate.CompatDir, "libcuda.so.560"))
			},
			wantMethod: ldupdate.MethodLDConfig,
			wantReason: "/usr/local/cuda/compat: libcuda.so.560 links to libcuda.so.560.35.03 but is neither its SONAME nor its development link",
		},
		{
			description: "compat SONAME link to another library",
			opts:        small,
			image: func(t *testing.T, root, _ string) {
				writeLib(t, filepath.Join(root, ldupdate.CompatDir, "libcuda.so.560.35.03"), "libcuda.so.1")
				writeLib(t, filepath.Join(root, ldupdate.CompatDir, "libnvidia-nvvm.so.560.35.03"), "libnvidia-nvvm.so.4")
				testimage.Symlink(t, "libnvidia-nvvm.so.560.35.03", filepath.Join(root, ldupdate.CompatDir, "libcuda.so.1"))
			},
			wantMethod: ldupdate.MethodLDConfig,
			wantReason: "/usr/local/cuda/compat: libcuda.so.1 does not link to libcuda.so.560.35.03, the library with that SONAME",
		},
		{
			description: "compat library whose SONAME names another library",
			opts:        small,
			image: func(t *testing.T, root, _ string) {
				writeLib(t, filepath.Join(root, ldupdate.CompatDir, "libcuda.so.560.35.03"), "libnvidia-nvvm.so.4")
				writeLib(t, filepath.Join(root, ldupdate.CompatDir, "libnvidia-nvvm.so.4"), "libnvidia-other.so.4")
			},
			wantMethod: ldupdate.MethodLDConfig,
			wantReason: "/usr/local/cuda/compat: libcuda.so.560.35.03 has the SONAME libnvidia-nvvm.so.4, the name of another library",
		},
		{
			description: "compat directory too large",
			opts:        small,
			image: func(t *testing.T, root, _ string) {
				writeLib(t, filepath.Join(root, ldupdate.CompatDir, "libcuda.so.560.35.03"), "libcuda.so.1")
				for i := range 64 {
					if err := os.WriteFile(filepath.Join(root, ldupdate.CompatDir, fmt.Sprintf("README%d", i)), nil, 0o644); err != nil {
						t.Fatal(err)
					}
				}
			},
			wantMethod: ldupdate.MethodLDConfig,
			wantReason: "/usr/local/cuda/compat: more than 64 entries",
		},
		{
			description: "musl image without a cache",
			opts:        bare,
			image: func(t *testing.T, root, _ string) {
				writeLib(t, filepath.Join(root, "lib/ld-musl-x86_64.so.1"), "ld-musl-x86_64.so.1")
			},
			wantMethod: ldupdate.MethodSkipped,
			wantReason: "the image has /lib/ld-musl-x86_64.so.1 and no /etc/ld.so.cache: musl's loader reads no cache",
			check: func(t *testing.T, root, _ string) {
				if _, err := os.Lstat(filepath.Join(root, "etc/ld.so.cache")); err == nil {
					t.Error("a cache was written for a musl image")
				}
				if got, _ := os.Readlink(filepath.Join(root, libDir64, "libcuda.so.1")); got != "libcuda.so.550.54.15" {
					t.Errorf("libcuda.so.1 -> %q, want the SONAME link made all the same", got)
				}
			},
		},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			root, _ := buildRoot(t, tc.opts)
			host := t.TempDir()
			libs := driverLibs[:2]
			if tc.libs != nil {
				libs = tc.libs
			}
			paths := inject(t, root, libs)
			if len(libs) == 0 {
				paths = []string{libDir64 + "/libcuda.so.550.54.15"}
			}
			if tc.image != nil {
				tc.image(t, root, host)
			}
			before := hostTree(t, host)
			type outcome struct {
				res LDCacheResult
				err error
			}
			done := make(chan outcome, 1)
			go func() {
				res, err := UpdateLDCache(root, LDCacheOptions{Options: ldupdate.Options{LDConfig: hostLDConfig, Libraries: libraries(paths, nil), DriverVersion: driverVer}, Deadline: 10 * time.Second})
				done <- outcome{res, err}
			}()
			var o outcome
			select {
			case o = <-done:
			case <-time.After(30 * time.Second):
				t.Fatal("UpdateLDCache hung")
			}
			if tc.wantErr != "" {
				if want := strings.ReplaceAll(tc.wantErr, "ROOT", root); o.err == nil || o.err.Error() != want {
					t.Fatalf("UpdateLDCache error = %v\nwant %s", o.err, want)
				}
				if after := hostTree(t, host); after != before {
					t.Errorf("the host directory changed:\nbefore\n%s\nafter\n%s", before, after)
				}
				return
			}
			if o.err != nil {
				t.Fatalf("UpdateLDCache: %v", o.err)
			}
			wantReason := strings.ReplaceAll(tc.wantReason, "HOST", host)
			if o.res.Method != tc.wantMethod || o.res.Reason != wantReason {
				t.Errorf("UpdateLDCache = %q because %q\nwant       %q because %q", o.res.Method, o.res.Reason, tc.wantMethod, wantReason)
			}
			if after := hostTree(t, host); after != before {
				t.Errorf("the host directory changed:\nbefore\n%s\nafter\n%s", before, after)
			}
			if tc.wantMethod != ldupdate.MethodSkipped {
				found := false
				for _, e := range readCache(t, root).Entries {
					found = found || e.Name == "libcuda.so.1"
				}
				if !found && len(tc.libs) != 0 {
					t.Error("the container's cache lacks libcuda.so.1")
				}
			}
			if tc.check != nil {
				tc.check(t, root, host)
			}
		})
	}
}

// TestUpdateLDCacheMessages: what gpu-hook update-ldcache prints. Nothing in the common case;
// one line saying why when it ran ldconfig instead, or wrote no cache. (runc shows a hook's
// stderr in its error when the hook fails.)
func TestUpdateLDCacheMessages(t *testing.T) {
	requireRoot(t)
	testCases := []struct {
		description string
		opts        testimage.Options
		image       func(t *testing.T, root string)
		want        string
	}{
		{description: "in-process: silent", opts: testimage.Options{Libraries: 5, UsrMerge: true}},
		{description: "ldconfig", opts: testimage.Options{Libraries: 5, UsrMerge: true},
			image: func(t *testing.T, root string) {
				if err := os.Remove(filepath.Join(root, "etc/ld.so.cache")); err != nil {
					t.Fatal(err)
				}
				testimage.Mkfifo(t, filepath.Join(root, "etc/ld.so.cache"))
			},
			want: "gpu-hook: loader cache: ran /sbin/ldconfig over the whole image (slower) because the image's /etc/ld.so.cache is not a regular file\n"},
		{description: "musl", opts: testimage.Options{NoConfig: true, NoCache: true},
			image: func(t *testing.T, root string) {
				writeLib(t, filepath.Join(root, "lib/ld-musl-x86_64.so.1"), "ld-musl-x86_64.so.1")
			},
			want: "gpu-hook: loader cache: none written because the image has /lib/ld-musl-x86_64.so.1 and no /etc/ld.so.cache: musl's loader reads no cache\n"},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			root, _ := buildRoot(t, tc.opts)
			paths := inject(t, root, driverLibs[:1])
			if tc.image != nil {
				tc.image(t, root)
			}
			bundle := t.TempDir()
			if err := os.WriteFile(filepath.Join(bundle, "config.json"), []byte(`{"root":{"path":"`+root+`"}}`), 0o644); err != nil {
				t.Fatal(err)
			}
			var stdout, stderr strings.Builder
			logFile := filepath.Join(t.TempDir(), "log.json")
			args := []string{"update-ldcache", "--ldconfig", hostLDConfig, "--driver-version", driverVer, "--library", paths[0], "--log", logFile, "--log-format", "json"}
			if err := Run("gpu-hook", args, strings.NewReader(`{"bundle":"`+bundle+`"}`), &stdout, &stderr); err != nil {
				t.Fatal(err)
			}
			if stderr.String() != tc.want || stdout.Len() != 0 {
				t.Errorf("stderr = %q, stdout = %q\nwant stderr %q", stderr.String(), stdout.String(), tc.want)
			}
			// The same line in runc's log, where the debug log shows it.
			data, err := os.ReadFile(logFile)
			if tc.want == "" {
				if err == nil {
					t.Errorf("the log got %q; want nothing", data)
				}
				return
			}
			var line struct{ Level, Msg, Time string }
			if err := json.Unmarshal(data, &line); err != nil {
				t.Fatalf("log %q: %v", data, err)
			}
			if line.Level != "info" || line.Msg+"\n" != tc.want || line.Time == "" {
				t.Errorf("log line %+v; want level info and msg %q", line, tc.want)
			}
		})
	}
}

// TestRuncLog: gpu-hook's lines in the log file of the low-level runtime, in both of its
// formats, appended to what is there.
func TestRuncLog(t *testing.T) {
	at := func() time.Time { return time.Date(2026, 11, 24, 7, 31, 1, 0, time.UTC) }
	testCases := []struct{ format, want string }{
		{"json", `{"level":"info","msg":"gpu-hook: loader cache: \"x\"","time":"2026-11-24T07:31:01Z"}` + "\n"},
		{"text", `time="2026-11-24T07:31:01Z" level=info msg="gpu-hook: loader cache: \"x\""` + "\n"},
	}
	for _, tc := range testCases {
		t.Run(tc.format, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "log")
			if err := os.WriteFile(p, []byte("runc's line\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := (runcLog{path: p, format: tc.format, now: at}).write("info", `gpu-hook: loader cache: "x"`); err != nil {
				t.Fatal(err)
			}
			if data, _ := os.ReadFile(p); string(data) != "runc's line\n"+tc.want {
				t.Errorf("log = %q, want %q", data, "runc's line\n"+tc.want)
			}
		})
	}
	if err := (runcLog{path: "/nonexistent-dir/log", format: "yaml", now: time.Now}).write("info", "x"); err == nil || err.Error() != `--log-format "yaml": want text or json` {
		t.Errorf("error = %v", err)
	}
	if err := (runcLog{}).write("info", "x"); err != nil {
		t.Errorf("no log file: %v", err)
	}
}
