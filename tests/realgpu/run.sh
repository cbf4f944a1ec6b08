#!/usr/bin/env bash
# The real-GPU check (tests/realgpu/README.md): runs containers through gpu-runtime and the
# kit's runc on this host's GPU and driver, and times NVML and the create path.
#
#   bash tests/realgpu/run.sh KIT OUT [--driver-root DIR] [--dev-root DIR] [--proc-root DIR] [--runs N] [--fake]
#   bash KIT/run.sh KIT OUT ...      (the kit carries a copy of this script)
#
# KIT is a folder built by `make realgpu-kit`; OUT receives run.log (everything), results.md
# (the tables) and gpu-runtime.log. The driver root is /usr/local/nvidia or
# /home/kubernetes/bin/nvidia when it holds lib64/libnvidia-ml.so.1, else "/"; --runs is the
# number of runs of each timing (default 20); --proc-root is where the driver's /proc files are
# read (MIG capabilities; a fake host's procroot). --fake says the host is one built by
# tests/cmd/fakehost: its libcuda has no device API, so the CUDA checks are skipped.
# REALGPU_DEADLINE (seconds, default 480) is when it stops starting containers.
#
# Needs root, bash, coreutils, grep, sed and awk. It never changes the GPU's settings; when
# /sys/fs/cgroup holds no usable hierarchy it mounts one in a private mount namespace of its
# own. It prints a short table last and exits 1 if any check failed, 2 on bad usage.
set -uo pipefail

usage() {
  echo "usage: bash tests/realgpu/run.sh KIT OUT [--driver-root DIR] [--dev-root DIR] [--proc-root DIR] [--runs N] [--fake]" >&2
  exit 2
}

KIT="" OUT="" DRIVER_ROOT="" DEV_ROOT="/" PROC_ROOT="/" RUNS=20 FAKE=false
args=("$@")
while [ $# -gt 0 ]; do
  case "$1" in
    --driver-root) [ $# -ge 2 ] || usage; DRIVER_ROOT="$2"; shift 2 ;;
    --dev-root) [ $# -ge 2 ] || usage; DEV_ROOT="$2"; shift 2 ;;
    --proc-root) [ $# -ge 2 ] || usage; PROC_ROOT="$2"; shift 2 ;;
    --runs) [ $# -ge 2 ] && [[ "$2" =~ ^[1-9][0-9]*$ ]] || usage; RUNS="$2"; shift 2 ;;
    --fake) FAKE=true; shift ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    -*) echo "run.sh: unknown option $1" >&2; usage ;;
    *) if [ -z "$KIT" ]; then KIT="$1"; elif [ -z "$OUT" ]; then OUT="$1"; else usage; fi; shift ;;
  esac
done
[ -n "$KIT" ] && [ -n "$OUT" ] || usage
[ "$(id -u)" -eq 0 ] || { echo "run.sh: run as root (runc, device nodes)" >&2; exit 2; }
KIT="$(cd "$KIT" 2>/dev/null && pwd -P)" || { echo "run.sh: kit folder not found" >&2; exit 2; }
for f in bin/gpu-runtime bin/gpu-hook bin/gpu-ctk bin/runc bin/ldconfig rootfs/usr/bin/gpu-probe KIT.txt; do
  [ -e "$KIT/$f" ] || { echo "run.sh: $KIT is no kit: $f is missing (make realgpu-kit)" >&2; exit 2; }
done

# cgroup_mode says which cgroup hierarchy runc will find: v2, v1 (with the devices
# controller), or none.
cgroup_mode() {
  case "$(stat -fc %T /sys/fs/cgroup 2>/dev/null)" in
    cgroup2fs) echo v2 ;;
    tmpfs) if [ "$(stat -fc %T /sys/fs/cgroup/devices 2>/dev/null)" = cgroupfs ]; then echo v1; else echo none; fi ;;
    *) echo none ;;
  esac
}
# Without a usable hierarchy runc cannot create a container: mount one where nobody else sees it.
if [ "$(cgroup_mode)" = none ] && [ -z "${REALGPU_PRIVATE_MOUNTS:-}" ]; then
  unshare=(unshare --mount --propagation private)
  command -v unshare >/dev/null || unshare=("$KIT/rootfs/bin/busybox" unshare -m --propagation private)
  echo "run.sh: /sys/fs/cgroup has no usable cgroup hierarchy: going on in a private mount namespace to mount one" >&2
  exec "${unshare[@]}" env REALGPU_PRIVATE_MOUNTS=1 bash "$0" "${args[@]}"
fi
CGROUP_NOTE=""
if [ "$(cgroup_mode)" = none ]; then
  if mount -t cgroup2 cgroup2 /sys/fs/cgroup 2>/dev/null; then
    CGROUP_NOTE="mounted at /sys/fs/cgroup in a private mount namespace"
  elif mount -t tmpfs cgroups /sys/fs/cgroup && mkdir -p /sys/fs/cgroup/devices &&
    mount -t cgroup -o devices devices /sys/fs/cgroup/devices; then
    CGROUP_NOTE="a devices hierarchy mounted at /sys/fs/cgroup/devices in a private mount namespace"
  else
    CGROUP_NOTE="no cgroup hierarchy could be mounted"
  fi
fi

mkdir -p "$OUT" || exit 2
OUT="$(cd "$OUT" && pwd -P)"
LOG="$OUT/run.log" RESULTS="$OUT/results.md"
: >"$LOG"
# make_work makes the working folder where programs can run (a noexec /tmp cannot hold the
# containers' root filesystems).
make_work() {
  local base w
  for base in "${TMPDIR:-/tmp}" /var/tmp /run "$PWD"; do
    w="$(mktemp -d "$base/gpu-runtime-realgpu.XXXXXX" 2>/dev/null)" || continue
    if cp "$KIT/rootfs/bin/busybox" "$w/true" 2>/dev/null && "$w/true" 2>/dev/null; then # busybox's applet "true"
      rm -f "$w/true"
      echo "$w"
      return 0
    fi
    rm -rf "$w"
  done
  return 1
}
WORK="$(make_work)" || { echo "run.sh: no folder to work in where programs can run (tried \$TMPDIR, /tmp, /var/tmp, /run, .)" >&2; exit 1; }
STATE="$WORK/state" CONFIG="$WORK/config.toml"
RUNC="$KIT/bin/runc" RUNTIME="$KIT/bin/gpu-runtime" CTK="$KIT/bin/gpu-ctk" PROBE="$KIT/rootfs/usr/bin/gpu-probe"
# The run must end within the GPU machines' 10 minutes a command: past DEADLINE seconds no
# container is started and the timings stop; every step that could hang has a timeout.
START=$SECONDS DEADLINE="${REALGPU_DEADLINE:-480}" NOT_STARTED=255
[[ "$DEADLINE" =~ ^[0-9]+$ ]] || { echo "run.sh: REALGPU_DEADLINE=$DEADLINE is not a number of seconds" >&2; exit 2; }
mkdir -p "$STATE" "$WORK/cases"

