package engine

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpu-runtime/gpu-runtime/internal/atomicfile"
	"github.com/gpu-runtime/gpu-runtime/internal/jsonobject"
	"github.com/gpu-runtime/gpu-runtime/internal/trustedfile"
)

// newFileMode is the mode of configuration files gpu-ctk creates.
const newFileMode fs.FileMode = 0o644

// A Change is one file edit of a Plan.
type Change struct {
	Path     string      // the file, symlinks resolved
	Content  []byte      // the new content; nil when Remove
	Remove   bool        // remove the file
	Backup   bool        // copy the previous content to <Path>.bak.<UTC timestamp> first
	Previous []byte      // the content planned from; nil when the file did not exist
	Mode     fs.FileMode // the existing file's permissions, or 0644 for a new file
	// RestoredFrom is the backup Content was read from (unconfigure putting a file back as it
	// was before configure); Apply removes it once Content is written.
	RestoredFrom string
	// RemoveBackups are gpu-ctk's backups of the file, removed once it is written: unconfigure
	// leaves the file holding everything of the user's, so none is left behind.
	RemoveBackups []string
	// RemoveEmptyDirs: after removing the file, remove its directory if left empty, and so on
	// up this many directories (configure creates missing ones).
	RemoveEmptyDirs int
}

// A Plan is what configure or unconfigure changes, in the order it must happen, and what the
// user should know. A Plan with no Changes means the engine is already as asked.
type Plan struct {
	Files    []string // the files examined
	Changes  []Change
	Notes    []string // facts worth telling (a replaced default, a copied setting)
	Warnings []string // what was left out and why (a containerd import that is not a regular file)
	// Stale says why a registration configure made earlier is out of date (configure: what
	// the planned changes bring up to date); doctor reports it.
	Stale []string
	Next  []string // what the user must do once the changes are written
	// Runtimes are, for unconfigure, the runtime names of ours it removes (docker: every
	// entry whose path is gpu-runtime's; containerd and cri-o: those gpu-ctk's drop-in
	// registers, whatever their name).
	Runtimes []string
}

// Changed reports whether applying the plan writes anything.
func (p *Plan) Changed() bool { return len(p.Changes) > 0 }

// PlanConfigure reads the engine's files and plans registering the runtime. It writes nothing.
func PlanConfigure(engine Engine, opts Options) (*Plan, error) {
	opts, err := opts.withDefaults(engine, true)
	if err != nil {
		return nil, err
	}
	switch engine {
	case Docker:
		return planSingleFile(dockerFile, opts, configureDocker, nil)
	case Containerd:
		return planContainerdConfigure(opts)
	case CRIO:
		if err := checkCRIOInstalled(opts.ConfigPath); err != nil {
			return nil, err
		}
		return planSingleFile(crioFile, opts, configureCRIO, nil)
	}
	return nil, fmt.Errorf("%w %q", ErrUnknownEngine, engine)
}

// PlanUnconfigure reads the engine's files and plans removing the runtime. It writes nothing.
func PlanUnconfigure(engine Engine, opts Options) (*Plan, error) {
	opts, err := opts.withDefaults(engine, false)
	if err != nil {
		return nil, err
	}
	switch engine {
	case Docker:
		return planSingleFile(dockerFile, opts, unconfigureDocker, &dockerUndo)
	case Containerd:
		return planContainerdUnconfigure(opts)
	case CRIO:
		p, err := planSingleFile(crioFile, opts, removeDropIn, nil)
		if err != nil {
			return nil, err
		}
		if p.Changed() {
			p.Runtimes = dropInRuntimes(p.Changes[0].Previous, opts)
		}
		for i := range p.Changes {
			p.Changes[i].RemoveEmptyDirs = 1 // crio.conf.d, which configure may have created
		}
		return p, nil
	}
	return nil, fmt.Errorf("%w %q", ErrUnknownEngine, engine)
}

// singleFile describes an engine whose registration is one file.
type singleFile struct {
	backup bool   // the file holds the user's settings: back it up before changing it
	next   string // what the user does after a change
}

var (
	dockerFile = singleFile{backup: true, next: "restart dockerd: systemctl restart docker"}
	crioFile   = singleFile{backup: false, next: "restart cri-o: systemctl restart crio"}
)

