package realgpu

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/gpu-runtime/gpu-runtime/internal/fakehost"
)

// buildProbe compiles gpu-probe and the mock driver library (testdata/mockcuda.c) into a
// temporary directory: dir/gpu-probe, dir/lib/libcuda.so.1 (the mock) and dir/stub/libcuda.so.1
// (the fake host's libcuda, which has no device API).
func buildProbe(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("SKIPPED: gpu-probe's tests need gcc; install it (apt-get install gcc)")
	}
	dir := t.TempDir()
	for _, args := range [][]string{
		{"-O2", "-Wall", "-Wextra", "-Werror", "-o", filepath.Join(dir, "gpu-probe"), "probe/gpu-probe.c", "-ldl"},
		{"-O2", "-Wall", "-Wextra", "-Werror", "-fPIC", "-fvisibility=hidden", "-shared", "-Wl,-soname,libcuda.so.1",
			"-o", filepath.Join(dir, "lib/libcuda.so.1"), "testdata/mockcuda.c"},
	} {
		if err := os.MkdirAll(filepath.Join(dir, "lib"), 0o755); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command("gcc", args...).CombinedOutput(); err != nil {
			t.Fatalf("gcc %q: %v: %s", args, err, out)
		}
	}
	if err := fakehost.BuildCUDALibrary(filepath.Join(dir, "stub/libcuda.so.1"), "libcuda.so.1", 12040); err != nil {
		t.Fatal(err)
	}
	return dir
}

// The probe's timings vary; everything else of its output is fixed.
var probeTimes = regexp.MustCompile(`(ms|_ms)=[0-9]+\.[0-9]{3}`)

