package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestParallelCreates: 32 GPU containers created at once through gpu-runtime all start
// with the right device; the shared log file stays line-intact; no temporary files remain.
func TestParallelCreates(t *testing.T) {
	const n = 32
	e := newEnv(t, 8)
	shared := filepath.Join(t.TempDir(), "gpu-runtime.log")
	e.writeConfig(t, "")
	replaceInFile(t, e.config, `log-level = "debug"`, fmt.Sprintf("log-level = \"debug\"\nlog-file = %q", shared))

	type outcome struct {
		bundle, stdout, id string
		res                result
	}
	outcomes := make([]outcome, n)
	for i := range outcomes {
		gpu := i % 8
		outcomes[i].bundle = e.bundle(t, []string{fmt.Sprintf("NVIDIA_VISIBLE_DEVICES=%d", gpu)},
			`for f in /dev/nvidia[0-9]*; do echo "dev $f"; done; grep -q libcuda.so.1 /etc/ld.so.cache && echo ldcache-ok`)
		outcomes[i].id = containerID(t)
	}
	var wg sync.WaitGroup
	for i := range outcomes {
		wg.Add(1)
		go func(o *outcome) {
			defer wg.Done()
			out, err := os.OpenFile(filepath.Join(o.bundle, "..", "stdout"), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
			if err != nil {
				t.Error(err)
				return
			}
			defer out.Close()
			o.stdout = out.Name()
			o.res = e.runtime(t, out, "--log", filepath.Join(o.bundle, "log.json"), "--log-format", "json", "create", "--bundle", o.bundle, o.id)
		}(&outcomes[i])
	}
	wg.Wait()
	for i := range outcomes {
		o := &outcomes[i]
		if o.res.code != 0 {
			t.Errorf("create %s: exit %d: %s", o.id, o.res.code, o.res.stderr)
			continue
		}
		if r := e.runtime(t, nil, "start", o.id); r.code != 0 {
			t.Errorf("start %s: %s", o.id, r.stderr)
		}
	}
	for i := range outcomes {
		o := &outcomes[i]
		if o.res.code != 0 {
			continue // reported above
		}
		waitStopped(t, e, o.id)
		e.runtime(t, nil, "delete", "--force", o.id)
		data, _ := os.ReadFile(o.stdout)
		want := fmt.Sprintf("dev /dev/nvidia%d\nldcache-ok\n", i%8)
		if string(data) != want {
			t.Errorf("container %d saw %q, want %q", i, data, want)
		}
		entries, _ := os.ReadDir(o.bundle)
		for _, en := range entries {
			if strings.HasPrefix(en.Name(), ".config.json") {
				t.Errorf("temporary file left in %s: %s", o.bundle, en.Name())
			}
		}
	}
	// Every line of the shared log is one whole line in runc's format (the extra log file
	// follows --log-format, json here).
	fh, err := os.Open(shared)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	injected := 0
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		line := sc.Text()
		var entry struct{ Level, Msg, Time string }
		if err := json.Unmarshal([]byte(line), &entry); err != nil || entry.Level == "" || entry.Time == "" {
			t.Errorf("torn log line: %q", line)
		}
		if entry.Msg == "injected NVIDIA GPUs" {
			injected++
		}
	}
	if injected != n {
		t.Errorf("log has %d injection lines, want %d", injected, n)
	}
	// And each container's runc-format log is valid JSON.
	for i := range outcomes {
		data, _ := os.ReadFile(filepath.Join(outcomes[i].bundle, "log.json"))
		for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
			if l != "" && !json.Valid([]byte(l)) {
				t.Errorf("invalid JSON log line: %q", l)
			}
		}
	}
}

func waitStopped(t *testing.T, e *env, id string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		r := e.runtime(t, nil, "state", id)
		if strings.Contains(r.stdout, `"status": "stopped"`) {
			return
		}
		if r.code != 0 || time.Now().After(deadline) {
			t.Fatalf("container %s did not stop: exit %d %s %s", id, r.code, r.stdout, r.stderr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
