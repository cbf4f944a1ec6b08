package engine

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/pelletier/go-toml/v2/unstable"

	"github.com/gpu-runtime/gpu-runtime/internal/quote"
	"github.com/gpu-runtime/gpu-runtime/internal/trustedfile"
)

// containerd configuration.
//
// Version 2 (containerd 1.3 and later; 2.x migrates it on load) keeps CRI runtimes under
// plugins."io.containerd.grpc.v1.cri".containerd, version 3 (containerd 2.x) under
// plugins."io.containerd.cri.v1.runtime".containerd. Version 1 (no "version" key, short plugin
// names) is refused with ErrUnsupportedVersion.
//
// gpu-ctk writes the runtime to a drop-in listed in the main config's `imports`, which
// containerd merges differently by major version:
//   - 1.x replaces a plugin's whole section with the last loaded file's: a drop-in naming only
//     our runtime would drop runc, sandbox_image, the CNI directories and every other CRI
//     setting. A version 2 drop-in therefore carries the CRI section of the files loaded before
//     it, in containerd's order, plus our runtime (and the built-in runc when they define
//     none); its header says to re-run configure after changing CRI settings there.
//   - 2.x merges plugin sections key by key, so a version 3 drop-in holds only our runtime.
//
// The runtime starts from the settings of the default runtime (or runc) when it is a runc
// shim, so options such as SystemdCgroup match, with options.BinaryName the gpu-runtime path
// and "cdi.k8s.io/*" added to container_annotations: the CRI copies into the OCI spec only the
// annotations a runtime lists, and gpu-runtime reads CDI devices from them (the device plugin's
// cdi-annotations strategy). Pod annotations stay unlisted: any pod author writes them, while
// container annotations come from the kubelet and its device plugins.
//
// containerd refuses to start when an import names a missing file, so configure writes the
// drop-in before the import and unconfigure removes the import before the drop-in.
const (
	containerdV2Plugin = "io.containerd.grpc.v1.cri"
	containerdV3Plugin = "io.containerd.cri.v1.runtime"
	runcShim           = "io.containerd.runc.v2"
	defaultRuncName    = "runc"
)

// criPlugin is the plugin whose section holds CRI runtimes in a config of version.
func criPlugin(version int) string {
	if version == 3 {
		return containerdV3Plugin
	}
	return containerdV2Plugin
}

// configureContainerdMain returns containerd's main config (nil or blank for none) with
// opts.DropInPath in its imports, editing the text. A blank config gets a version line too; an
// import already covering the drop-in (the same path, or a matching glob) means no change.
func configureContainerdMain(current []byte, opts Options) (edit, error) {
	doc, err := parseTOML(current)
	if err != nil {
		return edit{}, err
	}
	version, err := containerdConfigVersion(doc)
	if err != nil {
		return edit{}, err
	}
	if version == 0 {
		var b bytes.Buffer
		fmt.Fprintf(&b, "version = %d\nimports = [%s]\n", opts.ContainerdConfigVersion, quote.TOMLString(opts.DropInPath))
		if len(current) > 0 {
			b.WriteByte('\n')
			b.Write(current)
		}
		note := fmt.Sprintf("%s: new containerd config, version %d", opts.ConfigPath, opts.ContainerdConfigVersion)
		return edit{content: b.Bytes(), changed: true, notes: []string{note}}, nil
	}
	if err := checkCRIEnabled(doc, version); err != nil {
		return edit{}, err
	}
	imports, err := importStrings(doc)
	if err != nil {
		return edit{}, err
	}
	if slices.ContainsFunc(imports, func(imp string) bool { return importCovers(imp, opts.ConfigPath, opts.DropInPath) }) {
		return edit{content: current}, nil
	}
	top, err := scanTopLevel(current)
	if err != nil {
		return edit{}, err
	}
	quoted := quote.TOMLString(opts.DropInPath)
	at, insert := top.versionEnd, "imports = ["+quoted+"]\n" // a new line after the version
	switch {
	case len(top.elems) > 0:
		at, insert = top.elems[len(top.elems)-1].end, ", "+quoted
	case top.imports:
		at, insert = top.open+1, quoted
	case at == len(current) && !bytes.HasSuffix(current, []byte("\n")):
		insert = "\n" + insert
	}
	out := slices.Concat(current[:at], []byte(insert), current[at:])
	if err := verifyImports(current, out, append(imports, opts.DropInPath)); err != nil {
		return edit{}, err
	}
	return edit{content: out, changed: true}, nil
}