func TestProbeOutput(t *testing.T) {
	dir := buildProbe(t)
	lib, stub := filepath.Join(dir, "lib"), filepath.Join(dir, "stub")
	loaded := func(d string) string {
		return `gpu-probe: library=libcuda.so.1 loaded=yes path="` + d + `/libcuda.so.1" file="` + d + `/libcuda.so.1"`
	}
	testCases := []struct {
		description string
		libDir      string // LD_LIBRARY_PATH
		env         []string
		args        []string
		want        []string // every line of stdout, times replaced by ms=T
		wantStatus  int
	}{
		{description: "a GPU", libDir: lib, want: []string{
			loaded(lib),
			"gpu-probe: cuda_driver_version=13.0",
			"gpu-probe: cuInit=0 ms=T",
			"gpu-probe: devices=1",
			`gpu-probe: device=0 name="Mock \"H100\" 80GB" total_mib=81559`,
			"gpu-probe: alloc device=0 bytes=67108864 readback=ok",
			"gpu-probe: result=ok devices=1",
		}},
		{description: "the SMs a context may use (an MPS share of 80 %)", libDir: lib, env: []string{"MOCKCUDA_SMS=105"}, want: []string{
			loaded(lib),
			"gpu-probe: cuda_driver_version=13.0",
			"gpu-probe: cuInit=0 ms=T",
			"gpu-probe: devices=1",
			`gpu-probe: device=0 name="Mock \"H100\" 80GB" total_mib=81559`,
			"gpu-probe: sm_count=105 of=132",
			"gpu-probe: alloc device=0 bytes=67108864 readback=ok",
			"gpu-probe: result=ok devices=1",
		}},
		{description: "two GPUs: both listed, device 0 allocated on", libDir: lib, env: []string{"MOCKCUDA_DEVICES=2"}, want: []string{
			loaded(lib),
			"gpu-probe: cuda_driver_version=13.0",
			"gpu-probe: cuInit=0 ms=T",
			"gpu-probe: devices=2",
			`gpu-probe: device=0 name="Mock \"H100\" 80GB" total_mib=81559`,
			`gpu-probe: device=1 name="Mock B200" total_mib=182272`,
			"gpu-probe: alloc device=0 bytes=67108864 readback=ok",
			"gpu-probe: result=ok devices=2",
		}},
		{description: "cuInit says no device", libDir: lib, env: []string{"MOCKCUDA_INIT=100"}, wantStatus: 2, want: []string{
			loaded(lib),
			"gpu-probe: cuda_driver_version=13.0",
			"gpu-probe: cuInit=100 ms=T",
			"gpu-probe: result=no-device call=cuInit code=100 name=CUDA_ERROR_NO_DEVICE",
		}},
		{description: "zero devices", libDir: lib, env: []string{"MOCKCUDA_DEVICES=0"}, wantStatus: 2, want: []string{
			loaded(lib),
			"gpu-probe: cuda_driver_version=13.0",
			"gpu-probe: cuInit=0 ms=T",
			"gpu-probe: devices=0",
			"gpu-probe: result=no-device call=cuDeviceGetCount code=0 name=CUDA_SUCCESS",
		}},
		{description: "cuInit fails otherwise", libDir: lib, env: []string{"MOCKCUDA_INIT=999"}, wantStatus: 1, want: []string{
			loaded(lib),
			"gpu-probe: cuda_driver_version=13.0",
			"gpu-probe: cuInit=999 ms=T",
			`gpu-probe: result=cuda-error call=cuInit code=999 name=CUDA_ERROR_UNKNOWN message="unknown error"`,
		}},
		{description: "an error the library cannot name", libDir: lib, env: []string{"MOCKCUDA_INIT=304"}, wantStatus: 1, want: []string{
			loaded(lib),
			"gpu-probe: cuda_driver_version=13.0",
			"gpu-probe: cuInit=304 ms=T",
			`gpu-probe: result=cuda-error call=cuInit code=304 name=unknown message="unknown"`,
		}},
		{description: "allocation fails", libDir: lib, env: []string{"MOCKCUDA_ALLOC=2"}, wantStatus: 1, want: []string{
			loaded(lib),
			"gpu-probe: cuda_driver_version=13.0",
			"gpu-probe: cuInit=0 ms=T",
			"gpu-probe: devices=1",
			`gpu-probe: device=0 name="Mock \"H100\" 80GB" total_mib=81559`,
			`gpu-probe: result=cuda-error call=cuMemAlloc_v2 code=2 name=CUDA_ERROR_OUT_OF_MEMORY message="out of memory"`,
		}},
		{description: "memory reads back wrong", libDir: lib, env: []string{"MOCKCUDA_READBACK=wrong"}, wantStatus: 1, want: []string{
			loaded(lib),
			"gpu-probe: cuda_driver_version=13.0",
			"gpu-probe: cuInit=0 ms=T",
			"gpu-probe: devices=1",
			`gpu-probe: device=0 name="Mock \"H100\" 80GB" total_mib=81559`,
			"gpu-probe: alloc device=0 bytes=67108864 readback=wrong",
			`gpu-probe: result=cuda-error call=readback code=0 name=WRONG_DATA message="16777216 of 16777216 words differ"`,
		}},
		{description: "the fake host's libcuda has no device API", libDir: stub, wantStatus: 4, want: []string{
			loaded(stub),
			"gpu-probe: cuda_driver_version=12.4",
			"gpu-probe: result=missing-symbol symbol=cuDeviceGetCount",
		}},
		{description: "no libcuda", libDir: filepath.Join(dir, "empty"), wantStatus: 3, want: []string{
			`gpu-probe: library=libcuda.so.1 loaded=no error="libcuda.so.1: cannot open shared object file: No such file or directory"`,
			"gpu-probe: result=no-libcuda",
		}},
		{description: "NVML", args: []string{"nvml", filepath.Join(lib, "libcuda.so.1")}, want: []string{
			"gpu-probe: nvml dlopen_ms=T init_ms=T shutdown_ms=T shutdown=0",
			"gpu-probe: result=ok",
		}},
		{description: "NVML initialisation fails", args: []string{"nvml", filepath.Join(lib, "libcuda.so.1")}, env: []string{"MOCKCUDA_NVML_INIT=9"}, wantStatus: 1, want: []string{
			`gpu-probe: result=cuda-error call=nvmlInit_v2 code=9 name=NVML message="Driver Not Loaded"`,
		}},
		{description: "NVML library without NVML", args: []string{"nvml", filepath.Join(stub, "libcuda.so.1")}, wantStatus: 4, want: []string{
			"gpu-probe: result=missing-symbol symbol=nvmlInit_v2",
		}},
		{description: "no NVML library", args: []string{"nvml", filepath.Join(dir, "empty/libnvidia-ml.so.1")}, wantStatus: 3, want: []string{
			`gpu-probe: library=` + dir + `/empty/libnvidia-ml.so.1 loaded=no error="` + dir + `/empty/libnvidia-ml.so.1: cannot open shared object file: No such file or directory"`,
			"gpu-probe: result=no-library",
		}},
	}
	out, _ := exec.Command("/sbin/ldconfig", "-p").Output()
	hostHasCUDA := strings.Contains(string(out), "libcuda.so.1 ")
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			if tc.description == "no libcuda" && hostHasCUDA {
				t.Skip("SKIPPED: this machine's loader cache has a libcuda.so.1, which the probe would load")
			}
			cmd := exec.Command(filepath.Join(dir, "gpu-probe"), tc.args...)
			cmd.Env = append([]string{"LD_LIBRARY_PATH=" + tc.libDir}, tc.env...)
			var stderr strings.Builder
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			status := 0
			if exitErr := (*exec.ExitError)(nil); errors.As(err, &exitErr) {
				status = exitErr.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			got := strings.Split(strings.TrimSuffix(probeTimes.ReplaceAllString(string(out), "${1}=T"), "\n"), "\n")
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") || status != tc.wantStatus {
				t.Errorf("gpu-probe %q exited %d with:\n%s\nwant %d with:\n%s\nstderr: %s",
					tc.args, status, strings.Join(got, "\n"), tc.wantStatus, strings.Join(tc.want, "\n"), stderr.String())
			}
		})
	}
}

func TestProbeUsage(t *testing.T) {
	dir := buildProbe(t)
	cmd := exec.Command(filepath.Join(dir, "gpu-probe"), "--help")
	out, err := cmd.CombinedOutput()
	var exitErr *exec.ExitError
	if !errors.As(err, &exitErr) || exitErr.ExitCode() != 64 {
		t.Fatalf("gpu-probe --help: %v, want exit status 64", err)
	}
	want := "usage: gpu-probe               probe libcuda.so.1 and device 0\n" +
		"       gpu-probe nvml LIBRARY  time NVML initialisation\n" +
		"exit status: 0 ok, 1 CUDA or NVML error, 2 no device, 3 no library, 4 missing symbol\n"
	if string(out) != want {
		t.Errorf("usage:\n%s\nwant:\n%s", out, want)
	}
}
