package engine

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/gpu-runtime/gpu-runtime/internal/atomicfile"
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
}

// A Plan is what configure or unconfigure changes, in the order it must happen, and what the
// user should know. A Plan with no Changes means the engine is already as asked.
type Plan struct {
	Engine  Engine
	Files   []string // the files examined
	Changes []Change
	Notes   []string // facts worth telling (a replaced default, a copied setting)
	Next    []string // what the user must do once the changes are written
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
		return planSingleFile(dockerFile, opts, configureDocker)
	case Containerd:
		return planContainerdConfigure(opts)
	case CRIO:
		return planSingleFile(crioFile, opts, configureCRIO)
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
		return planSingleFile(dockerFile, opts, unconfigureDocker)
	case Containerd:
		return planContainerdUnconfigure(opts)
	case CRIO:
		return planSingleFile(crioFile, opts, func(current []byte, opts Options) (edit, error) {
			content, changed, err := UnconfigureCRIO(current, opts)
			return edit{content: content, changed: changed}, err
		})
	}
	return nil, fmt.Errorf("%w %q", ErrUnknownEngine, engine)
}

// singleFile describes an engine whose registration is one file.
type singleFile struct {
	engine Engine
	backup bool   // the file holds the user's settings: back it up before changing it
	next   string // what the user does after a change
}

var (
	dockerFile = singleFile{engine: Docker, backup: true, next: "restart dockerd: systemctl restart docker"}
	crioFile   = singleFile{engine: CRIO, backup: false, next: "restart cri-o: systemctl restart crio"}
)

func planSingleFile(sf singleFile, opts Options, fn func([]byte, Options) (edit, error)) (*Plan, error) {
	f, err := readConfig(opts.ConfigPath)
	if err != nil {
		return nil, err
	}
	e, err := fn(f.content, opts)
	if err != nil {
		return nil, withPath(err, f.path)
	}
	p := &Plan{Engine: sf.engine, Files: []string{f.path}, Notes: e.notes}
	if e.changed {
		p.Changes = append(p.Changes, f.change(e.content, sf.backup))
		p.Next = []string{sf.next}
	}
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
	files := []File{{Path: opts.ConfigPath, Content: main.content}}
	if main.content != nil {
		imported, err := containerdImportFiles(files[0], opts.DropInPath, func(path string) ([]byte, error) {
			return os.ReadFile(path) // #nosec G304 -- paths come from the admin's containerd config
		})
		if err != nil {
			return nil, err
		}
		files = append(files, imported...)
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
	p := &Plan{Engine: Containerd, Files: []string{main.path, drop.path}}
	same := false
	if drop.content != nil {
		if same, err = sameTOML(drop.content, dropEdit.content); err != nil {
			return nil, withPath(err, drop.path)
		}
	}
	if !same {
		p.Changes = append(p.Changes, drop.change(dropEdit.content, false)) // the drop-in first: a missing import stops containerd
		p.Notes = append(p.Notes, dropEdit.notes...)
	}
	if mainEdit.changed {
		p.Changes = append(p.Changes, main.change(mainEdit.content, main.content != nil))
		p.Notes = append(p.Notes, mainEdit.notes...)
	}
	if p.Changed() {
		p.Next = []string{
			"restart containerd: systemctl restart containerd",
			fmt.Sprintf("Kubernetes: create a RuntimeClass with handler %q (packaging/kubernetes/runtimeclass.yaml) and set runtimeClassName in pods", opts.RuntimeName),
		}
	}
	return p, nil
}

func planContainerdUnconfigure(opts Options) (*Plan, error) {
	main, drop, err := readContainerd(opts)
	if err != nil {
		return nil, err
	}
	p := &Plan{Engine: Containerd, Files: []string{main.path, drop.path}}
	if main.content != nil {
		e, err := unconfigureContainerdMain(main.content, opts)
		if err != nil {
			return nil, withPath(err, main.path)
		}
		if e.changed {
			p.Changes = append(p.Changes, main.change(e.content, true)) // the import first
		}
		p.Notes = append(p.Notes, containerdLeftovers(main.content, main.path, opts.RuntimeName)...)
	}
	if drop.content != nil {
		if !owned(drop.content) {
			return nil, fmt.Errorf("%s: %w: it does not start with %q; remove our runtime from it by hand", drop.path, ErrNotOurs, dropInMarker)
		}
		p.Changes = append(p.Changes, drop.change(nil, false))
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

// readConfig reads path, following symlinks so that a linked config is edited where it lives.
func readConfig(path string) (configFile, error) {
	f := configFile{path: filepath.Clean(path), mode: newFileMode}
	if resolved, err := filepath.EvalSymlinks(path); err == nil {
		f.path = resolved
	} else if !errors.Is(err, fs.ErrNotExist) {
		return f, fmt.Errorf("resolve %s: %w", path, err)
	}
	info, err := os.Stat(f.path)
	if errors.Is(err, fs.ErrNotExist) {
		return f, nil
	}
	if err != nil {
		return f, fmt.Errorf("stat %s: %w", f.path, err)
	}
	if !info.Mode().IsRegular() {
		return f, fmt.Errorf("%w: %s is not a regular file", ErrInvalidOptions, f.path)
	}
	content, err := os.ReadFile(f.path) // #nosec G304 -- the admin names the engine's config
	if err != nil {
		return f, fmt.Errorf("read %s: %w", f.path, err)
	}
	if content == nil {
		content = []byte{}
	}
	f.content = content
	f.mode = info.Mode().Perm()
	return f, nil
}

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

// Apply makes the plan's changes in order. For each it first checks that the file still has
// the content planned from (ErrChanged otherwise), then copies it to a backup where Backup is
// set, then replaces it atomically or removes it. It returns the backups made. now names them.
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
		}
		if c.Remove {
			if err := os.Remove(c.Path); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return backups, fmt.Errorf("remove %s: %w", c.Path, err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(c.Path), 0o755); err != nil { // #nosec G301 -- /etc/<engine> directories are world-readable
			return backups, fmt.Errorf("create directory for %s: %w", c.Path, err)
		}
		if err := atomicfile.Write(c.Path, c.Content, c.Mode, atomicfile.Options{Follow: true, KeepOwner: true}); err != nil {
			return backups, err
		}
	}
	return backups, nil
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
// line, and a line for each file to be removed.
func (p *Plan) WriteDryRun(w io.Writer) error {
	for _, c := range p.Changes {
		var err error
		if c.Remove {
			_, err = fmt.Fprintf(w, "--- %s: would be removed\n", c.Path)
		} else {
			_, err = fmt.Fprintf(w, "--- %s: would be written (mode %04o)\n%s", c.Path, c.Mode, c.Content)
		}
		if err != nil {
			return fmt.Errorf("write dry run: %w", err)
		}
	}
	return nil
}
