package engine

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpu-runtime/gpu-runtime/internal/quote"
)

var testNow = time.Date(2025, 3, 4, 5, 6, 7, 0, time.UTC)

// listDir returns the names under dir, sorted, with their paths relative to dir.
func listDir(t *testing.T, dir string) []string {
	t.Helper()
	var names []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			rel, _ := filepath.Rel(dir, path)
			names = append(names, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(names)
	return names
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func writeFile(t *testing.T, path, content string, mode fs.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

func mustPlan(t *testing.T, configure bool, engine Engine, opts Options) *Plan {
	t.Helper()
	var p *Plan
	var err error
	if configure {
		p, err = PlanConfigure(engine, opts)
	} else {
		p, err = PlanUnconfigure(engine, opts)
	}
	if err != nil {
		t.Fatalf("plan: %v", err)
	}
	return p
}

func mustApply(t *testing.T, p *Plan, now time.Time) []string {
	t.Helper()
	backups, err := p.Apply(now)
	if err != nil {
		t.Fatalf("apply: %v", err)
	}
	return backups
}

// TestDockerFiles drives configure and unconfigure of a real daemon.json: backup content, mode
// kept, no temporary files left, idempotence, dry run.
func TestDockerFiles(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "daemon.json")
	writeFile(t, path, otherDaemonJSON, 0o600)
	opts := testOptions()
	opts.ConfigPath = path
	opts.SetAsDefault = true

	// Dry run: the plan holds the result; nothing is written.
	p := mustPlan(t, true, Docker, opts)
	var out bytes.Buffer
	if err := p.WriteDryRun(&out); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out.String(), "--- "+path+": would be written (mode 0600)\n") || !strings.Contains(out.String(), `"default-runtime": "gpu"`) {
		t.Errorf("dry run output:\n%s", out.String())
	}
	if got := readFile(t, path); string(got) != otherDaemonJSON {
		t.Fatalf("planning changed the file:\n%s", got)
	}
	if names := listDir(t, dir); len(names) != 1 {
		t.Fatalf("planning left files: %v", names)
	}

	backups := mustApply(t, p, testNow)
	wantBackup := path + ".bak.20250304T050607Z"
	if len(backups) != 1 || backups[0] != wantBackup {
		t.Fatalf("backups %v, want [%s]", backups, wantBackup)
	}
	if got := readFile(t, wantBackup); string(got) != otherDaemonJSON {
		t.Errorf("backup content:\n%s", got)
	}
	for _, name := range []string{path, wantBackup} {
		if info, err := os.Stat(name); err != nil || info.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v (err %v), want 0600", name, info.Mode(), err)
		}
	}
	configured := readFile(t, path)
	if !bytes.Contains(configured, []byte(`"gpu": {`)) {
		t.Errorf("not configured:\n%s", configured)
	}
	if names := listDir(t, dir); !slices.Equal(names, []string{"daemon.json", "daemon.json.bak.20250304T050607Z"}) {
		t.Errorf("files %v: a temporary file left, or a backup missing", names)
	}

	// Again: nothing to do, no new backup.
	p = mustPlan(t, true, Docker, opts)
	if p.Changed() {
		t.Fatalf("configuring twice plans %d changes", len(p.Changes))
	}
	if backups := mustApply(t, p, testNow.Add(time.Hour)); len(backups) != 0 {
		t.Errorf("backups %v", backups)
	}
	if got := readFile(t, path); !bytes.Equal(got, configured) {
		t.Errorf("the file changed")
	}

	// A key added after configure: unconfigure keeps it, so the file is not the backup; it
	// removes only what configure added, so it makes no backup, and removes configure's.
	edited := bytes.Replace(configured, []byte(`"log-level": "warn",`), []byte(`"log-level": "warn", "debug": true,`), 1)
	writeFile(t, path, string(edited), 0o600)
	p = mustPlan(t, false, Docker, opts)
	if backups = mustApply(t, p, testNow); len(backups) != 0 {
		t.Fatalf("unconfigure made backups %v", backups)
	}
	if names := listDir(t, dir); !slices.Equal(names, []string{"daemon.json"}) {
		t.Errorf("files %v: configure's backup left behind", names)
	}
	want := decodeJSON(t, []byte(otherDaemonJSON))
	want["debug"] = true
	if got := decodeJSON(t, readFile(t, path)); !reflect.DeepEqual(got, want) {
		t.Errorf("unconfigure did not keep the keys:\n%s", readFile(t, path))
	}
	if p := mustPlan(t, false, Docker, opts); p.Changed() {
		t.Errorf("unconfiguring twice plans %d changes", len(p.Changes))
	}
}

func TestNewFileAndDirectory(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "etc", "docker", "daemon.json")
	opts := testOptions()
	opts.ConfigPath = path
	p := mustPlan(t, true, Docker, opts)
	if backups := mustApply(t, p, testNow); len(backups) != 0 {
		t.Errorf("backup of a file that did not exist: %v", backups)
	}
	info, err := os.Stat(path)
	if err != nil || info.Mode().Perm() != 0o644 {
		t.Fatalf("stat: %v, %v", info, err)
	}
	checkGolden(t, "docker/no-file.json", readFile(t, path))
}

