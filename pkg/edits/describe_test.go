package edits

import (
	"reflect"
	"testing"
)

func TestDescribe(t *testing.T) {
	e := Edits{
		Env:         []string{"NVIDIA_VISIBLE_DEVICES=void"},
		RemoveHooks: []string{"nvidia-container-runtime-hook"},
		DeviceNodes: []DeviceNode{{Path: "/dev/nvidia0", HostPath: "/d/dev/nvidia0", Type: "c", Major: 195, Minor: 0, FileMode: 0o666, Why: "GPU 0 (GPU-a)"}},
		Mounts:      []Mount{{HostPath: "/drv/usr/bin/nvidia-smi", ContainerPath: "/usr/bin/nvidia-smi", Options: []string{"ro", "bind"}, Why: "utility: binary nvidia-smi"}},
		Hooks:       []Hook{{Stage: "createContainer", Path: "/b/gpu-hook", Args: []string{"gpu-hook", "update-ldcache", "--library", "/l"}, Timeout: 30, Why: "loader cache"}},
	}
	want := []string{
		"remove hook nvidia-container-runtime-hook (any stage) — " + RemovedHookWhy,
		"env NVIDIA_VISIBLE_DEVICES=void",
		"device /dev/nvidia0 c 195:0 mode 0666 uid 0 gid 0 (host /d/dev/nvidia0) — GPU 0 (GPU-a)",
		"cgroup allow c 195:0 rwm — the rule of /dev/nvidia0",
		"mount /usr/bin/nvidia-smi <- /drv/usr/bin/nvidia-smi (ro,bind) — utility: binary nvidia-smi",
		"hook createContainer /b/gpu-hook update-ldcache --library /l (timeout 30s) — loader cache",
	}
	if got := e.Describe(); !reflect.DeepEqual(got, want) {
		t.Errorf("Describe =\n%q\nwant\n%q", got, want)
	}
	// Every line is one edit: a hook without arguments still describes itself.
	if got := (Edits{Hooks: []Hook{{Stage: "prestart", Path: "/x"}}}).Describe(); !reflect.DeepEqual(got, []string{"hook prestart /x"}) {
		t.Errorf("argless hook: %q", got)
	}
}
