#!/usr/bin/env bash
# Installs, with apt-get on Debian/Ubuntu, what building and testing gpu-runtime needs, and
# says what it installs before installing it. Idempotent: does nothing when everything is there.
#
#   scripts/install-deps.sh          what make test needs: runc, crun, busybox-static, gcc,
#                                    libc6-dev, file, binutils (objdump), rpm (Debian's, to inspect
#                                    the .rpm), dash, containernetworking-plugins and iproute2
#                                    (the Kubernetes cluster tests' pod network); on amd64 also what make package ARCH=arm64
#                                    and tests/arm64 need: gcc-aarch64-linux-gnu,
#                                    libc6-dev-arm64-cross (aarch64 cross compiler and C library)
#                                    and qemu-user-static (qemu-aarch64-static, run explicitly:
#                                    no binfmt_misc registration is made or needed)
#   scripts/install-deps.sh --demo   only what make demo needs: runc, busybox-static, gcc, libc6-dev
#
# The container engines (docker.io, containerd, podman) are scripts/install-engine-deps.sh's.
# CNI_BRIDGE: where the CNI bridge plugin is looked for (default /usr/lib/cni/bridge; tests set it).
# Needs root (or sudo) for apt-get.
set -euo pipefail

demo=false
case "${1:-}" in
  "") ;;
  --demo) demo=true ;;
  -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
  *) echo "install-deps: unknown argument $1 (see --help)" >&2; exit 2 ;;
esac

if ! command -v go >/dev/null; then
  echo "install-deps: Go is not installed; install Go >= 1.26 (https://go.dev/dl/)" >&2
  exit 1
fi

need=()
command -v runc >/dev/null || need+=(runc)
[ -x /bin/busybox ] && /bin/busybox --list >/dev/null 2>&1 && file -L /bin/busybox 2>/dev/null | grep -q static || need+=(busybox-static)
command -v gcc >/dev/null || need+=(gcc libc6-dev)
command -v file >/dev/null || need+=(file) # the busybox check above
if ! $demo; then
  command -v crun >/dev/null || need+=(crun)
  command -v ldconfig >/dev/null || [ -x /sbin/ldconfig ] || need+=(libc-bin)
  command -v objdump >/dev/null || need+=(binutils) # make package: the glibc gpu-ctk needs
  command -v rpm >/dev/null || need+=(rpm)          # tests/packaging: rpm -qp on the .rpm
  command -v dash >/dev/null || need+=(dash)        # tests/packaging: the scripts under Debian's sh
  if [ "$(go env GOARCH)" = amd64 ]; then            # make package ARCH=arm64, tests/arm64
    command -v aarch64-linux-gnu-gcc >/dev/null || need+=(gcc-aarch64-linux-gnu)
    [ -e /usr/aarch64-linux-gnu/lib/libc.a ] || need+=(libc6-dev-arm64-cross)
    command -v qemu-aarch64-static >/dev/null || need+=(qemu-user-static)
  fi
  [ -x "${CNI_BRIDGE:-/usr/lib/cni/bridge}" ] || need+=(containernetworking-plugins) # tests/cluster: the pods' bridge
  command -v ip >/dev/null || need+=(iproute2)      # tests/cluster: removes the bridge
fi

if [ ${#need[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "install-deps: installing with apt-get (no recommends): ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${need[@]}"
  echo "install-deps: installed ${need[*]}"
fi
echo "install-deps: ok (runc $(runc --version | head -1 | awk '{print $3}'), busybox static, gcc)"