func TestSymlinkedConfig(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "real", "daemon.json")
	link := filepath.Join(dir, "daemon.json")
	writeFile(t, target, "{}", 0o644)
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	root := os.Geteuid() == 0
	if root { // an admin's file owned by a service account keeps its owner
		if err := os.Chown(target, 1234, 5678); err != nil {
			t.Fatal(err)
		}
	}
	opts := testOptions()
	opts.ConfigPath = link
	mustApply(t, mustPlan(t, true, Docker, opts), testNow)
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&fs.ModeSymlink == 0 {
		t.Fatalf("the link was replaced: %v %v", fi, err)
	}
	if !bytes.Contains(readFile(t, target), []byte(testRuntimePath)) {
		t.Errorf("the target was not configured")
	}
	var st syscall.Stat_t
	if err := syscall.Stat(target, &st); err != nil {
		t.Fatal(err)
	}
	if root && (st.Uid != 1234 || st.Gid != 5678) {
		t.Errorf("owner reset to %d:%d, want 1234:5678", st.Uid, st.Gid)
	}
}

func TestMalformedFileUntouched(t *testing.T) {
	testCases := []struct {
		description string
		engine      Engine
		file        string // the file name; for containerd, the main config
		content     string
		wantText    []string
	}{
		{
			description: "docker",
			engine:      Docker,
			file:        "daemon.json",
			content:     "{\n  \"debug\": tru\n}\n",
			wantText:    []string{"daemon.json at line 2, column"},
		},
		{
			description: "containerd main config",
			engine:      Containerd,
			file:        "config.toml",
			content:     "version = 2\nroot = \n",
			wantText:    []string{"config.toml at line 2, column"},
		},
		{
			description: "cri-o drop-in",
			engine:      CRIO,
			file:        "99-gpu-runtime.conf",
			content:     dropInMarker + "\n[crio\n",
			wantText:    []string{"99-gpu-runtime.conf at line 2, column"},
		},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, tc.file)
			writeFile(t, path, tc.content, 0o640)
			opts := testOptions()
			opts.ConfigPath = path
			opts.DropInPath = filepath.Join(dir, "conf.d", "99-gpu-runtime.toml")
			_, err := PlanConfigure(tc.engine, opts)
			checkErr(t, err, ErrMalformed, tc.wantText...)
			var pe *ParseError
			if !errors.As(err, &pe) || pe.Path != path {
				t.Errorf("error %v does not name %s", err, path)
			}
			if got := readFile(t, path); string(got) != tc.content {
				t.Errorf("the file changed:\n%s", got)
			}
			if names := listDir(t, dir); len(names) != 1 {
				t.Errorf("files written: %v", names)
			}
		})
	}
}

func TestApplyDetectsConcurrentChange(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "daemon.json")
	writeFile(t, path, "{}", 0o644)
	opts := testOptions()
	opts.ConfigPath = path
	p := mustPlan(t, true, Docker, opts)
	writeFile(t, path, `{"debug": true}`, 0o644)
	_, err := p.Apply(testNow)
	checkErr(t, err, ErrChanged, path)
	if got := readFile(t, path); string(got) != `{"debug": true}` {
		t.Errorf("the file was overwritten:\n%s", got)
	}
	if names := listDir(t, dir); len(names) != 1 {
		t.Errorf("files written: %v", names)
	}
}

