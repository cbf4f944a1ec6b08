package e2e

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// liveDockerd answers GET /info on a unix socket as a running dockerd does, with the runtimes
// and default runtime the test sets: what it loaded when it started.
type liveDockerd struct {
	mu   sync.Mutex
	info string
}

func (l *liveDockerd) set(runtimes, def string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.info = fmt.Sprintf(`{"ServerVersion":"20.10.24","Runtimes":{%s},"DefaultRuntime":%q}`, runtimes, def)
}

func startLiveDockerd(t *testing.T) *liveDockerd {
	t.Helper()
	dir, err := os.MkdirTemp("", "dl-") // short: a socket path has at most 107 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	sock := filepath.Join(dir, "docker.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	d := &liveDockerd{}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d.mu.Lock()
		defer d.mu.Unlock()
		_, _ = w.Write([]byte(d.info))
	})}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	t.Setenv("DOCKER_HOST", "unix://"+sock)
	return d
}

// TestDoctorLiveEngine: doctor compares docker's configuration with what the running dockerd
// (here a stand-in on DOCKER_HOST, this test's process) has loaded, and says to restart docker
// where they differ.
func TestDoctorLiveEngine(t *testing.T) {
	d := newDoctorEnv(t, healthyOptions())
	live := startLiveDockerd(t)
	pid := os.Getpid()
	runtimePath := filepath.Join(binDir, "gpu-runtime")
	daemonJSON := filepath.Join(d.engineRoot, "etc/docker/daemon.json")
	installed := "installed (" + filepath.Join(d.engineRoot, "usr/bin/dockerd") + "); "
	withGPU := fmt.Sprintf(`"gpu":{"path":%q},"runc":{"path":"runc"}`, runtimePath)
	withNvidia := fmt.Sprintf(`"nvidia":{"path":%q},"runc":{"path":"runc"}`, runtimePath)

	testCases := []struct {
		description    string
		configure      []string // gpu-ctk runtime ... before doctor
		runtimes, def  string
		status, detail string
		fix            string
	}{
		{"registered, dockerd not restarted", nil, `"runc":{"path":"runc"}`, "runc", "warn",
			installed + `runtime "gpu" registered: ` + runtimePath + fmt.Sprintf(`; registered but not loaded: the running dockerd (pid %d) has only the runtimes runc (it read its configuration before the runtime "gpu" was registered); restart docker`, pid),
			"systemctl restart docker"},
		{"registered and loaded", nil, withGPU, "runc", "ok",
			installed + `runtime "gpu" registered: ` + runtimePath + fmt.Sprintf("; loaded by the running dockerd (pid %d)", pid), ""},
		{"the default in daemon.json, not in dockerd", []string{"configure", "--set-as-default"}, withGPU, "runc", "warn",
			installed + `runtime "gpu" registered: ` + runtimePath + fmt.Sprintf(`, the default runtime; but not loaded as such: the running dockerd (pid %d) still defaults to "runc", so containers that name no runtime get no GPU; restart docker`, pid),
			"systemctl restart docker"},
		{"the default in both", nil, withGPU, "gpu", "ok",
			installed + `runtime "gpu" registered: ` + runtimePath + fmt.Sprintf(", the default runtime; loaded by the running dockerd (pid %d) as its default runtime", pid), ""},
		{"unregistered, dockerd not restarted", []string{"unconfigure"}, withGPU, "gpu", "warn",
			installed + `runtime "gpu" not registered (` + daemonJSON + fmt.Sprintf(`), but the running dockerd (pid %d) still has the runtime "gpu" loaded (%s) until it restarts; restart docker`, pid, runtimePath),
			"systemctl restart docker"},
		// A runtime of ours is told by its path, whatever its name.
		{"nvidia of ours, the default in both", []string{"configure", "--runtime-name=nvidia", "--set-as-default"}, withNvidia, "nvidia", "ok",
			installed + `runtime "nvidia" registered: ` + runtimePath + fmt.Sprintf(", the default runtime; loaded by the running dockerd (pid %d) as its default runtime", pid), ""},
		{"nvidia of ours and gpu, dockerd not restarted", []string{"configure"}, withNvidia, "nvidia", "warn",
			installed + `runtimes "gpu", "nvidia" registered: ` + runtimePath + fmt.Sprintf(`, "nvidia" the default runtime; registered but not loaded: the running dockerd (pid %d) has only the runtimes nvidia, runc (it read its configuration before the runtime "gpu" was registered); restart docker`, pid),
			"systemctl restart docker"},
		{"nvidia of ours unregistered, dockerd not restarted", []string{"unconfigure"}, withNvidia, "nvidia", "warn",
			installed + `runtime "gpu" not registered (` + daemonJSON + fmt.Sprintf(`), but the running dockerd (pid %d) still has the runtime "nvidia" loaded (%s) until it restarts; restart docker`, pid, runtimePath),
			"systemctl restart docker"},
		{"NVIDIA's own nvidia loaded: not ours", nil, `"nvidia":{"path":"nvidia-container-runtime"},"runc":{"path":"runc"}`, "nvidia", "warn",
			installed + `runtime "gpu" not registered (` + daemonJSON + `)`, "gpu-ctk runtime configure --runtime=docker && systemctl restart docker"},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			if tc.configure != nil {
				d.ctk(t, 0, append(append([]string{"runtime"}, tc.configure[0], "--runtime=docker", "--config", daemonJSON), tc.configure[1:]...)...)
			}
			live.set(tc.runtimes, tc.def)
			checks, _ := d.doctor(t)
			if c := checks["engine docker"]; c.Status != tc.status || c.Detail != tc.detail || c.Fix != tc.fix {
				t.Errorf("engine docker: %s: %s — fix: %s\nwant %s: %s — fix: %s", c.Status, c.Detail, c.Fix, tc.status, tc.detail, tc.fix)
			}
		})
	}
}