// unconfigureContainerdMain removes the imports entries that name opts.DropInPath (the whole
// `imports` line when no other entry is left). Globs are left alone.
func unconfigureContainerdMain(current []byte, opts Options) (edit, error) {
	doc, err := parseTOML(current)
	if err != nil {
		return edit{}, err
	}
	imports, err := importStrings(doc)
	if err != nil {
		return edit{}, err
	}
	ours := func(imp string) bool {
		return !strings.Contains(imp, "*") && importCovers(imp, opts.ConfigPath, opts.DropInPath)
	}
	if !slices.ContainsFunc(imports, ours) {
		return edit{content: current}, nil
	}
	top, err := scanTopLevel(current)
	if err != nil {
		return edit{}, err
	}
	if !top.imports || len(top.elems) != len(imports) {
		return edit{}, fmt.Errorf("%w: cannot locate the imports array in the text; edit it by hand", ErrUnexpected)
	}
	var kept, text []string
	for i, imp := range imports {
		if !ours(imp) {
			kept = append(kept, imp)
			text = append(text, string(current[top.elems[i].start:top.elems[i].end]))
		}
	}
	out := slices.Concat(current[:top.lineStart], current[top.lineEnd:])
	if kept != nil {
		// Rewrite the array from the kept elements' own text.
		out = slices.Concat(current[:top.open], []byte("["+strings.Join(text, ", ")+"]"), current[top.close+1:])
	}
	if err := verifyImports(current, out, kept); err != nil {
		return edit{}, err
	}
	return edit{content: out, changed: true}, nil
}

// containerdDropIn returns the drop-in registering the runtime. files are the configs
// containerd loads before the drop-in, in its order: the main config (nil content when
// missing), then its imports; cri is the CRI section in effect after them.
func containerdDropIn(files []configFile, opts Options) (edit, error) {
	var notes []string
	version, cri, source := 0, map[string]any{}, ""
	for i, f := range files {
		doc, err := parseTOML(f.content)
		if err != nil {
			return edit{}, withPath(err, f.path)
		}
		if i == 0 {
			if version, err = containerdConfigVersion(doc); err != nil {
				return edit{}, withPath(err, f.path)
			}
			version = cmp.Or(version, opts.ContainerdConfigVersion)
		}
		section, ok, err := subTable(doc, "plugins", criPlugin(version))
		if err != nil {
			return edit{}, withPath(err, f.path)
		}
		if !ok {
			continue
		}
		if version == 2 {
			cri = deepCopy(section).(map[string]any) // containerd 1.x: the last file's section wins whole
			source = f.path
			if i > 0 {
				notes = append(notes, fmt.Sprintf("%s also sets the CRI plugin section, which containerd 1.x replaces whole: the drop-in carries a copy, and a file containerd loads after the drop-in would drop our runtime", f.path))
			}
		} else {
			mergeTables(cri, section)
		}
	}
	runtimes, _, err := subTable(cri, "containerd", "runtimes")
	if err != nil {
		return edit{}, err
	}
	defName, err := stringAt(cri, "containerd", "default_runtime_name")
	if err != nil {
		return edit{}, err
	}

	runtime := map[string]any{}
	for _, name := range []string{defName, defaultRuncName} {
		if name == "" || name == opts.RuntimeName {
			continue
		}
		if base, ok := runtimes[name].(map[string]any); ok && base["runtime_type"] == runcShim {
			runtime = deepCopy(base).(map[string]any)
			notes = append(notes, fmt.Sprintf("containerd runtime %q starts from the settings of runtime %q", opts.RuntimeName, name))
			break
		}
	}
	runtime["runtime_type"] = runcShim
	annotations, err := withCDIAnnotations(runtime["container_annotations"])
	if err != nil {
		return edit{}, err
	}
	runtime["container_annotations"] = annotations
	options, err := makeTable(runtime, "options")
	if err != nil {
		return edit{}, err
	}
	options["BinaryName"] = opts.RuntimePath

	section := map[string]any{}
	if version == 2 {
		section = cri
	}
	ctrd, err := makeTable(section, "containerd")
	if err != nil {
		return edit{}, err
	}
	rts, err := makeTable(ctrd, "runtimes")
	if err != nil {
		return edit{}, err
	}
	if version == 2 && len(rts) == 0 {
		// Naming any runtime replaces containerd 1.x's built-in runc: name it too.
		rts[defaultRuncName] = map[string]any{"runtime_type": runcShim}
	}
	rts[opts.RuntimeName] = runtime
	if opts.SetAsDefault {
		ctrd["default_runtime_name"] = opts.RuntimeName
		if defName != "" && defName != opts.RuntimeName {
			notes = append(notes, fmt.Sprintf("containerd default_runtime_name was %q; now %q", defName, opts.RuntimeName))
		}
	}
	doc := map[string]any{
		"version": int64(version),
		"plugins": map[string]any{criPlugin(version): section},
	}
	var extra []string
	if version == 2 {
		extra = []string{
			"containerd 1.x replaces a plugin's whole section with the last imported file's, so this",
			"file also carries the CRI settings of " + opts.ConfigPath + " and its other imports as",
			"they were when it was generated: after changing them there, run gpu-ctk runtime configure again.",
		}
	}
	out, err := renderTOML(dropInHeader(opts, extra...), doc)
	return edit{content: out, changed: true, notes: notes, source: source}, err
}