// planSingleFile plans fn's edit of the engine's one file; undo, if any, is unconfigure's rule.
func planSingleFile(sf singleFile, opts Options, fn func([]byte, Options) (edit, error), undo *undoRule) (*Plan, error) {
	f, err := readConfig(opts.ConfigPath)
	if err != nil {
		return nil, err
	}
	if undo != nil {
		opts.backups = readBackups(f.path)
	}
	e, err := fn(f.content, opts)
	if err != nil {
		return nil, withPath(err, f.path)
	}
	p := &Plan{Files: []string{f.path}, Notes: e.notes, Runtimes: e.names}
	switch {
	case !e.changed:
		return p, nil
	case undo != nil:
		p.undo(f, e.content, *undo)
	default:
		p.Changes = append(p.Changes, f.change(e.content, sf.backup))
	}
	p.Next = []string{sf.next}
	return p, nil
}

func planContainerdConfigure(opts Options) (*Plan, error) {
	main, drop, err := readContainerd(opts)
	if err != nil {
		return nil, err
	}
	if !owned(drop.content) {
		return nil, fmt.Errorf("%s: %w: it does not start with %q; choose another drop-in file with --drop-in", drop.path, ErrNotOurs, dropInMarker)
	}
	// Imports are relative to the main config as named, not where its links lead.
	files, warnings, err := containerdFiles(configFile{path: opts.ConfigPath, content: main.content}, opts.DropInPath)
	if err != nil {
		return nil, err
	}
	if drop.content != nil && containerdDropInSetsDefault(drop.content, opts.RuntimeName) {
		opts.SetAsDefault = true
	}
	dropEdit, err := containerdDropIn(files, opts)
	if err != nil {
		return nil, err
	}
	mainEdit, err := configureContainerdMain(main.content, opts)
	if err != nil {
		return nil, withPath(err, main.path)
	}
	p := &Plan{Files: []string{main.path, drop.path}, Warnings: warnings}
	same, err := sameTOML(drop.content, dropEdit.content)
	if err != nil {
		return nil, withPath(err, drop.path)
	}
	if !same {
		p.Changes = append(p.Changes, drop.change(dropEdit.content, false)) // the drop-in first: a missing import stops containerd
		p.Notes = append(p.Notes, dropEdit.notes...)
		if drop.content != nil && dropEdit.source != "" && criCopyDrift(drop.content, dropEdit.content, opts.RuntimeName) {
			p.Stale = append(p.Stale, fmt.Sprintf("%s's CRI section changed since configure, and containerd 1.x reads the copy in %s instead (it replaces the whole section with the last file's): "+
				"the change has no effect until gpu-ctk runtime configure --runtime=containerd runs again", dropEdit.source, drop.path))
		}
	}
	if mainEdit.changed {
		p.Changes = append(p.Changes, main.change(mainEdit.content, main.content != nil))
		p.Notes = append(p.Notes, mainEdit.notes...)
	}
	if p.Changed() {
		p.Next = []string{
			"restart containerd: systemctl restart containerd",
			runtimeClassHint(opts.RuntimeName),
		}
	}
	return p, nil
}

// RuntimeClassFiles are where the package and make install put the RuntimeClass of "gpu".
var RuntimeClassFiles = []string{"/usr/share/gpu-runtime/kubernetes/runtimeclass.yaml", "/usr/local/share/gpu-runtime/kubernetes/runtimeclass.yaml"}

// runtimeClassHint says how Kubernetes pods reach the runtime: the installed RuntimeClass, or
// the object to create.
func runtimeClassHint(name string) string {
	if name == DefaultRuntimeName {
		for _, f := range RuntimeClassFiles {
			if _, err := os.Stat(f); err == nil {
				return fmt.Sprintf("Kubernetes: kubectl apply -f %s (a RuntimeClass with handler %q), and set runtimeClassName: %s in pods", f, name, name)
			}
		}
	}
	return fmt.Sprintf("Kubernetes: create a RuntimeClass (apiVersion node.k8s.io/v1) named %[1]s with handler %[1]q, and set runtimeClassName: %[1]s in pods", name)
}