// TestContainerdFiles: drop-in and import written in that order, backups of the main config
// only, idempotence, and unconfigure restoring the main config byte for byte.
func TestContainerdFiles(t *testing.T) {
	dir := t.TempDir()
	mainPath := filepath.Join(dir, "config.toml")
	dropIn := filepath.Join(dir, "conf.d", "99-gpu-runtime.toml")
	writeFile(t, mainPath, mainV2, 0o600)
	opts := testOptions()
	opts.ConfigPath = mainPath
	opts.DropInPath = dropIn

	p := mustPlan(t, true, Containerd, opts)
	if len(p.Changes) != 2 || p.Changes[0].Path != dropIn || p.Changes[1].Path != mainPath {
		t.Fatalf("changes %+v: want the drop-in, then the main config", p.Changes)
	}
	if !p.Changes[1].Backup || p.Changes[0].Backup {
		t.Errorf("backup flags: drop-in %v, main %v", p.Changes[0].Backup, p.Changes[1].Backup)
	}
	backups := mustApply(t, p, testNow)
	if len(backups) != 1 || readFileString(t, backups[0]) != mainV2 {
		t.Fatalf("backups %v", backups)
	}
	if info, err := os.Stat(mainPath); err != nil || info.Mode().Perm() != 0o600 {
		t.Errorf("main config mode %v (err %v), want 0600", info.Mode(), err)
	}
	if !strings.Contains(readFileString(t, mainPath), `imports = [`+quote.TOMLString(dropIn)+`]`) {
		t.Errorf("no import:\n%s", readFileString(t, mainPath))
	}
	if !owned(readFile(t, dropIn)) {
		t.Errorf("drop-in:\n%s", readFile(t, dropIn))
	}
	if p := mustPlan(t, true, Containerd, opts); p.Changed() {
		t.Errorf("configuring twice plans %+v", p.Changes)
	}

	// A CRI change in the main config refreshes the drop-in's copy, and only that.
	configuredMain := readFileString(t, mainPath)
	writeFile(t, mainPath, strings.Replace(configuredMain, "pause:3.9", "pause:3.10", 1), 0o600)
	p = mustPlan(t, true, Containerd, opts)
	if len(p.Changes) != 1 || p.Changes[0].Path != dropIn || !bytes.Contains(p.Changes[0].Content, []byte("pause:3.10")) {
		t.Errorf("refresh plans %+v", p.Changes)
	}
	writeFile(t, mainPath, configuredMain, 0o600)

	p = mustPlan(t, false, Containerd, opts)
	if len(p.Changes) != 2 || p.Changes[0].Path != mainPath || !p.Changes[1].Remove {
		t.Fatalf("changes %+v: want the main config, then removing the drop-in", p.Changes)
	}
	if p.Changes[0].RestoredFrom != backups[0] {
		t.Errorf("unconfigure restores from %q, want the backup %s", p.Changes[0].RestoredFrom, backups[0])
	}
	if backups := mustApply(t, p, testNow.Add(time.Second)); len(backups) != 0 {
		t.Errorf("unconfigure made backups %v of a file it restores", backups)
	}
	if got := readFileString(t, mainPath); got != mainV2 {
		t.Errorf("main config after unconfigure:\n%s", got)
	}
	if info, err := os.Stat(mainPath); err != nil || info.Mode().Perm() != 0o600 {
		t.Errorf("main config mode %v (err %v), want 0600", info.Mode(), err)
	}
	if _, err := os.Stat(filepath.Dir(dropIn)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("drop-in directory still there: %v", err)
	}
	if names := listDir(t, dir); !slices.Equal(names, []string{"config.toml"}) {
		t.Errorf("files %v, want only config.toml: the restored backup is removed", names)
	}
	if p := mustPlan(t, false, Containerd, opts); p.Changed() {
		t.Errorf("unconfiguring twice plans %+v", p.Changes)
	}
}

func TestContainerdNoMainConfig(t *testing.T) {
	dir := t.TempDir()
	opts := testOptions()
	opts.ConfigPath = filepath.Join(dir, "config.toml")
	opts.DropInPath = filepath.Join(dir, "conf.d", "99-gpu-runtime.toml")
	opts.ContainerdConfigVersion = 3
	p := mustPlan(t, true, Containerd, opts)
	if backups := mustApply(t, p, testNow); len(backups) != 0 {
		t.Errorf("backups %v", backups)
	}
	want := "version = 3\nimports = [" + quote.TOMLString(opts.DropInPath) + "]\n"
	if got := readFileString(t, opts.ConfigPath); got != want {
		t.Errorf("main config:\n%s\nwant:\n%s", got, want)
	}
	p = mustPlan(t, false, Containerd, opts)
	if len(p.Notes) != 1 || p.Notes[0] != opts.ConfigPath+" held only what configure wrote (configure created it): removed" {
		t.Errorf("notes %q", p.Notes)
	}
	mustApply(t, p, testNow)
	if names, _ := os.ReadDir(dir); len(names) != 0 {
		t.Errorf("unconfigure left %v: configure created the main config and conf.d", names)
	}
}

