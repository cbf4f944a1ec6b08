#!/usr/bin/env bash
# Demo: build a fake 2-GPU host, then run a busybox container through gpu-runtime (real runc)
# that asks for GPU 1 with NVIDIA_VISIBLE_DEVICES=1, and show what it got. Needs root.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" -eq 0 ] || { echo "demo: run as root (mknod, runc)" >&2; exit 1; }
if [ ! -x bin/gpu-runtime ] || [ ! -x bin/gpu-hook ]; then make build; fi

work=$(mktemp -d /tmp/gpu-runtime-demo.XXXXXX)
trap 'runc --root "$work/state" delete --force demo >/dev/null 2>&1 || true; rm -rf "$work"' EXIT

go build -o "$work/fakehost" ./tests/cmd/fakehost
eval "$("$work/fakehost" --dir "$work/host" --gpus 2)"
echo "== fake host: $GPU_COUNT GPUs, driver $DRIVER_VERSION, CUDA $CUDA_VERSION (NVML form) (driver root $DRIVER_ROOT)"

cat >"$work/config.toml" <<TOML
[driver]
root = "$DRIVER_ROOT"
dev-root = "$DEV_ROOT"
proc-root = "$PROC_ROOT"
TOML

bundle="$work/bundle"
mkdir -p "$bundle/rootfs/bin" "$bundle/rootfs/etc"
cp /bin/busybox "$bundle/rootfs/bin/busybox"
for a in $(/bin/busybox --list); do [ "$a" = busybox ] || ln -sf busybox "$bundle/rootfs/bin/$a"; done
spec() { # $1 = NVIDIA_VISIBLE_DEVICES value; what `docker run -e NVIDIA_VISIBLE_DEVICES=...` would produce
cat >"$bundle/config.json" <<JSON
{
  "ociVersion": "1.0.2",
  "process": {
    "terminal": false, "user": {"uid": 0, "gid": 0}, "cwd": "/",
    "args": ["/bin/sh", "-c", "echo '-- device nodes:'; ls -l /dev/nvidia*; echo '-- cgroup device rules:'; grep -E '^c (195|235):' /sys/fs/cgroup/devices/devices.list 2>/dev/null || echo '(cgroup v2: rules live in the eBPF program)'; echo '-- driver libraries:'; ls -l /usr/lib/x86_64-linux-gnu/libcuda.so* /usr/lib/x86_64-linux-gnu/libnvidia-ml.so*; echo '-- ld.so.cache entries for libcuda.so.1:'; grep -c libcuda.so.1 /etc/ld.so.cache; echo '-- nvidia-smi:'; nvidia-smi"],
    "env": ["PATH=/usr/sbin:/usr/bin:/sbin:/bin", "NVIDIA_VISIBLE_DEVICES=$1"],
    "noNewPrivileges": true
  },
  "root": {"path": "rootfs", "readonly": false},
  "hostname": "gpu-demo",
  "mounts": [
    {"destination": "/proc", "type": "proc", "source": "proc"},
    {"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]},
    {"destination": "/dev/pts", "type": "devpts", "source": "devpts", "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"]},
    {"destination": "/sys", "type": "sysfs", "source": "sysfs", "options": ["nosuid", "noexec", "nodev", "ro"]},
    {"destination": "/sys/fs/cgroup", "type": "cgroup", "source": "cgroup", "options": ["nosuid", "noexec", "nodev", "relatime", "ro"]}
  ],
  "linux": {
    "resources": {"devices": [{"allow": false, "access": "rwm"}]},
    "namespaces": [{"type": "pid"}, {"type": "network"}, {"type": "ipc"}, {"type": "uts"}, {"type": "mount"}]
  }
}
JSON
}
spec 1
echo "== what gpu-runtime will inject, and why (gpu-ctk explain --bundle; the edits only):"
GPU_RUNTIME_CONFIG="$work/config.toml" bin/gpu-ctk explain --bundle "$bundle" | grep -E '^(devices|capabilities):|^  (device|mount /usr/bin/nvidia-smi|mount /usr/lib/x86_64-linux-gnu/libcuda\.so|hook)' | cut -c1-200
echo "== docker run -e NVIDIA_VISIBLE_DEVICES=1 equivalent: gpu-runtime run demo"
GPU_RUNTIME_CONFIG="$work/config.toml" bin/gpu-runtime --root "$work/state" run --bundle "$bundle" demo
echo "== only /dev/nvidia1 (GPU 1) was given, plus the control and UVM nodes."

echo "== and a request for a GPU that does not exist fails clearly:"
spec 5
GPU_RUNTIME_CONFIG="$work/config.toml" bin/gpu-runtime --root "$work/state" run --bundle "$bundle" demo2 || true
