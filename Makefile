# gpu-runtime — see README.md. Every target is phony; `make help` lists them.
SHELL := /bin/bash
GO ?= go
# The version `make build` stamps (--version) and `make package` names the packages with, from
# scripts/version.sh: 1.2.3 on tag v1.2.3, 1.2.3+git7.<hash> after it, 0.0.0~git<commits>.<hash>
# before any tag. `VERSION=1.2.3 make package` sets it.
ifeq ($(origin VERSION),undefined)
VERSION := $(shell scripts/version.sh)
endif
LDFLAGS := -s -w -X github.com/gpu-runtime/gpu-runtime/internal/version.Version=$(VERSION)
PREFIX ?= /usr/local
# golangci-lint, pinned; built once from the Go module proxy into .cache (make lint).
GOLANGCI_LINT_VERSION := v2.15.0
GOLANGCI_LINT := .cache/golangci-lint/$(GOLANGCI_LINT_VERSION)/golangci-lint
# Set on the command line only (make package BIN=… DIST=…), never from the environment.
BIN := bin
DIST := dist
# The architecture to build for, in Go's words: this machine's, or on the command line
# (make package ARCH=arm64) another, cross-built into bin/<arch> and dist/<arch> unless BIN and
# DIST say otherwise: gpu-runtime and gpu-hook need only Go, gpu-ctk (cgo) the target's C cross
# compiler (Debian: gcc-aarch64-linux-gnu libc6-dev-arm64-cross, which make deps installs).
HOST_ARCH := $(shell env -u GOARCH $(GO) env GOARCH 2>/dev/null)
ARCH := $(HOST_ARCH)
CROSS_CC_arm64 := aarch64-linux-gnu-gcc
CROSS_CC_amd64 := x86_64-linux-gnu-gcc
CTK_CC :=
ifneq ($(ARCH),$(HOST_ARCH))
ifeq ($(CROSS_CC_$(ARCH)),)
$(error ARCH=$(ARCH): gpu-runtime is built for amd64 or arm64 only)
endif
CTK_CC := $(CROSS_CC_$(ARCH))
ifeq ($(origin BIN),file)
BIN := bin/$(ARCH)
endif
ifeq ($(origin DIST),file)
DIST := dist/$(ARCH)
endif
endif

.PHONY: help build test unit e2e test-arm64 test-packages test-cluster cluster bench-cluster fuzz deps demo bench lint package install uninstall clean realgpu-kit

help: ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-13s %s\n", $$1, $$2}'

build: ## build bin/gpu-runtime, bin/gpu-hook and bin/gpu-kubelet-plugin (static) and bin/gpu-ctk (cgo: NVML via dlopen); ARCH=arm64 cross-builds them into bin/arm64
	@test -z "$(CTK_CC)" || command -v $(CTK_CC) >/dev/null || { echo "make build ARCH=$(ARCH): the C compiler $(CTK_CC) (for gpu-ctk) is not installed: run make deps, or apt-get install gcc-aarch64-linux-gnu libc6-dev-arm64-cross (gcc-x86-64-linux-gnu libc6-dev-amd64-cross for amd64)" >&2; exit 1; }
	GOARCH=$(ARCH) CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(BIN)/gpu-runtime ./cmd/gpu-runtime
	GOARCH=$(ARCH) CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(BIN)/gpu-hook ./cmd/gpu-hook
	GOARCH=$(ARCH) CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(BIN)/gpu-kubelet-plugin ./cmd/gpu-kubelet-plugin
	GOARCH=$(ARCH) $(if $(CTK_CC),CC=$(CTK_CC) )CGO_ENABLED=1 CGO_CFLAGS="-O2 -Wno-deprecated-declarations" $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(BIN)/gpu-ctk ./cmd/gpu-ctk

deps: ## install what the tests need, saying what before installing it (apt: runc, crun, busybox-static, gcc, binutils, rpm, containernetworking-plugins, on amd64 gcc-aarch64-linux-gnu, libc6-dev-arm64-cross, qemu-user-static; docker.io, containerd, podman only where no engine of that kind is installed; crictl, containerd 2.x and Kubernetes v1.37.2 into .cache/)
	./scripts/install-deps.sh
	./scripts/install-engine-deps.sh
	@./scripts/build-kubernetes.sh --check >/dev/null 2>&1 || echo "deps: building Kubernetes v1.37.2 for the cluster tests into .cache/kubernetes (once: about 9 minutes on 2 cores, then cached)"
	./scripts/build-kubernetes.sh >/dev/null

test: deps build ## install what is missing (saying what), then lint (golangci-lint too), unit, end-to-end, Kubernetes cluster and package tests and brief fuzzing (root)
	$(MAKE) lint
	GPU_RUNTIME_E2E=1 $(GO) test -count=1 -timeout 20m $$($(GO) list ./... | grep -v '/tests/cluster$$')
	$(MAKE) test-cluster
	$(MAKE) test-packages
	$(MAKE) fuzz