// TestUnconfigureRestoresBeforeConfigure: after configure and unconfigure, the engine's file
// is as it was before configure, byte for byte, where gpu-ctk can tell that: from the backup
// configure made, or, for a file configure created, by removing it. Anything the user changed
// in between is kept.
func TestUnconfigureRestoresBeforeConfigure(t *testing.T) {
	const compactJSON = `{"log-level":"warn",  "labels": [ "a" ]}`
	testCases := []struct {
		description string
		engine      Engine
		before      map[string]string // files under the test dir; "" content is an empty file
		// between runs after configure: the user's edits, a second configure.
		between   func(t *testing.T, dir string, opts Options)
		wantFiles map[string]string // every file afterwards, with its content; "*" any content
		wantNote  string
	}{
		{
			description: "docker: no daemon.json before",
			engine:      Docker,
			wantFiles:   map[string]string{},
			wantNote:    "DIR/daemon.json held only what configure wrote (configure created it): removed",
		},
		{
			description: "docker: the user's layout comes back",
			engine:      Docker,
			before:      map[string]string{"daemon.json": compactJSON},
			wantFiles:   map[string]string{"daemon.json": compactJSON},
		},
		{
			description: "docker: an empty daemon.json stays empty",
			engine:      Docker,
			before:      map[string]string{"daemon.json": ""},
			wantFiles:   map[string]string{"daemon.json": ""},
		},
		{
			description: "docker: configured twice, the older backup matches",
			engine:      Docker,
			before:      map[string]string{"daemon.json": compactJSON},
			between: func(t *testing.T, dir string, opts Options) {
				opts.SetAsDefault = true
				mustApply(t, mustPlan(t, true, Docker, opts), testNow.Add(time.Minute))
			},
			wantFiles: map[string]string{"daemon.json": compactJSON},
		},
		{
			description: "docker: a user's edit after configure is kept",
			engine:      Docker,
			before:      map[string]string{"daemon.json": compactJSON},
			between: func(t *testing.T, dir string, opts Options) {
				path := filepath.Join(dir, "daemon.json")
				writeFile(t, path, strings.Replace(readFileString(t, path), `"warn"`, `"debug"`, 1), 0o644)
			},
			wantFiles: map[string]string{
				"daemon.json": "{\n    \"log-level\": \"debug\",\n    \"labels\": [\n        \"a\"\n    ]\n}\n",
			},
		},
		{
			description: "docker: a backup that is a symlink is not read",
			engine:      Docker,
			before:      map[string]string{"daemon.json": compactJSON},
			between: func(t *testing.T, dir string, opts Options) {
				backup := filepath.Join(dir, "daemon.json.bak.20250304T050607Z")
				if err := os.Rename(backup, backup+".real"); err != nil {
					t.Fatal(err)
				}
				if err := os.Symlink(backup+".real", backup); err != nil {
					t.Fatal(err)
				}
			},
			wantFiles: map[string]string{
				"daemon.json":                           "{\n    \"log-level\": \"warn\",\n    \"labels\": [\n        \"a\"\n    ]\n}\n",
				"daemon.json.bak.20250304T050607Z.real": compactJSON,
			},
		},
		{
			description: "containerd: no config before",
			engine:      Containerd,
			wantFiles:   map[string]string{},
			wantNote:    "DIR/config.toml held only what configure wrote (configure created it): removed",
		},
		{
			description: "containerd: a config of comments only comes back",
			engine:      Containerd,
			before:      map[string]string{"config.toml": "# nothing yet\n"},
			wantFiles:   map[string]string{"config.toml": "# nothing yet\n"},
		},
		{
			description: "containerd: imports of the user's keep their text",
			engine:      Containerd,
			before:      map[string]string{"config.toml": "version = 2\nimports = [ 'a.toml' ,\n  \"b.toml\" ]\n", "a.toml": "", "b.toml": ""},
			wantFiles:   map[string]string{"config.toml": "version = 2\nimports = [ 'a.toml' ,\n  \"b.toml\" ]\n", "a.toml": "", "b.toml": ""},
		},
		{
			description: "containerd: conf.d holding another file stays",
			engine:      Containerd,
			before:      map[string]string{"config.toml": mainV2, "conf.d/other.toml": "# the user's\n"},
			wantFiles:   map[string]string{"config.toml": mainV2, "conf.d/other.toml": "# the user's\n"},
		},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			dir := t.TempDir()
			for name, content := range tc.before {
				writeFile(t, filepath.Join(dir, name), content, 0o644)
			}
			opts := testOptions()
			opts.ConfigPath = filepath.Join(dir, "daemon.json")
			if tc.engine == Containerd {
				opts.ConfigPath = filepath.Join(dir, "config.toml")
				opts.DropInPath = filepath.Join(dir, "conf.d", "99-gpu-runtime.toml")
			}
			mustApply(t, mustPlan(t, true, tc.engine, opts), testNow)
			if tc.between != nil {
				tc.between(t, dir, opts)
			}
			p := mustPlan(t, false, tc.engine, opts)
			mustApply(t, p, testNow.Add(time.Second))

			got := map[string]string{}
			for _, name := range listDir(t, dir) {
				got[name] = readFileString(t, filepath.Join(dir, name))
			}
			for name, want := range tc.wantFiles {
				if want == "*" {
					want = got[name]
				}
				if content, ok := got[name]; !ok || content != want {
					t.Errorf("%s: got %q (present %v), want %q", name, content, ok, want)
				}
			}
			for name := range got {
				if _, ok := tc.wantFiles[name]; !ok {
					t.Errorf("%s left behind", name)
				}
			}
			if _, other := tc.before["conf.d/other.toml"]; tc.engine == Containerd && !other {
				if _, err := os.Stat(filepath.Join(dir, "conf.d")); !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("conf.d left behind: %v", err)
				}
			}
			var wantNotes []string
			if tc.wantNote != "" {
				wantNotes = []string{strings.ReplaceAll(tc.wantNote, "DIR", dir)}
			}
			if !slices.Equal(p.Notes, wantNotes) {
				t.Errorf("notes %q, want %q", p.Notes, wantNotes)
			}
		})
	}
}

