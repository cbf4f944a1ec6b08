package request

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gpu-runtime/gpu-runtime/pkg/capabilities"
	"github.com/gpu-runtime/gpu-runtime/pkg/requirements"
)

// fromEnv reads a request from a container environment alone, every channel accepted: that
// of a privileged container.
func fromEnv(env []string) (Request, error) {
	caps := &specs.LinuxCapabilities{Bounding: []string{"CAP_SYS_ADMIN"}}
	req, _, err := FromSpec(&specs.Spec{Process: &specs.Process{Env: env, Capabilities: caps}}, Policy{})
	return req, err
}

func TestFromEnv(t *testing.T) {
	def := capabilities.Default()
	all := capabilities.Everything()
	testCases := []struct {
		description string
		env         []string
		want        Request
	}{
		{description: "unset: not a GPU container", env: []string{"PATH=/bin"}, want: Request{Mode: NoGPU}},
		{description: "empty: not a GPU container", env: []string{"NVIDIA_VISIBLE_DEVICES="}, want: Request{Mode: NoGPU}},
		{description: "only commas and spaces: empty", env: []string{"NVIDIA_VISIBLE_DEVICES= , ,"}, want: Request{Mode: NoGPU}},
		{description: "void", env: []string{"NVIDIA_VISIBLE_DEVICES=void"}, want: Request{Mode: NoGPU}},
		{description: "all", env: []string{"NVIDIA_VISIBLE_DEVICES=all"}, want: Request{Mode: AllGPUs, Capabilities: def}},
		{description: "none", env: []string{"NVIDIA_VISIBLE_DEVICES=none"}, want: Request{Mode: NoDevices, Capabilities: def}},
		{description: "all, trimmed", env: []string{"NVIDIA_VISIBLE_DEVICES= all ,"}, want: Request{Mode: AllGPUs, Capabilities: def}},
		{description: "indices, trimmed, empty tokens dropped", env: []string{"NVIDIA_VISIBLE_DEVICES= 1, ,0 "}, want: Request{Mode: DeviceList, Devices: []string{"1", "0"}, Capabilities: def}},
		{description: "mixed index and UUID", env: []string{"NVIDIA_VISIBLE_DEVICES=0,GPU-abc"}, want: Request{Mode: DeviceList, Devices: []string{"0", "GPU-abc"}, Capabilities: def}},
		{description: "last duplicate env entry wins", env: []string{"NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_VISIBLE_DEVICES=1"}, want: Request{Mode: DeviceList, Devices: []string{"1"}, Capabilities: def}},
		{description: "legacy CUDA image: all GPUs, all capabilities, cuda requirement", env: []string{"CUDA_VERSION=12.4.1"},
			want: Request{Mode: AllGPUs, Capabilities: all, Legacy: true, Requirements: []requirements.Requirement{{Name: "CUDA_VERSION", Expression: "cuda>=12.4"}}}},
		{description: "legacy image with empty visible devices: not GPU", env: []string{"CUDA_VERSION=12.4.1", "NVIDIA_VISIBLE_DEVICES="}, want: Request{Mode: NoGPU}},
		{description: "legacy image with explicit capabilities keeps them", env: []string{"CUDA_VERSION=11.0", "NVIDIA_DRIVER_CAPABILITIES=compute"},
			want: Request{Mode: AllGPUs, Capabilities: capabilities.Set{capabilities.Compute: true}, Legacy: true, Requirements: []requirements.Requirement{{Name: "CUDA_VERSION", Expression: "cuda>=11.0"}}}},
		{description: "CUDA image with NVIDIA_REQUIRE_CUDA is not legacy", env: []string{"CUDA_VERSION=12.4.1", "NVIDIA_REQUIRE_CUDA=cuda>=12.4"}, want: Request{Mode: NoGPU}},
		{description: "requirements sorted, jetpack and empty ones skipped", env: []string{
			"NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_REQUIRE_X=driver>=500", "NVIDIA_REQUIRE_CUDA=cuda>=12.0",
			"NVIDIA_REQUIRE_JETPACK=csv-mounts=all", "NVIDIA_REQUIRE_EMPTY= ", "NVIDIA_DISABLE_REQUIRE=true"},
			want: Request{Mode: AllGPUs, Capabilities: def, DisableRequire: true, Requirements: []requirements.Requirement{
				{Name: "NVIDIA_REQUIRE_CUDA", Expression: "cuda>=12.0"}, {Name: "NVIDIA_REQUIRE_X", Expression: "driver>=500"}}}},
		{description: "disable require is a strict boolean", env: []string{"NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_DISABLE_REQUIRE=yes"}, want: Request{Mode: AllGPUs, Capabilities: def}},
		{description: "capabilities all", env: []string{"NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_DRIVER_CAPABILITIES=all"}, want: Request{Mode: AllGPUs, Capabilities: all}},
		{description: "empty capabilities: default", env: []string{"NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_DRIVER_CAPABILITIES="}, want: Request{Mode: AllGPUs, Capabilities: def}},
		{description: "capability list", env: []string{"NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_DRIVER_CAPABILITIES=utility, video"},
			want: Request{Mode: AllGPUs, Capabilities: capabilities.Set{capabilities.Utility: true, capabilities.Video: true}}},
		{description: "bad capabilities ignored when not a GPU container", env: []string{"NVIDIA_DRIVER_CAPABILITIES=bogus"}, want: Request{Mode: NoGPU}},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			got, err := fromEnv(tc.env)
			if err != nil {
				t.Fatalf("FromEnv: %v", err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestFromEnvErrors(t *testing.T) {
	testCases := []struct {
		description string
		env         []string
		wantErr     string
		is          error
	}{
		{description: "duplicate device", env: []string{"NVIDIA_VISIBLE_DEVICES=0,1,0"},
			wantErr: `invalid GPU request: device "0" is listed twice in NVIDIA_VISIBLE_DEVICES="0,1,0"`, is: ErrInvalid},
		{description: "none with a device: contradictory", env: []string{"NVIDIA_VISIBLE_DEVICES=0,none"},
			wantErr: `invalid GPU request: NVIDIA_VISIBLE_DEVICES="0,none": "none" cannot be combined with other devices (all, none and void each stand alone)`, is: ErrInvalid},
		{description: "all with void: contradictory", env: []string{"NVIDIA_VISIBLE_DEVICES=all,void"},
			wantErr: `invalid GPU request: NVIDIA_VISIBLE_DEVICES="all,void": "all" cannot be combined with other devices (all, none and void each stand alone)`, is: ErrInvalid},
		{description: "all twice", env: []string{"NVIDIA_VISIBLE_DEVICES=all,all"},
			wantErr: `invalid GPU request: NVIDIA_VISIBLE_DEVICES="all,all": "all" cannot be combined with other devices (all, none and void each stand alone)`, is: ErrInvalid},
		{description: "a huge value is quoted cut", env: []string{"NVIDIA_VISIBLE_DEVICES=" + strings.Repeat("x,", 50000) + "x"},
			wantErr: `invalid GPU request: device "x" is listed twice in NVIDIA_VISIBLE_DEVICES="` + strings.Repeat("x,", 128) + `"… (100001 bytes)`, is: ErrInvalid},
		{description: "a malformed CDI name: the CDI parser says why", env: []string{"NVIDIA_VISIBLE_DEVICES=0,nvidia.com/=1"},
			wantErr: `invalid GPU request: "nvidia.com/=1" in NVIDIA_VISIBLE_DEVICES is not a CDI device name (vendor.com/class=name): unqualified device "nvidia.com/=1", missing vendor`, is: ErrInvalid},
		{description: "unknown capability", env: []string{"NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_DRIVER_CAPABILITIES=compute,gaming"},
			wantErr: `invalid GPU request: unknown driver capability "gaming" in NVIDIA_DRIVER_CAPABILITIES="compute,gaming": allowed are all, compute, compat32, display, graphics, ngx, utility, video`,
			is:      capabilities.ErrUnknown},
		{description: "several unknown capabilities", env: []string{"NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=a,b"},
			wantErr: `invalid GPU request: unknown driver capability "a", "b" in NVIDIA_DRIVER_CAPABILITIES="a,b": allowed are all, compute, compat32, display, graphics, ngx, utility, video`,
			is:      ErrInvalid},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			_, err := fromEnv(tc.env)
			if err == nil || err.Error() != tc.wantErr {
				t.Fatalf("error = %v\nwant    %s", err, tc.wantErr)
			}
			if !errors.Is(err, tc.is) {
				t.Errorf("error %v is not %v", err, tc.is)
			}
		})
	}
}

func TestIMEXAndMIG(t *testing.T) {
	testCases := []struct {
		description string
		env         []string
		wantIMEX    []int
		wantAllIMEX bool
		wantMIG     [2]bool
		wantErr     string
	}{
		{description: "channels deduplicated in order", env: []string{"NVIDIA_IMEX_CHANNELS=3, 0,3"}, wantIMEX: []int{3, 0}},
		{description: "all", env: []string{"NVIDIA_IMEX_CHANNELS=all"}, wantAllIMEX: true},
		{description: "none", env: []string{"NVIDIA_IMEX_CHANNELS=none"}},
		{description: "out of range", env: []string{"NVIDIA_IMEX_CHANNELS=2048"}, wantErr: `invalid GPU request: IMEX channel "2048" in NVIDIA_IMEX_CHANNELS="2048": want a number from 0 to 2047, or all`},
		{description: "not a number", env: []string{"NVIDIA_IMEX_CHANNELS=0,x"}, wantErr: `invalid GPU request: IMEX channel "x" in NVIDIA_IMEX_CHANNELS="0,x": want a number from 0 to 2047, or all`},
		{description: "MIG config and monitor", env: []string{"NVIDIA_MIG_CONFIG_DEVICES=all", "NVIDIA_MIG_MONITOR_DEVICES=all"}, wantMIG: [2]bool{true, true}},
		{description: "MIG with a list", env: []string{"NVIDIA_MIG_CONFIG_DEVICES=0"}, wantErr: `invalid GPU request: NVIDIA_MIG_CONFIG_DEVICES="0": only "all" is supported`},
		{description: "MIG monitor with a list", env: []string{"NVIDIA_MIG_MONITOR_DEVICES=0,1"}, wantErr: `invalid GPU request: NVIDIA_MIG_MONITOR_DEVICES="0,1": only "all" is supported`},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			r, err := fromEnv(append([]string{"NVIDIA_VISIBLE_DEVICES=all"}, tc.env...))
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("error = %v\nwant    %s", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(r.IMEXChannels, tc.wantIMEX) || r.AllIMEXChannels != tc.wantAllIMEX || r.MIGConfig != tc.wantMIG[0] || r.MIGMonitor != tc.wantMIG[1] {
				t.Errorf("got imex %v all %v mig %v/%v", r.IMEXChannels, r.AllIMEXChannels, r.MIGConfig, r.MIGMonitor)
			}
		})
	}
}