log() { printf '%s\n' "$*" >>"$LOG"; }
say() { printf 'run.sh: %s\n' "$*"; log "== $*"; }
# logged runs a command with its output going to the log only.
logged() { log "\$ $*"; "$@" >>"$LOG" 2>&1; }

cleanup() {
  local id
  for id in $("$RUNC" --root "$STATE" list -q 2>/dev/null); do
    "$RUNC" --root "$STATE" delete --force "$id" >/dev/null 2>&1
  done
  # MPS daemons a killed run left (gpu-ctk mps stop is idempotent).
  [ -f "$WORK/config-mps.toml" ] && GPU_RUNTIME_CONFIG="$WORK/config-mps.toml" timeout 30 "$CTK" mps stop >/dev/null 2>&1
  if [ -f "$WORK/gpu-runtime.log" ]; then
    cp "$WORK/gpu-runtime.log" "$OUT/gpu-runtime.log"
  else
    echo "(gpu-runtime wrote no log: no container was created through it)" >"$OUT/gpu-runtime.log"
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- results ----
CHECKS=() OUTCOMES=() DETAILS=() TIMINGS=() FACTS=()
record() { # check outcome detail; outcome is pass, FAIL or skip
  CHECKS+=("$1") OUTCOMES+=("$2") DETAILS+=("$3")
  printf 'run.sh: %-4s %s: %s\n' "$2" "$1" "$3"
  log "-- $2 $1: $3"
  write_results # so that a run stopped from outside still leaves its table
}
fact() { FACTS+=("$1|$2"); log "fact: $1: $2"; }
# first_line prints a file's first line matching a pattern (the first line when none does),
# cut to 200 characters, for a table cell.
first_line() {
  local line
  line="$(grep -m1 -E "$2" "$1" 2>/dev/null)" || line="$(grep -m1 . "$1" 2>/dev/null)"
  line="${line//|/\\|}"
  printf '%s' "${line:0:200}"
}
# failure_line prints the line of a failed run that says why.
failure_line() { first_line "$1" 'gpu-runtime:|unsatisfied|rror|denied|not permitted|timed out|did not end|not run:'; }

FINISHED=false
# write_results writes results.md from what is recorded so far.
write_results() {
  local passed=0 failed=0 skipped=0 o f i t name runs m lo hi unit
  for o in "${OUTCOMES[@]}"; do
    case "$o" in pass) passed=$((passed + 1)) ;; FAIL) failed=$((failed + 1)) ;; *) skipped=$((skipped + 1)) ;; esac
  done
  SUMMARY="$passed passed, $failed failed, $skipped skipped in $((SECONDS - START)) s"
  $FINISHED || SUMMARY="$SUMMARY (unfinished: the run was stopped before its end)"
  {
    echo "## gpu-runtime real-GPU check, $(date -u +%Y-%m-%dT%H:%M:%SZ)$($FAKE && echo ' (fake host)')"
    echo
    echo "| | |"
    echo "|---|---|"
    for f in "${FACTS[@]}"; do echo "| ${f%%|*} | ${f#*|} |"; done
    echo
    echo "| check | outcome | detail |"
    echo "|---|---|---|"
    for i in "${!CHECKS[@]}"; do echo "| ${CHECKS[$i]} | ${OUTCOMES[$i]} | ${DETAILS[$i]} |"; done
    echo
    echo "| timing | runs | median | min | max |"
    echo "|---|---|---|---|---|"
    for t in "${TIMINGS[@]}"; do
      IFS='|' read -r name runs m lo hi unit <<<"$t"
      echo "| $name | $runs | $m $unit | $lo $unit | $hi $unit |"
    done
    echo
    echo "$SUMMARY."
  } >"$RESULTS"
  FAILED=$failed
}

# ---- numbers ----
now_ms() { local t=${EPOCHREALTIME:-}; [ -n "$t" ] || t=$(date +%s.%N); printf '%s' "${t/,/.}"; }
elapsed_ms() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", (b - a) * 1000 }'; }
# stats prints "median min max" of the numbers on stdin, or "n/a n/a n/a".
stats() {
  sort -g | awk '{ a[NR] = $1 } END {
    if (NR == 0) { print "n/a n/a n/a"; exit }
    m = (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2
    printf "%.3f %.3f %.3f\n", m, a[1], a[NR] }'
}
timing() { # name runs "median min max" [unit]
  local m lo hi
  read -r m lo hi <<<"$3"
  TIMINGS+=("$1|$2|$m|$lo|$hi|${4:-ms}")
  log "timing: $1: runs $2, median $m, min $lo, max $hi ${4:-ms}"
}

# ---- the host ----
detect_driver_root() {
  local r
  for r in /usr/local/nvidia /home/kubernetes/bin/nvidia; do
    compgen -G "$r/lib64/libnvidia-ml.so.*" >/dev/null && { echo "$r"; return; }
  done
  echo /
}
# find_in_root prints the first of root-relative paths that exists under the driver root.
find_in_root() {
  local p
  for p in "$@"; do
    p="${DRIVER_ROOT%/}/$p"
    [ -e "$p" ] && { echo "$p"; return 0; }
  done
  return 1
}
json_field() { # file key: the first string or number value of "key" in gpu-ctk's JSON
  sed -n -E "s/^ *\"$2\": \"?([^\",]*)\"?,?\$/\\1/p" "$1" | head -1
}

