package request

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"tags.cncf.io/container-device-interface/pkg/parser"
)

// maxMessage bounds every error and warning this package returns, whatever the container
// sent: a message quotes at most a list of five values and one variable (internal/quote), each
// at most 256 bytes, which quoting can make four characters each (\x00), plus its own words.
const maxMessage = 8 << 10

// cutQuoted is how a message shows a value longer than 256 bytes: its first 256 bytes quoted,
// then its length.
func cutQuoted(s string) string {
	return strconv.Quote(s[:256]) + fmt.Sprintf("… (%d bytes)", len(s))
}

// TestMessagesBounded: a value of megabytes in any request channel (environment variable,
// volume mount, annotation) is quoted cut in the error or warning that names it; no message
// is longer than maxMessage.
func TestMessagesBounded(t *testing.T) {
	const mb = 1 << 20
	xs := strings.Repeat("x", 2*mb)
	zeros := strings.Repeat("0,", mb/2)
	badName := "nvidia.com/gpu=" + strings.Repeat("!", mb)
	_, _, _, parserErr := parser.ParseQualifiedName(badName)
	parserText := parserErr.Error()
	parserCut := parserText[:256] + fmt.Sprintf("… (%d bytes)", len(parserText))
	privileged := &specs.LinuxCapabilities{Bounding: []string{"CAP_SYS_ADMIN"}}
	lenient := Policy{AcceptEnvWhenUnprivileged: true, AcceptVolumeMounts: true}
	strict := Policy{AcceptVolumeMounts: true}
	ignored := " ignored: the container is unprivileged and request.accept-envvar-when-unprivileged is false"

	testCases := []struct {
		description string
		policy      Policy
		caps        *specs.LinuxCapabilities
		env         []string
		mounts      []specs.Mount
		annotations map[string]string
		wantErr     string
		wantWarning string
	}{
		{description: "NVIDIA_IMEX_CHANNELS", policy: lenient, env: []string{"NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_IMEX_CHANNELS=0," + xs},
			wantErr: "invalid GPU request: IMEX channel " + cutQuoted(xs) + " in NVIDIA_IMEX_CHANNELS=" + cutQuoted("0,"+xs) + ": want a number from 0 to 2047, or all"},
		{description: "NVIDIA_MIG_CONFIG_DEVICES", policy: lenient, caps: privileged, env: []string{"NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_MIG_CONFIG_DEVICES=" + zeros},
			wantErr: "invalid GPU request: NVIDIA_MIG_CONFIG_DEVICES=" + cutQuoted(strings.TrimSpace(zeros)) + `: only "all" is supported`},
		{description: "NVIDIA_MIG_MONITOR_DEVICES", policy: lenient, caps: privileged, env: []string{"NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_MIG_MONITOR_DEVICES=" + zeros},
			wantErr: "invalid GPU request: NVIDIA_MIG_MONITOR_DEVICES=" + cutQuoted(zeros) + `: only "all" is supported`},
		{description: "a malformed CDI name in NVIDIA_VISIBLE_DEVICES", policy: lenient, env: []string{"NVIDIA_VISIBLE_DEVICES=0," + badName},
			wantErr: "invalid GPU request: " + cutQuoted(badName) + " in NVIDIA_VISIBLE_DEVICES is not a CDI device name (vendor.com/class=name): " + parserCut},
		{description: "NVIDIA_VISIBLE_DEVICES listing a device twice", policy: lenient, env: []string{"NVIDIA_VISIBLE_DEVICES=" + zeros},
			wantErr: `invalid GPU request: device "0" is listed twice in NVIDIA_VISIBLE_DEVICES=` + cutQuoted(zeros)},
		{description: "NVIDIA_VISIBLE_DEVICES of an unprivileged container", policy: strict, env: []string{"NVIDIA_VISIBLE_DEVICES=" + zeros},
			wantWarning: "NVIDIA_VISIBLE_DEVICES=" + cutQuoted(zeros) + ignored + "; no GPU injected"},
		{description: "NVIDIA_DRIVER_CAPABILITIES", policy: lenient, env: []string{"NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_DRIVER_CAPABILITIES=" + xs},
			wantErr: "invalid GPU request: unknown driver capability " + cutQuoted(xs) + " in NVIDIA_DRIVER_CAPABILITIES=" + cutQuoted(xs) + ": allowed are all, compute, compat32, display, graphics, ngx, utility, video"},
		{description: "NVIDIA_MPS_SHARE of an unprivileged container", policy: strict, env: []string{"NVIDIA_MPS_SHARE=" + xs},
			wantWarning: "NVIDIA_MPS_SHARE=" + cutQuoted(xs) + ignored + "; no GPU injected"},
		{description: "a malformed CDI name by volume mount", policy: strict, mounts: []specs.Mount{devMount("cdi/" + badName)},
			wantErr: "invalid GPU request: volume mount " + cutQuoted(DeviceListMountDir+"/cdi/"+badName) + ": " + cutQuoted(badName) + " is not a CDI device name (vendor.com/class=name): " + parserCut},
		{description: "a volume mount naming no device", policy: strict, mounts: []specs.Mount{devMount(xs + "/y")},
			wantErr: "invalid GPU request: volume mount " + cutQuoted(DeviceListMountDir+"/"+xs+"/y") + " does not name one device"},
		{description: "a volume mount naming no MPS share", policy: strict, mounts: []specs.Mount{devMount("mps/" + xs + "/y")},
			wantErr: "invalid GPU request: volume mount " + cutQuoted(MPSMountDir+"/"+xs+"/y") + " does not name one MPS share"},
		{description: "volume mounts naming two MPS shares", policy: strict, mounts: []specs.Mount{devMount("mps/a" + xs), devMount("mps/b" + xs)},
			wantErr: "invalid GPU request: volume mounts name two MPS shares, " + cutQuoted("a"+xs) + " and " + cutQuoted("b"+xs) + ": a container joins one"},
		{description: "CDI annotations of an unprivileged container", policy: strict, annotations: map[string]string{CDIAnnotationPrefix + xs: xs},
			wantWarning: "CDI annotations " + cutQuoted(CDIAnnotationPrefix+xs) + ignored},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			spec := &specs.Spec{Process: &specs.Process{Env: tc.env, Capabilities: tc.caps}, Mounts: tc.mounts, Annotations: tc.annotations}
			_, warnings, err := FromSpec(spec, tc.policy)
			for _, w := range warnings {
				if len(w) > maxMessage {
					t.Errorf("a warning of %d bytes: %.300q…", len(w), w)
				}
			}
			if err != nil && len(err.Error()) > maxMessage {
				t.Fatalf("an error of %d bytes: %.300q…", len(err.Error()), err.Error())
			}
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr || !errors.Is(err, ErrInvalid) {
					t.Fatalf("error = %v\nwant    %s", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(warnings) != 1 || warnings[0] != tc.wantWarning {
				t.Errorf("warnings = %q\nwant       %q", warnings, tc.wantWarning)
			}
		})
	}
}
