#!/bin/sh
# gpu-runtime package: before its files are removed. The same script serves dpkg and rpm:
#   dpkg prerm: remove | upgrade <new version> | deconfigure ... | failed-upgrade <old version>
#   rpm %preun: 0 (erase) | 1 (upgrade: the old package's script, the new package in place)
# On removal, and only then, it stops the running MPS shares (gpu-ctk mps stop: the configured
# ones and any other with a pid file under the MPS root; if one cannot be stopped the removal
# stops), records which running engines have gpu-runtime loaded under whatever name (gpu-ctk
# loaded: postrm leaves a pass-through for them), unregisters every runtime of gpu-runtime's
# from every engine, "gpu" or another name such as "nvidia", told by its path (gpu-ctk runtime
# unconfigure puts each engine's file back as it was before configure) and removes the
# hook link it made. If an engine cannot be unconfigured the removal stops, rather than leave
# that engine pointing at a missing binary. An upgrade keeps everything.
set -e
setup=/usr/lib/gpu-runtime/host-setup

case "$1" in
remove | 0)
  "$setup" stop-mps /usr/bin
  "$setup" record-loaded /usr/bin
  "$setup" unregister /usr/bin
  "$setup" unlink-hook /usr/bin
  ;;
upgrade | deconfigure | failed-upgrade | 1) ;;
*)
  echo "gpu-runtime prerm: unknown argument \"$1\"" >&2
  exit 1
  ;;
esac
exit 0