func TestBackupsOfNewestFirst(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "daemon.json")
	for _, name := range []string{
		"daemon.json.bak.20250304T050607Z", "daemon.json.bak.20250304T050607Z.2", "daemon.json.bak.20250304T050607Z.10",
		"daemon.json.bak.20250101T000000Z", "daemon.json.bak.20250304T050607Z.x", "daemon.json.bak.manual", "other.json.bak.20260101T000000Z",
	} {
		writeFile(t, filepath.Join(dir, name), "{}", 0o644)
	}
	want := []string{"daemon.json.bak.20250304T050607Z.10", "daemon.json.bak.20250304T050607Z.2", "daemon.json.bak.20250304T050607Z", "daemon.json.bak.20250101T000000Z"}
	var got []string
	for _, b := range backupsOf(path) {
		got = append(got, filepath.Base(b))
	}
	if !slices.Equal(got, want) {
		t.Errorf("backupsOf = %v, want %v", got, want)
	}
}

// TestNotOursRefused: a file at the drop-in path that gpu-ctk did not write is neither
// replaced nor removed.
func TestNotOursRefused(t *testing.T) {
	for _, engine := range []Engine{Containerd, CRIO} {
		for _, configure := range []bool{true, false} {
			dir := t.TempDir()
			dropIn := filepath.Join(dir, "99-gpu-runtime.conf")
			writeFile(t, dropIn, "# mine\n", 0o644)
			opts := testOptions()
			opts.ConfigPath = dropIn
			if engine == Containerd {
				opts.ConfigPath = filepath.Join(dir, "config.toml")
				opts.DropInPath = dropIn
			}
			var err error
			if configure {
				_, err = PlanConfigure(engine, opts)
			} else {
				_, err = PlanUnconfigure(engine, opts)
			}
			checkErr(t, err, ErrNotOurs, dropIn)
			if got := readFileString(t, dropIn); got != "# mine\n" {
				t.Errorf("%s configure=%v changed the file", engine, configure)
			}
		}
	}
}

func TestCRIOFiles(t *testing.T) {
	dir := t.TempDir()
	opts := testOptions()
	opts.ConfigPath = filepath.Join(dir, "crio.conf.d", "99-gpu-runtime.conf")
	p := mustPlan(t, true, CRIO, opts)
	if backups := mustApply(t, p, testNow); len(backups) != 0 {
		t.Errorf("backups %v", backups)
	}
	checkGolden(t, "crio/dropin.conf", readFile(t, opts.ConfigPath))
	if p := mustPlan(t, true, CRIO, opts); p.Changed() {
		t.Errorf("configuring twice plans %+v", p.Changes)
	}
	opts.SetAsDefault = true
	if backups := mustApply(t, mustPlan(t, true, CRIO, opts), testNow); len(backups) != 0 {
		t.Errorf("a drop-in was backed up into the drop-in directory: %v", backups)
	}
	checkGolden(t, "crio/dropin-default.conf", readFile(t, opts.ConfigPath))
	mustApply(t, mustPlan(t, false, CRIO, opts), testNow)
	if names := listDir(t, dir); len(names) != 0 {
		t.Errorf("files left: %v", names)
	}
	// configure created crio.conf.d; unconfigure removes it, empty.
	if _, err := os.Stat(filepath.Join(dir, "crio.conf.d")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("crio.conf.d left behind: %v", err)
	}
}

// TestCRIONotInstalled: without /etc/crio, configure refuses and creates nothing; a
// crio.conf.d holding another file stays after unconfigure.
func TestCRIONotInstalled(t *testing.T) {
	dir := t.TempDir()
	opts := testOptions()
	opts.ConfigPath = filepath.Join(dir, "etc", "crio", "crio.conf.d", "99-gpu-runtime.conf")
	_, err := PlanConfigure(CRIO, opts)
	checkErr(t, err, ErrNotInstalled, filepath.Join(dir, "etc", "crio")+" does not exist, so cri-o is not installed here and nothing was written: install cri-o first "+
		"(or, to write the drop-in for a cri-o installed later, create "+filepath.Join(dir, "etc", "crio", "crio.conf.d")+" and run gpu-ctk again)")
	if names, _ := os.ReadDir(dir); len(names) != 0 {
		t.Errorf("configure created %v", names)
	}
	writeFile(t, filepath.Join(dir, "etc", "crio", "crio.conf.d", "10-crio.conf"), "# cri-o's\n", 0o644)
	mustApply(t, mustPlan(t, true, CRIO, opts), testNow)
	mustApply(t, mustPlan(t, false, CRIO, opts), testNow)
	if got := readFileString(t, filepath.Join(dir, "etc", "crio", "crio.conf.d", "10-crio.conf")); got != "# cri-o's\n" {
		t.Errorf("10-crio.conf: %q", got)
	}
}

func readFileString(t *testing.T, path string) string {
	t.Helper()
	return string(readFile(t, path))
}

