#!/usr/bin/env bash
# Builds the real-GPU kit (see tests/realgpu/README.md): everything tests/realgpu/run.sh needs
# on a bare GPU machine, and a copy of run.sh, in one folder that travels to it.
#
#   scripts/build-realgpu-kit.sh [--out DIR]    # default DIR: .realgpu-kit in the repository
#
# DIR/bin      gpu-runtime, gpu-hook (static), gpu-ctk (cgo, glibc), runc (static, libseccomp
#              linked in) built from the Go module proxy at $RUNC_VERSION and cached under
#              .cache/runc/, ldconfig (static, for hosts without one)
# DIR/rootfs   busybox, the glibc loader and the libraries libcuda and nvidia-smi need, and
#              /usr/bin/gpu-probe (tests/realgpu/probe/gpu-probe.c)
# DIR/run.sh   a copy of tests/realgpu/run.sh, so that the kit is all a GPU machine needs
# DIR/KIT.txt  what was built, from which versions, and the sizes
#
# Installs what is missing with apt-get (gcc, libc6-dev, busybox-static, libseccomp-dev,
# pkg-config, file, make) and needs Go and the module proxy for runc's first build. DIR is
# replaced as a whole; a DIR that is not empty and holds no KIT.txt is refused.
set -euo pipefail

RUNC_VERSION="${RUNC_VERSION:-v1.4.3}"
MAX_KIT_BYTES=$((64 << 20))
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="$repo/.realgpu-kit"

