package engine

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/gpu-runtime/gpu-runtime/internal/jsonobject"
)

// Keys of moby's daemon.json (daemon/config.Config and api/types.Runtime).
const (
	dockerRuntimesKey = "runtimes"
	dockerDefaultKey  = "default-runtime"
	dockerPathKey     = "path"
	dockerArgsKey     = "runtimeArgs"
)

// edit is a pure function's result: new content, whether it differs, what the user should know.
type edit struct {
	content []byte
	changed bool
	notes   []string
	source  string   // containerd version 2: the file whose CRI section the drop-in copies
	names   []string // docker unconfigure: the runtimes removed
}

// configureDocker returns daemon.json (nil or empty for none) with runtimes.<name> pointing at
// opts.RuntimePath and, with opts.SetAsDefault, default-runtime set to it; every other key is
// kept verbatim, in its order.
func configureDocker(current []byte, opts Options) (edit, error) {
	top, runtimes, entry, def, err := loadDocker(current, opts.RuntimeName)
	if err != nil {
		return edit{}, err
	}
	path, err := jsonString(entry, dockerPathKey, "runtimes."+opts.RuntimeName+".path")
	if err != nil {
		return edit{}, err
	}
	var notes []string
	changed := false
	if entry == nil || path != opts.RuntimePath {
		if entry == nil {
			entry = &jsonobject.Object{Members: []jsonobject.Member{{Name: dockerPathKey}, {Name: dockerArgsKey, Value: json.RawMessage("[]")}}}
		} else if path != "" {
			notes = append(notes, fmt.Sprintf("docker runtime %q pointed at %q; now %q", opts.RuntimeName, path, opts.RuntimePath))
		}
		entry.Set(dockerPathKey, jsonobject.String(opts.RuntimePath))
		runtimes.Set(opts.RuntimeName, entry.Encode())
		top.Set(dockerRuntimesKey, runtimes.Encode())
		changed = true
	}
	if opts.SetAsDefault && def != opts.RuntimeName {
		if def != "" {
			notes = append(notes, fmt.Sprintf("docker default-runtime was %q; now %q", def, opts.RuntimeName))
		}
		top.Set(dockerDefaultKey, jsonobject.String(opts.RuntimeName))
		changed = true
	}
	return dockerEdit(current, top, changed, notes)
}

// unconfigureDocker removes gpu-runtime's runtimes from daemon.json: every runtime of ours
// (Ours: by its path, whatever its name) when opts.every, else runtime opts.RuntimeName, only
// if it is ours — another's runtime of that name (NVIDIA's "nvidia") is left, with a note. Each
// goes as unconfigureDockerName says. The edit's names are the runtimes removed.
func unconfigureDocker(current []byte, opts Options) (edit, error) {
	_, runtimes, entry, def, err := loadDocker(current, opts.RuntimeName)
	if err != nil {
		return edit{}, err
	}
	var names []string
	for _, m := range runtimes.Members {
		if (opts.every || m.Name == opts.RuntimeName) && dockerOurs(m.Value, opts.RuntimePath) {
			names = append(names, m.Name)
		}
	}
	var notes []string
	if len(names) == 0 {
		if entry != nil {
			path, _ := jsonString(entry, dockerPathKey, "")
			return edit{content: current, notes: []string{fmt.Sprintf("docker runtime %q is not gpu-runtime's (its path is %q); left as it is", opts.RuntimeName, path)}}, nil
		}
		// No entry: a default-runtime naming it alone is still ours to remove.
		names = []string{opts.RuntimeName}
	}
	if opts.every {
		if raw, ok := runtimes.Get(DefaultRuntimeName); ok && !slices.Contains(names, DefaultRuntimeName) {
			var r struct{ Path string }
			_ = json.Unmarshal(raw, &r)
			notes = append(notes, fmt.Sprintf("docker runtime %q is not gpu-runtime's (its path is %q); left as it is", DefaultRuntimeName, r.Path))
		}
	}
	// The default's runtime first: once it is undone, the default is what it was before
	// configure, and no other runtime's undo calls it someone else's.
	if i := slices.Index(names, def); i > 0 {
		names = slices.Insert(slices.Delete(names, i, i+1), 0, def)
	}
	e := edit{content: current}
	for _, name := range names {
		o := opts
		o.RuntimeName = name
		one, err := unconfigureDockerName(e.content, o)
		if err != nil {
			return edit{}, err
		}
		e.content, e.changed = one.content, e.changed || one.changed
		if one.changed {
			e.names = append(e.names, name)
		}
		for _, n := range one.notes {
			if !slices.Contains(notes, n) {
				notes = append(notes, n)
			}
		}
	}
	e.notes = notes
	slices.Sort(e.names)
	return e, nil
}

