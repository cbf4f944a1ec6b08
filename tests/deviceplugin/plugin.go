// Package deviceplugin is a test double of NVIDIA's Kubernetes device plugin
// (github.com/NVIDIA/k8s-device-plugin), for the cluster tests: it registers with the real
// kubelet over the kubelet's device-plugin API (v1beta1), advertises a host's GPUs and MIG
// devices as gpu-ctk's discovery reports them, and answers Allocate as NVIDIA's plugin
// documents for each device-list strategy:
//
//	envvar           NVIDIA_VISIBLE_DEVICES=<uuid>,<uuid>
//	volume-mounts    NVIDIA_VISIBLE_DEVICES=/var/run/nvidia-container-devices, and a mount of
//	                 /dev/null at /var/run/nvidia-container-devices/<uuid> per device
//	cdi-annotations  the annotation cdi.k8s.io/<plugin>_<response id>: nvidia.com/gpu=<uuid>,…
//	cdi-cri          the CRI's CDI devices nvidia.com/gpu=<uuid>, …
//
// and the MIG strategies "none" (every GPU as nvidia.com/gpu) and "mixed" (GPUs not in MIG
// mode as nvidia.com/gpu, MIG devices as nvidia.com/mig-<profile>). Device ids are UUIDs, as
// with NVIDIA's default device-id strategy. It is not a product: no health watching, no
// sharing, no preferred allocation.
package deviceplugin

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/gpu-runtime/gpu-runtime/pkg/discover"
)

// Strategies are the device-list strategies, as NVIDIA's plugin names them.
var Strategies = []string{"envvar", "volume-mounts", "cdi-annotations", "cdi-cri"}

const (
	// VisibleDevices is the variable the envvar and volume-mounts strategies set.
	VisibleDevices = "NVIDIA_VISIBLE_DEVICES"
	// VolumeMountsRoot is where the volume-mounts strategy mounts /dev/null, one file per device.
	VolumeMountsRoot = "/var/run/nvidia-container-devices"
	// CDIKind is the kind of the CDI names the CDI strategies hand out: what gpu-ctk cdi
	// generate writes.
	CDIKind = "nvidia.com/gpu"
	// AnnotationPrefix starts the cdi-annotations strategy's annotation key, followed by the
	// plugin name, "_" and a response id (the CDI library's AnnotationKey form).
	AnnotationPrefix = "cdi.k8s.io/gpu-device-plugin_"
)

// Resource is one extended resource the plugin advertises, and the device ids (UUIDs) it has.
type Resource struct {
	Name    string // nvidia.com/gpu, nvidia.com/mig-1g.10gb
	Devices []string
}

// Resources turns a host's discovery into the resources NVIDIA's plugin advertises under the
// MIG strategy: "none" advertises every GPU whole; "mixed" GPUs not in MIG mode as
// nvidia.com/gpu and each MIG device as nvidia.com/mig-<profile>.
func Resources(d discover.Driver, migStrategy string) ([]Resource, error) {
	gpus := Resource{Name: "nvidia.com/gpu"}
	mig := map[string]*Resource{}
	var names []string
	for _, g := range d.GPUs {
		switch {
		case migStrategy == "none" || !g.MIGCurrent:
			gpus.Devices = append(gpus.Devices, g.UUID)
		case migStrategy == "mixed":
			for _, m := range g.MIGDevices {
				name := "nvidia.com/mig-" + m.Profile
				if mig[name] == nil {
					mig[name] = &Resource{Name: name}
					names = append(names, name)
				}
				mig[name].Devices = append(mig[name].Devices, m.UUID)
			}
		default:
			return nil, fmt.Errorf("MIG strategy %q: this test double knows none and mixed", migStrategy)
		}
	}
	out := []Resource{gpus}
	slices.Sort(names)
	for _, n := range names {
		out = append(out, *mig[n])
	}
	return out, nil
}

