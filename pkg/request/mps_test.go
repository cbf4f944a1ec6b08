package request

import (
	"reflect"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

func TestMPSShareRequest(t *testing.T) {
	sharesMount := func(names ...string) []specs.Mount {
		var out []specs.Mount
		for _, n := range names {
			out = append(out, specs.Mount{Destination: MPSMountDir + "/" + n, Source: "/dev/null"})
		}
		return out
	}
	trust := Policy{AcceptEnvWhenUnprivileged: true, AcceptVolumeMounts: true}
	strict := Policy{AcceptVolumeMounts: true}
	testCases := []struct {
		description string
		env         []string
		mounts      []specs.Mount
		policy      Policy
		share       string
		mode        Mode
		devices     []string
		warning     string
		wantErr     string
	}{
		{description: "the share alone: its GPUs", env: []string{"NVIDIA_MPS_SHARE=large"}, policy: trust, share: "large", mode: AllGPUs},
		{description: "with all (a CUDA image)", env: []string{"NVIDIA_MPS_SHARE=large", "NVIDIA_VISIBLE_DEVICES=all"}, policy: trust, share: "large", mode: AllGPUs},
		{description: "with a GPU of it", env: []string{"NVIDIA_MPS_SHARE=large", "NVIDIA_VISIBLE_DEVICES=0"}, policy: trust, share: "large", mode: DeviceList, devices: []string{"0"}},
		{description: "with void", env: []string{"NVIDIA_MPS_SHARE=large", "NVIDIA_VISIBLE_DEVICES=void"}, policy: trust,
			wantErr: `invalid GPU request: NVIDIA_MPS_SHARE="large" with NVIDIA_VISIBLE_DEVICES="void": a share needs its GPUs; drop one of them`},
		{description: "an unprivileged tenant's env on a multi-tenant host", env: []string{"NVIDIA_MPS_SHARE=large"}, policy: strict, mode: NoGPU,
			warning: `NVIDIA_MPS_SHARE="large" ignored: the container is unprivileged and request.accept-envvar-when-unprivileged is false; no GPU injected`},
		{description: "the device plugin's mount", mounts: sharesMount("small"), policy: strict, share: "small", mode: AllGPUs},
		{description: "the mount wins over a tenant's env", env: []string{"NVIDIA_MPS_SHARE=large"}, mounts: sharesMount("small"), policy: strict, share: "small", mode: AllGPUs},
		{description: "a mount with a device mount", mounts: append(sharesMount("small"), specs.Mount{Destination: DeviceListMountDir + "/1", Source: "/dev/null"}), policy: strict,
			share: "small", mode: DeviceList, devices: []string{"1"}},
		{description: "two shares", mounts: sharesMount("small", "large"), policy: strict,
			wantErr: `invalid GPU request: volume mounts name two MPS shares, "small" and "large": a container joins one`},
		{description: "mounts not trusted", mounts: sharesMount("small"), policy: Policy{AcceptEnvWhenUnprivileged: true}, mode: NoGPU},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			spec := &specs.Spec{Process: &specs.Process{Env: tc.env}, Mounts: tc.mounts}
			req, warnings, err := FromSpec(spec, tc.policy)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if req.MPSShare != tc.share || req.Mode != tc.mode || !reflect.DeepEqual(req.Devices, tc.devices) {
				t.Errorf("request %+v", req)
			}
			if got := strings.Join(warnings, "\n"); got != tc.warning {
				t.Errorf("warnings %q, want %q", got, tc.warning)
			}
		})
	}
	if !MayRequestGPU([]byte(`{"process":{"env":["NVIDIA_MPS_SHARE=large"]}}`)) {
		t.Error("the pre-check misses NVIDIA_MPS_SHARE")
	}
}