func planContainerdUnconfigure(opts Options) (*Plan, error) {
	main, drop, err := readContainerd(opts)
	if err != nil {
		return nil, err
	}
	mainEdit, err := unconfigureContainerdMain(main.content, opts)
	if err != nil {
		return nil, withPath(err, main.path)
	}
	dropEdit, err := removeDropIn(drop.content, opts)
	if err != nil {
		return nil, withPath(err, drop.path)
	}
	p := &Plan{Files: []string{main.path, drop.path}}
	if mainEdit.changed {
		p.undo(main, mainEdit.content, containerdUndo) // the import first
	}
	p.Notes = append(p.Notes, containerdLeftovers(main.content, main.path, opts.RuntimeName)...)
	if dropEdit.changed {
		p.Runtimes = dropInRuntimes(drop.content, opts)
		c := drop.change(nil, false)
		c.RemoveEmptyDirs = 1 // gpu-ctk's choice of directory: configure created it if missing
		p.Changes = append(p.Changes, c)
	}
	if p.Changed() {
		p.Next = []string{"restart containerd: systemctl restart containerd"}
	}
	return p, nil
}

func readContainerd(opts Options) (main, drop configFile, err error) {
	if main, err = readConfig(opts.ConfigPath); err != nil {
		return main, drop, err
	}
	if drop, err = readConfig(opts.DropInPath); err != nil {
		return main, drop, err
	}
	if main.path == drop.path {
		return main, drop, fmt.Errorf("%w: the drop-in %s is the main config %s", ErrInvalidOptions, opts.DropInPath, opts.ConfigPath)
	}
	return main, drop, nil
}

// configFile is a file as read for planning.
type configFile struct {
	path    string // symlinks resolved
	content []byte // nil when missing
	mode    fs.FileMode
}

// readConfig reads the file at path with trustedfile.ReadRegular, following a link there (Apply replaces
// its target, so that the link stays); a link to nothing or to a non-regular file is refused.
func readConfig(path string) (configFile, error) {
	f := configFile{path: filepath.Clean(path), mode: newFileMode}
	link := ""
	if fi, err := os.Lstat(f.path); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
		link = f.path
	}
	resolved, err := filepath.EvalSymlinks(f.path)
	switch {
	case err == nil:
		f.path = resolved
	case errors.Is(err, fs.ErrNotExist) && link != "":
		target, _ := os.Readlink(link)
		return f, fmt.Errorf("%w: %s is a symbolic link to %s, which does not exist: gpu-ctk does not create a file where a link points; "+
			"create that file (an empty one will do), point the link at the engine's configuration file, or remove the link, then run gpu-ctk again",
			ErrInvalidOptions, link, target)
	case !errors.Is(err, fs.ErrNotExist):
		return f, fmt.Errorf("resolve %s: %w", path, err)
	}
	content, mode, err := trustedfile.ReadRegular(f.path, maxConfigSize, false)
	var nr *trustedfile.NotRegularError
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return f, nil
	case errors.As(err, &nr) && nr.Kind != "" && link != "":
		return f, fmt.Errorf("%w: %s is a symbolic link to %s, a %s, not a regular file: point the link at a regular file or remove it, then run gpu-ctk again",
			ErrInvalidOptions, link, f.path, nr.Kind)
	case errors.As(err, &nr) && nr.Kind != "":
		return f, fmt.Errorf("%w: %w: gpu-ctk edits regular files only; remove it, or name the engine's configuration file", ErrInvalidOptions, err)
	case errors.As(err, &nr):
		return f, fmt.Errorf("%w: %w", ErrInvalidOptions, err)
	case err != nil:
		return f, err
	}
	f.content = content
	f.mode = mode
	return f, nil
}

// maxConfigSize bounds what gpu-ctk reads of a configuration file, an import or a backup.
const maxConfigSize = 1 << 20

// change plans replacing f with content (nil: removing it).
func (f configFile) change(content []byte, backup bool) Change {
	return Change{
		Path:     f.path,
		Content:  content,
		Remove:   content == nil,
		Backup:   backup && f.content != nil,
		Previous: f.content,
		Mode:     f.mode,
	}
}

// undoRule says, for one engine's main file, when unconfigure's result is that file as it was
// before configure: same, a backup holding the same settings as the planned content (the two
// differ at most in layout); bare, planned content that is what configure writes into a file
// it creates, less the runtime (such a file did not exist before).
type undoRule struct {
	same func(backup, planned []byte) bool
	bare func(planned []byte) bool
}