// dockerOurs reports whether a runtimes.<name> entry's path is gpu-runtime's.
func dockerOurs(raw json.RawMessage, runtimePath string) bool {
	var r struct {
		Path string `json:"path"`
	}
	return json.Unmarshal(raw, &r) == nil && Ours(r.Path, runtimePath)
}

// unconfigureDockerName removes runtimes.<name> (and "runtimes" when that leaves it empty) and
// default-runtime when it names the runtime. What configure displaced there — another
// default-runtime, another runtime of the same name (NVIDIA's "nvidia" entry, replaced by
// --runtime-name nvidia) — is put back, in its place, as opts.backups hold it (see
// dockerDisplaced). Someone else's default is left alone.
func unconfigureDockerName(current []byte, opts Options) (edit, error) {
	top, runtimes, entry, def, err := loadDocker(current, opts.RuntimeName)
	if err != nil {
		return edit{}, err
	}
	was := dockerDisplaced(opts.backups, opts.RuntimeName, entry, def)
	var notes []string
	changed := false
	if entry != nil {
		if was.entry != nil {
			runtimes.Set(opts.RuntimeName, was.entry)
			notes = append(notes, fmt.Sprintf("docker runtime %q is again what it was before configure: %s", opts.RuntimeName, compactJSON(was.entry)))
		} else {
			runtimes.Remove(opts.RuntimeName)
		}
		if len(runtimes.Members) == 0 {
			top.Remove(dockerRuntimesKey)
		} else {
			top.Set(dockerRuntimesKey, runtimes.Encode())
		}
		changed = true
	}
	switch {
	case def == opts.RuntimeName && was.def != nil:
		top.Set(dockerDefaultKey, was.def)
		notes = append(notes, fmt.Sprintf("docker default-runtime is again %s, as before configure", was.def))
		changed = true
	case def == opts.RuntimeName:
		top.Remove(dockerDefaultKey)
		changed = true
	case def != "":
		notes = append(notes, fmt.Sprintf("docker default-runtime %q is not ours; left as it is", def))
	}
	return dockerEdit(current, top, changed, notes)
}

// displaced is what configure replaced in daemon.json: nil where it replaced nothing.
type displaced struct {
	def   json.RawMessage // the default-runtime value
	entry json.RawMessage // the runtimes.<name> entry
}

// dockerDisplaced finds, in backups (daemon.json's backups gpu-ctk made, newest first), what
// configure displaced: the default-runtime of the newest backup whose default-runtime is not
// name (def is name now), and the runtimes.<name> of the newest backup whose entry differs
// from the current one (entry), and the default of that backup when it named a runtime called
// name (NVIDIA's "nvidia", replaced by --runtime-name nvidia). configure backs the file up
// before every change, so the backup of the host before the first configure holds both;
// later ones hold ours.
func dockerDisplaced(backups [][]byte, name string, entry *jsonobject.Object, def string) displaced {
	var was displaced
	needDef, needEntry := def == name, entry != nil
	current := ""
	if entry != nil {
		current = compactJSON(entry.Encode())
	}
	for _, b := range backups {
		if !needDef && !needEntry {
			break
		}
		top, bRuntimes, bEntry, bDef, err := loadDocker(b, name)
		if err != nil {
			continue
		}
		if needDef && bDef != name {
			needDef = false
			was.def, _ = top.Get(dockerDefaultKey)
		}
		if needEntry && (bEntry == nil || compactJSON(bEntry.Encode()) != current) {
			needEntry = false
			was.entry, _ = bRuntimes.Get(name)
			if needDef && bDef == name { // NVIDIA's "nvidia" was the default and the runtime we replaced
				needDef = false
				was.def, _ = top.Get(dockerDefaultKey)
			}
		}
	}
	return was
}

