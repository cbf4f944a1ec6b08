package request

import (
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"reflect"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gpu-runtime/gpu-runtime/pkg/capabilities"
)

func devMount(id string) specs.Mount {
	return specs.Mount{Source: "/dev/null", Destination: DeviceListMountDir + "/" + id, Type: "bind", Options: []string{"bind"}}
}

func TestFromSpecPolicy(t *testing.T) {
	privileged := &specs.LinuxCapabilities{Bounding: []string{"CAP_CHOWN", "CAP_SYS_ADMIN"}}
	unprivileged := &specs.LinuxCapabilities{Bounding: []string{"CAP_CHOWN"}}
	strict := Policy{AcceptEnvWhenUnprivileged: false, AcceptVolumeMounts: true}
	lenient := Policy{AcceptEnvWhenUnprivileged: true, AcceptVolumeMounts: false}
	def := capabilities.Default()
	testCases := []struct {
		description  string
		policy       Policy
		caps         *specs.LinuxCapabilities
		env          []string
		mounts       []specs.Mount
		want         Request
		wantWarnings []string
	}{
		{description: "default policy: env honoured for unprivileged", policy: lenient, caps: unprivileged,
			env: []string{"NVIDIA_VISIBLE_DEVICES=all"}, want: Request{Mode: AllGPUs, Capabilities: def}},
		{description: "default policy: volume mounts ignored", policy: lenient, caps: unprivileged,
			env: []string{"NVIDIA_VISIBLE_DEVICES=0"}, mounts: []specs.Mount{devMount("1")}, want: Request{Mode: DeviceList, Devices: []string{"0"}, Capabilities: def}},
		{description: "strict: unprivileged env ignored with a warning", policy: strict, caps: unprivileged,
			env: []string{"NVIDIA_VISIBLE_DEVICES=all"}, want: Request{Mode: NoGPU},
			wantWarnings: []string{`NVIDIA_VISIBLE_DEVICES="all" ignored: the container is unprivileged and request.accept-envvar-when-unprivileged is false; no GPU injected`}},
		{description: "strict: legacy CUDA image ignored too", policy: strict, caps: nil,
			env: []string{"CUDA_VERSION=12.0"}, want: Request{Mode: NoGPU},
			wantWarnings: []string{`NVIDIA_VISIBLE_DEVICES="" ignored: the container is unprivileged and request.accept-envvar-when-unprivileged is false; no GPU injected`}},
		{description: "strict: no request, no warning", policy: strict, caps: unprivileged, env: []string{"PATH=/bin"}, want: Request{Mode: NoGPU}},
		{description: "strict: privileged env honoured", policy: strict, caps: privileged,
			env: []string{"NVIDIA_VISIBLE_DEVICES=1"}, want: Request{Mode: DeviceList, Devices: []string{"1"}, Capabilities: def}},
		{description: "strict: volume mounts honoured and replace env", policy: strict, caps: unprivileged,
			env:    []string{"NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_DRIVER_CAPABILITIES=utility"},
			mounts: []specs.Mount{{Source: "proc", Destination: "/proc"}, devMount("GPU-b"), devMount("0")},
			want:   Request{Mode: DeviceList, Devices: []string{"0", "GPU-b"}, Capabilities: capabilities.Set{capabilities.Utility: true}}},
		{description: "volume mount all", policy: strict, caps: unprivileged, mounts: []specs.Mount{devMount("all")},
			want: Request{Mode: AllGPUs, Capabilities: def}},
		{description: "mount under the dir but not from /dev/null is not a request", policy: strict, caps: unprivileged,
			mounts: []specs.Mount{{Source: "/tmp/x", Destination: DeviceListMountDir + "/0"}}, want: Request{Mode: NoGPU}},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			spec := &specs.Spec{Process: &specs.Process{Env: tc.env, Capabilities: tc.caps}, Mounts: tc.mounts}
			got, warnings, err := FromSpec(spec, tc.policy)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
			if !reflect.DeepEqual(warnings, tc.wantWarnings) {
				t.Errorf("warnings = %q\nwant       %q", warnings, tc.wantWarnings)
			}
		})
	}
}

func TestVolumeMountErrors(t *testing.T) {
	testCases := []struct {
		description string
		mount       specs.Mount
		wantErr     string
	}{
		{"not a CDI name", devMount("cdi/gpu0"), `invalid GPU request: volume mount "/var/run/nvidia-container-devices/cdi/gpu0": "gpu0" is not a CDI device name (vendor.com/class=name): unqualified device "gpu0", missing vendor`},
		{"nested path", devMount("a/b"), `invalid GPU request: volume mount "/var/run/nvidia-container-devices/a/b" does not name one device`},
		{"list in one mount", devMount("0,1"), `invalid GPU request: volume mount "/var/run/nvidia-container-devices/0,1" does not name one device`},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			_, _, err := FromSpec(&specs.Spec{Mounts: []specs.Mount{tc.mount}}, Policy{AcceptVolumeMounts: true})
			if err == nil || err.Error() != tc.wantErr || !errors.Is(err, ErrInvalid) {
				t.Fatalf("error = %v\nwant    %s", err, tc.wantErr)
			}
		})
	}
}

