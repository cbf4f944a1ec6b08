package plan

import (
	"errors"
	"fmt"
	"strings"
)

// ClaimDevices resolves the devices the Kubernetes scheduler allocated to a ResourceClaim —
// a request channel of its own, beside the container's environment and CDI names — by the
// UUIDs gpu-kubelet-plugin published: each must still exist on the host, be healthy and, for
// a whole GPU, not be in MIG mode. claim names the claim in messages ("ResourceClaim
// default/gpu-abc"). Every problem is reported at once.
func ClaimDevices(claim string, uuids []string, host Host) ([]Device, error) {
	var out []Device
	var errs []error
	for _, uuid := range uuids {
		d, err := resolveToken(uuid, host.Driver.GPUs)
		where, excluded := excludedUUID(uuid, host)
		switch {
		case errors.Is(err, ErrUnknownDevice) && excluded:
			errs = append(errs, fmt.Errorf("%w: %s was allocated GPU %s, which the driver now excludes (NVreg_ExcludedGpus)%s: delete the pod so that the claim is allocated another device, or remove the GPU from NVreg_ExcludedGpus and reload the driver",
				ErrUnhealthy, claim, uuid, where))
			continue
		case errors.Is(err, ErrUnknownDevice):
			errs = append(errs, fmt.Errorf("%w: %s was allocated device %s, which this node no longer has (its MIG devices were reconfigured, or the GPU is gone, since the scheduler allocated it): delete the pod so that the claim is allocated again; %s",
				ErrUnknownDevice, claim, uuid, claimHave(host)))
			continue
		case err != nil:
			errs = append(errs, fmt.Errorf("%s: device %s: %w", claim, uuid, err))
			continue
		}
		if d.GPU.MIGEnabled() && !d.IsMIG() {
			errs = append(errs, fmt.Errorf("%w: %s was allocated GPU %s, which is now in MIG mode: it cannot be given whole; delete the pod so that the claim is allocated again (the node publishes its MIG devices instead)",
				ErrMIGEnabled, claim, d))
			continue
		}
		if d.Health() != nil {
			text, fix := healthText(d)
			errs = append(errs, fmt.Errorf("%w: %s was allocated %s; it became unhealthy after the allocation: delete the pod so that the claim is allocated another device, or %s",
				ErrUnhealthy, claim, text, fix))
			continue
		}
		out = append(out, d)
	}
	return out, errors.Join(errs...)
}

// excludedUUID says whether uuid names a GPU the driver excludes, and where (" at <bus>").
func excludedUUID(uuid string, host Host) (string, bool) {
	for _, x := range host.Driver.Excluded {
		if strings.EqualFold(x.UUID, uuid) {
			return x.Where(), true
		}
	}
	return "", false
}

// claimHave lists the devices a claim can be given on host: the GPUs and MIG devices.
func claimHave(host Host) string {
	var parts []string
	for _, d := range Devices(host.Driver.GPUs) {
		parts = append(parts, d.String())
	}
	if len(parts) == 0 {
		return "this node has no GPUs"
	}
	return "this node has " + strings.Join(parts, ", ")
}