while [ $# -gt 0 ]; do
  case "$1" in
    --out) [ $# -ge 2 ] || { echo "build-realgpu-kit: --out needs a directory" >&2; exit 2; }; out="$2"; shift 2 ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "build-realgpu-kit: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
case "$out" in /*) ;; *) out="$PWD/$out" ;; esac

say() { echo "build-realgpu-kit: $*"; }
die() { echo "build-realgpu-kit: $*" >&2; exit 1; }

install_packages() {
  local need=()
  command -v gcc >/dev/null || need+=(gcc)
  [ -e /usr/lib/x86_64-linux-gnu/libc.a ] || need+=(libc6-dev)
  file -L /bin/busybox 2>/dev/null | grep -q static || need+=(busybox-static)
  [ -e /usr/lib/x86_64-linux-gnu/libseccomp.a ] || need+=(libseccomp-dev)
  command -v pkg-config >/dev/null || need+=(pkg-config)
  command -v file >/dev/null || need+=(file)
  command -v make >/dev/null || need+=(make)
  [ ${#need[@]} -eq 0 ] && return
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  say "installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${need[@]}"
}

# build_runc leaves a static runc of $RUNC_VERSION in .cache/runc/$RUNC_VERSION/runc. runc
# needs cgo (libcontainer/nsenter); it is linked as runc's own `make static` does: static-pie,
# glibc and libseccomp linked in, netgo and osusergo so that no NSS module is loaded.
build_runc() {
  local cache="$repo/.cache/runc/$RUNC_VERSION" want="${RUNC_VERSION#v}"
  if [ -x "$cache/runc" ] && "$cache/runc" --version 2>/dev/null | grep -q "^runc version $want\$"; then
    say "runc $RUNC_VERSION cached: $cache/runc"
    return
  fi
  say "building runc $RUNC_VERSION from the Go module proxy into $cache (a minute or two)"
  local tmp
  tmp="$(mktemp -d)"
  # `go install pkg@version` is refused by this proxy for some modules: get runc into a
  # throwaway module (its go.mod pins every dependency) and build it there.
  (
    cd "$tmp"
    export GOSUMDB=off GOFLAGS=-mod=mod GOWORK=off CGO_ENABLED=1
    go mod init runc-build >/dev/null 2>&1
    go get "github.com/opencontainers/runc@$RUNC_VERSION" >get.log 2>&1 || { cat get.log >&2; exit 1; }
    go build -trimpath -buildmode=pie -tags "seccomp urfave_cli_no_docs netgo osusergo" \
      -ldflags "-s -w -linkmode external -extldflags -static-pie" -o "$tmp/runc" github.com/opencontainers/runc
  ) || { rm -rf "$tmp"; die "runc $RUNC_VERSION build failed"; }
  file "$tmp/runc" | grep -q "static-pie linked" || { rm -rf "$tmp"; die "runc is not static: $(file "$tmp/runc")"; }
  mkdir -p "$cache"
  mv -f "$tmp/runc" "$cache/runc.new"
  mv -f "$cache/runc.new" "$cache/runc"
  rm -rf "$tmp"
}

# library_path prints where the host's loader cache has a 64-bit library.
library_path() {
  local p
  p="$(/sbin/ldconfig -p | awk -v n="$1" '$1 == n && /x86-64/ { print $NF; exit }')"
  if [ -z "$p" ] || [ ! -e "$p" ]; then die "library $1 not found in the host's ld.so.cache"; fi
  echo "$p"
}

build_rootfs() {
  local rootfs="$1" multiarch=lib/x86_64-linux-gnu
  mkdir -p "$rootfs"/{bin,etc/ld.so.conf.d,lib64,"$multiarch",usr/bin,proc,sys,dev,tmp,run,root}
  chmod 1777 "$rootfs/tmp"
  cp /bin/busybox "$rootfs/bin/busybox"
  local applet
  for applet in $(/bin/busybox --list); do
    [ "$applet" = busybox ] || ln -s busybox "$rootfs/bin/$applet"
  done
  # The loader and what libcuda, libnvidia-ml and nvidia-smi link against (glibc >= 2.34 keeps
  # libdl, libpthread and librt as stubs; the driver's libraries still name them).
  local lib
  for lib in ld-linux-x86-64.so.2 libc.so.6 libm.so.6 libdl.so.2 libpthread.so.0 librt.so.1; do
    cp -L "$(library_path "$lib")" "$rootfs/$multiarch/$lib"
  done
  ln -s "../$multiarch/ld-linux-x86-64.so.2" "$rootfs/lib64/ld-linux-x86-64.so.2"
  printf 'include /etc/ld.so.conf.d/*.conf\n' >"$rootfs/etc/ld.so.conf"
  printf '/lib/x86_64-linux-gnu\n/usr/lib/x86_64-linux-gnu\n' >"$rootfs/etc/ld.so.conf.d/x86_64-linux-gnu.conf"
  printf 'root:x:0:0:root:/root:/bin/sh\n' >"$rootfs/etc/passwd"
  printf 'root:x:0:\n' >"$rootfs/etc/group"
  gcc -O2 -Wall -Wextra -Werror -o "$rootfs/usr/bin/gpu-probe" "$repo/tests/realgpu/probe/gpu-probe.c" -ldl
}

# glibc_needs prints the newest GLIBC_ symbol version a binary asks for.
glibc_needs() {
  objdump -T "$1" 2>/dev/null | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1
}

install_packages
command -v go >/dev/null || die "Go is not installed; install Go >= 1.25 (https://go.dev/dl/)"
if [ -e "$out" ] && [ -n "$(ls -A "$out")" ] && [ ! -e "$out/KIT.txt" ]; then
  die "$out is not empty and is no kit (no KIT.txt): refusing to replace it"
fi
build_runc
stage="$(mktemp -d "$(dirname "$out")/.realgpu-kit-stage.XXXXXX")"
trap 'rm -rf "$stage"' EXIT
say "building gpu-runtime, gpu-hook and gpu-ctk (make build)"
make --no-print-directory -C "$repo" build BIN="$stage/bin" >"$stage/make.log" 2>&1 || { cat "$stage/make.log" >&2; die "make build failed"; }
rm -f "$stage/make.log"
# The kit runs containers through gpu-runtime; the DRA plugin (about 50 MiB, client-go) has no
# part in it and would not fit in the 64 MiB that travel with the kit.
rm -f "$stage/bin/gpu-kubelet-plugin"
cp "$repo/.cache/runc/$RUNC_VERSION/runc" "$stage/bin/runc"
file -L /sbin/ldconfig | grep -q "static" || die "/sbin/ldconfig is not a static executable"
cp -L /sbin/ldconfig "$stage/bin/ldconfig"
say "building the rootfs and gpu-probe"
build_rootfs "$stage/rootfs"
cp "$repo/tests/realgpu/run.sh" "$stage/run.sh"

for b in gpu-runtime gpu-hook runc ldconfig; do
  file "$stage/bin/$b" | grep -q "static" || die "$b is not a static executable: $(file "$stage/bin/$b")"
done
bytes="$(du -sb "$stage" | cut -f1)"
[ "$bytes" -lt "$MAX_KIT_BYTES" ] || die "the kit is $((bytes >> 20)) MiB, over the 64 MiB that can travel with it"
{
  echo "gpu-runtime real-GPU kit (scripts/build-realgpu-kit.sh); run as root: bash KIT/run.sh KIT OUT (tests/realgpu/README.md)"
  echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -srm)"
  echo "gpu-runtime: $("$stage/bin/gpu-runtime" --version 2>&1 | head -1)"
  echo "go: $(go env GOVERSION)"
  echo "runc: $("$stage/bin/runc" --version | tr '\n' ';' | sed 's/;$//')"
  echo "runc build: $RUNC_VERSION from the Go module proxy, static-pie, seccomp on (libseccomp $(pkg-config --modversion libseccomp) linked in)"
  echo "gpu-ctk needs: $(glibc_needs "$stage/bin/gpu-ctk") (dynamic: loads the host's libnvidia-ml)"
  echo "rootfs: busybox $(/bin/busybox | head -1 | awk '{print $2}'), glibc $(/sbin/ldconfig --version | head -1 | awk '{print $NF}') (loader, libc, libm, libdl, libpthread, librt), gpu-probe"
  echo "size: $((bytes >> 10)) KiB"
  (cd "$stage" && du -sk bin/* rootfs | awk '{ printf "  %6d KiB  %s\n", $1, $2 }')
} >"$stage/KIT.txt"
rm -rf "$out"
mv "$stage" "$out"
trap - EXIT
say "kit ready: $out ($((bytes >> 20)) MiB)"
