#!/bin/sh
# gpu-runtime package: after its files are in place. The same script serves dpkg and rpm:
#   dpkg postinst: configure [<version configured before>] | abort-upgrade | abort-remove | abort-deconfigure
#   rpm %post:     1 (install) | 2 (upgrade)
# It never configures or restarts a container engine. It links docker's hook name where that is
# safe (host-setup link-hook) and says what to run. An upgrade needs nothing: the engines keep
# pointing at /usr/bin/gpu-runtime, which the package manager replaced by a rename.
set -e
setup=/usr/lib/gpu-runtime/host-setup

upgraded() {
  echo "gpu-runtime: upgraded${1:+ from $1}; engine registrations are unchanged and need no restart: new containers run the new gpu-runtime"
}

case "$1" in
configure)
  "$setup" link-hook /usr/bin
  if [ -n "${2:-}" ]; then
    upgraded "$2"
  else
    "$setup" hint
  fi
  ;;
1)
  "$setup" link-hook /usr/bin
  "$setup" hint
  ;;
2)
  "$setup" link-hook /usr/bin
  upgraded ""
  ;;
abort-upgrade | abort-remove | abort-deconfigure) ;;
*)
  echo "gpu-runtime postinst: unknown argument \"$1\"" >&2
  exit 1
  ;;
esac
exit 0