func TestFromSpecStrictDropsEnvIMEX(t *testing.T) {
	spec := &specs.Spec{
		Process: &specs.Process{Env: []string{"NVIDIA_IMEX_CHANNELS=0", "NVIDIA_MIG_CONFIG_DEVICES=all"}},
		Mounts:  []specs.Mount{devMount("0")},
	}
	req, warnings, err := FromSpec(spec, Policy{AcceptEnvWhenUnprivileged: false, AcceptVolumeMounts: true})
	if err != nil {
		t.Fatal(err)
	}
	if req.Mode != DeviceList || len(req.IMEXChannels) != 0 || req.MIGConfig {
		t.Errorf("request = %+v", req)
	}
	want := []string{"NVIDIA_IMEX_CHANNELS, NVIDIA_MIG_CONFIG_DEVICES and NVIDIA_MIG_MONITOR_DEVICES ignored: the container is unprivileged and request.accept-envvar-when-unprivileged is false"}
	if !reflect.DeepEqual(warnings, want) {
		t.Errorf("warnings = %q", warnings)
	}
}

// TestFromSpecStrictNeverParsesIgnoredEnv: variables the policy ignores cannot fail the
// request, however malformed; they are reported as ignored.
func TestFromSpecStrictNeverParsesIgnoredEnv(t *testing.T) {
	for _, env := range []string{"NVIDIA_IMEX_CHANNELS=x", "NVIDIA_MIG_MONITOR_DEVICES=0"} {
		spec := &specs.Spec{Process: &specs.Process{Env: []string{env}}, Mounts: []specs.Mount{devMount("0")}}
		req, warnings, err := FromSpec(spec, Policy{AcceptVolumeMounts: true})
		if err != nil || req.Mode != DeviceList || len(warnings) != 1 {
			t.Errorf("%s: %+v %q %v", env, req, warnings, err)
		}
	}
	// "none" asks for nothing: no warning.
	spec := &specs.Spec{Process: &specs.Process{Env: []string{"NVIDIA_IMEX_CHANNELS=none"}}, Mounts: []specs.Mount{devMount("0")}}
	if _, warnings, err := FromSpec(spec, Policy{AcceptVolumeMounts: true}); err != nil || warnings != nil {
		t.Errorf("none: %q %v", warnings, err)
	}
}

// TestMayRequestGPU: the fast pre-check never says "no" for a spec FromSpec would inject into.
func TestMayRequestGPU(t *testing.T) {
	testCases := []struct {
		description string
		raw         string
		want        bool
	}{
		{"plain container", `{"process":{"env":["PATH=/bin","HOME=/root"]},"mounts":[{"destination":"/proc"}]}`, false},
		{"visible devices", `{"process":{"env":["NVIDIA_VISIBLE_DEVICES=0"]}}`, true},
		{"legacy CUDA image", `{"process":{"env":["CUDA_VERSION=12.0"]}}`, true},
		{"device-plugin mount", `{"mounts":[{"source":"/dev/null","destination":"/var/run/nvidia-container-devices/0"}]}`, true},
		{"docker --gpus hook", `{"hooks":{"prestart":[{"path":"/usr/bin/nvidia-container-runtime-hook"}]}}`, true},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			if got := MayRequestGPU([]byte(tc.raw)); got != tc.want {
				t.Errorf("MayRequestGPU = %v, want %v", got, tc.want)
			}
		})
	}
}

