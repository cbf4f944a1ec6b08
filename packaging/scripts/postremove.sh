#!/bin/sh
# gpu-runtime package: after its files are removed. The same script serves dpkg and rpm:
#   dpkg postrm: remove | purge | upgrade <new version> | disappear | failed-upgrade | abort-install | abort-upgrade
#   rpm %postun: 0 (erase) | 1 (upgrade)
# Removal drops gpu-runtime's discovery cache (/run/gpu-runtime/discovery-cache.csv, and the
# directory when nothing else is in it) and keeps /etc/gpu-runtime/config.toml; dpkg's purge
# removes that too (rpm -e keeps an edited one as config.toml.rpmsave, as rpm does for every
# configuration file), with the health file and its lock and the MPS shares' directories
# (their daemons were stopped before removal; a tmpfs still mounted is left, and said).
#
# The pass-through. An engine reads its runtimes when it starts: a running dockerd or
# containerd that had gpu-runtime loaded as a runtime, under whatever name ("gpu", or "nvidia"
# after configure --runtime-name nvidia; prerm recorded which, in
# /run/gpu-runtime/engines-loaded) keeps calling /usr/bin/gpu-runtime until it restarts, to
# stop and delete the containers it started with it and, where that runtime is its default,
# to start every new container. So removal leaves /usr/bin/gpu-runtime as a small script that
# passes every command to runc (crun where there is no runc), except that it refuses to create
# a container that asks for a GPU, saying that gpu-runtime was removed and which engine to
# restart; and it says which engine to restart. Purge removes the pass-through once no engine
# recorded still runs as the same process (pid and start time); otherwise it keeps it and says
# how to remove it after the restart. Installing the package again replaces it.
set -e

passthrough=/usr/bin/gpu-runtime
marker="# gpu-runtime pass-through: left by the removal of gpu-runtime's package"
record=/run/gpu-runtime/engines-loaded

# restart_of ENGINE: the command that restarts it.
restart_of() {
  case "$1" in
  docker) echo "systemctl restart docker" ;;
  *) echo "systemctl restart $1" ;;
  esac
}

daemon_of() {
  case "$1" in
  docker) echo dockerd ;;
  *) echo "$1" ;;
  esac
}

# runtimes_of NAMES: NAMES (comma-separated, of [A-Za-z0-9._-]) as words: the runtime "a", the
# runtimes "a", "b", or gpu-runtime when none.
runtimes_of() {
  case "$1" in
  "") echo "gpu-runtime" ;;
  *,*) echo "the runtimes $(printf '%s' "$1" | sed 's/[^,][^,]*/"&"/g; s/,/, /g')" ;;
  *) echo "the runtime \"$1\"" ;;
  esac
}

# start_time PID: field 22 of /proc/PID/stat ("" when PID does not run).
start_time() {
  stat="$(cat "/proc/$1/stat" 2>/dev/null)" || return 0
  rest="${stat##*) }"
  # shellcheck disable=SC2086 # split into the fields after the command name
  set -- $rest
  shift 19
  echo "$1"
}

# leave_passthrough: after removal, while the record names an engine, write the pass-through.
leave_passthrough() {
  [ -s "$record" ] || { rm -f "$record"; return 0; }
  [ -e "$passthrough" ] && [ "$(sed -n 2p "$passthrough" 2>/dev/null)" != "$marker" ] && { rm -f "$record"; return 0; }
  restarts=""
  lines=""
  allnames=""
  while read -r engine pid start state names; do
    case "$engine" in docker | containerd) ;; *) continue ;; esac
    case "$pid$start" in "" | *[!0-9]*) pid=0 start=0 ;; esac
    restart="$(restart_of "$engine")"
    restarts="${restarts:+$restarts && }$restart"
    lines="$lines# loaded: $engine $pid $start
