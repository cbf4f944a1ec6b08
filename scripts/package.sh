#!/usr/bin/env bash
# Builds gpu-runtime's packages from what `make build` built, with nfpm and packaging/nfpm.yaml:
#   $DIST/gpu-runtime_<version>_<arch>.deb      (Debian's arch names: amd64, arm64)
#   $DIST/gpu-runtime-<version>-1.<arch>.rpm    (RPM's: x86_64, aarch64)
# `make package` runs it after `make build`. Earlier gpu-runtime packages of the same
# architecture in $DIST are removed.
#
#   VERSION     the packages' version; default scripts/version.sh. bin/ must carry the same
#               (gpu-runtime --version), which make package ensures by building with it.
#   BIN, DIST   the binaries (default bin) and where the packages go (default dist)
#   MAINTAINER  the packages' Maintainer/Packager field
#   NFPM        an nfpm to use instead of the one built here
#   ARCH        Go's name of the binaries' architecture (amd64, arm64); default this machine's.
#               Binaries of another architecture (make package ARCH=arm64) are checked and run
#               (--version) with qemu-user: qemu-aarch64-static, from qemu-user-static.
#
# nfpm is built once, at NFPM_VERSION, from the Go module proxy into .cache/nfpm/ (inside a
# throwaway module, so that gpu-runtime's go.mod does not grow nfpm's dependencies; about a
# minute on 2 cores the first time).
set -euo pipefail

NFPM_VERSION="${NFPM_VERSION:-v2.44.0}"
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
bin="${BIN:-bin}"
dist="${DIST:-dist}"
export MAINTAINER="${MAINTAINER:-gpu-runtime developers <dev@gpu-runtime.local>}"

say() { echo "package: $*"; }
die() { echo "package: $*" >&2; exit 1; }

version="$(scripts/version.sh)" || exit 1

build_nfpm() {
  local cache="$repo/.cache/nfpm" out="$repo/.cache/nfpm/nfpm-$NFPM_VERSION"
  if [ -x "$out" ]; then
    echo "$out"
    return
  fi
  command -v go >/dev/null || die "Go is needed to build nfpm (or set NFPM to an nfpm binary)"
  say "building nfpm $NFPM_VERSION from the Go module proxy into $cache (once; about a minute)" >&2
  local tmp
  tmp="$(mktemp -d)"
  # As scripts/install-engine-deps.sh builds crictl: `go install …@version` may be refused by
  # the proxy; getting the command's package into a throwaway module and building it works.
  if ! (
    cd "$tmp"
    export GOFLAGS=-mod=mod GOWORK=off
    go mod init nfpm-build >/dev/null 2>&1
    go get "github.com/goreleaser/nfpm/v2/cmd/nfpm@$NFPM_VERSION" >get.log 2>&1 || { cat get.log >&2; exit 1; }
    CGO_ENABLED=0 go build -trimpath -o "$tmp/nfpm" github.com/goreleaser/nfpm/v2/cmd/nfpm
  ); then
    rm -rf "$tmp"
    die "building nfpm $NFPM_VERSION failed"
  fi
  mkdir -p "$cache"
  mv -f "$tmp/nfpm" "$out.new"
  mv -f "$out.new" "$out"
  rm -rf "$tmp"
  echo "$out"
}

# Go's name for the architecture, as make build built for; nfpm turns it into dpkg's and rpm's.
ARCH="${ARCH:-$(go env GOARCH 2>/dev/null || true)}"
[ -n "$ARCH" ] || die "Go is needed to tell the architecture (or set ARCH: amd64, arm64)"
export ARCH
host_arch="$(go env GOARCH 2>/dev/null || dpkg --print-architecture 2>/dev/null || true)"
case "$ARCH" in
  amd64) machine=62 qemu=qemu-x86_64-static tools=x86_64-linux-gnu deb_arch=amd64 rpm_arch=x86_64 ;;
  arm64) machine=183 qemu=qemu-aarch64-static tools=aarch64-linux-gnu deb_arch=arm64 rpm_arch=aarch64 ;;
  *) die "ARCH=$ARCH: gpu-runtime is packaged for amd64 and arm64 only" ;;
esac
run=()   # how to run a binary of $ARCH here
objdump=objdump
if [ "$ARCH" != "$host_arch" ]; then
  command -v "$qemu" >/dev/null ||
    die "$qemu is needed to run the $ARCH binaries' --version on this $host_arch machine (apt-get install qemu-user-static)"
  run=("$qemu" -L "/usr/$tools")
  objdump="$tools-objdump"
  command -v "$objdump" >/dev/null ||
    die "$objdump is needed to read the glibc version the $ARCH gpu-ctk needs (apt-get install binutils-$tools, which gcc-$tools brings)"
fi

for b in gpu-runtime gpu-hook gpu-ctk gpu-kubelet-plugin; do
  [ -x "$bin/$b" ] || die "$bin/$b is missing: run make build first (make package does)"
  # e_machine, the ELF header's bytes 18-19 (little-endian on both architectures)
  m="$(od -An -tu2 -j18 -N2 "$bin/$b" | tr -d ' ')"
  [ "$m" = "$machine" ] ||
    die "$bin/$b is not an $ARCH binary (ELF machine ${m:-unreadable}, want $machine): build it with make build ARCH=$ARCH (make package ARCH=$ARCH does)"
done
stamped="$("${run[@]}" "$bin/gpu-runtime" --version)" || die "$bin/gpu-runtime --version failed"
stamped="${stamped%%$'\n'*}" # the first line
[ "$stamped" = "gpu-runtime version $version" ] ||
  die "$bin/gpu-runtime says \"$stamped\", but the packages would be version $version: build with the same VERSION (make package VERSION=$version)"

command -v "$objdump" >/dev/null || die "objdump is needed to read the glibc version gpu-ctk needs (apt-get install binutils)"
GLIBC="$("$objdump" -T "$bin/gpu-ctk" | { grep -o 'GLIBC_[0-9][0-9.]*' || true; } | sed 's/^GLIBC_//' | sort -uV | tail -n1)"
[ -n "$GLIBC" ] || die "no glibc symbol version found in $bin/gpu-ctk"
export GLIBC VERSION="$version" BIN="$bin"
# Reproducible: every file's time is the commit's, unless the caller chose one.
if [ -z "${SOURCE_DATE_EPOCH:-}" ] && git rev-parse --git-dir >/dev/null 2>&1; then
  SOURCE_DATE_EPOCH="$(git log -1 --format=%ct)"
  export SOURCE_DATE_EPOCH
fi

nfpm="${NFPM:-$(build_nfpm)}"
mkdir -p "$dist"
rm -f "$dist"/gpu-runtime_*_"$deb_arch".deb "$dist"/gpu-runtime-*-1."$rpm_arch".rpm
for packager in deb rpm; do
  "$nfpm" package --config packaging/nfpm.yaml --packager "$packager" --target "$dist/" >"$dist/nfpm-$packager.log" 2>&1 ||
    { cat "$dist/nfpm-$packager.log" >&2; die "nfpm $packager failed"; }
  rm -f "$dist/nfpm-$packager.log"
done
built=("$dist"/gpu-runtime_"$version"_"$deb_arch".deb "$dist"/gpu-runtime-"$version"-1."$rpm_arch".rpm)
for f in "${built[@]}"; do
  [ -f "$f" ] || die "nfpm wrote no $f"
done
say "built version $version (glibc >= $GLIBC, nfpm $NFPM_VERSION):"
printf '  %s\n' "${built[@]}"
