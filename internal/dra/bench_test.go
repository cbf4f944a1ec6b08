package dra

import (
	"bytes"
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
)

// BenchmarkPrepare is prepare's own time for a one-GPU claim on the fake node, host view
// (from the discovery cache), spec, checkpoint and all, and unprepare's after it.
func BenchmarkPrepare(b *testing.B) {
	f := newFixture(b)
	d := f.driver(b)
	gpu0 := strings.ToLower(f.fh.Options.GPUs[0].UUID)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c := claim(fmt.Sprintf("uid-%d", i), "bench", []string{gpu0})
		if res, err := d.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{c}); err != nil || res[c.UID].Err != nil {
			b.Fatalf("prepare: %v %+v", err, res)
		}
		if _, err := d.UnprepareResourceClaims(context.Background(), []kubeletplugin.NamespacedObject{{UID: types.UID(c.UID)}}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkResources is one poll of the plugin: the host view (health file and discovery
// fingerprint read; the cache answers) and the devices to publish.
func BenchmarkResources(b *testing.B) {
	f := newFixture(b)
	d := f.driver(b)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, _, err := d.Resources(); err != nil {
			b.Fatal(err)
		}
	}
}

// TestPrepareLogsItsTime: the "claim prepared" line carries the prepare call's duration,
// which bench/cluster reads from the plugin's log.
func TestPrepareLogsItsTime(t *testing.T) {
	f := newFixture(t)
	d := f.driver(t)
	var buf bytes.Buffer
	log := logrus.New()
	log.SetOutput(&buf)
	d.o.Log = log
	c := claim("uid-took", "took", []string{strings.ToLower(f.fh.Options.GPUs[0].UUID)})
	if res, err := d.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{c}); err != nil || res[c.UID].Err != nil {
		t.Fatalf("prepare: %v %+v", err, res)
	}
	m := regexp.MustCompile(`msg="claim prepared" .*took=([0-9.]+(µs|ms|s))`).FindStringSubmatch(buf.String())
	if m == nil {
		t.Fatalf("no took=<duration> in the prepare's log line:\n%s", buf.String())
	}
	if took, err := time.ParseDuration(m[1]); err != nil || took <= 0 {
		t.Errorf("took=%s: %v", m[1], err)
	}
}
