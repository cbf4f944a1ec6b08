package capabilities

import (
	"path"
	"slices"
)

// Files names the driver files a capability brings, injected when present. Libraries are
// SONAME prefixes ("libcuda"): the file is "<prefix>.so.<driver version>". Binaries are looked
// up in the driver's binary directories; Sockets and Configs are paths in the driver root.
type Files struct {
	Libraries []string
	Binaries  []string
	Sockets   []string
	Configs   []string
	Required  []string // the library prefixes whose absence is an error, not a skipped file
}

// FilesOf returns what capability c injects. Compat32 and Display have no files of their own:
// compat32 selects the 32-bit variants of the other sets, display implies graphics (see Set.Has).
func FilesOf(c Capability) Files {
	for _, e := range table {
		if e.capability == c {
			return e.files
		}
	}
	return Files{}
}

// table is a list, not a map: a composite literal of constants is laid out by the linker, while a
// map would be built by init code in every gpu-runtime process, start and delete included.
var table = [...]struct {
	capability Capability
	files      Files
}{
	{Utility, Files{
		Libraries: []string{"libnvidia-ml", "libnvidia-cfg", "libnvidia-nscq"},
		Binaries:  []string{"nvidia-smi", "nvidia-debugdump", "nvidia-persistenced", "nv-fabricmanager"},
		// Under both var/run and run: a root without the var/run -> ../run link (a driver
		// container's) has them under run/ only. The first found of one socket wins.
		Sockets: []string{
			"/var/run/nvidia-persistenced/socket", "/run/nvidia-persistenced/socket",
			"/var/run/nvidia-fabricmanager/socket", "/run/nvidia-fabricmanager/socket",
		},
		Required: []string{"libnvidia-ml"},
	}},
	{Compute, Files{
		Libraries: []string{
			"libcuda", "libcudadebugger", "libnvidia-opencl", "libnvidia-gpucomp",
			"libnvidia-ptxjitcompiler", "libnvidia-fatbinaryloader", "libnvidia-allocator",
			"libnvidia-compiler", "libnvidia-pkcs11", "libnvidia-pkcs11-openssl3",
			"libnvidia-nvvm", "libnvidia-tileiras",
		},
		Binaries: []string{"nvidia-cuda-mps-control", "nvidia-cuda-mps-server"},
		Configs:  []string{"/etc/OpenCL/vendors/nvidia.icd"},
		Required: []string{"libcuda"},
	}},
	{Video, Files{
		Libraries: []string{"libvdpau_nvidia", "libnvidia-encode", "libnvidia-opticalflow", "libnvcuvid"},
	}},
	{Graphics, Files{
		Libraries: []string{
			"libnvidia-eglcore", "libnvidia-glcore", "libnvidia-tls", "libnvidia-glsi",
			"libnvidia-fbc", "libnvidia-ifr", "libnvidia-rtcore", "libnvoptix",
			"libGLX_nvidia", "libEGL_nvidia", "libGLESv2_nvidia", "libGLESv1_CM_nvidia",
			"libnvidia-glvkspirv", "libnvidia-cbl",
		},
		Configs: []string{
			"/usr/share/vulkan/icd.d/nvidia_icd.json",
			"/etc/vulkan/icd.d/nvidia_icd.json",
			"/usr/share/vulkan/implicit_layer.d/nvidia_layers.json",
			"/etc/vulkan/implicit_layer.d/nvidia_layers.json",
			"/usr/share/glvnd/egl_vendor.d/10_nvidia.json",
			"/usr/share/egl/egl_external_platform.d/15_nvidia_gbm.json",
			"/usr/share/egl/egl_external_platform.d/10_nvidia_wayland.json",
		},
	}},
	{NGX, Files{
		Libraries: []string{"libnvidia-ngx"},
	}},
}

// FileDirs returns the directory of every socket and config file, in the order of All,
// repeats included: what discovery's cache must watch.
func FileDirs() []string {
	var out []string
	for _, c := range All {
		files := FilesOf(c)
		for _, p := range slices.Concat(files.Sockets, files.Configs) {
			out = append(out, path.Dir(p))
		}
	}
	return out
}

// LibraryPrefixes returns every library prefix in the table, for discovery.
func LibraryPrefixes() []string {
	var out []string
	for _, c := range All {
		out = append(out, FilesOf(c).Libraries...)
	}
	return out
}
