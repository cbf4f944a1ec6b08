#!/usr/bin/env bash
# Installs what the engine end-to-end tests (tests/engines) need on Debian/Ubuntu: docker.io,
# containerd (with ctr), podman, and crictl built from the Go module proxy into
# .cache/crictl/crictl. Idempotent: installs only what is missing and says what it did.
#
#   scripts/install-engine-deps.sh            # apt packages and crictl
#   scripts/install-engine-deps.sh --crictl   # crictl only (the tests run this when it is missing)
#
# Needs root (or sudo) for apt-get; the crictl build needs Go and the module proxy.
set -euo pipefail

CRICTL_VERSION="${CRICTL_VERSION:-v1.34.0}"
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="$repo/.cache/crictl"
crictl="$cache/crictl"

only_crictl=false
case "${1:-}" in
  "") ;;
  --crictl) only_crictl=true ;;
  -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
  *) echo "install-engine-deps: unknown argument $1 (see --help)" >&2; exit 2 ;;
esac

install_packages() {
  local need=()
  # dockerd: /usr/bin/docker is Debian's client matching it; another docker on PATH does not count.
  { [ -x /usr/sbin/dockerd ] && [ -x /usr/bin/docker ]; } || need+=(docker.io)
  { command -v containerd >/dev/null && command -v ctr >/dev/null && command -v containerd-shim-runc-v2 >/dev/null; } || need+=(containerd)
  { command -v podman >/dev/null && command -v conmon >/dev/null; } || need+=(podman)
  command -v runc >/dev/null || need+=(runc)
  if [ ${#need[@]} -eq 0 ]; then
    echo "install-engine-deps: packages present: docker.io, containerd, podman, runc"
    return
  fi
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "install-engine-deps: installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  # With recommends: the configuration the engine suite is validated on. The tests start the engines themselves.
  $sudo apt-get install -y -qq "${need[@]}"
  # Packaged services must not start the host's default engines for us; leave them as installed.
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

$only_crictl || install_packages
build_crictl