# After `go test ./...`, never beside it: the cluster suite starts a whole Kubernetes node (etcd,
# apiserver, controller-manager, scheduler, kubelet, containerd 2.x), too heavy to share 2 cores
# with the other suites.
test-cluster: build ## Kubernetes tests: pods on a real single-node v1.37.2 cluster get GPUs through the RuntimeClass, a device plugin, CDI and the DRA kubelet plugin (root; builds Kubernetes into .cache once)
	./scripts/build-kubernetes.sh >/dev/null
	GPU_RUNTIME_E2E=1 $(GO) test -count=1 -v -timeout 30m ./tests/cluster/

cluster: build ## start the test cluster by hand (root): prints the KUBECONFIG; Ctrl-C stops it and removes everything it made
	$(GO) run ./tests/cmd/cluster

bench-cluster: build ## kubectl apply -> Ready for a GPU pod through the RuntimeClass and through a DRA claim against the same pod without GPU, and the DRA plugin's prepare time, on one test cluster (root; writes bench/cluster-results.md)
	$(GO) run ./bench/cluster -pairs $${PAIRS:-20}

# After `go test ./...`, never beside it: these tests install gpu-runtime into /usr/bin, which
# the other suites must not see (go test runs packages in parallel).
test-packages: package ## build the packages, then install, upgrade, remove and purge them here, with a private dockerd running a GPU container (root; leaves the machine as it was)
	GPU_RUNTIME_E2E=1 GPU_RUNTIME_PACKAGES=$(abspath $(DIST)) $(GO) test -count=1 -timeout 15m ./tests/packaging/

unit: ## unit tests only (no root needed for most)
	$(GO) test -count=1 $$($(GO) list ./... | grep -v /tests/)

e2e: build ## end-to-end tests: real runc, dockerd, containerd (ctr and CRI) and podman on a fake GPU host (root)
	GPU_RUNTIME_E2E=1 $(GO) test -count=1 -v -timeout 20m ./tests/e2e/ ./tests/engines/

test-arm64: ## cross-build the arm64 packages (make package ARCH=arm64) and run them under qemu-user: --version, gpu-ctk info on an arm64 fake host, a create against an arm64 runc (root; make test runs it within go test ./...)
	GPU_RUNTIME_E2E=1 $(GO) test -count=1 -v -timeout 15m ./tests/arm64/

fuzz: ## run each fuzz target briefly (execution counts, not durations: a duration-based -fuzztime can fail with "context deadline exceeded" on a loaded machine, golang/go#75804, fixed in go1.27)
	$(GO) test -run='^$$' -fuzz=FuzzParse -fuzztime=200000x ./internal/ldcache/
	$(GO) test -run='^$$' -fuzz=FuzzCacheRoundTrip -fuzztime=50000x ./internal/ldcache/
	$(GO) test -run='^$$' -fuzz=FuzzELF -fuzztime=100000x ./internal/hook/
	$(GO) test -run='^$$' -fuzz=FuzzParse -fuzztime=50000x ./pkg/config/
	$(GO) test -run='^$$' -fuzz=FuzzFromEnv -fuzztime=200000x ./pkg/request/
	$(GO) test -run='^$$' -fuzz=FuzzMayRequestGPU -fuzztime=200000x ./pkg/request/
	$(GO) test -run='^$$' -fuzz=FuzzParse -fuzztime=200000x ./pkg/requirements/
	$(GO) test -run='^$$' -fuzz=FuzzParseArgs -fuzztime=200000x ./pkg/oci/
	$(GO) test -run='^$$' -fuzz=FuzzSpecEncode -fuzztime=20000x ./pkg/oci/
	$(GO) test -run='^$$' -fuzz=FuzzCheckKeys -fuzztime=100000x ./pkg/oci/
	$(GO) test -run='^$$' -fuzz=FuzzDecodeCache -fuzztime=100000x ./pkg/discover/
	$(GO) test -run='^$$' -fuzz=FuzzDecodeHealth -fuzztime=100000x ./pkg/discover/

demo: ## make a fake 2-GPU host, show what gpu-ctk explain says a container asking for GPU 1 gets, run it through gpu-runtime and real runc, then show the error for a GPU that does not exist (installs only what is missing of runc, busybox-static and gcc, saying so)
	./scripts/install-deps.sh --demo
	$(MAKE) build
	./scripts/demo.sh

bench: build ## lifecycle benchmark vs plain runc (writes bench/results.md) and Go benchmarks of the create path (root)
	$(GO) run ./bench/lifecycle -pairs $${PAIRS:-100}
	$(GO) test -run '^$$' -bench '^BenchmarkCreatePath$$' -benchmem ./internal/create/
	# a process of its own: go-nvml binds one NVML library per process, and each benchmark's fake host has its own
	$(GO) test -run '^$$' -bench '^BenchmarkCreatePathHealth$$' -benchmem ./internal/create/

