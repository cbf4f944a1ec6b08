#!/usr/bin/env bash
# Builds containerd 2.x (containerd, ctr, containerd-shim-runc-v2) from the Go module proxy into
# .cache/containerd2/, for the engine tests of CDI (Debian 12 ships containerd 1.6, which has no
# CDI). Idempotent: does nothing when the cached binaries are of the pinned version.
#
#   scripts/build-containerd2.sh     # prints the directory holding the binaries
#
# `go install …@version` is refused for some 2.x tags, so the module is fetched into a throwaway
# module and the three commands built there (about 2 minutes on 2 cores with empty Go caches,
# downloads included; seconds when the Go build cache is warm).
set -euo pipefail

CONTAINERD2_VERSION="${CONTAINERD2_VERSION:-v2.1.4}"
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="$repo/.cache/containerd2"

if [ -x "$cache/containerd" ] && [ -x "$cache/ctr" ] && [ -x "$cache/containerd-shim-runc-v2" ] &&
   "$cache/containerd" --version 2>/dev/null | grep -qE " ${CONTAINERD2_VERSION//./\\.}( |$)"; then
  echo "$cache"
  exit 0
fi
command -v go >/dev/null || { echo "build-containerd2: Go is needed" >&2; exit 1; }
echo "build-containerd2: building containerd $CONTAINERD2_VERSION from the Go module proxy into $cache (about 2 minutes)" >&2
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
(
  cd "$tmp"
  export GOSUMDB=off GOFLAGS=-mod=mod GOWORK=off
  go mod init containerd2-build >/dev/null 2>&1
  go get "github.com/containerd/containerd/v2@$CONTAINERD2_VERSION" >get.log 2>&1 || { cat get.log >&2; exit 1; }
  ldflags="-X github.com/containerd/containerd/v2/version.Version=$CONTAINERD2_VERSION"
  for cmd in containerd ctr containerd-shim-runc-v2; do
    CGO_ENABLED=0 go build -trimpath -tags "no_btrfs" -ldflags "$ldflags" -o "$tmp/$cmd" "github.com/containerd/containerd/v2/cmd/$cmd" ||
      { echo "build-containerd2: building $cmd failed" >&2; exit 1; }
  done
) >&2
mkdir -p "$cache"
for cmd in containerd ctr containerd-shim-runc-v2; do
  mv -f "$tmp/$cmd" "$cache/$cmd.new"
  mv -f "$cache/$cmd.new" "$cache/$cmd"
done
echo "build-containerd2: built $("$cache/containerd" --version)" >&2
echo "$cache"