// FuzzMayRequestGPU: whenever FromSpec would inject, the pre-check must say true.
func FuzzMayRequestGPU(f *testing.F) {
	f.Add("NVIDIA_VISIBLE_DEVICES=all", "CUDA_VERSION=1.0", uint64(0), uint8(0))
	f.Add("X=1", "Y=2", uint64(0), uint8(0))
	f.Add("NVIDIA_VISIBLE_DEVICES=0", "", uint64(1<<12), uint8(0))
	f.Add("cdi.k8s.io/gpu", "nvidia.com/gpu=0", uint64(0xffff), uint8(1))
	f.Add("X=1", "/var/run/nvidia-container-devices/0", uint64(1<<10), uint8(2))
	f.Add("X=1", "/usr/bin/nvidia-container-runtime-hook", uint64(3), uint8(3))
	f.Fuzz(func(t *testing.T, a, b string, escapeMask uint64, where uint8) {
		spec := &specs.Spec{Process: &specs.Process{Env: []string{a, b}}}
		switch where % 4 {
		case 1: // an annotation
			spec.Annotations = map[string]string{a: b}
		case 2: // a device-plugin volume mount
			spec.Mounts = []specs.Mount{{Destination: b, Source: "/dev/null"}}
		case 3: // docker's --gpus hook
			spec.Hooks = &specs.Hooks{Prestart: []specs.Hook{{Path: b}}} //nolint:staticcheck // docker writes prestart
		}
		raw, err := json.Marshal(spec)
		if err != nil {
			return
		}
		// The same spec, some of its string characters written as JSON escapes.
		escaped := escapeSome(raw, escapeMask)
		var back specs.Spec
		if err := json.Unmarshal(escaped, &back); err != nil {
			t.Fatalf("escaping broke the JSON: %v\n%s", err, escaped)
		}
		req, _, err := FromSpec(&back, Policy{AcceptEnvWhenUnprivileged: true, AcceptVolumeMounts: true})
		dockerHook := back.Hooks != nil && len(back.Hooks.Prestart) > 0 && path.Base(back.Hooks.Prestart[0].Path) == DockerHookName //nolint:staticcheck // docker writes prestart
		if (err == nil && (req.IsGPU() || req.WantsCDI())) || dockerHook {
			if !MayRequestGPU(escaped) {
				t.Fatalf("a GPU request missed by the pre-check:\n%s", escaped)
			}
		}
	})
}

// escapeSome rewrites characters inside the JSON strings of raw as \uXXXX (a slash as \/),
// the i-th string character when bit i%64 of mask is set.
func escapeSome(raw []byte, mask uint64) []byte {
	var out []byte
	inString, escaped := false, false
	hexLeft := 0 // the digits of a \uXXXX being copied
	n := 0
	for _, c := range raw {
		switch {
		case !inString:
			inString = c == '"'
		case hexLeft > 0:
			hexLeft--
		case escaped:
			escaped = false
			if c == 'u' {
				hexLeft = 4
			}
		case c == '\\':
			escaped = true
		case c == '"':
			inString = false
		default:
			n++
			if mask&(1<<(n%64)) != 0 && c < 0x80 {
				if c == '/' && n%2 == 0 {
					out = append(out, '\\', '/')
				} else {
					out = append(out, fmt.Sprintf("\\u%04x", c)...)
				}
				continue
			}
		}
		out = append(out, c)
	}
	return out
}

// TestMayRequestGPUEscapes: a request written with JSON escapes is not missed, and the
// escapes encoders write (&, <, > and control characters) do not defeat the pre-check's
// purpose for specs without a request.
func TestMayRequestGPUEscapes(t *testing.T) {
	for _, raw := range []string{
		`{"process":{"env":["NVIDIA\u005fVISIBLE_DEVICES=0"]}}`,
		`{"process":{"env":["\u004eVIDIA_VISIBLE_DEVICES=0"]}}`,
		`{"mounts":[{"destination":"\/var\/run\/nvidia-container-devices\/0","source":"\/dev\/null"}]}`,
	} {
		if !MayRequestGPU([]byte(raw)) {
			t.Errorf("missed: %s", raw)
		}
	}
	for _, raw := range []string{
		`{"process":{"args":["sh","-c","a \u0026\u0026 b \u003e c"],"env":["TAB=\t","Q=\"\\u0041"]}}`,
	} {
		if MayRequestGPU([]byte(raw)) {
			t.Errorf("a spec without a request flagged: %s", raw)
		}
	}
}

// TestMIGAccessNeedsSysAdmin: NVIDIA_MIG_CONFIG_DEVICES/NVIDIA_MIG_MONITOR_DEVICES are for
// MIG managers, which run privileged: anyone else gets an error naming the variable.
func TestMIGAccessNeedsSysAdmin(t *testing.T) {
	privileged := &specs.LinuxCapabilities{Bounding: []string{"CAP_SYS_ADMIN"}}
	testCases := []struct {
		description string
		caps        *specs.LinuxCapabilities
		env         []string
		wantErr     string
	}{
		{"config with CAP_SYS_ADMIN", privileged, []string{"NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_MIG_CONFIG_DEVICES=all"}, ""},
		{"monitor with CAP_SYS_ADMIN", privileged, []string{"NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_MIG_MONITOR_DEVICES=all"}, ""},
		{"config without", nil, []string{"NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_MIG_CONFIG_DEVICES=all"},
			"invalid GPU request: NVIDIA_MIG_CONFIG_DEVICES=all needs CAP_SYS_ADMIN in the container's bounding set: run the MIG manager privileged (docker run --cap-add SYS_ADMIN), or unset NVIDIA_MIG_CONFIG_DEVICES"},
		{"monitor without", &specs.LinuxCapabilities{Bounding: []string{"CAP_CHOWN"}}, []string{"NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_MIG_MONITOR_DEVICES=all"},
			"invalid GPU request: NVIDIA_MIG_MONITOR_DEVICES=all needs CAP_SYS_ADMIN in the container's bounding set: run the MIG manager privileged (docker run --cap-add SYS_ADMIN), or unset NVIDIA_MIG_MONITOR_DEVICES"},
		{"none or void is not a request", nil, []string{"NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_MIG_CONFIG_DEVICES=none"}, ""},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			spec := &specs.Spec{Process: &specs.Process{Env: tc.env, Capabilities: tc.caps}}
			_, _, err := FromSpec(spec, Policy{AcceptEnvWhenUnprivileged: true})
			if fmt.Sprint(err) != fmt.Sprint(errOrNil(tc.wantErr)) {
				t.Errorf("error = %v\nwant    %s", err, tc.wantErr)
			}
		})
	}
}