AUTO_ROOT=false
if [ -z "$DRIVER_ROOT" ]; then DRIVER_ROOT="$(detect_driver_root)" AUTO_ROOT=true; fi
for p in "$KIT" "$OUT" "$WORK" "$DRIVER_ROOT" "$DEV_ROOT"; do
  case "$p" in *'"'*|*'\'*|*$'\n'*) echo "run.sh: path $p has a quote, backslash or newline" >&2; exit 2 ;; esac
done

say "gpu-runtime real-GPU check: kit $KIT, output $OUT$($FAKE && echo ', fake host')"
log "$(cat "$KIT/KIT.txt")"
runtime_kind="$(uname -r)"
dmesg 2>/dev/null | head -3 | grep -q gVisor && runtime_kind="$runtime_kind, gVisor"
fact "kernel" "$runtime_kind"
if ! $AUTO_ROOT; then
  fact "driver root" "$DRIVER_ROOT"
elif [ "$DRIVER_ROOT" = / ]; then
  fact "driver root" "/ (no /usr/local/nvidia or /home/kubernetes/bin/nvidia with lib64/libnvidia-ml.so.*)"
else
  fact "driver root" "$DRIVER_ROOT (found: it has lib64/libnvidia-ml.so.*)"
fi
fact "dev root" "$DEV_ROOT"
fact "proc root" "$PROC_ROOT"
fact "cgroups" "$(cgroup_mode)${CGROUP_NOTE:+ ($CGROUP_NOTE)}"
fact "runc" "$("$RUNC" --version 2>&1 | head -1 | awk '{print $3}') (kit: static, libseccomp $("$RUNC" --version 2>&1 | awk '/libseccomp/ {print $2}') linked in)"
fact "gpu-runtime" "$("$RUNTIME" --version 2>&1 | head -1)"
LDCONFIG=/sbin/ldconfig
[ -x "$LDCONFIG" ] || LDCONFIG="$KIT/bin/ldconfig"
fact "ldconfig for the hook" "$LDCONFIG"
log "--- the driver root and device nodes"
logged ls -la "$DRIVER_ROOT"
for d in lib64 bin usr/lib/x86_64-linux-gnu usr/bin; do
  [ -d "${DRIVER_ROOT%/}/$d" ] && log "\$ ls -la ${DRIVER_ROOT%/}/$d | grep -iE 'nvidia|libcuda'" &&
    ls -la "${DRIVER_ROOT%/}/$d" 2>&1 | grep -iE 'nvidia|libcuda' | head -60 >>"$LOG"
done
logged ls -la "${DEV_ROOT%/}/dev/"
logged grep -E 'cgroup' /proc/self/mountinfo

NVML="$(find_in_root lib64/libnvidia-ml.so.1 usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1 lib/x86_64-linux-gnu/libnvidia-ml.so.1 usr/lib64/libnvidia-ml.so.1 usr/local/nvidia/lib64/libnvidia-ml.so.1)"
SMI="$(find_in_root bin/nvidia-smi usr/bin/nvidia-smi usr/local/nvidia/bin/nvidia-smi)"

# ---- 1. NVML initialisation, before anything else here touches the GPU ----
if [ -z "$NVML" ]; then
  record "NVML initialisation" FAIL "no libnvidia-ml.so.1 under $DRIVER_ROOT (lib64, usr/lib/x86_64-linux-gnu, lib/x86_64-linux-gnu, usr/lib64, usr/local/nvidia/lib64)"
else
  : >"$WORK/nvml.ms"
  first="" failed=""
  for i in $(seq 0 "$RUNS"); do
    if [ "$i" -gt 0 ] && [ $((SECONDS - START)) -ge $((DEADLINE / 4)) ]; then
      log "NVML timing stopped after $((i - 1)) runs: it has used its share of the time limit"
      break
    fi
    # gpu-probe runs on the host through the kit's loader and glibc, whatever the host's are.
    out="$(timeout --kill-after=5 60 "$KIT/rootfs/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2" \
      --library-path "$KIT/rootfs/lib/x86_64-linux-gnu" "$PROBE" nvml "$NVML" 2>&1)" || [ -n "$out" ] || out="gpu-probe printed nothing: it timed out (60 s) or crashed"
    log "$out"
    ms="$(sed -n -E 's/.* init_ms=([0-9.]+).*/\1/p' <<<"$out")"
    if [ -z "$ms" ]; then failed="$(grep -m1 'result=' <<<"$out")"; failed="${failed:-$out}"; break; fi
    if [ "$i" -eq 0 ]; then first="$ms"; else echo "$ms" >>"$WORK/nvml.ms"; fi
  done
  if [ -n "$failed" ]; then
    record "NVML initialisation" FAIL "$NVML: ${failed:0:200}"
  else
    n="$(grep -c . "$WORK/nvml.ms")"
    record "NVML initialisation" pass "$NVML: first ${first} ms, then median $(stats <"$WORK/nvml.ms" | awk '{print $1}') ms over $n fresh processes"
    timing "NVML init, first in this run" 1 "$first $first $first"
    timing "NVML init, a fresh process each" "$n" "$(stats <"$WORK/nvml.ms")"
  fi
fi

# ---- 2. the config, gpu-ctk info and doctor ----
cat >"$CONFIG" <<TOML
[runtime]
runtimes = ["$RUNC"]
log-level = "debug"
log-file = "$WORK/gpu-runtime.log"
[driver]
root = "$DRIVER_ROOT"
dev-root = "$DEV_ROOT"
proc-root = "$PROC_ROOT"
[hook]
path = "$KIT/bin/gpu-hook"
ldconfig = "$LDCONFIG"
[discovery]
cache-file = "$WORK/discovery-cache.csv"
TOML
log "--- $CONFIG"
log "$(cat "$CONFIG")"
export GPU_RUNTIME_CONFIG="$CONFIG"

