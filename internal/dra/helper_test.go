package dra

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// TestRunWithKubeletPlugin starts the real kubeletplugin helper against client-go's fake
// clientset and a temporary kubelet directory: the registration and DRA sockets appear, the
// node's devices are published as a ResourceSlice, a health mark taints a device and a clear
// lifts the taint in the same run, and stopping (what SIGTERM does in main) removes the
// sockets.
func TestRunWithKubeletPlugin(t *testing.T) {
	f := newFixture(t)
	d := f.driver(t)
	client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a", UID: "node-a-uid"}})
	kubeletDir, err := os.MkdirTemp("", "kubelet") // short: a socket path holds at most 107 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(kubeletDir) })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- d.Run(ctx, RunOptions{KubeClient: client, KubeletDir: kubeletDir, Poll: 100 * time.Millisecond})
	}()

	sockets := []string{filepath.Join(kubeletDir, "plugins_registry", DriverName+"-reg.sock"), filepath.Join(kubeletDir, "plugins", DriverName, "dra.sock")}
	waitFor(t, "the kubelet sockets", func() (bool, string) {
		for _, s := range sockets {
			if fi, err := os.Stat(s); err != nil || fi.Mode()&os.ModeSocket == 0 {
				return false, s + " missing"
			}
		}
		return true, ""
	})
	gpu1 := strings.ToLower(f.fh.Options.GPUs[1].UUID)
	slice := func() (*resourceapi.ResourceSlice, string) {
		list, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
		if err != nil || len(list.Items) != 1 {
			return nil, "slices: " + describeSlices(list, err)
		}
		return &list.Items[0], ""
	}
	waitFor(t, "the node's ResourceSlice", func() (bool, string) {
		s, why := slice()
		if s == nil {
			return false, why
		}
		if s.Spec.Driver != DriverName || s.Spec.NodeName == nil || *s.Spec.NodeName != "node-a" || s.Spec.Pool.Name != "node-a" || len(s.Spec.Devices) != 4 {
			return false, describeSlices(&resourceapi.ResourceSliceList{Items: []resourceapi.ResourceSlice{*s}}, nil)
		}
		return true, ""
	})
	taintOf := func() (bool, string) {
		s, why := slice()
		if s == nil {
			return false, why
		}
		for _, dev := range s.Spec.Devices {
			if dev.Name == gpu1 {
				return len(dev.Taints) == 1 && dev.Taints[0].Value == "xid-79" && dev.Taints[0].Effect == resourceapi.DeviceTaintEffectNoSchedule, ""
			}
		}
		return false, gpu1 + " not published"
	}
	f.mark(t, f.fh.Options.GPUs[1].UUID, "Xid 79: GPU has fallen off the bus", 79)
	waitFor(t, "the taint of a marked GPU", taintOf)
	f.mark(t, f.fh.Options.GPUs[1].UUID, "", 0)
	waitFor(t, "the taint lifted by a clear", func() (bool, string) { ok, why := taintOf(); return !ok && why == "", why })

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return 30s after its context was cancelled")
	}
	for _, s := range sockets {
		if _, err := os.Lstat(s); err == nil {
			t.Errorf("%s left after stopping", s)
		}
	}
}

// waitFor polls cond for up to 20 seconds.
func waitFor(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	var why string
	for time.Now().Before(deadline) {
		var ok bool
		if ok, why = cond(); ok {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s: not within 20s (%s)", what, why)
}

func describeSlices(list *resourceapi.ResourceSliceList, err error) string {
	if err != nil {
		return err.Error()
	}
	var parts []string
	for _, s := range list.Items {
		node := ""
		if s.Spec.NodeName != nil {
			node = *s.Spec.NodeName
		}
		parts = append(parts, s.Name+" driver "+s.Spec.Driver+" node "+node+" devices "+strings.Repeat("*", len(s.Spec.Devices)))
	}
	return strings.Join(parts, "; ")
}
