#!/usr/bin/env bash
# Installs what the engine end-to-end tests (tests/engines, tests/packaging) need on
# Debian/Ubuntu: docker.io, containerd (with ctr) and podman where no engine of that kind is
# installed, crictl built from the Go module proxy into .cache/crictl/crictl, and containerd
# 2.x (containerd, ctr, containerd-shim-runc-v2; the CDI tests' engine, which Debian 12 does
# not ship) built by scripts/build-containerd2.sh into .cache/containerd2/. Idempotent: says
# what it installs before installing it, and installs only what is missing.
#
#   scripts/install-engine-deps.sh                # apt packages, crictl and containerd 2.x
#   scripts/install-engine-deps.sh --crictl       # crictl only (the tests run this when it is missing)
#   scripts/install-engine-deps.sh --containerd2  # containerd 2.x only (the tests build it when it is missing)
#
# Needs root (or sudo) for apt-get; the crictl and containerd 2.x builds need Go and the module
# proxy (a cold containerd 2.x build takes a few minutes; the result is cached).
set -euo pipefail

CRICTL_VERSION="${CRICTL_VERSION:-v1.34.0}"
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="$repo/.cache/crictl"
crictl="$cache/crictl"

only=""
case "${1:-}" in
  "") ;;
  --crictl) only=crictl ;;
  --containerd2) only=containerd2 ;;
  -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
  *) echo "install-engine-deps: unknown argument $1 (see --help)" >&2; exit 2 ;;
esac

# An engine of each kind is installed from Debian only where the host has none: a GPU node's
# engines (docker-ce's /usr/bin/dockerd, containerd.io's containerd) are never replaced. An
# engine that is there but lacks a tool the tests need is reported, not replaced.
install_packages() {
  local need=() missing=()
  # dockerd: Debian's docker.io ships /usr/sbin/dockerd, docker-ce /usr/bin/dockerd; both ship
  # the client as /usr/bin/docker (another docker earlier on PATH may not match the daemon).
  # (Tests point DOCKERD_CANDIDATES and DOCKER_CLIENT elsewhere.)
  local dockerd="" candidate client="${DOCKER_CLIENT:-/usr/bin/docker}"
  for candidate in ${DOCKERD_CANDIDATES:-/usr/sbin/dockerd /usr/bin/dockerd}; do
    [ -x "$candidate" ] && dockerd="$candidate"
  done
  if [ -n "$dockerd" ]; then
    [ -x "$client" ] || missing+=("$client (the docker client of your dockerd)")
  else
    need+=(docker.io)
  fi
  if command -v containerd >/dev/null; then
    command -v ctr >/dev/null || missing+=("ctr (containerd's client)")
    command -v containerd-shim-runc-v2 >/dev/null || missing+=("containerd-shim-runc-v2")
  else
    need+=(containerd)
  fi
  if command -v podman >/dev/null; then
    command -v conmon >/dev/null || missing+=("conmon (podman's monitor)")
  else
    need+=(podman)
  fi
  # Rootless podman (the rootless tests) maps a user's subordinate ids with newuidmap: a tool,
  # not an engine, installed where podman came without its recommends.
  command -v newuidmap >/dev/null || need+=(uidmap)
  command -v runc >/dev/null || need+=(runc)
  if [ ${#missing[@]} -gt 0 ]; then
    echo "install-engine-deps: an engine is installed without what its tests need, and is left as it is: ${missing[*]}" >&2
  fi
  if [ ${#need[@]} -eq 0 ]; then
    echo "install-engine-deps: engines present: dockerd, containerd, podman, runc (and newuidmap)"
    return
  fi
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  # With recommends: the configuration the engine suite is validated on. The tests start the
  # engines themselves; packaged services are not started for us here (no systemd), and are
  # left as installed.
  echo "install-engine-deps: missing here (engines only where none of their kind is); installing with apt-get (with recommends): ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq "${need[@]}"
  echo "install-engine-deps: installed ${need[*]}"
}

build_crictl() {
  if [ -x "$crictl" ] && "$crictl" --version 2>/dev/null | grep -q "${CRICTL_VERSION#v}"; then
    echo "install-engine-deps: crictl $CRICTL_VERSION present: $crictl"
    return
  fi
  if ! command -v go >/dev/null; then
    echo "install-engine-deps: Go is needed to build crictl" >&2
    exit 1
  fi
  echo "install-engine-deps: building crictl $CRICTL_VERSION from the Go module proxy into $cache (about a minute)"
  local tmp
  tmp="$(mktemp -d)"
  # `go install sigs.k8s.io/cri-tools/cmd/crictl@version` is refused here (the proxy's version
  # listing is blocked), and `go get sigs.k8s.io/cri-tools@version` alone does not resolve the
  # command's dependencies: get the command's package inside a throwaway module, then build it.
  (
    cd "$tmp"
    export GOSUMDB=off GOFLAGS=-mod=mod GOWORK=off
    go mod init crictl-build >/dev/null 2>&1
    go get "sigs.k8s.io/cri-tools/cmd/crictl@$CRICTL_VERSION" >get.log 2>&1 || { cat get.log >&2; exit 1; }
    CGO_ENABLED=0 go build -trimpath \
      -ldflags "-X sigs.k8s.io/cri-tools/pkg/version.Version=$CRICTL_VERSION" \
      -o "$tmp/crictl" sigs.k8s.io/cri-tools/cmd/crictl
  ) || { rm -rf "$tmp"; echo "install-engine-deps: crictl build failed" >&2; exit 1; }
  mkdir -p "$cache"
  mv -f "$tmp/crictl" "$crictl.new"
  mv -f "$crictl.new" "$crictl"
  rm -rf "$tmp"
  echo "install-engine-deps: built $("$crictl" --version)"
}

build_containerd2() {
  local dir
  # It says what it builds on stderr and prints the directory on stdout.
  dir="$("$repo/scripts/build-containerd2.sh")" || { echo "install-engine-deps: containerd 2.x build failed" >&2; exit 1; }
  echo "install-engine-deps: containerd 2.x present: $dir ($("$dir/containerd" --version))"
}

case "$only" in
  crictl) build_crictl ;;
  containerd2) build_containerd2 ;;
  *) install_packages; build_crictl; build_containerd2 ;;
esac
