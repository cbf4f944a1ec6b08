package engine

import (
	"bytes"
	"testing"
)

func TestConfigureCRIO(t *testing.T) {
	plain, _, err := pure(t, configureCRIO, nil, testOptions())
	if err != nil {
		t.Fatal(err)
	}
	withDefault, _, err := pure(t, configureCRIO, nil, Options{RuntimePath: testRuntimePath, SetAsDefault: true})
	if err != nil {
		t.Fatal(err)
	}
	testCases := []struct {
		description  string
		current      []byte
		setAsDefault bool
		runtimePath  string
		golden       string
		wantChanged  bool
		wantDefault  string
		wantErr      error
		wantErrText  []string
	}{
		{
			description: "no file",
			golden:      "crio/dropin.conf",
			wantChanged: true,
		},
		{
			description: "empty file",
			current:     []byte{},
			golden:      "crio/dropin.conf",
			wantChanged: true,
		},
		{
			description:  "set as default",
			setAsDefault: true,
			golden:       "crio/dropin-default.conf",
			wantChanged:  true,
			wantDefault:  "gpu",
		},
		{
			description: "already configured",
			current:     plain,
		},
		{
			description: "already configured, other layout",
			current:     []byte(dropInMarker + "\n[crio.runtime.runtimes.gpu]\nruntime_type = \"oci\"\nruntime_path = \"/usr/local/bin/gpu-runtime\"\n"),
		},
		{
			description: "configuring again without --set-as-default keeps our default",
			current:     withDefault,
			wantDefault: "gpu",
		},
		{
			description:  "adding the default to an existing drop-in",
			current:      plain,
			setAsDefault: true,
			golden:       "crio/dropin-default.conf",
			wantChanged:  true,
			wantDefault:  "gpu",
		},
		{
			description: "a new runtime path",
			current:     plain,
			runtimePath: "/usr/bin/gpu-runtime",
			wantChanged: true,
		},
		{
			description: "not ours",
			current:     []byte("[crio.runtime]\ndefault_runtime = \"crun\"\n"),
			wantErr:     ErrNotOurs,
			wantErrText: []string{dropInMarker},
		},
		{
			description: "malformed",
			current:     []byte(dropInMarker + "\n[crio.runtime\n"),
			wantErr:     ErrMalformed,
			wantErrText: []string{"line 2"},
		},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			opts := testOptions()
			opts.SetAsDefault = tc.setAsDefault
			if tc.runtimePath != "" {
				opts.RuntimePath = tc.runtimePath
			}
			got, changed, err := pure(t, configureCRIO, tc.current, opts)
			checkErr(t, err, tc.wantErr, tc.wantErrText...)
			if tc.wantErr != nil {
				return
			}
			if changed != tc.wantChanged {
				t.Errorf("changed = %v, want %v", changed, tc.wantChanged)
			}
			if !changed && !bytes.Equal(got, tc.current) {
				t.Errorf("unchanged, but the content differs:\n%s", got)
			}
			if tc.golden != "" {
				checkGolden(t, tc.golden, got)
			}
			doc, err := parseTOML(got)
			if err != nil {
				t.Fatal(err)
			}
			if path, _ := stringAt(doc, "crio", "runtime", "runtimes", "gpu", "runtime_path"); path != opts.RuntimePath {
				t.Errorf("runtime_path = %q, want %q", path, opts.RuntimePath)
			}
			if typ, _ := stringAt(doc, "crio", "runtime", "runtimes", "gpu", "runtime_type"); typ != "oci" {
				t.Errorf("runtime_type = %q, want oci", typ)
			}
			if def, _ := stringAt(doc, "crio", "runtime", "default_runtime"); def != tc.wantDefault {
				t.Errorf("default_runtime = %q, want %q", def, tc.wantDefault)
			}
		})
	}
}

func TestUnconfigureCRIO(t *testing.T) {
	ours, _, err := pure(t, configureCRIO, nil, testOptions())
	if err != nil {
		t.Fatal(err)
	}
	testCases := []struct {
		description string
		current     []byte
		wantChanged bool
		wantErr     error
	}{
		{description: "no file"},
		{description: "ours: removed", current: ours, wantChanged: true},
		{description: "ours even when malformed: removed", current: []byte(dropInMarker + "\n[["), wantChanged: true},
		{description: "not ours: refused", current: []byte("[crio.runtime]\n"), wantErr: ErrNotOurs},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			got, changed, err := pure(t, removeDropIn, tc.current, testOptions())
			checkErr(t, err, tc.wantErr)
			if changed != tc.wantChanged {
				t.Errorf("changed = %v, want %v", changed, tc.wantChanged)
			}
			if got != nil {
				t.Errorf("content %q, want nil", got)
			}
		})
	}
}
