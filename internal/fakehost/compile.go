package fakehost

import (
	"bytes"
	"crypto/sha256"
	_ "embed" // for the C sources
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
)

// The C sources live in csrc/ because the go command treats .c files next to Go files as cgo
// sources, which would compile the fake NVML into this package.
var (
	//go:embed csrc/stub.c
	stubSource []byte
	//go:embed csrc/fakecuda.c
	cudaSource []byte
	//go:embed csrc/fakenvml.c
	nvmlSource []byte
	//go:embed csrc/fakenvml.h
	nvmlHeader []byte
	//go:embed csrc/fakemps.c
	mpsSource []byte
)

// withCFlags returns the flags used for every C file followed by extra: only symbols marked
// visible are exported.
func withCFlags(extra ...string) []string {
	return append([]string{"-O2", "-fPIC", "-fvisibility=hidden", "-Wall", "-Wextra"}, extra...)
}

// artifact is one compiled file, built at most once per process.
type artifact struct {
	once sync.Once
	data []byte
	err  error
}

// artifacts caches compiled objects and libraries in memory, by a key naming their inputs, so
// that building many hosts in one process runs gcc once per distinct library.
var artifacts struct {
	sync.Mutex
	m map[string]*artifact
}

// cached returns the bytes build produces for key, calling build only the first time.
func cached(key string, build func() ([]byte, error)) ([]byte, error) {
	artifacts.Lock()
	if artifacts.m == nil {
		artifacts.m = make(map[string]*artifact)
	}
	a, ok := artifacts.m[key]
	if !ok {
		a = &artifact{}
		artifacts.m[key] = a
	}
	artifacts.Unlock()
	a.once.Do(func() { a.data, a.err = build() })
	return a.data, a.err
}

// compiler is the C compiler for a Go architecture name ("" or runtime.GOARCH: this
// machine's) and the Debian packages that provide it and the target's C library.
func compiler(arch string) (gcc, packages string, err error) {
	if arch == "" || arch == runtime.GOARCH {
		return "gcc", "gcc libc6-dev", nil
	}
	switch arch {
	case "arm64":
		return "aarch64-linux-gnu-gcc", "gcc-aarch64-linux-gnu libc6-dev-arm64-cross", nil
	case "amd64":
		return "x86_64-linux-gnu-gcc", "gcc-x86-64-linux-gnu libc6-dev-amd64-cross", nil
	}
	return "", "", fmt.Errorf("no C compiler known for architecture %q: %s", arch, supportedArchs)
}

// supportedArchs says which values Options.Arch takes.
const supportedArchs = `the fake host's architecture is "" (this machine's), "amd64" or "arm64"`

// gccBuild runs the C compiler for arch (see compiler) in a fresh temporary directory holding
// inputs (name to content) and returns the content of the file it writes to "out".
func gccBuild(arch string, inputs map[string][]byte, args ...string) ([]byte, error) {
	name, packages, err := compiler(arch)
	if err != nil {
		return nil, err
	}
	gcc, err := exec.LookPath(name)
	if err != nil {
		return nil, fmt.Errorf("find C compiler %s (install %s): %w", name, packages, err)
	}
	dir, err := os.MkdirTemp("", "fakehost-gcc-")
	if err != nil {
		return nil, fmt.Errorf("create build directory: %w", err)
	}
	defer func() { _ = os.RemoveAll(dir) }()
	for name, content := range inputs {
		if err := writeNewFile(filepath.Join(dir, name), content, 0o644); err != nil {
			return nil, err
		}
	}
	cmd := exec.Command(gcc, append(args, "-o", "out")...)
	cmd.Dir = dir
	var output bytes.Buffer
	cmd.Stdout = &output
	cmd.Stderr = &output
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("run %s %q: %w: %s", name, args, err, bytes.TrimSpace(output.Bytes()))
	}
	out, err := os.ReadFile(filepath.Join(dir, "out"))
	if err != nil {
		return nil, fmt.Errorf("read gcc output: %w", err)
	}
	return out, nil
}

// stubObject returns the object file every stub library is linked from.
func stubObject(arch string) ([]byte, error) {
	return cached(arch+"/object:stub", func() ([]byte, error) {
		return gccBuild(arch, map[string][]byte{"stub.c": stubSource}, withCFlags("-c", "stub.c")...)
	})
}

// stubLibrary returns an empty shared library with the given SONAME.
func stubLibrary(arch, soname string) ([]byte, error) {
	return cached(arch+"/stub:"+soname, func() ([]byte, error) {
		obj, err := stubObject(arch)
		if err != nil {
			return nil, err
		}
		return gccBuild(arch, map[string][]byte{"stub.o": obj}, "-shared", "stub.o", "-Wl,-soname,"+soname)
	})
}

