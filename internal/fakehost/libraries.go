package fakehost

import (
	"path"
	"strings"
)

// Capabilities of driver libraries, as NVIDIA_DRIVER_CAPABILITIES names them.
const (
	CapabilityUtility  = "utility"
	CapabilityCompute  = "compute"
	CapabilityVideo    = "video"
	CapabilityGraphics = "graphics"
	CapabilityNGX      = "ngx"
)

// LibDirRel is the library directory of a fake host of the default layout, relative to its
// driver root (see Layout for the other).
const LibDirRel = "usr/lib/x86_64-linux-gnu"

// Layout says where a fake host keeps its driver libraries and binaries.
type Layout string

// The layouts of a fake host's driver root.
const (
	// LayoutDistribution, the default, is where a distribution's driver packages install:
	// libraries in usr/lib/x86_64-linux-gnu (LibDirRel), binaries in usr/bin (BinDirRel),
	// and an etc/ld.so.cache that lists the libraries.
	LayoutDistribution Layout = ""
	// LayoutLib64 is a self-contained driver folder: libraries in lib64 (vdpau in
	// lib64/vdpau), binaries in bin, the libraries' SONAME links made, and no etc/ld.so.conf
	// or etc/ld.so.cache. GKE and COS nodes install the driver so, in
	// /home/kubernetes/bin/nvidia, and GPU VMs mount it so at /usr/local/nvidia.
	LayoutLib64 Layout = "lib64"
)

// LibDir is the layout's library directory, relative to the driver root.
func (l Layout) LibDir() string {
	if l == LayoutLib64 {
		return "lib64"
	}
	return LibDirRel
}

// BinDir is the layout's binary directory, relative to the driver root.
func (l Layout) BinDir() string {
	if l == LayoutLib64 {
		return "bin"
	}
	return BinDirRel
}

// Path maps a path relative to the driver root of the default layout — a Library's RelPath,
// an entry of Binaries — to where the layout keeps that file; other paths are unchanged.
func (l Layout) Path(rel string) string {
	for _, dir := range []string{LibDirRel, BinDirRel} {
		if rest, ok := strings.CutPrefix(rel, dir+"/"); ok {
			if dir == LibDirRel {
				return path.Join(l.LibDir(), rest)
			}
			return path.Join(l.BinDir(), rest)
		}
	}
	return rel
}

func (l Layout) valid() bool { return l == LayoutDistribution || l == LayoutLib64 }

// DecoyDriverVersion is the version of the leftover libcuda of an older driver that Build places
// next to the real one.
const DecoyDriverVersion = "470.57.02"

// Library is one shared library of the fake driver.
type Library struct {
	Prefix string // file name up to ".so", e.g. "libcuda"
	SONAME string // DT_SONAME, e.g. "libcuda.so.1"
	// RelPath is the path relative to the driver root in the default layout, e.g.
	// "usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15"; Layout.Path maps it to another.
	RelPath    string
	Capability string // one of the Capability constants; empty for decoys
}

// fullVersion marks a library whose real SONAME is its full file name.
const fullVersion = ""

