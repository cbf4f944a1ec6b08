package plan

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/gpu-runtime/gpu-runtime/pkg/discover"
)

func TestClaimDevices(t *testing.T) {
	since := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	gpus := []discover.GPU{
		{Index: 0, Minor: 0, UUID: "GPU-0000"},
		{Index: 1, Minor: 1, UUID: "GPU-1111", Health: &discover.Health{Signal: discover.HealthRecorded, Reason: "Xid 79: GPU has fallen off the bus", Xid: 79, Since: since, Source: "/run/gpu-runtime/health.csv"}},
		{Index: 2, Minor: 2, UUID: "GPU-2222", MIGCapable: true, MIGCurrent: true, MIGPending: true,
			MIGDevices: []discover.MIGDevice{{Index: 0, UUID: "MIG-aaaa", GI: 1, CI: 0, Profile: "3g.40gb"}}},
	}
	host := Host{Driver: discover.Driver{GPUs: gpus, Excluded: []discover.ExcludedGPU{{UUID: "GPU-xxxx", BusID: "00000000:47:00.0"}}}}
	const claim = "ResourceClaim default/gpu-a"
	testCases := []struct {
		description string
		uuids       []string
		want        []string // the UUIDs resolved
		wantErr     string
		wantIs      error
	}{
		{description: "a GPU and a MIG device", uuids: []string{"GPU-0000", "MIG-aaaa"}, want: []string{"GPU-0000", "MIG-aaaa"}},
		{description: "a GPU that went unhealthy after allocation", uuids: []string{"GPU-1111"}, wantIs: ErrUnhealthy,
			wantErr: "unhealthy device: ResourceClaim default/gpu-a was allocated GPU 1 (GPU-1111): Xid 79: GPU has fallen off the bus since 2026-11-27T10:00:00Z (recorded in /run/gpu-runtime/health.csv); it became unhealthy after the allocation: delete the pod so that the claim is allocated another device, or when it is repaired, or the record was a false alarm, return it to service: gpu-ctk health clear GPU-1111"},
		{description: "a MIG device gone since (MIG reconfigured)", uuids: []string{"MIG-bbbb"}, wantIs: ErrUnknownDevice,
			wantErr: "unknown device: ResourceClaim default/gpu-a was allocated device MIG-bbbb, which this node no longer has (its MIG devices were reconfigured, or the GPU is gone, since the scheduler allocated it): delete the pod so that the claim is allocated again; this node has 0 (GPU-0000), 1 (GPU-1111), 2:0 (MIG-aaaa, 3g.40gb)"},
		{description: "a GPU now in MIG mode", uuids: []string{"GPU-2222"}, wantIs: ErrMIGEnabled,
			wantErr: "GPU in MIG mode requested whole: ResourceClaim default/gpu-a was allocated GPU 2 (GPU-2222), which is now in MIG mode: it cannot be given whole; delete the pod so that the claim is allocated again (the node publishes its MIG devices instead)"},
		{description: "a GPU the driver now excludes", uuids: []string{"GPU-xxxx"}, wantIs: ErrUnhealthy,
			wantErr: "unhealthy device: ResourceClaim default/gpu-a was allocated GPU GPU-xxxx, which the driver now excludes (NVreg_ExcludedGpus) at 0000:47:00.0: delete the pod so that the claim is allocated another device, or remove the GPU from NVreg_ExcludedGpus and reload the driver"},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			got, err := ClaimDevices(claim, tc.uuids, host)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr || !errors.Is(err, tc.wantIs) {
					t.Fatalf("error:\n got %v\nwant %s", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var uuids []string
			for _, d := range got {
				uuids = append(uuids, d.UUID)
			}
			if !slices.Equal(uuids, tc.want) {
				t.Errorf("devices %v, want %v", uuids, tc.want)
			}
		})
	}
}