DRIVER="" CUDA="" GPUS=0 GPU0_UUID="" GPU0_MINOR="" GPU0_NAME=""
log "\$ gpu-ctk info"
if timeout --kill-after=5 60 "$CTK" info >"$WORK/info.txt" 2>&1 && timeout --kill-after=5 60 "$CTK" info --json >"$WORK/info.json" 2>>"$LOG"; then
  cat "$WORK/info.txt" >>"$LOG"
  DRIVER="$(json_field "$WORK/info.json" driver_version)"
  CUDA="$(json_field "$WORK/info.json" cuda_version)"
  GPUS="$(grep -c '"uuid":' "$WORK/info.json")"
  GPU0_UUID="$(json_field "$WORK/info.json" uuid)"
  GPU0_MINOR="$(json_field "$WORK/info.json" minor)"
  GPU0_NAME="$(json_field "$WORK/info.json" name)"
  fact "driver" "$DRIVER, CUDA $CUDA, NVML $(json_field "$WORK/info.json" nvml_path)"
  fact "GPUs" "$GPUS: GPU 0 is $GPU0_NAME ($GPU0_UUID, /dev/nvidia$GPU0_MINOR)"
  if [ "$GPUS" -ge 1 ]; then
    record "gpu-ctk info" pass "driver $DRIVER, CUDA $CUDA, $GPUS GPU(s), GPU 0: $GPU0_NAME"
  else
    record "gpu-ctk info" FAIL "NVML lists no GPU"
  fi
else
  cat "$WORK/info.txt" >>"$LOG"
  record "gpu-ctk info" FAIL "$(first_line "$WORK/info.txt" 'gpu-ctk:')"
fi
if "$CTK" doctor --help >/dev/null 2>&1; then
  log "\$ gpu-ctk doctor"
  timeout --kill-after=5 120 "$CTK" doctor >"$WORK/doctor.txt" 2>&1
  rc=$?
  cat "$WORK/doctor.txt" >>"$LOG"
  counts="$(grep -c '^ok ' "$WORK/doctor.txt") ok, $(grep -c '^warn ' "$WORK/doctor.txt") warn, $(grep -c '^fail ' "$WORK/doctor.txt") fail"
  if [ "$rc" -eq 0 ]; then
    record "gpu-ctk doctor" pass "exit 0: $counts"
  else
    record "gpu-ctk doctor" FAIL "exit status $rc: $counts; first failure: $(grep -m1 '^fail ' "$WORK/doctor.txt" | cut -c6-)"
  fi
else
  record "gpu-ctk doctor" skip "skipped: not in this build"
fi

MIG_UUID=""
if [ -n "$SMI" ]; then
  log "\$ $SMI -L"
  timeout --kill-after=5 60 "$SMI" -L >"$WORK/smi-L.txt" 2>&1
  cat "$WORK/smi-L.txt" >>"$LOG"
  MIG_UUID="$(sed -n -E 's/^ *MIG .*\(UUID: (MIG-[^)]*)\).*/\1/p' "$WORK/smi-L.txt" | head -1)"
  if ! $FAKE; then # read-only queries; the fake nvidia-smi knows only -L
    q="$(timeout --kill-after=5 60 "$SMI" --query-gpu=name,persistence_mode,mig.mode.current,compute_mode --format=csv,noheader 2>&1 | head -1)"
    fact "nvidia-smi (GPU 0)" "name, persistence, MIG, compute mode: $q"
    logged timeout --kill-after=5 60 "$SMI"
  fi
fi