// criCopyDrift reports whether two version 2 drop-ins carry different copies of the CRI
// section, our runtime and the default naming it set aside: the settings copied from source
// changed since the drop-in was generated.
func criCopyDrift(old, updated []byte, name string) bool {
	strip := func(data []byte) (map[string]any, bool) {
		doc, err := parseTOML(data)
		if err != nil {
			return nil, false
		}
		cri, ok, err := subTable(doc, "plugins", containerdV2Plugin)
		if err != nil || !ok {
			return nil, false
		}
		if ctrd, ok, _ := subTable(cri, "containerd"); ok {
			if rts, ok, _ := subTable(ctrd, "runtimes"); ok {
				delete(rts, name)
			}
			if ctrd["default_runtime_name"] == name {
				delete(ctrd, "default_runtime_name")
			}
		}
		return cri, true
	}
	a, okA := strip(old)
	b, okB := strip(updated)
	return okA && okB && !reflect.DeepEqual(a, b)
}

// cdiAnnotationsPattern passes the CDI annotations through the CRI to the runtime.
const cdiAnnotationsPattern = "cdi.k8s.io/*"

// withCDIAnnotations returns a runtime's container_annotations with cdiAnnotationsPattern.
func withCDIAnnotations(current any) ([]any, error) {
	list, ok := current.([]any)
	if !ok && current != nil {
		return nil, fmt.Errorf("%w: container_annotations is %s, not an array", ErrUnexpected, quote.TOMLType(current))
	}
	if slices.Contains(list, any(cdiAnnotationsPattern)) {
		return slices.Clone(list), nil
	}
	return append(slices.Clone(list), cdiAnnotationsPattern), nil
}

// containerdDropInSetsDefault reports whether a drop-in we generated made name the default,
// so that configuring again keeps it so.
func containerdDropInSetsDefault(content []byte, name string) bool {
	doc, err := parseTOML(content)
	return err == nil && slices.ContainsFunc([]string{containerdV2Plugin, containerdV3Plugin}, func(plugin string) bool {
		def, _ := stringAt(doc, "plugins", plugin, "containerd", "default_runtime_name")
		return def == name
	})
}

// containerdLeftovers says what of runtime name the main config itself still holds after
// unconfigure (gpu-ctk never writes there; someone else did).
func containerdLeftovers(content []byte, path, name string) []string {
	doc, err := parseTOML(content)
	if err != nil {
		return nil
	}
	var notes []string
	for _, plugin := range []string{containerdV2Plugin, containerdV3Plugin} {
		if _, ok, _ := subTable(doc, "plugins", plugin, "containerd", "runtimes", name); ok {
			notes = append(notes, fmt.Sprintf("%s itself defines runtime %q (not written by gpu-ctk); left as it is", path, name))
		}
		if def, _ := stringAt(doc, "plugins", plugin, "containerd", "default_runtime_name"); def == name {
			notes = append(notes, fmt.Sprintf("%s itself sets default_runtime_name = %q; left as it is", path, name))
		}
	}
	return notes
}