// TestBackupsPruned: each change of daemon.json makes a backup, and only the newest
// MaxBackups are kept; other files' backups and files of other names are not touched.
func TestBackupsPruned(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "daemon.json")
	writeFile(t, path, `{"debug": false}`, 0o644)
	writeFile(t, filepath.Join(dir, "daemon.json.bak.manual"), "{}", 0o644)
	writeFile(t, filepath.Join(dir, "other.json.bak.20200101T000000Z"), "{}", 0o644)
	opts := testOptions()
	opts.ConfigPath = path
	now := testNow
	var made []string
	for i := 0; i < MaxBackups+3; i++ {
		// Something else changes the file between runs, so each configure changes it too.
		writeFile(t, path, fmt.Sprintf(`{"debug": %t}`, i%2 == 0), 0o644)
		p := mustPlan(t, true, Docker, opts)
		backups, err := p.Apply(now)
		if err != nil {
			t.Fatal(err)
		}
		made = append(made, backups...)
		now = now.Add(time.Second)
	}
	var got []string
	for _, b := range backupsOf(path) {
		got = append(got, filepath.Base(b))
	}
	var want []string
	for i := len(made) - 1; i >= len(made)-MaxBackups; i-- {
		want = append(want, filepath.Base(made[i]))
	}
	if len(made) != MaxBackups+3 || !slices.Equal(got, want) {
		t.Errorf("%d backups made; kept %v, want the newest %v", len(made), got, want)
	}
	for _, keep := range []string{"daemon.json.bak.manual", "other.json.bak.20200101T000000Z"} {
		if _, err := os.Stat(filepath.Join(dir, keep)); err != nil {
			t.Errorf("%s removed: %v", keep, err)
		}
	}
}

// TestRuntimeClassHint: containerd's next steps name the installed RuntimeClass file where
// there is one for the runtime's name, and otherwise say what to create.
func TestRuntimeClassHint(t *testing.T) {
	saved := RuntimeClassFiles
	t.Cleanup(func() { RuntimeClassFiles = saved })
	installed := filepath.Join(t.TempDir(), "runtimeclass.yaml")
	RuntimeClassFiles = []string{filepath.Join(t.TempDir(), "absent.yaml"), installed}
	want := `Kubernetes: create a RuntimeClass (apiVersion node.k8s.io/v1) named gpu with handler "gpu", and set runtimeClassName: gpu in pods`
	if got := runtimeClassHint("gpu"); got != want {
		t.Errorf("no file installed: %q", got)
	}
	writeFile(t, installed, "kind: RuntimeClass\n", 0o644)
	if got := runtimeClassHint("gpu"); got != "Kubernetes: kubectl apply -f "+installed+` (a RuntimeClass with handler "gpu"), and set runtimeClassName: gpu in pods` {
		t.Errorf("installed: %q", got)
	}
	if got := runtimeClassHint("gpu-test"); !strings.HasPrefix(got, "Kubernetes: create a RuntimeClass (apiVersion node.k8s.io/v1) named gpu-test with handler \"gpu-test\"") {
		t.Errorf("another name: %q", got)
	}
}

// nvidiaCTKDaemonJSON is daemon.json as `nvidia-ctk runtime configure --runtime=docker
// --set-as-default` leaves it on a host that had none: keys sorted, four-space indent.
const nvidiaCTKDaemonJSON = `{
    "default-runtime": "nvidia",
    "runtimes": {
        "nvidia": {
            "args": [],
            "path": "nvidia-container-runtime"
        }
    }
}`