# ---- 3. containers ----
mkdir -p "$WORK/rootfs-base"
cp -a "$KIT/rootfs/." "$WORK/rootfs-base/"
json_string() {
  local s=$1
  s=${s//\\/\\\\}; s=${s//\"/\\\"}; s=${s//$'\n'/\\n}; s=${s//$'\t'/\\t}
  printf '"%s"' "$s"
}
SEQ=0
# new_bundle NAME SCRIPT ENV...: a bundle whose container runs `sh -c SCRIPT` with ENV, on a
# fresh copy of the kit's rootfs, as `runc spec` would write it but with host networking (no
# network namespace: sandboxes like gVisor offer only the host's) and no cgroup mount.
new_bundle() {
  local name=$1 script=$2 e env='"PATH=/usr/local/nvidia/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"'
  shift 2
  SEQ=$((SEQ + 1))
  BUNDLE="$WORK/bundles/$SEQ-$name"
  mkdir -p "$BUNDLE"
  cp -al "$WORK/rootfs-base" "$BUNDLE/rootfs" 2>/dev/null || cp -a "$WORK/rootfs-base" "$BUNDLE/rootfs"
  for e in "$@"; do env+=", $(json_string "$e")"; done
  local caps='"CAP_AUDIT_WRITE", "CAP_KILL", "CAP_NET_BIND_SERVICE"'
  cat >"$BUNDLE/config.json" <<JSON
{
  "ociVersion": "1.0.2",
  "process": {
    "terminal": false,
    "user": {"uid": 0, "gid": 0},
    "args": ["/bin/sh", "-c", $(json_string "$script")],
    "env": [$env],
    "cwd": "/",
    "capabilities": {"bounding": [$caps], "effective": [$caps], "permitted": [$caps]},
    "rlimits": [{"type": "RLIMIT_NOFILE", "hard": 1024, "soft": 1024}],
    "noNewPrivileges": true
  },
  "root": {"path": "rootfs", "readonly": false},
  "hostname": "realgpu",
  "mounts": [
    {"destination": "/proc", "type": "proc", "source": "proc"},
    {"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]},
    {"destination": "/dev/pts", "type": "devpts", "source": "devpts", "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"]},
    {"destination": "/dev/shm", "type": "tmpfs", "source": "shm", "options": ["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"]},
    {"destination": "/sys", "type": "sysfs", "source": "sysfs", "options": ["nosuid", "noexec", "nodev", "ro"]}
  ],
  "linux": {
    "resources": {"devices": [{"allow": false, "access": "rwm"}]},
    "namespaces": [{"type": "pid"}, {"type": "ipc"}, {"type": "uts"}, {"type": "mount"}]
  }
}
JSON
}
# run_container NAME TOOL SCRIPT ENV...: runs a container to its end with TOOL (runc or
# gpu-runtime); RC is the exit status, CASE_OUT the file with its output and the runtime's
# errors and log.
run_container() {
  local name=$1 tool=$2 script=$3
  shift 3
  new_bundle "$name" "$script" "$@"
  local id="realgpu-$$-$SEQ" bin="$RUNTIME"
  [ "$tool" = runc ] && bin="$RUNC"
  CASE_OUT="$WORK/cases/$SEQ-$name.out"
  log "--- container $name ($tool): env $*"
  if [ $((SECONDS - START)) -ge "$DEADLINE" ]; then
    echo "run.sh: not run: the run is near its 10-minute limit" >"$CASE_OUT"
    RC=$NOT_STARTED
    log "$(cat "$CASE_OUT")"
    return
  fi
  timeout --kill-after=5 90 "$bin" --root "$STATE" --log "$CASE_OUT.log" run --bundle "$BUNDLE" "$id" >"$CASE_OUT" 2>&1
  RC=$?
  [ "$RC" -eq 124 ] && echo "run.sh: the container did not end within 90 s" >>"$CASE_OUT"
  "$RUNC" --root "$STATE" delete --force "$id" >/dev/null 2>&1
  [ -s "$CASE_OUT.log" ] && grep -E 'level=(error|warning)|"level":"(error|warning)"' "$CASE_OUT.log" >>"$CASE_OUT"
  log "exit status $RC"
  cat "$CASE_OUT" >>"$LOG"
}
# The script every GPU container runs: its NVIDIA device nodes, nvidia-smi -L and the probe.
GPU_SCRIPT='echo "realgpu: devices $(ls /dev | grep "^nvidia" | tr "\n" " ")"
if command -v nvidia-smi >/dev/null 2>&1; then nvidia-smi -L; echo "realgpu: nvidia-smi exit=$?"; else echo "realgpu: nvidia-smi absent"; fi
gpu-probe; echo "realgpu: probe exit=$?"'
# run_failed says why the last container failed.
run_failed() {
  if [ "$RC" -eq "$NOT_STARTED" ]; then
    echo "not run: the run is near its 10-minute limit"
  else
    echo "gpu-runtime run failed (exit $RC): $(failure_line "$CASE_OUT")"
  fi
}
devices_of() { sed -n 's/^realgpu: devices //p' "$1" | sed 's/ *$//'; }
probe_result() { grep -m1 '^gpu-probe: result=' "$1" | sed 's/^gpu-probe: //'; }
has_line() { grep -qE "$2" "$1"; }
gpu_nodes() { devices_of "$1" | tr ' ' '\n' | grep -E '^nvidia[0-9]+$' | tr '\n' ' ' | sed 's/ $//'; }
FAKE_CUDA="skipped: fake host — its libcuda has only cuInit and cuDriverGetVersion (no device API)"

# check_cuda CHECK FILE WANT: the probe's result against what the case wants (ok or no-device).
check_cuda() {
  local check=$1 file=$2 want=$3 result
  result="$(probe_result "$file")"
  if $FAKE; then
    if [[ "$result" == "result=missing-symbol symbol=cuDeviceGetCount" ]] && has_line "$file" '^gpu-probe: library=libcuda.so.1 loaded=yes'; then
      record "$check" skip "$FAKE_CUDA; libcuda.so.1 loaded from $(sed -n -E 's/^gpu-probe: library=libcuda.so.1 loaded=yes path="([^"]*)".*/\1/p' "$file")"
    else
      record "$check" FAIL "fake libcuda: want result=missing-symbol symbol=cuDeviceGetCount, got ${result:-no probe output}"
    fi
    return
  fi
  case "$want:$result" in
    ok:result=ok*)
      record "$check" pass "$(grep -m1 '^gpu-probe: device=0 ' "$file" | sed 's/^gpu-probe: //'); $(grep -m1 '^gpu-probe: alloc ' "$file" | sed 's/^gpu-probe: //'); $(grep -m1 '^gpu-probe: cuInit=' "$file" | sed 's/^gpu-probe: //')"
      ;;
    no-device:result=no-device*) record "$check" pass "$result" ;;
    *) record "$check" FAIL "want result=$want, got ${result:-no probe output: $(first_line "$file" 'error|rror')}" ;;
  esac
}

BASELINE_OK=false
run_container baseline runc 'echo "realgpu: baseline ok"'
if [ "$RC" -eq 0 ] && has_line "$CASE_OUT" '^realgpu: baseline ok$'; then
  BASELINE_OK=true
  record "plain runc container" pass "busybox ran through the kit's runc"
else
  if [ "$RC" -eq "$NOT_STARTED" ]; then
    record "plain runc container" FAIL "$(run_failed)"
  else
    record "plain runc container" FAIL "runc cannot run a container on this host: $(first_line "$CASE_OUT" 'rror|denied|not permitted|no such')"
  fi
fi
NOT_RUN="skipped: the plain runc container failed, so no container can run here"
[ "$RC" -eq "$NOT_STARTED" ] && NOT_RUN="skipped: not run: the run is near its 10-minute limit"

if $BASELINE_OK; then
  run_container passthrough gpu-runtime 'echo "realgpu: devices $(ls /dev | grep "^nvidia" | tr "\n" " ")"'
  if [ "$RC" -eq 0 ] && [ -z "$(devices_of "$CASE_OUT" | tr -d ' ')" ]; then
    record "non-GPU container through gpu-runtime" pass "ran, no NVIDIA device nodes"
  else
    record "non-GPU container through gpu-runtime" FAIL "exit $RC, devices: $(devices_of "$CASE_OUT"); $(failure_line "$CASE_OUT")"
  fi
else
  record "non-GPU container through gpu-runtime" skip "$NOT_RUN"
fi

GPU0_OK=false
if ! $BASELINE_OK; then
  for c in "GPU 0: device nodes" "GPU 0: nvidia-smi -L" "GPU 0: CUDA probe"; do record "$c" skip "$NOT_RUN"; done
elif [ -z "$GPU0_UUID" ]; then
  for c in "GPU 0: device nodes" "GPU 0: nvidia-smi -L" "GPU 0: CUDA probe"; do record "$c" skip "skipped: gpu-ctk info failed, so GPU 0 is unknown"; done
