package hook

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpu-runtime/gpu-runtime/pkg/requirements"
)

func TestCompatVersion(t *testing.T) {
	testCases := []struct {
		description string
		files       []string
		want        string
	}{
		{"no compat dir", nil, ""},
		{"newest versioned file wins", []string{"libcuda.so.1", "libcuda.so.535.104.05", "libcuda.so.560.28.03", "libnvidia-ptxjitcompiler.so.560.28.03"}, "560.28.03"},
		{"numeric, not lexical, comparison", []string{"libcuda.so.99.1", "libcuda.so.100.0"}, "100.0"},
		{"only links and garbage", []string{"libcuda.so.1", "libcuda.so.x.y"}, ""},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			root := t.TempDir()
			for _, f := range tc.files {
				p := filepath.Join(root, CompatDir, f)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte("not an ELF"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			got, _, err := CompatVersion(root)
			if err != nil || got != tc.want {
				t.Fatalf("CompatVersion = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func TestPreferCompatConfined(t *testing.T) {
	requireRoot(t)
	host := t.TempDir()
	root := t.TempDir()
	lib := "/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15"
	buildLib(t, filepath.Join(root, lib), "libcuda.so.1")
	buildLib(t, filepath.Join(root, CompatDir, "libcuda.so.560.28.03"), "libcuda.so.1")
	if err := os.MkdirAll(filepath.Join(root, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	// The image points ld.so.conf.d at a host directory.
	if err := os.Symlink(host, filepath.Join(root, "etc/ld.so.conf.d")); err != nil {
		t.Fatal(err)
	}
	_, err := UpdateLDCache(root, LDCacheOptions{LDConfig: "/sbin/ldconfig", Libraries: []string{lib}, DriverVersion: "550.54.15"})
	if entries, _ := os.ReadDir(host); len(entries) != 0 {
		t.Fatalf("wrote to the host through the image's symlink: %v (err %v)", entries, err)
	}
	// Confined, the link dangles inside the root: the hook refuses with a clear error.
	if err == nil || !strings.HasPrefix(err.Error(), "create /etc/ld.so.conf.d in container root: ") {
		t.Fatalf("error = %v", err)
	}
	// With the target present inside the root, the entry lands there.
	if err := os.MkdirAll(filepath.Join(root, host), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := UpdateLDCache(root, LDCacheOptions{LDConfig: "/sbin/ldconfig", Libraries: []string{lib}, DriverVersion: "550.54.15"}); err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(host); len(entries) != 0 {
		t.Fatalf("wrote to the host: %v", entries)
	}
	conf, err := os.ReadFile(filepath.Join(root, host, filepath.Base(CompatConf)))
	if err != nil || !strings.Contains(string(conf), CompatDir) {
		t.Errorf("compat conf inside the root: %q, %v", conf, err)
	}
}

func TestCheckRequirements(t *testing.T) {
	bundle := t.TempDir()
	host := requirements.Host{CUDA: "12.4", Driver: "550.54.15"}
	testCases := []struct {
		description string
		spec        string
		wantErr     string
	}{
		{"satisfied", `{"process":{"env":["NVIDIA_REQUIRE_CUDA=cuda>=12.0"]}}`, ""},
		{"unsatisfied", `{"process":{"env":["NVIDIA_REQUIRE_CUDA=cuda>=12.8"]}}`,
			"unsatisfied condition: cuda>=12.8, please update your driver to a newer version, or use an earlier cuda container (host: cuda 12.4, driver 550.54.15)"},
		{"disabled", `{"process":{"env":["NVIDIA_REQUIRE_CUDA=cuda>=12.8","NVIDIA_DISABLE_REQUIRE=true"]}}`, ""},
		{"no process", `{}`, ""},
		{"bad spec", `{"process":`, "decode spec of bundle " + bundle + ": unexpected end of JSON input"},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			if err := os.WriteFile(filepath.Join(bundle, "config.json"), []byte(tc.spec), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := CheckRequirements(bundle, host)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || err.Error() != tc.wantErr {
				t.Fatalf("error = %v\nwant    %s", err, tc.wantErr)
			}
		})
	}
}

func TestRunMessages(t *testing.T) {
	testCases := []struct {
		description string
		argv0       string
		args        []string
		stdin       string
		wantMsg     string
	}{
		{"docker's hook name means gpu-runtime was bypassed", "/usr/bin/nvidia-container-runtime-hook", []string{"prestart"}, "",
			"gpu-hook: container was created without gpu-runtime: docker ran nvidia-container-runtime-hook for a --gpus container; run it with --runtime=gpu, or set gpu as docker's default-runtime in /etc/docker/daemon.json"},
		{"unknown subcommand", "gpu-hook", []string{"poststart"}, "", `gpu-hook: unknown subcommand "poststart"`},
		{"bad --gpu", "gpu-hook", []string{"prestart", "--gpu", "x"}, "", `gpu-hook: --gpu "x": want INDEX,ARCH,BRAND`},
		{"bad --gpu index", "gpu-hook", []string{"prestart", "--gpu", "-1,8.0,tesla"}, "", `gpu-hook: --gpu "-1,8.0,tesla": bad index "-1"`},
		{"no state on stdin", "gpu-hook", []string{"prestart"}, "", "gpu-hook: bad hook input: decode container state from stdin: EOF"},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			var out, errb strings.Builder
			err := Run(tc.argv0, tc.args, strings.NewReader(tc.stdin), &out, &errb)
			if err == nil || Message(err) != tc.wantMsg {
				t.Fatalf("message = %v\nwant      %s", err, tc.wantMsg)
			}
		})
	}
	if !errors.Is(Run("nvidia-container-runtime-hook", nil, nil, nil, nil), ErrBypassed) {
		t.Error("want ErrBypassed")
	}
}

// TestCompatVersionBounded: an image can hold any number of libcuda.so.* files; only the
// newest few by name are opened, FIFOs never, and the hook says what it skipped.
func TestCompatVersionBounded(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, CompatDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 100; i++ {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("libcuda.so.%d.1", 400+i)), []byte("not an ELF"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "libcuda.so.999.1"), 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var got string
	var warnings []string
	var err error
	go func() {
		got, warnings, err = CompatVersion(root)
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("CompatVersion blocked on the FIFO")
	}
	if err != nil || got != "499.1" {
		t.Fatalf("CompatVersion = %q, %v; want 499.1 (the FIFO named 999.1 is not a library)", got, err)
	}
	want := []string{
		"/usr/local/cuda/compat holds 101 libcuda.so.<version> files; only the newest 8 by name were considered",
		"/usr/local/cuda/compat/libcuda.so.999.1 ignored: not a regular file",
	}
	if strings.Join(warnings, "\n") != strings.Join(want, "\n") {
		t.Errorf("warnings =\n%s\nwant\n%s", strings.Join(warnings, "\n"), strings.Join(want, "\n"))
	}
}

// TestBoundedELF: the compat library's ELF header is checked before debug/elf reads its
// section table; a hostile header is not parsed.
func TestBoundedELF(t *testing.T) {
	header := func(class byte, shoff uint64, shentsize, shnum uint16) []byte {
		h := make([]byte, 64)
		copy(h, "\x7fELF")
		h[4], h[5] = class, 1 // little endian
		binary.LittleEndian.PutUint64(h[40:], shoff)
		binary.LittleEndian.PutUint16(h[58:], shentsize)
		binary.LittleEndian.PutUint16(h[60:], shnum)
		return h
	}
	testCases := []struct {
		description string
		data        []byte
		size        int64
		want        bool
	}{
		{"sane 64-bit header", header(2, 64, 64, 10), 64 + 640, true},
		{"not ELF", []byte("garbage"), 7, false},
		{"section table past the end", header(2, 64, 64, 10), 100, false},
		{"too many sections", header(2, 64, 64, 2000), 1 << 30, false},
		{"odd section header size", header(2, 64, 1, 10), 1 << 20, false},
		{"offset overflowing", header(2, 1<<63, 64, 10), 1 << 20, false},
	}
	for _, tc := range testCases {
		if got := boundedELF(bytes.NewReader(tc.data), tc.size); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.description, got, tc.want)
		}
	}
}
