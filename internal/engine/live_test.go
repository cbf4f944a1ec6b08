package engine

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// fakeDocker serves body (with status) for GET /info on a unix socket in a temporary directory.
func fakeDocker(t *testing.T, status int, body string) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "docker.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/info" {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	})}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return sock
}

func TestQueryDocker(t *testing.T) {
	sock := fakeDocker(t, http.StatusOK, `{"ID":"x","Runtimes":{"gpu":{"path":"/usr/bin/gpu-runtime"},"runc":{"path":"runc"}},"DefaultRuntime":"gpu","Other":[1,2]}`)
	live, err := QueryDocker(context.Background(), sock)
	if err != nil {
		t.Fatal(err)
	}
	if live.Engine != Docker || live.Socket != sock || live.Default != "gpu" || !live.Loads("gpu") || live.Runtimes["gpu"] != "/usr/bin/gpu-runtime" ||
		strings.Join(live.RuntimeNames(), ",") != "gpu,runc" {
		t.Errorf("QueryDocker: %+v", live)
	}
	// The listener is this test process: the peer credentials name it.
	if live.PID != os.Getpid() || live.StartTime == 0 || live.StartTime != ProcessStartTime(os.Getpid()) {
		t.Errorf("pid %d start %d, want %d and its start time", live.PID, live.StartTime, os.Getpid())
	}
}

func TestQueryDockerErrors(t *testing.T) {
	big := `{"Runtimes":{},"X":"` + strings.Repeat("a", LiveMaxBody) + `"}`
	testCases := []struct {
		description string
		sock        func(t *testing.T) string
		want        string
		notRunning  bool
	}{
		{"no socket", func(t *testing.T) string { return filepath.Join(t.TempDir(), "none.sock") }, "", true},
		{"no listener", func(t *testing.T) string {
			sock := filepath.Join(t.TempDir(), "dead.sock")
			l, err := net.Listen("unix", sock)
			if err != nil {
				t.Fatal(err)
			}
			l.(*net.UnixListener).SetUnlinkOnClose(false)
			_ = l.Close()
			return sock
		}, "", true},
		{"error status", func(t *testing.T) string { return fakeDocker(t, http.StatusInternalServerError, "{}") }, "answered GET /info with 500 Internal Server Error", false},
		{"not JSON", func(t *testing.T) string { return fakeDocker(t, http.StatusOK, "<html>") }, "dockerd's answer on", false},
		{"too large", func(t *testing.T) string { return fakeDocker(t, http.StatusOK, big) }, "more than 4194304 bytes", false},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			_, err := QueryDocker(context.Background(), tc.sock(t))
			if err == nil {
				t.Fatal("no error")
			}
			if errors.Is(err, ErrNotRunning) != tc.notRunning || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q (not running: %v), want one with %q (not running: %v)", err, errors.Is(err, ErrNotRunning), tc.want, tc.notRunning)
			}
		})
	}
}

func TestQueryContainerd(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "containerd.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	// crictl info's answer, as containerd 1.6 gives it (shortened); the fake checks its arguments.
	crictl := filepath.Join(dir, "crictl")
	script := `#!/bin/sh
[ "$*" = "--runtime-endpoint unix://` + sock + ` --timeout 5s info" ] || { echo "bad arguments: $*" >&2; exit 1; }
echo '{"status":{},"config":{"containerd":{"defaultRuntimeName":"runc","runtimes":{"runc":{"runtimeType":"io.containerd.runc.v2","options":{"SystemdCgroup":false}},"gpu":{"runtimeType":"io.containerd.runc.v2","options":{"BinaryName":"/usr/bin/gpu-runtime"}}}}}}'
`
	if err := os.WriteFile(crictl, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	live, err := QueryContainerd(context.Background(), sock, crictl)
	if err != nil {
		t.Fatal(err)
	}
	if live.Engine != Containerd || live.Default != "runc" || live.Runtimes["gpu"] != "/usr/bin/gpu-runtime" || strings.Join(live.RuntimeNames(), ",") != "gpu,runc" || live.PID != os.Getpid() {
		t.Errorf("QueryContainerd: %+v", live)
	}

	if _, err := QueryContainerd(context.Background(), sock, ""); err == nil || err.Error() != "containerd answers on "+sock+", but without crictl its CRI runtimes cannot be asked" {
		t.Errorf("without crictl: %v", err)
	}
	noCRI := filepath.Join(dir, "crictl-nocri")
	if err := os.WriteFile(noCRI, []byte("#!/bin/sh\necho '{\"status\":{}}'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := QueryContainerd(context.Background(), sock, noCRI); err == nil || !strings.Contains(err.Error(), "no CRI runtimes in its answer (is containerd's CRI plugin disabled?)") {
		t.Errorf("without the CRI plugin: %v", err)
	}
	if _, err := QueryContainerd(context.Background(), filepath.Join(dir, "none.sock"), crictl); !errors.Is(err, ErrNotRunning) {
		t.Errorf("no socket: %v, want ErrNotRunning", err)
	}
}

// TestLiveOurs: the loaded runtimes of ours are told by their program, not their name.
func TestLiveOurs(t *testing.T) {
	testCases := []struct {
		description string
		runtimes    map[string]string
		runtimePath string
		want        []string
	}{
		{"gpu only", map[string]string{"gpu": "/usr/bin/gpu-runtime", "runc": "runc"}, "", []string{"gpu"}},
		{"nvidia ours", map[string]string{"nvidia": "/usr/bin/gpu-runtime", "runc": "runc"}, "", []string{"nvidia"}},
		{"nvidia NVIDIA's own", map[string]string{"nvidia": "nvidia-container-runtime", "runc": "runc"}, "", nil},
		{"two names of ours", map[string]string{"nvidia": "/usr/bin/gpu-runtime", "gpu": "/usr/local/bin/gpu-runtime", "kata": "/k"}, "", []string{"gpu", "nvidia"}},
		{"another program path, given", map[string]string{"gpu": "/opt/gr/rt"}, "/opt/gr/rt", []string{"gpu"}},
		{"a program not said", map[string]string{"gpu": ""}, "", nil},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			if got := (Live{Runtimes: tc.runtimes}).Ours(tc.runtimePath); !slices.Equal(got, tc.want) {
				t.Errorf("Ours = %q, want %q", got, tc.want)
			}
		})
	}
}