// dockerUndo: daemon.json objects with the same members in the same order, each value the
// same JSON; bare is an object with no member (dockerd reads a missing daemon.json so).
var dockerUndo = undoRule{
	same: func(backup, planned []byte) bool {
		a, errA := parseJSONObject(backup)
		b, errB := parseJSONObject(planned)
		return errA == nil && errB == nil && slices.EqualFunc(a.Members, b.Members, func(ma, mb jsonobject.Member) bool {
			var va, vb bytes.Buffer
			return ma.Name == mb.Name && json.Compact(&va, ma.Value) == nil && json.Compact(&vb, mb.Value) == nil && bytes.Equal(va.Bytes(), vb.Bytes())
		})
	},
	bare: func(planned []byte) bool {
		obj, err := parseJSONObject(planned)
		return err == nil && len(obj.Members) == 0
	},
}

// containerdUndo: TOML documents with the same keys and values, or a backup with no settings
// (comments only) against a planned config holding only the version configure added; bare is
// the "version = N" line configure writes into a config it creates.
var containerdUndo = undoRule{
	same: func(backup, planned []byte) bool {
		a, errA := parseTOML(backup)
		b, errB := parseTOML(planned)
		_, version := b["version"]
		return errA == nil && errB == nil && (version && len(a) == 0 && len(b) == 1 || reflect.DeepEqual(a, b))
	},
	bare: func(planned []byte) bool {
		s := string(planned)
		return s == "version = 2\n" || s == "version = 3\n"
	},
}

// undo plans writing content, unconfigure's result, to f, a file holding the user's settings,
// so that f ends as it was before configure where that can be told: the newest backup of f
// holding the same settings is written back byte for byte (f needs no backup: it is that one
// plus our runtime); else bare content removes f (configure created it); else content is
// written. Either way every backup gpu-ctk made of f is then removed: unconfigure's result
// holds all of the user's settings, and only what configure added is gone.
func (p *Plan) undo(f configFile, content []byte, rule undoRule) {
	backups := backupsOf(f.path)
	for _, b := range backups {
		data, _, err := trustedfile.ReadRegular(b, maxConfigSize, false) // a regular file, not a link
		if err == nil && rule.same(data, content) {
			c := f.change(data, false)
			c.RestoredFrom = b
			c.RemoveBackups = backups
			p.Changes = append(p.Changes, c)
			return
		}
	}
	if rule.bare(content) {
		c := f.change(nil, false)
		c.RemoveBackups = backups
		p.Changes = append(p.Changes, c)
		p.Notes = append(p.Notes, fmt.Sprintf("%s held only what configure wrote (configure created it): removed", f.path))
		return
	}
	c := f.change(content, false)
	c.RemoveBackups = backups
	p.Changes = append(p.Changes, c)
}

// readBackups returns the content of path's backups that are regular files, newest first.
func readBackups(path string) [][]byte {
	var out [][]byte
	for _, b := range backupsOf(path) {
		if data, _, err := trustedfile.ReadRegular(b, maxConfigSize, false); err == nil {
			out = append(out, data)
		}
	}
	return out
}

// backupRE matches the names writeBackup gives: <UTC timestamp>[.N] after "<file>.bak.".
var backupRE = regexp.MustCompile(`^([0-9]{8}T[0-9]{6}Z)(?:\.([0-9]{1,2}))?$`)

// backupsOf returns the backups writeBackup made of path, newest first.
func backupsOf(path string) []string {
	entries, err := os.ReadDir(filepath.Dir(path))
	if err != nil {
		return nil
	}
	type backup struct {
		path, stamp string
		n           int
	}
	var found []backup
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), filepath.Base(path)+".bak.")
		if m := backupRE.FindStringSubmatch(rest); ok && m != nil {
			n, _ := strconv.Atoi(m[2]) // "" (the first backup of that second) is 0
			found = append(found, backup{path: filepath.Join(filepath.Dir(path), e.Name()), stamp: m[1], n: n})
		}
	}
	slices.SortFunc(found, func(a, b backup) int { // newest first
		return cmp.Or(strings.Compare(b.stamp, a.stamp), cmp.Compare(b.n, a.n))
	})
	names := make([]string, len(found))
	for i, b := range found {
		names[i] = b.path
	}
	return names
}

