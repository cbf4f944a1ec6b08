package request

import (
	"errors"
	"strings"
	"testing"

	"github.com/gpu-runtime/gpu-runtime/pkg/capabilities"
)

// FuzzFromEnv: any container environment either parses into a consistent request or fails
// with ErrInvalid; it never panics. No error is longer than maxMessage, however long the
// values: the values, joined and repeated longer than any message may be, are also tried in
// every variable this package reads.
func FuzzFromEnv(f *testing.F) {
	for _, seed := range [][3]string{
		{"all", "", ""}, {"0,1", "compute,utility", ""}, {"void", "all", "12.0"}, {"none", "graphics,display", ""},
		{"GPU-8f3a,1", " compute , ", ""}, {"", "", "12.4.1"}, {"0,0", "x", ""}, {",,,", "all,bogus", "1"},
		{"MIG-abc,0:1", "ngx", ""}, {"\x00", "\xff", "\n"},
	} {
		f.Add(seed[0], seed[1], seed[2])
	}
	f.Fuzz(func(t *testing.T, visible, caps, cuda string) {
		env := []string{"NVIDIA_VISIBLE_DEVICES=" + visible, "NVIDIA_DRIVER_CAPABILITIES=" + caps, "CUDA_VERSION=" + cuda, "NVIDIA_REQUIRE_X=" + visible}
		v := visible + caps + cuda
		long := strings.Repeat(v, maxMessage/max(len(v), 1)+1) // longer than any message may be
		for _, name := range []string{EnvVisibleDevices, EnvCapabilities, EnvIMEXChannels, EnvMIGConfig, EnvMIGMonitor} {
			// all first: the variable named last replaces it when it is NVIDIA_VISIBLE_DEVICES
			if _, err := fromEnv([]string{"NVIDIA_VISIBLE_DEVICES=all", name + "=" + long}); err != nil && len(err.Error()) > maxMessage {
				t.Fatalf("%s of %d bytes: an error of %d bytes: %.300q…", name, len(long), len(err.Error()), err.Error())
			}
		}
		r, err := fromEnv(env)
		if err != nil && len(err.Error()) > maxMessage {
			t.Fatalf("an error of %d bytes: %.300q…", len(err.Error()), err.Error())
		}
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v is not ErrInvalid", err)
			}
			return
		}
		if r.Mode == DeviceList && len(r.Devices)+len(r.CDIDevices) == 0 { // CDI names alone are a list of devices too
			t.Fatalf("device list without devices for %q", visible)
		}
		seen := map[string]bool{}
		for _, d := range r.Devices {
			if d == "" || d != strings.TrimSpace(d) || seen[d] {
				t.Fatalf("bad device token %q from %q", d, visible)
			}
			seen[d] = true
		}
		if r.IsGPU() {
			if len(r.Capabilities) == 0 {
				t.Fatalf("GPU request without capabilities")
			}
			for c := range r.Capabilities {
				if _, err := capabilities.Parse(string(c)); err != nil {
					t.Fatalf("unknown capability %q in result", c)
				}
			}
		}
	})
}