// TestUnconfigureRestoresWhatConfigureDisplaced: from a host configured by NVIDIA's toolkit,
// configure --set-as-default (and --runtime-name nvidia, which replaces NVIDIA's runtime) then
// unconfigure gives the default and NVIDIA's runtime back: byte for byte when nothing else
// changed, in place when the user edited the file meanwhile; no backup is left either way.
func TestUnconfigureRestoresWhatConfigureDisplaced(t *testing.T) {
	testCases := []struct {
		description string
		name        string
		userEdit    bool   // the user adds a key between configure and unconfigure
		wantRuntime string // runtimes.<name>.path after configure
		want        string // daemon.json afterwards
		wantNotes   []string
	}{
		{
			description: "runtime gpu as the default, nothing else changed",
			name:        "gpu",
			wantRuntime: testRuntimePath,
			want:        nvidiaCTKDaemonJSON,
		},
		{
			description: "runtime nvidia replacing NVIDIA's, nothing else changed",
			name:        "nvidia",
			wantRuntime: testRuntimePath,
			want:        nvidiaCTKDaemonJSON,
		},
		{
			description: "runtime gpu as the default, the user added a key",
			name:        "gpu",
			userEdit:    true,
			wantRuntime: testRuntimePath,
			want: `{
    "default-runtime": "nvidia",
    "runtimes": {
        "nvidia": {
            "args": [],
            "path": "nvidia-container-runtime"
        }
    },
    "debug": true
}
`,
			wantNotes: []string{`docker default-runtime is again "nvidia", as before configure`},
		},
		{
			description: "runtime nvidia replacing NVIDIA's, the user added a key",
			name:        "nvidia",
			userEdit:    true,
			wantRuntime: testRuntimePath,
			want: `{
    "default-runtime": "nvidia",
    "runtimes": {
        "nvidia": {
            "args": [],
            "path": "nvidia-container-runtime"
        }
    },
    "debug": true
}
`,
			wantNotes: []string{`docker runtime "nvidia" is again what it was before configure: {"args":[],"path":"nvidia-container-runtime"}`},
		},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "daemon.json")
			writeFile(t, path, nvidiaCTKDaemonJSON, 0o644)
			opts := testOptions()
			opts.RuntimeName = tc.name
			opts.ConfigPath = path
			opts.SetAsDefault = true
			mustApply(t, mustPlan(t, true, Docker, opts), testNow)
			configured := decodeJSON(t, readFile(t, path))
			if configured["default-runtime"] != tc.name {
				t.Errorf("default-runtime after configure: %v", configured["default-runtime"])
			}
			if got := configured["runtimes"].(map[string]any)[tc.name].(map[string]any)["path"]; got != tc.wantRuntime {
				t.Errorf("runtimes.%s.path after configure: %v", tc.name, got)
			}
			if tc.userEdit {
				s := readFileString(t, path)
				writeFile(t, path, strings.TrimSuffix(strings.TrimSpace(s), "}")+`, "debug": true}`, 0o644)
			}
			opts.SetAsDefault = false
			p := mustPlan(t, false, Docker, opts)
			if backups := mustApply(t, p, testNow.Add(time.Second)); len(backups) != 0 {
				t.Errorf("unconfigure made backups %v", backups)
			}
			if got := readFileString(t, path); got != tc.want {
				t.Errorf("daemon.json after unconfigure:\n%s\nwant:\n%s", got, tc.want)
			}
			if names := listDir(t, dir); !slices.Equal(names, []string{"daemon.json"}) {
				t.Errorf("files left: %v", names)
			}
			for _, n := range tc.wantNotes {
				if !slices.Contains(p.Notes, n) {
					t.Errorf("notes %q lack %q", p.Notes, n)
				}
			}
		})
	}
}

// TestContainerdCRIDrift: a CRI setting of config.toml changed after configure is shadowed by
// the version 2 drop-in's copy; planning configure names the file and why (doctor shows it),
// and configuring again takes the change in. A new runtime path alone is no drift.
func TestContainerdCRIDrift(t *testing.T) {
	dir := t.TempDir()
	opts := testOptions()
	opts.ConfigPath = filepath.Join(dir, "config.toml")
	opts.DropInPath = filepath.Join(dir, "conf.d", "99-gpu-runtime.toml")
	writeFile(t, opts.ConfigPath, mainV2, 0o644)
	mustApply(t, mustPlan(t, true, Containerd, opts), testNow)

	moved := opts
	moved.RuntimePath = "/opt/gpu/gpu-runtime"
	if p := mustPlan(t, true, Containerd, moved); !p.Changed() || len(p.Stale) != 0 {
		t.Errorf("another runtime path: changed %v, stale %q; want a change and no drift", p.Changed(), p.Stale)
	}

	writeFile(t, opts.ConfigPath, strings.Replace(readFileString(t, opts.ConfigPath), "pause:3.9", "pause:3.10", 1), 0o644)
	p := mustPlan(t, true, Containerd, opts)
	want := opts.ConfigPath + "'s CRI section changed since configure, and containerd 1.x reads the copy in " + opts.DropInPath +
		" instead (it replaces the whole section with the last file's): the change has no effect until gpu-ctk runtime configure --runtime=containerd runs again"
	if !slices.Equal(p.Stale, []string{want}) {
		t.Errorf("stale %q\nwant %q", p.Stale, want)
	}
	mustApply(t, p, testNow)
	if !strings.Contains(readFileString(t, opts.DropInPath), "sandbox_image = 'registry.k8s.io/pause:3.10'") {
		t.Errorf("the drop-in did not take the change in:\n%s", readFileString(t, opts.DropInPath))
	}
	if p := mustPlan(t, true, Containerd, opts); p.Changed() || len(p.Stale) != 0 {
		t.Errorf("after configuring again: changed %v, stale %q", p.Changed(), p.Stale)
	}
}

// nvidiaCTKContainerdConfig is /etc/containerd/config.toml as `nvidia-ctk runtime configure
// --runtime=containerd --set-as-default` leaves containerd 1.x's default config: NVIDIA's
// runtime "nvidia" beside runc, and the default.
const nvidiaCTKContainerdConfig = `version = 2

[plugins]

  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = "registry.k8s.io/pause:3.6"

    [plugins."io.containerd.grpc.v1.cri".containerd]
      default_runtime_name = "nvidia"

      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes]

        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]
          privileged_without_host_devices = false
          runtime_engine = ""
          runtime_root = ""
          runtime_type = "io.containerd.runc.v2"

          [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]
            BinaryName = "/usr/bin/nvidia-container-runtime"

        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
          runtime_type = "io.containerd.runc.v2"

          [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
            SystemdCgroup = true
`