// containerdConfigVersion returns a main config's version, or 0 for a blank document.
func containerdConfigVersion(doc map[string]any) (int, error) {
	const v1 = "containerd reads it as version 1, whose short plugin names gpu-ctk does not write: " +
		"migrate it to version 2 (add `version = 2` and spell plugins by their full names, e.g. " +
		`[plugins."io.containerd.grpc.v1.cri"]; containerd 2.x: containerd config migrate) and re-run; ` +
		"a containerd that only serves docker (disabled_plugins = [\"cri\"]) needs --runtime=docker instead"
	v, ok := doc["version"]
	if !ok {
		if len(doc) == 0 {
			return 0, nil
		}
		return 0, fmt.Errorf("%w: no \"version\" key: %s", ErrUnsupportedVersion, v1)
	}
	n, ok := v.(int64)
	if !ok {
		return 0, fmt.Errorf("%w: \"version\" is %s, not an integer", ErrUnexpected, quote.TOMLType(v))
	}
	switch n {
	case 2, 3:
		return int(n), nil
	case 1:
		return 0, fmt.Errorf("%w: version 1: %s", ErrUnsupportedVersion, v1)
	}
	return 0, fmt.Errorf("%w: version %d: gpu-ctk writes versions 2 (containerd 1.x) and 3 (containerd 2.x)", ErrUnsupportedVersion, n)
}

// checkCRIEnabled fails when disabled_plugins switches the CRI plugin off.
func checkCRIEnabled(doc map[string]any, version int) error {
	list, _ := doc["disabled_plugins"].([]any)
	for _, v := range list {
		if s, _ := v.(string); s == containerdV2Plugin || s == criPlugin(version) {
			return fmt.Errorf("%w: disabled_plugins lists %q, so no CRI runtime would ever run: remove it from disabled_plugins (or, when this containerd only serves docker, use --runtime=docker)", ErrCRIDisabled, s)
		}
	}
	return nil
}

// importStrings returns the main config's imports.
func importStrings(doc map[string]any) ([]string, error) {
	v, ok := doc["imports"]
	if !ok {
		return nil, nil
	}
	list, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("%w: \"imports\" is %s, not an array", ErrUnexpected, quote.TOMLType(v))
	}
	out := make([]string, 0, len(list))
	for _, e := range list {
		s, ok := e.(string)
		if !ok {
			return nil, fmt.Errorf("%w: an \"imports\" entry is %s, not a string", ErrUnexpected, quote.TOMLType(e))
		}
		out = append(out, s)
	}
	return out, nil
}

// resolveImport is the path (or glob) of an imports entry of the file parent.
func resolveImport(entry, parent string) string {
	p := filepath.Clean(entry)
	if !filepath.IsAbs(p) {
		p = filepath.Join(filepath.Dir(parent), p)
	}
	return p
}

// importCovers reports whether entry, in the file parent, makes containerd load dropIn.
func importCovers(entry, parent, dropIn string) bool {
	p := resolveImport(entry, parent)
	if strings.Contains(p, "*") {
		ok, _ := filepath.Match(p, filepath.Clean(dropIn))
		return ok
	}
	return p == filepath.Clean(dropIn)
}

// containerdFiles returns the files containerd would load, in its order: main, then its imports
// (breadth first, globs sorted), but skip. Links are followed, as containerd does; a file that
// is not regular is left out with a warning, and one that cannot be read is an error.
func containerdFiles(main configFile, skip string) ([]configFile, []string, error) {
	loaded := map[string]bool{filepath.Clean(main.path): true, filepath.Clean(skip): true}
	out := []configFile{main}
	var warnings []string
	pending, err := importPaths(main)
	if err != nil {
		return nil, nil, err
	}
	for len(pending) > 0 {
		path := pending[0]
		pending = pending[1:]
		if loaded[path] {
			continue
		}
		loaded[path] = true
		var content []byte
		resolved, err := filepath.EvalSymlinks(path)
		if err == nil {
			content, _, err = trustedfile.ReadRegular(resolved, maxConfigSize, false)
		}
		var nr *trustedfile.NotRegularError
		if errors.As(err, &nr) && nr.Kind != "" {
			what := path
			if nr.Path != path {
				what += " (a link to " + nr.Path + ")"
			}
			warnings = append(warnings, fmt.Sprintf("containerd import %s is a %s, not a regular file: skipped; containerd cannot load it either: remove it, or take it out of imports", what, nr.Kind))
			continue
		}
		if err != nil {
			return nil, nil, fmt.Errorf("read containerd import %s: %w", path, err)
		}
		f := configFile{path: path, content: content}
		more, err := importPaths(f)
		if err != nil {
			return nil, nil, err
		}
		out = append(out, f)
		pending = append(pending, more...)
	}
	return out, warnings, nil
}

