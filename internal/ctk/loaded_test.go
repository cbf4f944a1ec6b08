package ctk

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpu-runtime/gpu-runtime/internal/engine"
)

// serveInfo answers GET /info on a unix socket as a dockerd that loaded these runtimes.
func serveInfo(t *testing.T, info string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "ld-") // short: a socket path has at most 107 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	sock := filepath.Join(dir, "docker.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(info)) })}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return sock
}

// TestLoaded: gpu-ctk loaded names the running engines that have gpu-runtime loaded, under
// whatever name (told by the runtime's path), with their restart; --record gives the scripts
// ENGINE PID STARTTIME STATE NAMES; an engine that does not run, or has none of ours loaded
// (NVIDIA's own "nvidia"), is not listed.
func TestLoaded(t *testing.T) {
	pid := os.Getpid()
	start := engine.ProcessStartTime(pid)
	// A containerd socket that answers, and no crictl: what it loaded is unknown.
	dir := t.TempDir()
	ctdSock := filepath.Join(dir, "c.sock")
	l, err := net.Listen("unix", ctdSock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	testCases := []struct {
		description string
		info        string // dockerd's /info; "" for no dockerd
		containerd  bool
		args        []string
		want        string
	}{
		{"no engine runs", "", false, nil, ""},
		{"dockerd without gpu", `{"Runtimes":{"runc":{"path":"runc"}},"DefaultRuntime":"runc"}`, false, nil, ""},
		{"dockerd with gpu", `{"Runtimes":{"gpu":{"path":"/usr/bin/gpu-runtime"},"runc":{"path":"runc"}},"DefaultRuntime":"runc"}`, false, nil,
			fmt.Sprintf("the running dockerd (pid %d) has the runtime \"gpu\" loaded: systemctl restart docker\n", pid)},
		{"dockerd with gpu, the default", `{"Runtimes":{"gpu":{"path":"/usr/bin/gpu-runtime"}},"DefaultRuntime":"gpu"}`, false, nil,
			fmt.Sprintf("the running dockerd (pid %d) has the runtime \"gpu\" loaded, \"gpu\" as its default runtime: systemctl restart docker\n", pid)},
		{"dockerd with nvidia of ours, the default", `{"Runtimes":{"nvidia":{"path":"/usr/bin/gpu-runtime"},"runc":{"path":"runc"}},"DefaultRuntime":"nvidia"}`, false, nil,
			fmt.Sprintf("the running dockerd (pid %d) has the runtime \"nvidia\" loaded, \"nvidia\" as its default runtime: systemctl restart docker\n", pid)},
		{"dockerd with NVIDIA's own nvidia", `{"Runtimes":{"nvidia":{"path":"nvidia-container-runtime"},"runc":{"path":"runc"}},"DefaultRuntime":"nvidia"}`, false, nil, ""},
		{"dockerd with two names of ours", `{"Runtimes":{"nvidia":{"path":"/usr/bin/gpu-runtime"},"gpu":{"path":"/usr/bin/gpu-runtime"},"runc":{"path":"runc"}},"DefaultRuntime":"runc"}`, false, nil,
			fmt.Sprintf("the running dockerd (pid %d) has the runtimes \"gpu\", \"nvidia\" loaded: systemctl restart docker\n", pid)},
		{"record", `{"Runtimes":{"gpu":{"path":"/usr/bin/gpu-runtime"}},"DefaultRuntime":"gpu"}`, true, []string{"--record"},
			fmt.Sprintf("docker %d %d default gpu\ncontainerd %d %d unknown -\n", pid, start, pid, start)},
		{"record, two names of ours", `{"Runtimes":{"nvidia":{"path":"/usr/bin/gpu-runtime"},"gpu":{"path":"/usr/bin/gpu-runtime"}},"DefaultRuntime":"nvidia"}`, false, []string{"--record"},
			fmt.Sprintf("docker %d %d default gpu,nvidia\n", pid, start)},
		{"containerd without crictl", "", true, nil,
			fmt.Sprintf("the running containerd (pid %d) may have gpu-runtime loaded as a runtime (containerd answers on %s, but without crictl its CRI runtimes cannot be asked): to be sure it has not, systemctl restart containerd\n", pid, ctdSock)},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			t.Setenv("DOCKER_HOST", "unix://"+filepath.Join(dir, "none.sock"))
			if tc.info != "" {
				t.Setenv("DOCKER_HOST", "unix://"+serveInfo(t, tc.info))
			}
			t.Setenv("CONTAINERD_ADDRESS", filepath.Join(dir, "none.sock"))
			if tc.containerd {
				t.Setenv("CONTAINERD_ADDRESS", ctdSock)
			}
			lookCrictl = func() string { return "" } // whatever this host has
			t.Cleanup(func() { lookCrictl = findCrictl })
			var stdout, stderr strings.Builder
			if err := Run(append([]string{"loaded"}, tc.args...), &stdout, &stderr); err != nil {
				t.Fatal(err)
			}
			if stdout.String() != tc.want {
				t.Errorf("gpu-ctk loaded %v:\n%s\nwant\n%s", tc.args, stdout.String(), tc.want)
			}
		})
	}
}