// compactJSON is raw without insignificant whitespace (raw itself when it does not parse).
func compactJSON(raw []byte) string {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return string(raw)
	}
	return b.String()
}

// dockerEdit is the edit leaving daemon.json as top, indented with four spaces: json.Indent
// only changes whitespace between tokens, so every value keeps its text.
func dockerEdit(current []byte, top *jsonobject.Object, changed bool, notes []string) (edit, error) {
	if !changed {
		return edit{content: current, notes: notes}, nil
	}
	var b bytes.Buffer
	if err := json.Indent(&b, top.Encode(), "", "    "); err != nil {
		return edit{}, fmt.Errorf("indent daemon.json: %w", err)
	}
	b.WriteByte('\n')
	return edit{content: b.Bytes(), changed: true, notes: notes}, nil
}

// loadDocker parses daemon.json down to runtime name's entry (runtimes empty, entry nil: absent)
// and reads its default-runtime.
func loadDocker(current []byte, name string) (top, runtimes, entry *jsonobject.Object, def string, err error) {
	if top, err = parseJSONObject(current); err != nil {
		return nil, nil, nil, "", err
	}
	if def, err = jsonString(top, dockerDefaultKey, `"`+dockerDefaultKey+`"`); err != nil {
		return nil, nil, nil, "", err
	}
	raw, ok := top.Get(dockerRuntimesKey)
	if !ok {
		return top, &jsonobject.Object{}, nil, def, nil
	}
	if runtimes, err = parseJSONObject(raw); err != nil {
		return nil, nil, nil, "", fmt.Errorf("%w: %q is not a JSON object", ErrUnexpected, dockerRuntimesKey)
	}
	if raw, ok = runtimes.Get(name); !ok {
		return top, runtimes, nil, def, nil
	}
	if entry, err = parseJSONObject(raw); err != nil {
		return nil, nil, nil, "", fmt.Errorf("%w: runtimes.%s is not a JSON object", ErrUnexpected, name)
	}
	return top, runtimes, entry, def, nil
}

// jsonString returns the string member name of o, "" when absent; what names it in the error.
func jsonString(o *jsonobject.Object, name, what string) (string, error) {
	var s string
	if raw, ok := o.Get(name); ok && json.Unmarshal(raw, &s) != nil {
		return "", fmt.Errorf("%w: %s is not a string", ErrUnexpected, what)
	}
	return s, nil
}

// parseJSONObject parses a JSON object (blank: empty); syntax errors carry line and column.
func parseJSONObject(data []byte) (*jsonobject.Object, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return &jsonobject.Object{}, nil
	}
	// A first pass for precise errors: syntax, trailing data, top-level type.
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, jsonParseError(data, err, dec.InputOffset())
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, jsonParseError(data, errors.New("unexpected data after the top-level value"), dec.InputOffset())
	}
	if _, ok := v.(map[string]any); !ok {
		return nil, &ParseError{Line: 1, Column: 1, Err: errors.New("the top-level value is not a JSON object")}
	}
	obj, err := jsonobject.Parse(data)
	if err != nil {
		return nil, jsonParseError(data, err, 0)
	}
	return obj, nil
}

// jsonParseError locates err in data: a 1-based line and column.
func jsonParseError(data []byte, err error, offset int64) error {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		offset = se.Offset - 1 // Offset counts the bytes read, the offending one included
	}
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		err = errors.New("unexpected end of JSON input")
		offset = int64(len(data))
	}
	lead := data[:min(max(offset, 0), int64(len(data)))]
	line := bytes.Count(lead, []byte{'\n'}) + 1
	return &ParseError{Line: line, Column: len(lead) - bytes.LastIndexByte(lead, '\n'), Err: err}
}
