package testimage

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// DlopenCUDAProgram is where Options.DlopenCUDA puts its program in the root.
const DlopenCUDAProgram = "/usr/bin/dlopen-cuda"

// dlopenCUDASource dlopens libcuda.so.1 by its SONAME, as CUDA applications do, and prints
// the file the dynamic linker opened ("libcuda.so.1 => /path") or the error, exiting 1.
const dlopenCUDASource = `#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <stdio.h>

int main(void) {
	void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	struct link_map *lm;
	if (h == NULL) {
		printf("libcuda.so.1 => error: %s\n", dlerror());
		return 1;
	}
	if (dlinfo(h, RTLD_DI_LINKMAP, &lm) != 0) {
		printf("libcuda.so.1 => dlinfo: %s\n", dlerror());
		return 1;
	}
	printf("libcuda.so.1 => %s\n", lm->l_name);
	return 0;
}
`

// dlopenCUDA compiles dlopenCUDASource with the host's gcc into the root, dynamically linked
// against the host's C library (which HostLibc copies in).
func (b *builder) dlopenCUDA() {
	if b.err != nil {
		return
	}
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		b.err = fmt.Errorf("compile %s (DlopenCUDA): find gcc: %w", DlopenCUDAProgram, err)
		return
	}
	dir, err := os.MkdirTemp("", "testimage-")
	if err != nil {
		b.err = err
		return
	}
	defer func() { _ = os.RemoveAll(dir) }()
	src := filepath.Join(dir, "dlopen-cuda.c")
	if err := os.WriteFile(src, []byte(dlopenCUDASource), 0o644); err != nil {
		b.err = err
		return
	}
	b.mkdir(filepath.Dir(DlopenCUDAProgram))
	if out, err := exec.Command(gcc, "-O2", "-Wall", "-o", b.abs(DlopenCUDAProgram), src).CombinedOutput(); err != nil {
		b.err = fmt.Errorf("compile %s (DlopenCUDA): %w: %s", DlopenCUDAProgram, err, out)
	}
}