// driverLibraries lists the fake driver's libraries: prefix, SONAME suffix (fullVersion for the
// full driver version), capability and sub-directory of the library directory.
var driverLibraries = []struct {
	prefix, sonameSuffix, capability, subdir string
}{
	{"libnvidia-ml", "1", CapabilityUtility, ""},
	{"libnvidia-cfg", "1", CapabilityUtility, ""},
	{"libnvidia-nscq", "2", CapabilityUtility, ""},

	{"libcuda", "1", CapabilityCompute, ""},
	{"libcudadebugger", "1", CapabilityCompute, ""},
	{"libnvidia-opencl", "1", CapabilityCompute, ""},
	{"libnvidia-gpucomp", fullVersion, CapabilityCompute, ""},
	{"libnvidia-ptxjitcompiler", "1", CapabilityCompute, ""},
	{"libnvidia-allocator", "1", CapabilityCompute, ""},
	{"libnvidia-nvvm", "4", CapabilityCompute, ""},
	{"libnvidia-pkcs11", fullVersion, CapabilityCompute, ""},
	{"libnvidia-pkcs11-openssl3", fullVersion, CapabilityCompute, ""},

	{"libnvidia-encode", "1", CapabilityVideo, ""},
	{"libnvidia-opticalflow", "1", CapabilityVideo, ""},
	{"libnvcuvid", "1", CapabilityVideo, ""},
	{"libvdpau_nvidia", "1", CapabilityVideo, "vdpau"},

	{"libnvidia-eglcore", fullVersion, CapabilityGraphics, ""},
	{"libnvidia-glcore", fullVersion, CapabilityGraphics, ""},
	{"libnvidia-tls", fullVersion, CapabilityGraphics, ""},
	{"libnvidia-glsi", fullVersion, CapabilityGraphics, ""},
	{"libnvidia-fbc", "1", CapabilityGraphics, ""},
	{"libnvidia-rtcore", fullVersion, CapabilityGraphics, ""},
	{"libnvoptix", "1", CapabilityGraphics, ""},
	{"libGLX_nvidia", "0", CapabilityGraphics, ""},
	{"libEGL_nvidia", "0", CapabilityGraphics, ""},
	{"libGLESv2_nvidia", "2", CapabilityGraphics, ""},
	{"libGLESv1_CM_nvidia", "1", CapabilityGraphics, ""},
	{"libnvidia-glvkspirv", fullVersion, CapabilityGraphics, ""},
	{"libnvidia-cbl", fullVersion, CapabilityGraphics, ""},

	{"libnvidia-ngx", "1", CapabilityNGX, ""},
}

// Libraries returns the driver libraries a fake host of the given driver version holds, with
// their real SONAMEs. The fake NVML is the "libnvidia-ml" entry and the fake libcuda the
// "libcuda" entry; the others are empty stubs. Decoys are not included.
func Libraries(driverVersion string) []Library {
	libs := make([]Library, 0, len(driverLibraries))
	for _, l := range driverLibraries {
		file := l.prefix + ".so." + driverVersion
		soname := file
		if l.sonameSuffix != fullVersion {
			soname = l.prefix + ".so." + l.sonameSuffix
		}
		libs = append(libs, Library{
			Prefix:     l.prefix,
			SONAME:     soname,
			RelPath:    path.Join(LibDirRel, l.subdir, file),
			Capability: l.capability,
		})
	}
	return libs
}

// Decoys returns the libraries a fake host of the given driver version holds that are not part
// of its driver and must never be injected: an unrelated "libfoo.so.1.2.3" and, when
// driverVersion is newer than DecoyDriverVersion, an older driver's leftover
// "libcuda.so.470.57.02" (SONAME libcuda.so.1). The leftover is omitted otherwise so that
// ldconfig still points libcuda.so.1 at the host's own libcuda.
func Decoys(driverVersion string) []Library {
	decoys := []Library{{
		Prefix:  "libfoo",
		SONAME:  "libfoo.so.1",
		RelPath: path.Join(LibDirRel, "libfoo.so.1.2.3"),
	}}
	if compareVersions(driverVersion, DecoyDriverVersion) > 0 {
		decoys = append(decoys, Library{
			Prefix:  "libcuda",
			SONAME:  "libcuda.so.1",
			RelPath: path.Join(LibDirRel, "libcuda.so."+DecoyDriverVersion),
		})
	}
	return decoys
}

// compareVersions compares dotted numeric versions field by field.
func compareVersions(a, b string) int {
	as, bs := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < len(as) || i < len(bs); i++ {
		var x, y int
		if i < len(as) {
			x = atoi(as[i])
		}
		if i < len(bs) {
			y = atoi(bs[i])
		}
		switch {
		case x < y:
			return -1
		case x > y:
			return 1
		}
	}
	return 0
}

// atoi parses a run of decimal digits, ignoring anything after them.
func atoi(s string) int {
	n := 0
	for _, c := range s {
		if c < '0' || c > '9' {
			break
		}
		n = n*10 + int(c-'0')
	}
	return n
}