else
  run_container gpu0 gpu-runtime "$GPU_SCRIPT" NVIDIA_VISIBLE_DEVICES=0
  if [ "$RC" -ne 0 ]; then
    record "GPU 0: device nodes" FAIL "$(run_failed)"
    record "GPU 0: nvidia-smi -L" skip "skipped: the container did not run"
    record "GPU 0: CUDA probe" skip "skipped: the container did not run"
  else
    GPU0_OK=true
    nodes="$(gpu_nodes "$CASE_OUT")"
    all="$(devices_of "$CASE_OUT")"
    if [ "$nodes" = "nvidia$GPU0_MINOR" ] && [[ " $all " == *" nvidiactl "* ]] && [[ " $all " == *" nvidia-uvm "* ]]; then
      record "GPU 0: device nodes" pass "$all"
    else
      record "GPU 0: device nodes" FAIL "want nvidia$GPU0_MINOR (only), nvidiactl and nvidia-uvm; got: $all"
    fi
    listed="$(grep -c '^GPU [0-9]*:' "$CASE_OUT")"
    if ! has_line "$CASE_OUT" '^realgpu: nvidia-smi exit=0$'; then
      record "GPU 0: nvidia-smi -L" FAIL "$(first_line "$CASE_OUT" 'nvidia-smi|NVIDIA-SMI|Failed')"
    elif ! grep -qF "(UUID: $GPU0_UUID)" "$CASE_OUT"; then
      record "GPU 0: nvidia-smi -L" FAIL "GPU 0 ($GPU0_UUID) not listed"
    elif ! $FAKE && [ "$listed" -ne 1 ]; then
      record "GPU 0: nvidia-smi -L" FAIL "lists $listed GPUs, want only GPU 0"
    else
      record "GPU 0: nvidia-smi -L" pass "$(grep -m1 '^GPU 0:' "$CASE_OUT")$($FAKE && echo ' (the fake nvidia-smi lists every GPU)')"
    fi
    check_cuda "GPU 0: CUDA probe" "$CASE_OUT" ok
    fact "libcuda in the container" "$(sed -n -E 's/^gpu-probe: library=libcuda.so.1 loaded=yes path="([^"]*)" file="([^"]*)".*/\1 -> \2/p' "$CASE_OUT")"
    if ! $FAKE && has_line "$CASE_OUT" '^gpu-probe: device=0 ' && ! grep -qF "name=\"$GPU0_NAME\"" "$CASE_OUT"; then
      record "GPU 0: CUDA and NVML agree" FAIL "CUDA names device 0 $(sed -n 's/^gpu-probe: device=0 name=//p' "$CASE_OUT" | head -1), NVML $GPU0_NAME"
    fi
  fi
fi

if ! $BASELINE_OK; then
  for c in "none: no GPU device node" "none: driver files" "none: CUDA finds no device"; do record "$c" skip "$NOT_RUN"; done
else
  run_container none gpu-runtime "$GPU_SCRIPT" NVIDIA_VISIBLE_DEVICES=none
  if [ "$RC" -ne 0 ]; then
    record "none: no GPU device node" FAIL "$(run_failed)"
  else
    nodes="$(gpu_nodes "$CASE_OUT")"
    if [ -z "$nodes" ]; then record "none: no GPU device node" pass "devices: $(devices_of "$CASE_OUT")"
    else record "none: no GPU device node" FAIL "got $nodes"; fi
    if has_line "$CASE_OUT" '^gpu-probe: library=libcuda.so.1 loaded=yes'; then
      record "none: driver files" pass "libcuda.so.1 loads; nvidia-smi $(sed -n 's/^realgpu: nvidia-smi //p' "$CASE_OUT")"
    else
      record "none: driver files" FAIL "libcuda.so.1 did not load: $(probe_result "$CASE_OUT")"
    fi
    check_cuda "none: CUDA finds no device" "$CASE_OUT" no-device
  fi
fi

if ! $BASELINE_OK; then
  for c in "utility: nvidia-smi works" "utility: no libcuda"; do record "$c" skip "$NOT_RUN"; done
else
  run_container utility gpu-runtime "$GPU_SCRIPT" NVIDIA_VISIBLE_DEVICES=0 NVIDIA_DRIVER_CAPABILITIES=utility
  if [ "$RC" -ne 0 ]; then
    record "utility: nvidia-smi works" FAIL "$(run_failed)"
  else
    if has_line "$CASE_OUT" '^realgpu: nvidia-smi exit=0$' && grep -qF "(UUID: $GPU0_UUID)" "$CASE_OUT"; then
      record "utility: nvidia-smi works" pass "$(grep -m1 '^GPU 0:' "$CASE_OUT")"
    else
      record "utility: nvidia-smi works" FAIL "$(first_line "$CASE_OUT" 'nvidia-smi|NVIDIA-SMI|Failed')"
    fi
    result="$(probe_result "$CASE_OUT")"
    if [[ "$result" == result=no-libcuda ]]; then
      record "utility: no libcuda" pass "$(grep -m1 '^gpu-probe: library=' "$CASE_OUT" | sed 's/^gpu-probe: //')"
    else
      record "utility: no libcuda" FAIL "want result=no-libcuda, got ${result:-no probe output}"
    fi
  fi
fi

if ! $BASELINE_OK || [ -z "$CUDA" ]; then
  reason="$NOT_RUN"; [ -z "$CUDA" ] && reason="skipped: gpu-ctk info failed, so the CUDA version is unknown"
  for c in "requirement the host fails" "requirement the host passes"; do record "$c" skip "$reason"; done