lint: $(GOLANGCI_LINT) ## gofmt, go vet, go mod tidy check, golangci-lint (.golangci.yml; pinned, built into .cache), shell syntax (and shellcheck where installed)
	@test -z "$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))" || { gofmt -l .; echo "gofmt needed"; exit 1; }
	$(GO) vet ./...
	$(GO) mod tidy -diff
	$(GOLANGCI_LINT) run ./...
	@for f in scripts/*.sh packaging/scripts/*; do bash -n "$$f" || exit 1; done
	@for f in packaging/scripts/*; do dash -n "$$f" || exit 1; done
	@if command -v shellcheck >/dev/null; then shellcheck scripts/*.sh packaging/scripts/*; else echo "lint: shellcheck is not installed: shell scripts only syntax-checked"; fi

package: build ## build dist/gpu-runtime_<version>_<arch>.deb and dist/gpu-runtime-<version>-1.<arch>.rpm with nfpm (built once into .cache/nfpm); ARCH=arm64 cross-builds dist/arm64/…_arm64.deb and ….aarch64.rpm
	VERSION=$(VERSION) BIN=$(BIN) DIST=$(DIST) ARCH=$(ARCH) ./scripts/package.sh

install: ## install what make build built, building nothing (so sudo make install works without Go): binaries, config, RuntimeClass, docker's hook link where safe
	@for b in gpu-runtime gpu-hook gpu-ctk; do test -x $(BIN)/$$b || { echo "make install: $(BIN)/$$b is missing: run make build first (as yourself; then sudo make install)" >&2; exit 1; }; done
	install -D -m 0755 $(BIN)/gpu-runtime $(DESTDIR)$(PREFIX)/bin/gpu-runtime
	install -D -m 0755 $(BIN)/gpu-hook $(DESTDIR)$(PREFIX)/bin/gpu-hook
	install -D -m 0755 $(BIN)/gpu-ctk $(DESTDIR)$(PREFIX)/bin/gpu-ctk
	install -D -m 0644 packaging/kubernetes/runtimeclass.yaml $(DESTDIR)$(PREFIX)/share/gpu-runtime/kubernetes/runtimeclass.yaml
	test -e $(DESTDIR)/etc/gpu-runtime/config.toml || install -D -m 0644 config.toml $(DESTDIR)/etc/gpu-runtime/config.toml
	@if [ -n "$(DESTDIR)" ]; then echo "make install: DESTDIR is set: no nvidia-container-runtime-hook link (whether one is safe is for the target host to tell: packaging/scripts/host-setup link-hook)"; \
	else packaging/scripts/host-setup link-hook $(PREFIX)/bin && packaging/scripts/host-setup hint; fi

uninstall: ## remove what make install installed, first unregistering gpu-runtime (every name it is registered under) from the engines as package removal does; an edited /etc/gpu-runtime/config.toml stays
	@if [ -z "$(DESTDIR)" ] && [ -x $(PREFIX)/bin/gpu-ctk ]; then packaging/scripts/host-setup unregister $(PREFIX)/bin; fi
	packaging/scripts/host-setup unlink-hook $(DESTDIR)$(PREFIX)/bin
	rm -f $(DESTDIR)$(PREFIX)/bin/gpu-runtime $(DESTDIR)$(PREFIX)/bin/gpu-hook $(DESTDIR)$(PREFIX)/bin/gpu-ctk
	rm -f $(DESTDIR)$(PREFIX)/share/gpu-runtime/kubernetes/runtimeclass.yaml
	-@rmdir $(DESTDIR)$(PREFIX)/share/gpu-runtime/kubernetes $(DESTDIR)$(PREFIX)/share/gpu-runtime 2>/dev/null
	@if cmp -s config.toml $(DESTDIR)/etc/gpu-runtime/config.toml; then rm -f $(DESTDIR)/etc/gpu-runtime/config.toml; rmdir $(DESTDIR)/etc/gpu-runtime 2>/dev/null || true; \
	elif [ -e $(DESTDIR)/etc/gpu-runtime/config.toml ]; then echo "make uninstall: kept $(DESTDIR)/etc/gpu-runtime/config.toml: it differs from the default (remove it by hand when you are done with it)"; fi

clean: ## remove build outputs (bin/, dist/)
	rm -rf $(BIN) $(DIST)

$(GOLANGCI_LINT):
	@echo "lint: building golangci-lint $(GOLANGCI_LINT_VERSION) from the Go module proxy into $(dir $@) (once; about 2 minutes)"
	GOBIN=$(abspath $(dir $@)) GOFLAGS= $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)

realgpu-kit: ## build the real-GPU check's kit into .realgpu-kit/ (static runc, rootfs, gpu-probe; see tests/realgpu/README.md)
	./scripts/build-realgpu-kit.sh --out $(or $(KIT),.realgpu-kit)
