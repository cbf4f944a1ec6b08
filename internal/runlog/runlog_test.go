package runlog

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"
)

func TestFormatsMatchRunc(t *testing.T) {
	testCases := []struct {
		description string
		format      string
		check       func(t *testing.T, line string)
	}{
		{"json like runc --log-format json", "json", func(t *testing.T, line string) {
			var m map[string]string
			if err := json.Unmarshal([]byte(line), &m); err != nil {
				t.Fatalf("not JSON: %q", line)
			}
			if m["level"] != "error" || m["msg"] != "boom \"x\"" || m["time"] == "" {
				t.Errorf("fields = %v", m)
			}
		}},
		{"text like runc's default", "text", func(t *testing.T, line string) {
			if !strings.HasPrefix(line, "time=\"") || !strings.Contains(line, `level=error msg="boom \"x\""`) {
				t.Errorf("line = %q", line)
			}
		}},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "log")
			if err := os.WriteFile(p, []byte("existing line\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			var stderr bytes.Buffer
			l := New(Options{RuncLog: p, Format: tc.format, Level: logrus.InfoLevel, Stderr: &stderr})
			l.Debug("hidden")
			l.Error(`boom "x"`)
			l.Close()
			data, _ := os.ReadFile(p)
			got := strings.Split(strings.TrimSpace(string(data)), "\n")
			if len(got) != 2 || got[0] != "existing line" {
				t.Fatalf("log must be appended to, one line per entry: %q", got)
			}
			tc.check(t, got[1])
			if stderr.Len() != 0 || !l.ToFile() {
				t.Errorf("with --log, nothing goes to stderr: %q", stderr.String())
			}
		})
	}
}

func TestNoLogFileMeansStderr(t *testing.T) {
	var stderr bytes.Buffer
	extra := filepath.Join(t.TempDir(), "extra.log")
	l := New(Options{Format: "text", ExtraFile: extra, Level: logrus.WarnLevel, Stderr: &stderr})
	l.Warn("careful")
	l.Close()
	if !strings.Contains(stderr.String(), "careful") || l.ToFile() {
		t.Errorf("stderr = %q", stderr.String())
	}
	if data, _ := os.ReadFile(extra); !strings.Contains(string(data), "careful") {
		t.Errorf("extra log file = %q", data)
	}
}

func TestUnopenableLogReported(t *testing.T) {
	var stderr bytes.Buffer
	l := New(Options{RuncLog: "/nonexistent/dir/log.json", Format: "json", Level: logrus.InfoLevel, Stderr: &stderr})
	l.Error("still logged")
	if !strings.Contains(stderr.String(), "gpu-runtime: open log file /nonexistent/dir/log.json") || !strings.Contains(stderr.String(), "still logged") {
		t.Errorf("stderr = %q", stderr.String())
	}
	if l.ToFile() {
		t.Error("ToFile after the log file could not be opened")
	}
}

func TestTerminalHidesInfoButNotDebug(t *testing.T) {
	testCases := []struct {
		description string
		level       logrus.Level
		wantInfo    bool
	}{
		{"info level: info lines stay off stderr", logrus.InfoLevel, false},
		{"debug level: shown", logrus.DebugLevel, true},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			var stderr bytes.Buffer
			l := New(Options{Format: "text", Level: tc.level, Stderr: &stderr})
			l.Info("routine")
			l.Warn("important")
			if strings.Contains(stderr.String(), "routine") != tc.wantInfo || !strings.Contains(stderr.String(), "important") {
				t.Errorf("stderr = %q", stderr.String())
			}
		})
	}
}

// TestFilesOpenOnlyWhenWritten: a call that logs nothing (start, delete) opens no file.
func TestFilesOpenOnlyWhenWritten(t *testing.T) {
	dir := t.TempDir()
	runcLog, extra := filepath.Join(dir, "log.json"), filepath.Join(dir, "extra.log")
	l := New(Options{RuncLog: runcLog, Format: "json", ExtraFile: extra, Level: logrus.InfoLevel, Stderr: io.Discard})
	l.Debug("below the level")
	l.Close()
	for _, p := range []string{runcLog, extra} {
		if _, err := os.Stat(p); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s: %v, want no file", p, err)
		}
	}
	l = New(Options{RuncLog: runcLog, Format: "json", Level: logrus.InfoLevel, Stderr: io.Discard})
	l.Warn("written")
	l.Close()
	if data, err := os.ReadFile(runcLog); err != nil || !strings.Contains(string(data), `"msg":"written"`) {
		t.Errorf("log = %q, %v", data, err)
	}
}

// TestUnopenableFilesNeverDoubleLines: only runc's log falls back to stderr; an extra log
// file that cannot be opened is reported once and its lines dropped, so no line reaches
// stderr twice.
func TestUnopenableFilesNeverDoubleLines(t *testing.T) {
	dir := t.TempDir()
	good, bad := filepath.Join(dir, "log.json"), filepath.Join(dir, "missing", "x.log")
	testCases := []struct {
		description     string
		runcLog, extra  string
		wantStderrLines int // lines containing "boom"
		wantOpenErrors  int
	}{
		{"no --log, extra file unopenable", "", bad, 1, 1},
		{"--log and extra file both unopenable", bad, bad, 1, 2},
		{"--log fine, extra file unopenable", good, bad, 0, 1},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			var stderr bytes.Buffer
			l := New(Options{RuncLog: tc.runcLog, ExtraFile: tc.extra, Format: "text", Level: logrus.InfoLevel, Stderr: &stderr})
			l.Info("routine")
			l.Error("boom")
			l.Close()
			if n := strings.Count(stderr.String(), "boom"); n != tc.wantStderrLines {
				t.Errorf("%d lines with boom on stderr, want %d:\n%s", n, tc.wantStderrLines, stderr.String())
			}
			if n := strings.Count(stderr.String(), "gpu-runtime: open log file"); n != tc.wantOpenErrors {
				t.Errorf("%d open errors on stderr, want %d:\n%s", n, tc.wantOpenErrors, stderr.String())
			}
			if tc.runcLog == good && strings.Contains(stderr.String(), "routine") {
				t.Errorf("info line on stderr:\n%s", stderr.String())
			}
		})
	}
}

// TestReport: a failure goes to the log with container_id, and to stderr as well when the log
// is a file (where engines show it); without a file it is written once, to stderr.
func TestReport(t *testing.T) {
	logPath := filepath.Join(t.TempDir(), "log.json")
	var stderr bytes.Buffer
	l := New(Options{RuncLog: logPath, Format: "json", Level: logrus.InfoLevel, Stderr: &stderr})
	l.Report("c1", errors.New("no GPU 5"))
	l.Close()
	data, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	var line map[string]any
	if err := json.Unmarshal(data, &line); err != nil || line["level"] != "error" || line["msg"] != "gpu-runtime: no GPU 5" || line["container_id"] != "c1" {
		t.Errorf("log line %s (%v)", data, err)
	}
	if stderr.String() != "gpu-runtime: no GPU 5\n" {
		t.Errorf("stderr %q", stderr.String())
	}

	stderr.Reset()
	l = New(Options{Level: logrus.InfoLevel, Stderr: &stderr})
	l.Report("", errors.New("no GPU 5"))
	if got := stderr.String(); strings.Count(got, "gpu-runtime: no GPU 5") != 1 || strings.Contains(got, "container_id") {
		t.Errorf("stderr %q: want the line once, without container_id", got)
	}
}