// TestContainerdMigrationFromNVIDIA: on a config.toml NVIDIA's toolkit configured, configure
// --runtime-name nvidia --set-as-default makes the CRI handler "nvidia" (RuntimeClasses written
// for NVIDIA's toolkit) gpu-runtime, with runc's settings, the default; unconfigure leaves
// config.toml byte for byte as it was, NVIDIA's runtime in it, and no other file.
func TestContainerdMigrationFromNVIDIA(t *testing.T) {
	dir := t.TempDir()
	opts := testOptions()
	opts.RuntimeName = "nvidia"
	opts.SetAsDefault = true
	opts.ConfigPath = filepath.Join(dir, "config.toml")
	opts.DropInPath = filepath.Join(dir, "conf.d", "99-gpu-runtime.toml")
	writeFile(t, opts.ConfigPath, nvidiaCTKContainerdConfig, 0o644)
	p := mustPlan(t, true, Containerd, opts)
	if !slices.Contains(p.Notes, `containerd runtime "nvidia" starts from the settings of runtime "runc"`) {
		t.Errorf("notes %q", p.Notes)
	}
	mustApply(t, p, testNow)
	drop, err := parseTOML(readFile(t, opts.DropInPath))
	if err != nil {
		t.Fatal(err)
	}
	cri := []string{"plugins", containerdV2Plugin, "containerd"}
	if def, _ := stringAt(drop, append(cri, "default_runtime_name")...); def != "nvidia" {
		t.Errorf("default_runtime_name %q", def)
	}
	if bin, _ := stringAt(drop, append(cri, "runtimes", "nvidia", "options", "BinaryName")...); bin != testRuntimePath {
		t.Errorf("runtime nvidia's BinaryName %q", bin)
	}
	if opt, _, _ := subTable(drop, append(cri, "runtimes", "nvidia", "options")...); opt["SystemdCgroup"] != true {
		t.Errorf("runtime nvidia's options %v: runc's SystemdCgroup not carried", opt)
	}

	opts.SetAsDefault = false
	mustApply(t, mustPlan(t, false, Containerd, opts), testNow.Add(time.Second))
	if got := readFileString(t, opts.ConfigPath); got != nvidiaCTKContainerdConfig {
		t.Errorf("config.toml after unconfigure:\n%s", got)
	}
	if names := listDir(t, dir); !slices.Equal(names, []string{"config.toml"}) {
		t.Errorf("files left: %v", names)
	}
}

// TestUnconfigureOtherName: a runtime registered under another name (--runtime-name nvidia) is
// unregistered by unconfigure without a name, as package removal runs it: containerd's and
// cri-o's drop-in are gpu-ctk's own files, removed whatever name they register; the plan names
// the runtimes it removes.
func TestUnconfigureOtherName(t *testing.T) {
	testCases := []struct {
		description string
		engine      Engine
		names       []string // configured in turn (the drop-in holds the last)
		wantNames   []string
	}{
		{"docker, nvidia", Docker, []string{"nvidia"}, []string{"nvidia"}},
		{"docker, gpu and nvidia", Docker, []string{"gpu", "nvidia"}, []string{"gpu", "nvidia"}},
		{"containerd, nvidia", Containerd, []string{"nvidia"}, []string{"nvidia"}},
		{"cri-o, nvidia", CRIO, []string{"nvidia"}, []string{"nvidia"}},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			dir := t.TempDir()
			opts := Options{RuntimePath: testRuntimePath, SetAsDefault: true}
			switch tc.engine {
			case Docker:
				opts.ConfigPath = filepath.Join(dir, "daemon.json")
			case Containerd:
				opts.ConfigPath = filepath.Join(dir, "config.toml")
				opts.DropInPath = filepath.Join(dir, "conf.d", "99-gpu-runtime.toml")
			case CRIO:
				opts.ConfigPath = filepath.Join(dir, "crio.conf.d", "99-gpu-runtime.conf")
			}
			for _, name := range tc.names {
				opts.RuntimeName = name
				mustApply(t, mustPlan(t, true, tc.engine, opts), testNow)
			}
			opts.RuntimeName = ""
			p := mustPlan(t, false, tc.engine, Options{ConfigPath: opts.ConfigPath, DropInPath: opts.DropInPath})
			if !slices.Equal(p.Runtimes, tc.wantNames) {
				t.Errorf("runtimes %q, want %q", p.Runtimes, tc.wantNames)
			}
			mustApply(t, p, testNow)
			if names := listDir(t, dir); len(names) != 0 {
				t.Errorf("left after unconfigure: %v", names)
			}
		})
	}
}