// Apply makes the plan's changes in order: each file must still have the content planned from
// (else ErrChanged), is backed up where Backup is set, then replaced atomically or removed. It
// returns the backups made, named after now.
func (p *Plan) Apply(now time.Time) ([]string, error) {
	var backups []string
	for _, c := range p.Changes {
		current, err := readConfig(c.Path)
		if err != nil {
			return backups, err
		}
		if (current.content == nil) != (c.Previous == nil) || !bytes.Equal(current.content, c.Previous) {
			return backups, fmt.Errorf("%s: %w; run gpu-ctk again", c.Path, ErrChanged)
		}
		if c.Backup {
			name, err := writeBackup(c.Path, c.Previous, c.Mode, now)
			if err != nil {
				return backups, err
			}
			backups = append(backups, name)
			pruneBackups(c.Path)
		}
		if c.Remove {
			if err := os.Remove(c.Path); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return backups, fmt.Errorf("remove %s: %w", c.Path, err)
			}
			removeBackups(c.RemoveBackups)
			for dir, n := filepath.Dir(c.Path), 0; n < c.RemoveEmptyDirs; dir, n = filepath.Dir(dir), n+1 {
				if os.Remove(dir) != nil { // fails, as it should, when anything else is there
					break
				}
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(c.Path), 0o755); err != nil { // #nosec G301 -- /etc/<engine> directories are world-readable
			return backups, fmt.Errorf("create directory for %s: %w", c.Path, err)
		}
		if err := atomicfile.Write(c.Path, c.Content, c.Mode, atomicfile.Options{Follow: true, KeepOwner: true}); err != nil {
			return backups, err
		}
		if c.RestoredFrom != "" {
			if err := os.Remove(c.RestoredFrom); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return backups, fmt.Errorf("remove the restored backup %s: %w", c.RestoredFrom, err)
			}
		}
		removeBackups(c.RemoveBackups)
	}
	return backups, nil
}

// removeBackups removes backups gpu-ctk made, never failing: the file they were of is written.
func removeBackups(names []string) {
	for _, b := range names {
		_ = os.Remove(b)
	}
}

// MaxBackups is how many backups of a file gpu-ctk keeps; older ones are removed.
const MaxBackups = 5

// pruneBackups removes the backups of path beyond the newest MaxBackups, never failing.
func pruneBackups(path string) {
	all := backupsOf(path)
	for _, old := range all[min(len(all), MaxBackups):] {
		_ = os.Remove(old)
	}
}

// writeBackup copies content to a new file <path>.bak.<UTC timestamp>[.N], never replacing one.
func writeBackup(path string, content []byte, mode fs.FileMode, now time.Time) (string, error) {
	base := path + ".bak." + now.UTC().Format("20060102T150405Z")
	for n := 0; n < 100; n++ {
		name := base
		if n > 0 {
			name = fmt.Sprintf("%s.%d", base, n)
		}
		f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode) // #nosec G304 -- next to the config
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return "", fmt.Errorf("create backup of %s: %w", path, err)
		}
		_, err = f.Write(content)
		if err == nil {
			err = f.Sync()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = os.Chmod(name, mode) // the umask may have narrowed OpenFile's mode
		}
		if err != nil {
			_ = os.Remove(name)
			return "", fmt.Errorf("write backup %s: %w", name, err)
		}
		return name, nil
	}
	return "", fmt.Errorf("create backup of %s: %w", path, fs.ErrExist)
}

// WriteDryRun writes what Apply would leave: each file to be written, whole, under a header
// line; a line for each file to be removed.
func (p *Plan) WriteDryRun(w io.Writer) error {
	for _, c := range p.Changes {
		what := fmt.Sprintf("would be written (mode %04o)", c.Mode)
		switch {
		case c.Remove:
			what = "would be removed" // and c.Content is nil
		case c.RestoredFrom != "":
			what = fmt.Sprintf("would be restored from %s (mode %04o)", c.RestoredFrom, c.Mode)
		}
		if _, err := fmt.Fprintf(w, "--- %s: %s\n%s", c.Path, what, c.Content); err != nil {
			return fmt.Errorf("write dry run: %w", err)
		}
	}
	return nil
}