else
  run_container require-fail gpu-runtime 'echo "realgpu: ran"' NVIDIA_VISIBLE_DEVICES=0 'NVIDIA_REQUIRE_CUDA=cuda>=99.0'
  want="unsatisfied condition: cuda>=99.0, please update your driver to a newer version, or use an earlier cuda container (host: cuda $CUDA, driver $DRIVER)"
  if [ "$RC" -ne 0 ] && grep -qF "$want" "$CASE_OUT" && ! has_line "$CASE_OUT" '^realgpu: ran$'; then
    record "requirement the host fails" pass "cuda>=99.0 refused: $want"
  else
    record "requirement the host fails" FAIL "exit $RC; want \"$want\"; got: $(first_line "$CASE_OUT" 'unsatisfied|rror')"
  fi
  pass_req="cuda>=$CUDA,driver>=${DRIVER%%.*}"
  run_container require-pass gpu-runtime 'echo "realgpu: ran"' NVIDIA_VISIBLE_DEVICES=0 "NVIDIA_REQUIRE_CUDA=$pass_req"
  if [ "$RC" -eq 0 ] && has_line "$CASE_OUT" '^realgpu: ran$'; then
    record "requirement the host passes" pass "$pass_req: the container ran"
  else
    record "requirement the host passes" FAIL "$pass_req: exit $RC: $(first_line "$CASE_OUT" 'unsatisfied|rror')"
  fi
fi

if [ -z "$MIG_UUID" ]; then
  record "MIG device" skip "skipped: no MIG device on this host (nvidia-smi -L lists none; MIG mode is never changed here)"
elif ! $BASELINE_OK; then
  record "MIG device" skip "$NOT_RUN"
else
  run_container mig gpu-runtime "$GPU_SCRIPT" "NVIDIA_VISIBLE_DEVICES=$MIG_UUID"
  if [ "$RC" -ne 0 ] && has_line "$CASE_OUT" 'MIG devices are not supported yet'; then
    record "MIG device" skip "skipped: this build refuses MIG devices: $(first_line "$CASE_OUT" 'MIG devices are not supported yet')"
  elif [ "$RC" -ne 0 ]; then
    record "MIG device" FAIL "$MIG_UUID: $(run_failed)"
  elif ! grep -qF "(UUID: $MIG_UUID)" "$CASE_OUT"; then
    record "MIG device" FAIL "$MIG_UUID: nvidia-smi -L in the container does not list it"
  else
    check_cuda "MIG device" "$CASE_OUT" ok
  fi
fi

# The other driver root of a /usr/local/nvidia host: "/" finds the same folder as a standard
# library directory and puts its files at /usr/local/nvidia/{lib64,bin} in the container.
ALT='GPU 0 with driver.root "/"'
if [ "$DRIVER_ROOT" != /usr/local/nvidia ]; then
  record "$ALT" skip "skipped: the driver is not in /usr/local/nvidia"
elif ! $BASELINE_OK; then
  record "$ALT" skip "$NOT_RUN"
