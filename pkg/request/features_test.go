package request

import (
	"reflect"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

func TestFeatures(t *testing.T) {
	testCases := []struct {
		description string
		env         []string
		want        []Feature
		wantNotes   []string
	}{
		{description: "none set", env: []string{"NVIDIA_VISIBLE_DEVICES=0"}},
		{description: "each enabled, in a fixed order", env: []string{"NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_NVSWITCH=enabled", "NVIDIA_GDRCOPY= enabled ", "NVIDIA_MOFED=enabled", "NVIDIA_GDS=enabled"},
			want: []Feature{FeatureGDS, FeatureMOFED, FeatureGDRCopy, FeatureNVSwitch}},
		{description: "empty and disabled: off, silently", env: []string{"NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_GDS=", "NVIDIA_MOFED=disabled"}},
		{description: "other values: off, with what to write", env: []string{"NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_GDRCOPY=1", "NVIDIA_GDS=Enabled"},
			wantNotes: []string{
				`NVIDIA_GDS="Enabled" is not "enabled": its devices are not injected (to have them, set NVIDIA_GDS=enabled)`,
				`NVIDIA_GDRCOPY="1" is not "enabled": its devices are not injected (to have them, set NVIDIA_GDRCOPY=enabled)`,
			}},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			req, _, err := FromSpec(&specs.Spec{Process: &specs.Process{Env: tc.env}}, Policy{AcceptEnvWhenUnprivileged: true})
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(req.Features, tc.want) || !reflect.DeepEqual(req.FeatureNotes, tc.wantNotes) {
				t.Errorf("features %q, notes %q; want %q, %q", req.Features, req.FeatureNotes, tc.want, tc.wantNotes)
			}
		})
	}
}

// TestFromSpecStrictDropsFeatures: an unprivileged container whose GPUs come from the
// kubelet's volume mounts cannot add host devices (InfiniBand verbs, nvidia-fs) by its env.
func TestFromSpecStrictDropsFeatures(t *testing.T) {
	spec := &specs.Spec{
		Process: &specs.Process{Env: []string{"NVIDIA_MOFED=enabled", "NVIDIA_GDS=enabled"}},
		Mounts:  []specs.Mount{devMount("0")},
	}
	req, warnings, err := FromSpec(spec, Policy{AcceptEnvWhenUnprivileged: false, AcceptVolumeMounts: true})
	if err != nil {
		t.Fatal(err)
	}
	if req.Mode != DeviceList || len(req.Features) != 0 {
		t.Errorf("request = %+v", req)
	}
	want := []string{`NVIDIA_GDS="enabled", NVIDIA_MOFED="enabled" ignored: the container is unprivileged and request.accept-envvar-when-unprivileged is false`}
	if !reflect.DeepEqual(warnings, want) {
		t.Errorf("warnings = %q, want %q", warnings, want)
	}
	// Trusted, the same container gets them.
	req, _, err = FromSpec(spec, Policy{AcceptEnvWhenUnprivileged: true, AcceptVolumeMounts: true})
	if err != nil || !reflect.DeepEqual(req.Features, []Feature{FeatureGDS, FeatureMOFED}) {
		t.Errorf("trusted: features %q, err %v", req.Features, err)
	}
}
