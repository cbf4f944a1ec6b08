#!/usr/bin/env bash
# Installs what building and testing gpu-runtime needs on Debian/Ubuntu. Idempotent: does
# nothing when everything is present. Needs root (or sudo) for apt-get.
set -euo pipefail

need=()
command -v runc >/dev/null || need+=(runc)
command -v crun >/dev/null || need+=(crun)
[ -x /bin/busybox ] && /bin/busybox --list >/dev/null 2>&1 && file -L /bin/busybox 2>/dev/null | grep -q static || need+=(busybox-static)
command -v gcc >/dev/null || need+=(gcc libc6-dev)
command -v file >/dev/null || need+=(file)
command -v ldconfig >/dev/null || [ -x /sbin/ldconfig ] || need+=(libc-bin)

if ! command -v go >/dev/null; then
  echo "install-deps: Go is not installed; install Go >= 1.24 (https://go.dev/dl/)" >&2
  exit 1
fi

if [ ${#need[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "install-deps: installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${need[@]}" file
fi
echo "install-deps: ok (runc $(runc --version | head -1 | awk '{print $3}'), busybox static, gcc)"