else
  sed -e 's|^root = ".*"|root = "/"|' -e "s|discovery-cache.csv|discovery-cache-root.csv|" "$CONFIG" >"$WORK/config-root.toml"
  GPU_RUNTIME_CONFIG="$WORK/config-root.toml" run_container root-slash gpu-runtime "$GPU_SCRIPT" NVIDIA_VISIBLE_DEVICES=0
  path="$(sed -n -E 's/^gpu-probe: library=libcuda.so.1 loaded=yes path="([^"]*)".*/\1/p' "$CASE_OUT")"
  result="$(probe_result "$CASE_OUT")" cuda="$(probe_result "$CASE_OUT")"
  $FAKE && [[ "$result" == result=missing-symbol* ]] && cuda="CUDA skipped: fake host"
  if [ "$RC" -ne 0 ]; then
    record "$ALT" FAIL "$(run_failed)"
  elif [ "$path" = /usr/local/nvidia/lib64/libcuda.so.1 ] && has_line "$CASE_OUT" '^realgpu: nvidia-smi exit=0$' &&
    { [[ "$result" == result=ok* ]] || [ "$cuda" = "CUDA skipped: fake host" ]; }; then
    record "$ALT" pass "libcuda from $path; nvidia-smi ran; $cuda"
  else
    record "$ALT" FAIL "want libcuda from /usr/local/nvidia/lib64/libcuda.so.1, nvidia-smi and CUDA working; got libcuda from ${path:-nowhere}, nvidia-smi $(sed -n 's/^realgpu: nvidia-smi //p' "$CASE_OUT"), ${result:-no probe output}"
  fi
fi

# MPS shares: large (80 %) and small (20 %) of GPU 0, each with its own control daemon; the
# probe in a container per share reads the SMs its context may use (cuCtxGetExecAffinity).
# MPS runs in the GPU's default compute mode: no setting of the GPU changes.
MPSC="MPS shares 80 % / 20 %"
if ! $BASELINE_OK; then
  record "$MPSC" skip "$NOT_RUN"
elif ! "$CTK" mps --help >/dev/null 2>&1; then
  record "$MPSC" skip "skipped: not in this build"
else
  cp "$CONFIG" "$WORK/config-mps.toml"
  cat >>"$WORK/config-mps.toml" <<TOML
[mps]
root = "$WORK/mps"
[mps.shares.large]
devices = ["0"]
active-thread-percentage = 80
[mps.shares.small]
devices = ["0"]
active-thread-percentage = 20
TOML
  MPS_SCRIPT='echo "realgpu: mps pipe $CUDA_MPS_PIPE_DIRECTORY $(ls /tmp/nvidia-mps | tr "\n" " ")"
gpu-probe; echo "realgpu: probe exit=$?"'
  log "\$ gpu-ctk mps start"
  if ! GPU_RUNTIME_CONFIG="$WORK/config-mps.toml" timeout --kill-after=5 60 "$CTK" mps start >"$WORK/mps-start.out" 2>&1; then
    cat "$WORK/mps-start.out" >>"$LOG"
    record "$MPSC" FAIL "gpu-ctk mps start: $(first_line "$WORK/mps-start.out" 'gpu-ctk:')"
  else
    GPU_RUNTIME_CONFIG="$WORK/config-mps.toml" run_container mps-large gpu-runtime "$MPS_SCRIPT" NVIDIA_MPS_SHARE=large
    large_out=$CASE_OUT large_rc=$RC
    GPU_RUNTIME_CONFIG="$WORK/config-mps.toml" run_container mps-small gpu-runtime "$MPS_SCRIPT" NVIDIA_MPS_SHARE=small
    small_out=$CASE_OUT small_rc=$RC
    log "\$ gpu-ctk mps stop"
    GPU_RUNTIME_CONFIG="$WORK/config-mps.toml" timeout --kill-after=5 60 "$CTK" mps stop >>"$LOG" 2>&1
    sms() { sed -n -E 's/^gpu-probe: sm_count=([0-9]+) of=([0-9]+)$/\1 \2/p' "$1" | head -1; }
    read -r large_sm total <<<"$(sms "$large_out")"
    read -r small_sm _ <<<"$(sms "$small_out")"
    if [ "$large_rc" -ne 0 ] || [ "$small_rc" -ne 0 ]; then
      RC=$((large_rc | small_rc)) CASE_OUT=$large_out
      [ "$large_rc" -eq 0 ] && CASE_OUT=$small_out
      record "$MPSC" FAIL "$(run_failed)"
    elif ! has_line "$large_out" '^realgpu: mps pipe /tmp/nvidia-mps ' || ! has_line "$small_out" '^realgpu: mps pipe /tmp/nvidia-mps '; then
      record "$MPSC" FAIL "a share's container lacks its pipe directory or CUDA_MPS_PIPE_DIRECTORY"
    elif $FAKE; then
      record "$MPSC" pass "both shares' containers ran with their pipe directories; SM counts skipped: fake host"
    elif [ -z "$large_sm" ] || [ -z "$small_sm" ]; then
      record "$MPSC" FAIL "the probe printed no SM count (large: $(probe_result "$large_out"); small: $(probe_result "$small_out"))"
    else
      detail="large: $large_sm of $total SMs ($((large_sm * 100 / total)) %), small: $small_sm of $total ($((small_sm * 100 / total)) %)"
      if [ $((large_sm * 100 / total)) -ge 75 ] && [ $((large_sm * 100 / total)) -le 85 ] &&
        [ $((small_sm * 100 / total)) -ge 15 ] && [ $((small_sm * 100 / total)) -le 25 ]; then
        record "$MPSC" pass "$detail"
      else
        record "$MPSC" FAIL "want about 80 % and 20 %: $detail"
      fi
    fi
  fi
fi

# ---- 4. create with a discovery-cache miss and a hit, alternating ----
time_create() { # NAME: times `gpu-runtime create` of a GPU 0 container; sets MS and HIT
  new_bundle "$1" 'sleep 1' NVIDIA_VISIBLE_DEVICES=0
  local id="realgpu-$$-$SEQ" t0 t1 rc
  t0="$(now_ms)"
  timeout --kill-after=5 60 "$RUNTIME" --root "$STATE" --log "$WORK/create.log" create --bundle "$BUNDLE" "$id" >"$WORK/create.out" 2>&1 </dev/null
  rc=$?
  t1="$(now_ms)"
  MS="$(elapsed_ms "$t0" "$t1")"
  HIT="$(grep 'discovered host' "$WORK/create.log" 2>/dev/null | tail -1 | grep -oE 'cache_hit[^a-z]*(true|false)' | grep -oE 'true|false')"
  "$RUNC" --root "$STATE" delete --force "$id" >/dev/null 2>&1
  rm -rf "$BUNDLE"
  if [ "$rc" -ne 0 ]; then
    cat "$WORK/create.out" >>"$LOG"
    CREATE_ERROR="$(first_line "$WORK/create.out" 'rror')"
    return 1
  fi
}
if ! $GPU0_OK; then
  record "create: cache miss vs hit" skip "skipped: the GPU 0 container failed"
else
  : >"$WORK/miss.ms"
  : >"$WORK/hit.ms"
  wrong="" CREATE_ERROR="" done_runs=0
  for i in $(seq 1 "$RUNS"); do
    if [ $((SECONDS - START)) -ge "$DEADLINE" ]; then
      log "timings stopped after $done_runs pairs: the run is near its time limit"
      break
    fi
    rm -f "$WORK/discovery-cache.csv"
    time_create miss || break
    echo "$MS" >>"$WORK/miss.ms"
    [ "$HIT" = false ] || wrong="$wrong miss#$i:${HIT:-unknown}"
    time_create hit || break
    echo "$MS" >>"$WORK/hit.ms"
    [ "$HIT" = true ] || wrong="$wrong hit#$i:${HIT:-unknown}"
    done_runs=$i
  done
  log "create miss ms: $(tr '\n' ' ' <"$WORK/miss.ms")"
  log "create hit ms: $(tr '\n' ' ' <"$WORK/hit.ms")"
  miss="$(stats <"$WORK/miss.ms")" hit="$(stats <"$WORK/hit.ms")"
  timing "create, discovery cache miss" "$done_runs" "$miss"
  timing "create, discovery cache hit" "$done_runs" "$hit"
  ratio="$(awk -v a="${miss%% *}" -v b="${hit%% *}" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }')"
  if [ -n "$CREATE_ERROR" ]; then
    record "create: cache miss vs hit" FAIL "a create failed after $done_runs pairs: $CREATE_ERROR"
  elif [ -n "$wrong" ]; then
    record "create: cache miss vs hit" FAIL "the cache did not behave (want miss after removing it, hit next):$wrong"
  elif [ "$done_runs" -lt "$RUNS" ]; then
    record "create: cache miss vs hit" FAIL "only $done_runs of $RUNS pairs within the time limit"
  else
    record "create: cache miss vs hit" pass "medians ${miss%% *} ms (miss) vs ${hit%% *} ms (hit), ratio $ratio, over $RUNS pairs"
  fi
fi

# ---- 5. the tables ----
FINISHED=true
write_results
log "$(cat "$RESULTS")"
echo
echo "== results ($RESULTS; full log $LOG)"
for f in "${FACTS[@]}"; do printf '%-22s %s\n' "${f%%|*}" "${f#*|}"; done
echo
for i in "${!CHECKS[@]}"; do printf '%-4s  %-40s %s\n' "${OUTCOMES[$i]}" "${CHECKS[$i]}" "${DETAILS[$i]:0:150}"; done
echo
for t in "${TIMINGS[@]}"; do
  IFS='|' read -r name runs m lo hi unit <<<"$t"
  printf '%-34s runs %-3s median %10s %s  (min %s, max %s)\n' "$name" "$runs" "$m" "$unit" "$lo" "$hi"
done
echo "$SUMMARY"
[ "$FAILED" -eq 0 ]