// importPaths lists what f imports, globs expanded.
func importPaths(f configFile) ([]string, error) {
	doc, err := parseTOML(f.content)
	if err != nil {
		return nil, withPath(err, f.path)
	}
	imports, err := importStrings(doc)
	if err != nil {
		return nil, withPath(err, f.path)
	}
	var out []string
	for _, imp := range imports {
		p := resolveImport(imp, f.path)
		if !strings.Contains(p, "*") {
			out = append(out, p)
			continue
		}
		matches, err := filepath.Glob(p)
		if err != nil {
			return nil, fmt.Errorf("expand import %q of %s: %w", imp, f.path, err)
		}
		out = append(out, matches...)
	}
	return out, nil
}

// span is a byte range of a document.
type span struct{ start, end int }

// topLevel locates, in a TOML document's text, the top-level keys gpu-ctk edits.
type topLevel struct {
	imports    bool   // an imports key exists
	lineStart  int    // start of the imports line (or of the key when it shares its line)
	lineEnd    int    // past the newline ending the imports key-value
	open       int    // offset of imports' '['
	close      int    // offset of imports' ']'
	elems      []span // the array's string elements, quotes included
	versionEnd int    // past the newline ending the version line
}

// scanTopLevel finds the imports array and the version line among the keys that precede the
// first table header.
func scanTopLevel(data []byte) (topLevel, error) {
	var t topLevel
	var p unstable.Parser
	p.Reset(data)
	for p.NextExpression() {
		e := p.Expression()
		if e.Kind != unstable.KeyValue {
			break // a table header: the top level is over
		}
		key := e.Key()
		if !key.Next() {
			continue
		}
		name := string(key.Node().Data)
		if !key.IsLast() {
			continue // a dotted key
		}
		// The key-value's range runs from its key to the end of its value.
		start, end := int(e.Raw.Offset), int(e.Raw.Offset+e.Raw.Length)
		switch name {
		case "version":
			t.versionEnd = lineEnd(data, end)
		case "imports":
			value := e.Value()
			if value.Kind != unstable.Array {
				return t, fmt.Errorf("%w: \"imports\" is not an array", ErrUnexpected)
			}
			t.imports = true
			t.open = start + bytes.IndexByte(data[start:end], '[')
			t.close = end - 1
			children := value.Children()
			for children.Next() {
				n := children.Node()
				if n.Kind != unstable.String {
					return t, fmt.Errorf("%w: an \"imports\" entry is not a string", ErrUnexpected)
				}
				t.elems = append(t.elems, span{int(n.Raw.Offset), int(n.Raw.Offset + n.Raw.Length)})
			}
			t.lineEnd = lineEnd(data, end)
			t.lineStart = start
			for t.lineStart > 0 && (data[t.lineStart-1] == ' ' || data[t.lineStart-1] == '\t') {
				t.lineStart--
			}
			if t.lineStart > 0 && data[t.lineStart-1] != '\n' {
				t.lineStart = start
			}
		}
	}
	if err := p.Error(); err != nil {
		return t, &ParseError{Err: err}
	}
	return t, nil
}

// lineEnd returns the offset past the newline ending the line at i (len(data) on the last
// line): after a key-value, only blanks and a comment can follow on its line.
func lineEnd(data []byte, i int) int {
	if n := bytes.IndexByte(data[i:], '\n'); n >= 0 {
		return i + n + 1
	}
	return len(data)
}

// verifyImports checks that a textual edit changed nothing but imports (want; nil: no key).
func verifyImports(before, after []byte, want []string) error {
	b, err := parseTOML(before)
	if err != nil {
		return err
	}
	a, err := parseTOML(after)
	if err != nil {
		return fmt.Errorf("edit imports: the result would not parse (%w); edit the file by hand", err)
	}
	got, _ := importStrings(a)
	_, has := a["imports"]
	delete(a, "imports")
	delete(b, "imports")
	if !reflect.DeepEqual(b, a) || !slices.Equal(got, want) || has != (want != nil) {
		return errors.New("edit imports: the edit would change more than imports; edit the file by hand")
	}
	return nil
}

// ContainerdConfigVersionFor returns the config version to write for the containerd whose
// `containerd --version` printed output: 3 for containerd 2.x and later, 2 before.
func ContainerdConfigVersionFor(output string) (int, error) {
	fields := strings.Fields(output)
	if len(fields) >= 3 && fields[0] == "containerd" {
		major, _, _ := strings.Cut(strings.TrimPrefix(fields[2], "v"), ".")
		if n, err := strconv.Atoi(major); err == nil {
			if n >= 2 {
				return 3, nil
			}
			return 2, nil
		}
	}
	return 0, fmt.Errorf("read containerd version from %q: %w", strings.TrimSpace(output), ErrUnexpected)
}
