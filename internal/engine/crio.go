package engine

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// cri-o reads every file of /etc/crio/crio.conf.d in lexical order after crio.conf and
// applies each key over the ones before, so a drop-in naming one runtime keeps the others.

// configureCRIO returns the cri-o drop-in (current: nil for none), generated whole:
// [crio.runtime.runtimes.<name>] with runtime_path and runtime_type "oci" and, with
// opts.SetAsDefault (or when current did), [crio.runtime] default_runtime. A file gpu-ctk did
// not generate is refused with ErrNotOurs; one holding the same settings is kept as it is.
func configureCRIO(current []byte, opts Options) (edit, error) {
	if !owned(current) {
		return edit{}, fmt.Errorf("%w: it does not start with %q; choose another drop-in file with --config", ErrNotOurs, dropInMarker)
	}
	doc, err := parseTOML(current)
	if err != nil {
		return edit{}, err
	}
	if def, _ := stringAt(doc, "crio", "runtime", "default_runtime"); def == opts.RuntimeName {
		opts.SetAsDefault = true
	}
	runtime := map[string]any{
		"default_runtime": opts.RuntimeName,
		"runtimes": map[string]any{
			opts.RuntimeName: map[string]any{
				"runtime_path": opts.RuntimePath,
				"runtime_type": "oci",
			},
		},
	}
	if !opts.SetAsDefault {
		delete(runtime, "default_runtime")
	}
	header := dropInHeader(opts, "cri-o reads every file in this directory: keep no backups or editor copies here.")
	out, err := renderTOML(header, map[string]any{"crio": map[string]any{"runtime": runtime}})
	if err != nil {
		return edit{}, err
	}
	if same, err := sameTOML(current, out); err != nil || same {
		return edit{content: current}, err
	}
	var notes []string
	if opts.SetAsDefault {
		notes = append(notes, fmt.Sprintf("cri-o default_runtime is now %q for every pod that names no runtime handler", opts.RuntimeName))
	}
	return edit{content: out, changed: true, notes: notes}, nil
}

// checkCRIOInstalled refuses a drop-in whose directory's parent (/etc/crio) does not exist:
// cri-o is not installed, and configure would leave directories no package owns. A missing
// drop-in directory alone (a cri-o without crio.conf.d) is created, and unconfigure removes it
// once empty.
func checkCRIOInstalled(dropIn string) error {
	dir := filepath.Dir(dropIn)
	if _, err := os.Stat(dir); err == nil {
		return nil
	}
	parent := filepath.Dir(dir)
	if _, err := os.Stat(parent); errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w: %s does not exist, so cri-o is not installed here and nothing was written: install cri-o first "+
			"(or, to write the drop-in for a cri-o installed later, create %s and run gpu-ctk again)", ErrNotInstalled, parent, dir)
	}
	return nil
}