// Allocate answers one container's allocation of the device ids under a strategy.
func Allocate(strategy string, ids []string) (*pluginapi.ContainerAllocateResponse, error) {
	r := &pluginapi.ContainerAllocateResponse{}
	switch strategy {
	case "envvar":
		r.Envs = map[string]string{VisibleDevices: strings.Join(ids, ",")}
	case "volume-mounts":
		r.Envs = map[string]string{VisibleDevices: VolumeMountsRoot}
		for _, id := range ids {
			r.Mounts = append(r.Mounts, &pluginapi.Mount{ContainerPath: filepath.Join(VolumeMountsRoot, id), HostPath: "/dev/null", ReadOnly: true})
		}
	case "cdi-annotations":
		b := make([]byte, 16)
		if _, err := rand.Read(b); err != nil {
			return nil, err
		}
		names := make([]string, len(ids))
		for i, id := range ids {
			names[i] = CDIKind + "=" + id
		}
		r.Annotations = map[string]string{AnnotationPrefix + hex.EncodeToString(b): strings.Join(names, ",")}
	case "cdi-cri":
		for _, id := range ids {
			r.CdiDevices = append(r.CdiDevices, &pluginapi.CDIDevice{Name: CDIKind + "=" + id})
		}
	default:
		return nil, fmt.Errorf("device-list strategy %q: want one of %s", strategy, strings.Join(Strategies, ", "))
	}
	return r, nil
}

// Server serves one resource on a socket in the kubelet's device-plugin directory.
type Server struct {
	pluginapi.UnimplementedDevicePluginServer
	Resource Resource
	Strategy string
	Socket   string // its path
	// Listed is closed once ListAndWatch has sent the devices to the kubelet.
	Listed   chan struct{}
	listOnce sync.Once
	grpc     *grpc.Server
}

// GetDevicePluginOptions: no PreStartContainer, no GetPreferredAllocation.
func (s *Server) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

// ListAndWatch sends every device, healthy, once, then waits until the kubelet hangs up.
func (s *Server) ListAndWatch(_ *pluginapi.Empty, stream pluginapi.DevicePlugin_ListAndWatchServer) error {
	resp := &pluginapi.ListAndWatchResponse{}
	for _, id := range s.Resource.Devices {
		resp.Devices = append(resp.Devices, &pluginapi.Device{ID: id, Health: pluginapi.Healthy})
	}
	if err := stream.Send(resp); err != nil {
		return err
	}
	s.listOnce.Do(func() { close(s.Listed) })
	<-stream.Context().Done()
	return nil
}

// Allocate answers each container's request under the server's strategy; an id the plugin
// did not advertise is an error.
func (s *Server) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	out := &pluginapi.AllocateResponse{}
	for _, c := range req.ContainerRequests {
		for _, id := range c.DevicesIds {
			if !slices.Contains(s.Resource.Devices, id) {
				return nil, fmt.Errorf("allocate %s: unknown device %q", s.Resource.Name, id)
			}
		}
		r, err := Allocate(s.Strategy, c.DevicesIds)
		if err != nil {
			return nil, err
		}
		out.ContainerResponses = append(out.ContainerResponses, r)
	}
	return out, nil
}

// Serve listens on the server's socket (replacing a stale one) and serves until Stop.
func (s *Server) Serve() error {
	if err := os.Remove(s.Socket); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	l, err := net.Listen("unix", s.Socket)
	if err != nil {
		return err
	}
	s.Listed = make(chan struct{})
	s.grpc = grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(s.grpc, s)
	go func() { _ = s.grpc.Serve(l) }()
	return nil
}

// Stop stops serving and removes the socket.
func (s *Server) Stop() {
	if s.grpc != nil {
		s.grpc.Stop()
	}
	_ = os.Remove(s.Socket)
}

// Register registers the server with the kubelet at kubeletSocket.
func (s *Server) Register(ctx context.Context, kubeletSocket string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := grpc.NewClient("unix://"+kubeletSocket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version:      pluginapi.Version,
		Endpoint:     filepath.Base(s.Socket),
		ResourceName: s.Resource.Name,
		Options:      &pluginapi.DevicePluginOptions{},
	})
	if err != nil {
		return fmt.Errorf("register %s with the kubelet at %s: %w", s.Resource.Name, kubeletSocket, err)
	}
	return nil
}