"
    who="the running $(daemon_of "$engine")"
    [ "$pid" = 0 ] || who="$who (pid $pid)"
    # NAMES: the runtimes of gpu-runtime's, comma-separated; "-": not known; none: a record
    # of a gpu-ctk that knew only "gpu".
    case "$names" in "") names=gpu ;; "-" | *[!A-Za-z0-9._,-]*) names="" ;; esac
    for n in $(printf '%s' "$names" | tr ',' ' '); do
      case ",$allnames," in *",$n,"*) ;; *) allnames="${allnames:+$allnames,}$n" ;; esac
    done
    runtime="$(runtimes_of "$names")"
    case "$state" in
    default) what="has $runtime loaded as its default runtime" ;;
    unknown) what="may have gpu-runtime loaded as a runtime (it did not say)" ;;
    *) what="has $runtime loaded" ;;
    esac
    echo "gpu-runtime: $who $what until it restarts: left $passthrough, a pass-through to runc, so that its containers still stop and containers without a GPU still start; a GPU container fails until then. Restart it: $restart"
  done <"$record"
  rm -f "$record"
  [ -n "$restarts" ] || return 0
  tmp="$passthrough.gpu-runtime-tmp"
  {
    echo "#!/bin/sh"
    echo "$marker"
    using="$(runtimes_of "$allnames")"
    echo "# while a running engine still has $using loaded; removed by purge once it restarted, or by hand."
    printf '%s' "$lines"
    echo "restart='$restarts'"
    echo "using='$using'"
    cat <<'EOF'
# Every command goes to runc (crun where there is none), with its arguments as given; create and
# run of a container asking for a GPU (NVIDIA_VISIBLE_DEVICES other than void or none, docker
# --gpus's hook, a CDI device annotation, the device plugin's volume mounts) fail instead.
msg="gpu-runtime was removed: this container asks for a GPU, which nothing gives it now. Restart the engine, so that it stops using $using: $restart; then install gpu-runtime again, or run the container without a GPU"
sub="" bundle="." log="" format=text want=""
for a in "$@"; do
  if [ -n "$want" ]; then
    case "$want" in log) log="$a" ;; format) format="$a" ;; bundle) bundle="$a" ;; esac
    want=""
    continue
  fi
  if [ -z "$sub" ]; then
    case "$a" in
    --log) want=log ;; --log=*) log="${a#--log=}" ;;
    --log-format) want=format ;; --log-format=*) format="${a#--log-format=}" ;;
    --root | --criu | --rootless) want=skip ;;
    -*) ;;
    *) sub="$a" ;;
    esac
  else
    case "$a" in
    --bundle | -b) want=bundle ;; --bundle=*) bundle="${a#--bundle=}" ;;
    esac
  fi
done
if [ "$sub" = create ] || [ "$sub" = run ]; then
  spec="$bundle/config.json"
  if head -c 4194304 "$spec" 2>/dev/null | grep -Eo '"NVIDIA_VISIBLE_DEVICES=[^"]*"|nvidia-container-runtime-hook|"cdi\.k8s\.io/|/var/run/nvidia-container-devices' |
    grep -Evq '^"NVIDIA_VISIBLE_DEVICES=(void|none|)"$'; then
    echo "gpu-runtime: $msg" >&2
    if [ -n "$log" ]; then
      now="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
      if [ "$format" = json ]; then
        printf '{"level":"error","msg":"%s","time":"%s"}\n' "$(printf '%s' "$msg" | sed 's/\\/\\\\/g; s/"/\\"/g')" "$now" >>"$log"
      else
        printf 'time="%s" level=error msg="%s"\n' "$now" "$(printf '%s' "$msg" | sed 's/"/\\"/g')" >>"$log"
      fi
    fi
    exit 1
  fi
fi
for r in runc crun; do
  if p="$(PATH="${PATH:-/usr/bin:/bin}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" command -v "$r")"; then
    exec "$p" "$@"
  fi
done
echo "gpu-runtime (pass-through): neither runc nor crun is installed" >&2
exit 127
EOF
  } >"$tmp"
  chmod 0755 "$tmp"
  mv -f "$tmp" "$passthrough"
}

# purge_passthrough: remove the pass-through unless an engine it names still runs as the same
# process (or as one not known).
purge_passthrough() {
  [ -f "$passthrough" ] && [ "$(sed -n 2p "$passthrough")" = "$marker" ] || return 0
  running=""
  restarts=""
  while read -r hash word engine pid start; do
    [ "$hash $word" = "# loaded:" ] || continue
    case "$pid$start" in "" | *[!0-9]*) pid=0 ;; esac
    if [ "$pid" = 0 ] || [ "$(start_time "$pid")" = "$start" ]; then
      who="$(daemon_of "$engine")"
      [ "$pid" = 0 ] || who="$who (pid $pid)"
      running="${running:+$running, }$who"
      restarts="${restarts:+$restarts && }$(restart_of "$engine")"
    fi
  done <"$passthrough"
  if [ -n "$running" ]; then
    echo "gpu-runtime: kept $passthrough, the pass-through to runc: the running $running still has gpu-runtime loaded as a runtime. Restart it, then remove the pass-through: $restarts && rm $passthrough"
    return 0
  fi
  rm -f "$passthrough"
}

case "$1" in
remove | 0)
  rm -f /run/gpu-runtime/discovery-cache.csv
  leave_passthrough
  rmdir /run/gpu-runtime 2>/dev/null || true
  ;;
purge)
  rm -f /run/gpu-runtime/discovery-cache.csv /run/gpu-runtime/health.csv /run/gpu-runtime/health.csv.lock "$record"
  if [ -d /run/gpu-runtime/mps ]; then
    if grep -q " /run/gpu-runtime/mps/" /proc/self/mountinfo 2>/dev/null; then
      echo "gpu-runtime: left /run/gpu-runtime/mps: an MPS share's tmpfs is still mounted there (see gpu-ctk mps status once installed again, or umount it)"
    else
      rm -rf /run/gpu-runtime/mps
    fi
  fi
  rmdir /run/gpu-runtime 2>/dev/null || true
  purge_passthrough
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
