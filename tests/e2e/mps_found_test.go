package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestMPSStopUnconfigured: a share started, then taken out of the configuration (as when the
// package's configuration is purged), is still found from its pid file under the MPS root:
// status shows it and stop ends its daemon and unmounts its tmpfs.
func TestMPSStopUnconfigured(t *testing.T) {
	e, root := mpsConfigured(t)
	if out, code := gpuCTK(t, e, "mps", "start", "large"); code != 0 || !strings.HasPrefix(out, "large: started (pid ") {
		t.Fatalf("start: exit %d: %q", code, out)
	}
	var pid int
	if out, _ := gpuCTK(t, e, "mps", "status", "large"); !strings.HasPrefix(out, "large: running, pid ") {
		t.Fatalf("status: %q", out)
	} else if _, err := fmt.Sscanf(out, "large: running, pid %d", &pid); err != nil {
		t.Fatal(err)
	}
	e.writeConfig(t, fmt.Sprintf("[mps]\nroot = %q\n", root))

	if out, code := gpuCTK(t, e, "mps", "status"); code != 0 || !strings.HasPrefix(out, fmt.Sprintf("large: not in the configuration, but its pid file names pid %d (running): gpu-ctk mps stop large\n", pid)) {
		t.Errorf("status: exit %d: %q", code, out)
	}
	out, code := ctkCombined(t, e, "mps", "stop", "other")
	if want := fmt.Sprintf("gpu-ctk: unknown MPS share \"other\": none is configured, and no other has a pid file under %s\n", root); code != 1 || out != want {
		t.Errorf("stop other: exit %d: %q, want %q", code, out, want)
	}
	if out, code := ctkCombined(t, e, "mps", "stop"); code != 0 || out != fmt.Sprintf("large: stopped (pid %d)\n", pid) {
		t.Errorf("stop: exit %d: %q", code, out)
	}
	if stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil && !strings.Contains(string(stat), ") Z ") {
		t.Errorf("the daemon (pid %d) still runs: %s", pid, stat)
	}
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	if shm := filepath.Join(root, "large", "shm"); strings.Contains(string(mounts), " "+shm+" ") {
		t.Errorf("%s is still mounted", shm)
	}
	if out, code := ctkCombined(t, e, "mps", "stop"); code != 0 || out != "no MPS share to stop: none configured, and no pid file under "+root+"\n" {
		t.Errorf("stop again: exit %d: %q", code, out)
	}
}