func errOrNil(s string) error {
	if s == "" {
		return nil
	}
	return errors.New(s)
}

// TestCDIRequests: CDI names come by NVIDIA_VISIBLE_DEVICES (mixed with native tokens), by
// volume mount and by cdi.k8s.io/ annotation, under the same trust policy as the env.
func TestCDIRequests(t *testing.T) {
	unprivileged := &specs.LinuxCapabilities{Bounding: []string{"CAP_CHOWN"}}
	lenient := Policy{AcceptEnvWhenUnprivileged: true, AcceptVolumeMounts: true}
	strict := Policy{AcceptEnvWhenUnprivileged: false, AcceptVolumeMounts: true}
	annotations := map[string]string{"cdi.k8s.io/k8s.device-plugin.nvidia.com_gpu": "k8s.device-plugin.nvidia.com/gpu=MIG-1", "other": "x"}
	testCases := []struct {
		description     string
		policy          Policy
		env             []string
		mounts          []specs.Mount
		annotations     map[string]string
		wantDevices     []string
		wantCDI         []string
		wantAnnotations map[string]string
		wantWarnings    []string
	}{
		{description: "CDI names mixed with indices, in order", policy: lenient, env: []string{"NVIDIA_VISIBLE_DEVICES=0,nvidia.com/gpu=1,vendor.example/class=x"},
			wantDevices: []string{"0"}, wantCDI: []string{"nvidia.com/gpu=1", "vendor.example/class=x"}},
		{description: "a CDI name alone", policy: lenient, env: []string{"NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=all"}, wantCDI: []string{"nvidia.com/gpu=all"}},
		{description: "by volume mount", policy: strict, mounts: []specs.Mount{devMount("cdi/nvidia.com/gpu=1"), devMount("0")},
			wantDevices: []string{"0"}, wantCDI: []string{"nvidia.com/gpu=1"}},
		{description: "annotations honoured by default", policy: lenient, annotations: annotations,
			wantAnnotations: map[string]string{"cdi.k8s.io/k8s.device-plugin.nvidia.com_gpu": "k8s.device-plugin.nvidia.com/gpu=MIG-1"}},
		{description: "an unprivileged container's annotations ignored on a multi-tenant host", policy: strict, annotations: annotations,
			wantWarnings: []string{`CDI annotations "cdi.k8s.io/k8s.device-plugin.nvidia.com_gpu" ignored: the container is unprivileged and request.accept-envvar-when-unprivileged is false`}},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			spec := &specs.Spec{Process: &specs.Process{Env: tc.env, Capabilities: unprivileged}, Mounts: tc.mounts, Annotations: tc.annotations}
			req, warnings, err := FromSpec(spec, tc.policy)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(req.Devices, tc.wantDevices) || !reflect.DeepEqual(req.CDIDevices, tc.wantCDI) ||
				!reflect.DeepEqual(req.CDIAnnotations, tc.wantAnnotations) || !reflect.DeepEqual(warnings, tc.wantWarnings) {
				t.Errorf("got devices %q cdi %q annotations %q warnings %q", req.Devices, req.CDIDevices, req.CDIAnnotations, warnings)
			}
			if want := tc.wantCDI != nil || tc.wantAnnotations != nil; req.WantsCDI() != want || (want && !req.IsGPU()) {
				t.Errorf("WantsCDI = %v, IsGPU = %v", req.WantsCDI(), req.IsGPU())
			}
		})
	}
	if !MayRequestGPU([]byte(`{"annotations":{"cdi.k8s.io/x":"nvidia.com/gpu=0"}}`)) {
		t.Error("MayRequestGPU misses a spec asking by annotation alone")
	}
}
