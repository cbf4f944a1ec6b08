package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"tags.cncf.io/container-device-interface/pkg/cdi"
)

// cdiKind is the kind of the bench's CDI spec: its own, so that no spec of the machine's
// spec directories can answer for it.
const cdiKind = "gpu-runtime.bench/gpu"

// cdiInjection is a GPU container's spec as a CDI-native engine (containerd 2.x, cri-o,
// podman) hands it to plain runc, and what making it cost the engine in process.
type cdiInjection struct {
	spec       []byte
	devices    int           // devices the generated spec offers
	load       time.Duration // median: reading the spec directory into a cache
	inject     time.Duration // median: resolving and applying kind=all to a decoded spec
	injectRuns int
}

// cdiSpec runs `gpu-ctk cdi generate` with config (the fake host's driver root, dev root and
// hook path) into a private spec directory, then injects cdiKind=all into plain with the CDI
// library, as containerd 2.x and podman do in their own process before they call runc.
func (l *lab) cdiSpec(plain []byte, config string) (cdiInjection, error) {
	var res cdiInjection
	dir := filepath.Join(l.work, "cdi")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return res, err
	}
	file := filepath.Join(dir, "bench.yaml")
	cmd := exec.Command(l.ctk, "cdi", "generate", "--kind", cdiKind, "--output", file)
	cmd.Env = append(os.Environ(), "GPU_RUNTIME_CONFIG="+config)
	if out, err := cmd.CombinedOutput(); err != nil {
		return res, fmt.Errorf("gpu-ctk cdi generate: %w: %s", err, strings.TrimSpace(string(out)))
	}

	const runs = 200
	var loads, injects []time.Duration
	var edited *specs.Spec
	for i := 0; i < runs; i++ {
		start := time.Now()
		cache, err := cdi.NewCache(cdi.WithSpecDirs(dir), cdi.WithAutoRefresh(false))
		loads = append(loads, time.Since(start))
		if err != nil {
			return res, fmt.Errorf("load the bench's CDI spec: %w", err)
		}
		var s specs.Spec
		if err := json.Unmarshal(plain, &s); err != nil {
			return res, err
		}
		start = time.Now()
		unresolved, err := cache.InjectDevices(&s, cdiKind+"=all")
		injects = append(injects, time.Since(start))
		if err != nil {
			return res, fmt.Errorf("inject %s=all (unresolved %v): %w", cdiKind, unresolved, err)
		}
		edited = &s
		if i == 0 {
			res.devices = len(cache.ListDevices())
		}
	}
	data, err := json.MarshalIndent(edited, "", "    ")
	if err != nil {
		return res, err
	}
	res.spec, res.load, res.inject, res.injectRuns = data, medianDuration(loads), medianDuration(injects), runs
	return res, nil
}

func medianDuration(ds []time.Duration) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}