// cudaLibrary returns a fake libcuda reporting cudaVersion.
func cudaLibrary(arch, soname string, cudaVersion int) ([]byte, error) {
	key := arch + "/cuda:" + soname + ":" + strconv.Itoa(cudaVersion)
	return cached(key, func() ([]byte, error) {
		args := withCFlags("-shared", "-DFAKEHOST_CUDA_VERSION="+strconv.Itoa(cudaVersion),
			"fakecuda.c", "-Wl,-soname,"+soname)
		return gccBuild(arch, map[string][]byte{"fakecuda.c": cudaSource}, args...)
	})
}

// mpsControl returns the fake nvidia-cuda-mps-control (csrc/fakemps.c), static: it runs in
// any container, as a tenant's own copy of the front end would.
func mpsControl(arch string) ([]byte, error) {
	return cached(arch+"/mps-control", func() ([]byte, error) {
		return gccBuild(arch, map[string][]byte{"fakemps.c": mpsSource}, "-O2", "-Wall", "-Wextra", "-static", "fakemps.c")
	})
}

// nvmlObject returns the compiled csrc/fakenvml.c, which every fake NVML is linked from.
// With memoryLimits it has the per-cgroup memory limits calls; without, their symbols are
// absent, as in drivers before R615.
func nvmlObject(arch string, memoryLimits bool) ([]byte, error) {
	key, flags := arch+"/object:nvml", []string{"-pthread", "-c", "fakenvml.c"}
	if memoryLimits {
		key, flags = key+"+memory-limits", append(flags, "-DFAKEHOST_MEMORY_LIMITS")
	}
	return cached(key, func() ([]byte, error) {
		inputs := map[string][]byte{"fakenvml.c": nvmlSource, "fakenvml.h": nvmlHeader}
		return gccBuild(arch, inputs, withCFlags(flags...)...)
	})
}

// nvmlLibrary returns a fake NVML with the data of config, a generated fakenvml_config.c.
func nvmlLibrary(arch string, memoryLimits bool, config []byte) ([]byte, error) {
	sum := sha256.Sum256(config)
	return cached(arch+"/nvml:"+hex.EncodeToString(sum[:]), func() ([]byte, error) {
		obj, err := nvmlObject(arch, memoryLimits)
		if err != nil {
			return nil, err
		}
		inputs := map[string][]byte{"fakenvml.o": obj, "fakenvml.h": nvmlHeader, "fakenvml_config.c": config}
		// The generated data needs no optimising: -O0 keeps building many hosts cheap.
		args := append(withCFlags("-O0", "-shared", "-pthread", "fakenvml.o", "fakenvml_config.c"),
			"-Wl,-soname,libnvidia-ml.so.1")
		return gccBuild(arch, inputs, args...)
	})
}

// BuildLibrary writes a tiny real ELF shared library with the given SONAME to path, creating
// missing parent directories. It fails if path exists. Needs gcc; the library is compiled once
// per process and SONAME.
func BuildLibrary(path, soname string) error {
	data, err := stubLibrary("", soname)
	if err != nil {
		return fmt.Errorf("build library %s: %w", soname, err)
	}
	return installFile(path, data, 0o755)
}

// BuildCUDALibrary is BuildLibrary for a fake libcuda whose cuDriverGetVersion reports
// cudaVersion (12040 is CUDA 12.4) and whose cuInit succeeds, e.g. for an image's
// /usr/local/cuda/compat/libcuda.so.<version>.
func BuildCUDALibrary(path, soname string, cudaVersion int) error {
	data, err := cudaLibrary("", soname, cudaVersion)
	if err != nil {
		return fmt.Errorf("build libcuda %s: %w", soname, err)
	}
	return installFile(path, data, 0o755)
}

// installFile writes a new file at path with mode perm, creating missing parents.
func installFile(path string, data []byte, perm os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("create directory for %q: %w", path, err)
	}
	return writeNewFile(path, data, perm)
}

// writeNewFile writes a file that must not exist yet and gives it exactly mode perm.
func writeNewFile(path string, data []byte, perm os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return fmt.Errorf("create file %q: %w", path, err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("write file %q: %w", path, err)
	}
	if err := f.Chmod(perm); err != nil { // not subject to the umask, unlike OpenFile
		f.Close()
		return fmt.Errorf("chmod file %q: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close file %q: %w", path, err)
	}
	return nil
}
