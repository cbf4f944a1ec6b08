#!/bin/sh
# gpu-runtime package: after its files are removed. The same script serves dpkg and rpm:
#   dpkg postrm: remove | purge | upgrade <new version> | disappear | failed-upgrade | abort-install | abort-upgrade
#   rpm %postun: 0 (erase) | 1 (upgrade)
# Removal drops gpu-runtime's discovery cache (/run/gpu-runtime/discovery-cache.csv, and the
# directory when nothing else is in it: running MPS shares and the health file stay, never
# removed from under a daemon) and keeps /etc/gpu-runtime/config.toml; dpkg's purge removes that too (rpm -e keeps an edited one as
# config.toml.rpmsave, as rpm does for every configuration file).
set -e

case "$1" in
remove | 0)
  rm -f /run/gpu-runtime/discovery-cache.csv
  rmdir /run/gpu-runtime 2>/dev/null || true
  ;;
purge)
  rm -f /run/gpu-runtime/discovery-cache.csv
  rmdir /run/gpu-runtime 2>/dev/null || true
  rm -f /etc/gpu-runtime/config.toml.dpkg-old /etc/gpu-runtime/config.toml.dpkg-dist /etc/gpu-runtime/config.toml.dpkg-new
  rmdir /etc/gpu-runtime 2>/dev/null || true
  ;;
upgrade | disappear | failed-upgrade | abort-install | abort-upgrade | 1) ;;
*)
  echo "gpu-runtime postrm: unknown argument \"$1\"" >&2
  exit 1
  ;;
esac
exit 0
