#!/usr/bin/env bash
# Builds the pinned Kubernetes components the cluster tests (tests/cluster, `make cluster`) run:
# kube-apiserver, kube-controller-manager, kube-scheduler, kubelet and kubectl from
# k8s.io/kubernetes, and etcd from go.etcd.io/etcd/server/v3, all from the Go module proxy, into
# .cache/kubernetes/<version>/bin/. Idempotent: does nothing when a stamp naming the versions and
# the Go version is there.
#
#   scripts/build-kubernetes.sh           # prints the directory holding the binaries
#   scripts/build-kubernetes.sh --check   # the same, but exits 1 (building nothing) when they are not built
#
# The kubernetes module's go.mod points its k8s.io/* staging modules at ./staging/…, which the
# module zip does not contain: the build rewrites those replace lines to the published k8s.io/*
# v0.<minor>.<patch> modules. A cold build takes about 9 minutes on 2 cores (the apiserver is
# most of it); with a warm Go build cache, seconds. Flags as Kubernetes' hack/lib/golang.sh
# builds them (-trimpath, -s -w, tags selinux,notest,grpcnotrace), all static (CGO_ENABLED=0:
# a cgo kubelet shares nothing with the other builds and takes minutes more).
set -euo pipefail

K8S_VERSION="${K8S_VERSION:-v1.37.2}"
ETCD_VERSION="${ETCD_VERSION:-v3.7.3}"
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="$repo/.cache/kubernetes/$K8S_VERSION"
bin="$out/bin"
components=(kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl)

command -v go >/dev/null || { echo "build-kubernetes: Go is needed to build Kubernetes $K8S_VERSION" >&2; exit 1; }
stamp="kubernetes $K8S_VERSION etcd $ETCD_VERSION $(go env GOVERSION)"
if [ -f "$out/stamp" ] && [ "$(cat "$out/stamp")" = "$stamp" ]; then
  echo "$bin"
  exit 0
fi
if [ "${1:-}" = "--check" ]; then
  echo "build-kubernetes: Kubernetes $K8S_VERSION is not built in $out (scripts/build-kubernetes.sh builds it)" >&2
  exit 1
fi

echo "build-kubernetes: building Kubernetes $K8S_VERSION (${components[*]}) and etcd $ETCD_VERSION from the Go module proxy into $bin (once; about 9 minutes on an idle 2-core machine, more under load; then cached)" >&2
start=$SECONDS
mkdir -p "$out"
rm -rf "$out/src" "$out/bin.new" "$out/stamp"
mkdir -p "$out/bin.new"
export GOWORK=off GOTOOLCHAIN=local GOFLAGS="-mod=mod -modcacherw -buildvcs=false"
(
  dir="$(cd /tmp && go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/^\s*"Dir": "\(.*\)",$/\1/p')"
  [ -d "$dir" ] || { echo "build-kubernetes: k8s.io/kubernetes@$K8S_VERSION was not downloaded" >&2; exit 1; }
  cp -r "$dir" "$out/src"
  chmod -R u+w "$out/src"
  cd "$out/src"
  minor="v0.${K8S_VERSION#v1.}"
  sed -i -E "s#^(\s*)(k8s\.io/[A-Za-z0-9._-]+) => \./staging/src/k8s\.io/[A-Za-z0-9._-]+\s*\$#\1\2 => \2 $minor#" go.mod
  if grep -q '=> ./staging' go.mod; then echo "build-kubernetes: a staging replace line was not rewritten" >&2; exit 1; fi
  rm -rf go.work go.work.sum vendor
  pkgs=()
  for c in "${components[@]}"; do pkgs+=("./cmd/$c"); done
  go list -deps "${pkgs[@]}" >/dev/null
  major="${K8S_VERSION#v}"; major="${major%%.*}"
  minornum="${K8S_VERSION#v*.}"; minornum="${minornum%%.*}"
  ld=""
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld+=" -X '$pkg.gitVersion=$K8S_VERSION' -X '$pkg.gitMajor=$major' -X '$pkg.gitMinor=$minornum'"
    ld+=" -X '$pkg.gitTreeState=clean' -X '$pkg.buildDate=1970-01-01T00:00:00Z'"
  done
  for c in "${components[@]}"; do
    t=$SECONDS
    CGO_ENABLED=0 go build -trimpath -tags selinux,notest,grpcnotrace -ldflags "$ld -s -w" -o "$out/bin.new/$c" "./cmd/$c"
    echo "build-kubernetes: $c built in $((SECONDS - t)) s" >&2
  done
  mkdir -p "$out/etcd-build"
  cd "$out/etcd-build"
  rm -f go.mod go.sum
  go mod init etcd-build >/dev/null 2>&1
  go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION" >get.log 2>&1 || { cat get.log >&2; exit 1; }
  t=$SECONDS
  CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$out/bin.new/etcd" go.etcd.io/etcd/server/v3
  echo "build-kubernetes: etcd built in $((SECONDS - t)) s" >&2
) >&2 || { echo "build-kubernetes: the build failed (see above)" >&2; exit 1; }
rm -rf "$bin" "$out/src" "$out/etcd-build"
mv "$out/bin.new" "$bin"
echo "$stamp" >"$out/stamp"
echo "build-kubernetes: built ${components[*]} etcd in $((SECONDS - start)) s" >&2
echo "$bin"
