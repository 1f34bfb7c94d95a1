#!/usr/bin/env bash
# hack/runtime.sh: a real containerd (CRI v1) for nodelet's users, tests and CI.
#
#   hack/runtime.sh up       install what is missing, configure and start containerd,
#                            build and import the test images; prints exactly one line
#                            on stdout: CONTAINER_RUNTIME_ENDPOINT=unix://.../containerd.sock
#                            Idempotent: a second run changes nothing.
#   hack/runtime.sh down     remove all pods, stop containerd and its shims, unmount,
#                            remove the bridge and iptables rules, delete state and run
#                            directories (the cache directory is kept). Safe when not up.
#   hack/runtime.sh stop     stop only the containerd process (pods and shims keep running)
#   hack/runtime.sh start    start it again with the same config, wait until it answers
#   hack/runtime.sh env      print the CONTAINER_RUNTIME_ENDPOINT=... line
#   hack/runtime.sh status   say whether it is running (exit 0 if running, 3 if not)
#   hack/runtime.sh crictl ARGS...   run crictl against this runtime
#   hack/runtime.sh ctr ARGS...      run ctr (namespace k8s.io) against this runtime
#
# Environment (defaults):
#   NODELET_STATE_DIR=/var/lib/nodelet-dev   containerd root/state, config, CNI, images, log
#   NODELET_RUN_DIR=/run/nodelet-dev         sockets, pid file, runc state
#   NODELET_CACHE_DIR=/var/cache/nodelet     crictl binary (survives down)
#   NODELET_BRIDGE=nodelet0                  pod bridge
#   NODELET_POD_CIDR=10.88.0.0/24            pod subnet
#   NODELET_RUNTIME_TIMEOUT=60               seconds to wait for containerd to answer
#
# Nothing leaves the machine: containerd runs with HTTP(S)_PROXY pointing at a closed
# loopback port (an image pull fails at once; 127.0.0.1/localhost are exempt so a local
# registry works), pods get no default route and no masquerade, and iptables drops
# forwarding between the pod bridge and any other interface.
set -euo pipefail

STATE_DIR=${NODELET_STATE_DIR:-/var/lib/nodelet-dev}
RUN_DIR=${NODELET_RUN_DIR:-/run/nodelet-dev}
CACHE_DIR=${NODELET_CACHE_DIR:-/var/cache/nodelet}
BRIDGE=${NODELET_BRIDGE:-nodelet0}
POD_CIDR=${NODELET_POD_CIDR:-10.88.0.0/24}
TIMEOUT=${NODELET_RUNTIME_TIMEOUT:-60}

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SOCK=$RUN_DIR/containerd.sock
ENDPOINT=unix://$SOCK
PIDFILE=$RUN_DIR/containerd.pid
CONFIG=$STATE_DIR/containerd.toml
LOG=$STATE_DIR/containerd.log
CNI_CONF_DIR=$STATE_DIR/cni/net.d
IMAGES_DIR=$STATE_DIR/images
CRICTL_VERSION=v1.37.0
CRICTL=$CACHE_DIR/bin/crictl
PAUSE_IMAGE=registry.k8s.io/pause:3.10
CNI_BIN_DIR=/usr/lib/cni
# A loopback port nothing listens on: a proxied connection is refused at once.
DEAD_PROXY=http://127.0.0.1:9
PACKAGES=(containerd runc containernetworking-plugins busybox-static iptables iproute2)
SYS_PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export PATH=$PATH:$SYS_PATH:/usr/local/go/bin
GO=${GO:-go}

# stdout carries only the result line(s); everything else goes to stderr.
exec 3>&1 1>&2

log() { echo "runtime.sh: $*" >&2; }
die() { log "error: $*"; exit 1; }

check_dirs() {
	local d
	for d in "$STATE_DIR" "$RUN_DIR" "$CACHE_DIR"; do
		[[ $d == /?* && $d != *[[:space:]]* && $(realpath -m "$d") != / ]] ||
			die "bad directory '$d' (must be absolute, not /, without spaces)"
	done
}

need_root() { [ "$(id -u)" = 0 ] || die "must run as root"; }

# Serialize concurrent invocations. The lock lives next to RUN_DIR so down can
# delete RUN_DIR while holding it; fd 9 is closed in containerd.
lock() {
	mkdir -p "$(dirname "$RUN_DIR")"
	exec 9>"${RUN_DIR%/}.lock"
	flock 9
}

CRICTL_CONFIG=$STATE_DIR/crictl.yaml
crictl_() { "$CRICTL" --config "$CRICTL_CONFIG" "$@"; }
ctr_() { ctr -a "$SOCK" -n k8s.io "$@"; }

# ---------------------------------------------------------------- packages, tools

ensure_packages() {
	local p missing=()
	for p in "${PACKAGES[@]}"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
	done
	[ ${#missing[@]} -eq 0 ] && return 0
	log "installing ${missing[*]}"
	(
		# Keep packages from starting their distro services (containerd.service).
		prc=/usr/sbin/policy-rc.d
		if [ ! -e $prc ]; then
			trap 'rm -f $prc' EXIT
			printf '#!/bin/sh\nexit 101\n' >$prc
			chmod 755 $prc
		fi
		apt-get update -q
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
	)
}

ensure_crictl() {
	if [ -x "$CRICTL" ] && "$CRICTL" --version 2>/dev/null | grep -qF "$CRICTL_VERSION"; then
		return 0
	fi
	command -v "$GO" >/dev/null || die "go not found (needed to build crictl and the test images)"
	log "building crictl $CRICTL_VERSION into $CACHE_DIR/bin (a few minutes the first time)"
	mkdir -p "$CACHE_DIR/bin"
	(cd / && GOBIN=$CACHE_DIR/bin GOFLAGS='' GO111MODULE=on "$GO" install \
		-ldflags "-X sigs.k8s.io/cri-tools/pkg/version.Version=$CRICTL_VERSION" \
		"sigs.k8s.io/cri-tools/cmd/crictl@$CRICTL_VERSION")
}

# ---------------------------------------------------------------- config files

# write_if_changed FILE < content: atomic (temp + rename); status 0 if the file
# changed, 1 if it already had this content.
write_if_changed() {
	local dst=$1 tmp
	tmp=$(dirname "$dst")/.$(basename "$dst").tmp
	cat >"$tmp"
	if [ -f "$dst" ] && cmp -s "$tmp" "$dst"; then
		rm -f "$tmp"
		return 1
	fi
	chmod 644 "$tmp"
	mv -f "$tmp" "$dst"
}

containerd_config() {
	cat <<EOF
# Written by hack/runtime.sh; changes are overwritten.
version = 2
root = "$STATE_DIR/root"
state = "$STATE_DIR/state"
oom_score = 0

[grpc]
  address = "$SOCK"

[ttrpc]
  address = "$SOCK.ttrpc"

[debug]
  address = "$RUN_DIR/containerd-debug.sock"
  level = "info"

[metrics]
  address = ""

[plugins]
  [plugins."io.containerd.internal.v1.opt"]
    path = "$STATE_DIR/opt"

  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = "$PAUSE_IMAGE"
    # Root here lacks CAP_SYS_RESOURCE: without this every RunPodSandbox fails.
    restrict_oom_score_adj = true
    disable_apparmor = true
    netns_mounts_under_state_dir = true
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"

    [plugins."io.containerd.grpc.v1.cri".containerd]
      snapshotter = "overlayfs"
      default_runtime_name = "runc"

      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"

        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
          SystemdCgroup = false
          Root = "$RUN_DIR/runc"

    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "$CNI_BIN_DIR"
      conf_dir = "$CNI_CONF_DIR"
      max_conf_num = 1

    [plugins."io.containerd.grpc.v1.cri".registry]
      config_path = "$STATE_DIR/certs.d"
EOF
}

cni_config() {
	cat <<EOF
{
  "cniVersion": "1.0.0",
  "name": "nodelet",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$BRIDGE",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "$STATE_DIR/cni/networks",
        "ranges": [[{"subnet": "$POD_CIDR"}]],
        "routes": []
      }
    },
    {
      "type": "portmap",
      "capabilities": {"portMappings": true}
    }
  ]
}
EOF
}

# ---------------------------------------------------------------- iptables

FW_COMMENT="nodelet-dev $BRIDGE isolation"
fw_rules() {
	printf '%s\n' "-i $BRIDGE ! -o $BRIDGE" "! -i $BRIDGE -o $BRIDGE"
}

fw_add() {
	local r
	while read -r r; do
		# shellcheck disable=SC2086
		iptables -w -C FORWARD $r -m comment --comment "$FW_COMMENT" -j DROP 2>/dev/null ||
			iptables -w -I FORWARD $r -m comment --comment "$FW_COMMENT" -j DROP
	done < <(fw_rules)
}

fw_del() {
	command -v iptables >/dev/null || return 0
	local r
	while read -r r; do
		# shellcheck disable=SC2086
		while iptables -w -C FORWARD $r -m comment --comment "$FW_COMMENT" -j DROP 2>/dev/null; do
			iptables -w -D FORWARD $r -m comment --comment "$FW_COMMENT" -j DROP
		done
	done < <(fw_rules)
}

# ---------------------------------------------------------------- processes

# cmdline PID: sets ARGS to the NUL-separated command line (empty if gone).
cmdline() {
	ARGS=()
	if [ -r "/proc/$1/cmdline" ]; then
		mapfile -d '' ARGS <"/proc/$1/cmdline" 2>/dev/null || true
	fi
}

# is_our_containerd PID
is_our_containerd() {
	local i
	cmdline "$1"
	[ ${#ARGS[@]} -ge 3 ] && [[ ${ARGS[0]##*/} == containerd ]] || return 1
	for ((i = 1; i < ${#ARGS[@]} - 1; i++)); do
		[[ ${ARGS[i]} == --config && ${ARGS[i + 1]} == "$CONFIG" ]] && return 0
	done
	return 1
}

# containerd_pid: print the PID of our containerd if it is alive.
containerd_pid() {
	local pid p
	pid=$(cat "$PIDFILE" 2>/dev/null || true)
	if [[ $pid =~ ^[0-9]+$ ]] && is_our_containerd "$pid"; then
		echo "$pid"
		return 0
	fi
	# The pid file is gone or stale: look for a containerd using our config.
	for p in /proc/[0-9]*; do
		p=${p#/proc/}
		if is_our_containerd "$p"; then
			echo "$p"
			return 0
		fi
	done
	return 1
}

answers() {
	if [ -x "$CRICTL" ]; then
		# The CRI service, not just containerd's own API, must be up.
		"$CRICTL" --config "$CRICTL_CONFIG" -r "$ENDPOINT" -t 3s version >/dev/null 2>&1
	else
		timeout 5 ctr -a "$SOCK" version >/dev/null 2>&1
	fi
}

start_containerd() {
	local pid i
	if pid=$(containerd_pid); then
		log "containerd already running (pid $pid)"
	else
		[ -f "$CONFIG" ] || die "no config at $CONFIG: run '$0 up' first"
		command -v containerd >/dev/null || die "containerd not installed: run '$0 up'"
		mkdir -p "$RUN_DIR"
		rm -f "$SOCK" "$SOCK.ttrpc" "$RUN_DIR/containerd-debug.sock"
		log "starting containerd (log: $LOG)"
		(
			exec 3>&- 9>&-
			exec setsid env -u ALL_PROXY -u all_proxy PATH="$SYS_PATH" \
				HTTP_PROXY="$DEAD_PROXY" HTTPS_PROXY="$DEAD_PROXY" http_proxy="$DEAD_PROXY" https_proxy="$DEAD_PROXY" \
				NO_PROXY=127.0.0.1,localhost,::1 no_proxy=127.0.0.1,localhost,::1 \
				containerd --config "$CONFIG" </dev/null >>"$LOG" 2>&1
		) &
		pid=$!
		echo "$pid" >"$PIDFILE"
	fi
	for ((i = 0; i < TIMEOUT * 5; i++)); do
		answers && return 0
		# Liveness, not the command line: a fresh child may not have exec'd yet.
		if ! proc_alive "$pid"; then
			tail -n 20 "$LOG" >&2 || true
			die "containerd exited; see $LOG"
		fi
		sleep 0.2
	done
	tail -n 20 "$LOG" >&2 || true
	die "containerd (pid $pid) did not answer on $SOCK within ${TIMEOUT}s; see $LOG"
}

# wait_gone PID SECONDS CHECK: wait until CHECK PID fails.
wait_gone() {
	local i
	for ((i = 0; i < $2 * 10; i++)); do
		"$3" "$1" || return 0
		sleep 0.1
	done
	return 1
}

stop_containerd() {
	local pid
	if ! pid=$(containerd_pid); then
		rm -f "$PIDFILE"
		return 0
	fi
	log "stopping containerd (pid $pid)"
	kill -TERM "$pid" 2>/dev/null || true
	if ! wait_gone "$pid" 15 is_our_containerd; then
		log "containerd did not exit on SIGTERM; killing it"
		kill -KILL "$pid" 2>/dev/null || true
		wait_gone "$pid" 5 is_our_containerd || die "cannot kill containerd (pid $pid)"
	fi
	rm -f "$PIDFILE"
}

# shim_pids: PIDs of containerd shims started by our containerd (their command
# line has "-address <our socket>").
shim_pids() {
	local p i
	for p in /proc/[0-9]*; do
		p=${p#/proc/}
		cmdline "$p"
		[[ ${#ARGS[@]} -gt 0 && ${ARGS[0]##*/} == containerd-shim* ]] || continue
		for ((i = 1; i < ${#ARGS[@]} - 1; i++)); do
			if [[ ${ARGS[i]} == -address && ${ARGS[i + 1]} == "$SOCK" ]]; then
				echo "$p"
				break
			fi
		done
	done
}

# descendants PID...: the given PIDs and all their descendants.
descendants() {
	local -A parent=()
	local p stat rest
	for p in /proc/[0-9]*; do
		stat=$(cat "$p/stat" 2>/dev/null) || continue
		rest=${stat##*) }
		read -r _ ppid _ <<<"$rest"
		parent[${p#/proc/}]=$ppid
	done
	local -A seen=()
	local queue=("$@") cur
	while [ ${#queue[@]} -gt 0 ]; do
		cur=${queue[0]}
		queue=("${queue[@]:1}")
		[ -n "${seen[$cur]:-}" ] && continue
		seen[$cur]=1
		echo "$cur"
		for p in "${!parent[@]}"; do
			[ "${parent[$p]}" = "$cur" ] && queue+=("$p")
		done
	done
}

# kill_shims: SIGKILL our shims and every process under them (containers);
# then remove the containers' now empty cgroups.
kill_shims() {
	local shims victims cgroups p line
	mapfile -t shims < <(shim_pids)
	[ ${#shims[@]} -eq 0 ] && return 0
	mapfile -t victims < <(descendants "${shims[@]}")
	log "killing ${#shims[@]} leftover shim(s) and ${#victims[@]} process(es) under them"
	cgroups=()
	for p in "${victims[@]}"; do
		while IFS=: read -r _ ctrls path; do
			[ -n "$path" ] && [ "$path" != / ] || continue
			ctrls=${ctrls#name=}
			if [ -z "$ctrls" ]; then
				cgroups+=("/sys/fs/cgroup/unified$path" "/sys/fs/cgroup$path")
			else
				cgroups+=("/sys/fs/cgroup/$ctrls$path")
			fi
		done <"/proc/$p/cgroup" 2>/dev/null || true
	done
	kill -KILL "${victims[@]}" 2>/dev/null || true
	for p in "${victims[@]}"; do
		wait_gone "$p" 5 proc_alive || log "process $p did not die"
	done
	# Only the containers' own cgroups (never anything recursive): rmdir fails
	# harmlessly when a cgroup is still in use or is not ours to remove.
	for line in $(printf '%s\n' "${cgroups[@]}" | sort -u); do
		if [[ $line == /sys/fs/cgroup/*/* ]] && [ -d "$line" ]; then
			rmdir "$line" 2>/dev/null || true
		fi
	done
}

proc_alive() {
	local s
	s=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
	s=${s##*) }
	[[ ${s:0:1} != Z ]]
}

# unmount_ours: unmount everything mounted at or below STATE_DIR and RUN_DIR.
unmount_ours() {
	local mounts m
	for _ in 1 2 3 4 5; do
		mapfile -t mounts < <(awk -v s="$STATE_DIR" -v r="$RUN_DIR" '
			{ m = $5; gsub(/\\040/, " ", m)
			  if (m == s || index(m, s "/") == 1 || m == r || index(m, r "/") == 1) print m }' \
			/proc/self/mountinfo | sort -r -u)
		[ ${#mounts[@]} -eq 0 ] && return 0
		for m in "${mounts[@]}"; do
			umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
		done
	done
	log "warning: still mounted: ${mounts[*]}"
}

# ---------------------------------------------------------------- images

build_images() {
	command -v "$GO" >/dev/null || die "go not found (needed to build the test images)"
	(cd "$ROOT" && "$GO" run ./test/images/build -out "$IMAGES_DIR")
}

import_images() {
	local have file ref digest f
	local -A todo=()
	have=$(ctr_ images ls)
	while IFS=$'\t' read -r file ref digest; do
		[ "$(awk -v r="$ref" '$1 == r { print $3 }' <<<"$have")" = "$digest" ] || todo[$file]=1
	done <"$IMAGES_DIR/images.txt"
	for f in "${!todo[@]}"; do
		log "importing $f"
		ctr_ images import "$f"
	done
}

# ---------------------------------------------------------------- commands

cmd_up() {
	need_root
	lock
	ensure_packages
	ensure_crictl
	mkdir -p "$STATE_DIR" "$RUN_DIR" "$CNI_CONF_DIR" "$STATE_DIR/certs.d" "$IMAGES_DIR"
	local config_changed=
	containerd_config | write_if_changed "$CONFIG" && config_changed=1
	cni_config | write_if_changed "$CNI_CONF_DIR/10-nodelet.conflist" && log "wrote CNI config"
	printf 'runtime-endpoint: %s\nimage-endpoint: %s\ntimeout: 10\n' "$ENDPOINT" "$ENDPOINT" |
		write_if_changed "$CRICTL_CONFIG" || true
	fw_add
	build_images
	if [ -n "$config_changed" ] && containerd_pid >/dev/null; then
		log "containerd config changed: restarting containerd"
		stop_containerd
	fi
	start_containerd
	import_images
	echo "CONTAINER_RUNTIME_ENDPOINT=$ENDPOINT" >&3
}

cmd_down() {
	need_root
	lock
	if containerd_pid >/dev/null && answers; then
		local pods
		mapfile -t pods < <(crictl_ -t 60s pods -q 2>/dev/null || true)
		if [ ${#pods[@]} -gt 0 ]; then
			log "removing ${#pods[@]} pod sandbox(es)"
			crictl_ -t 60s stopp "${pods[@]}" >/dev/null || true
			crictl_ -t 60s rmp -f "${pods[@]}" >/dev/null || true
		fi
	fi
	stop_containerd
	kill_shims
	unmount_ours
	fw_del
	if ip link show "$BRIDGE" >/dev/null 2>&1; then
		log "deleting bridge $BRIDGE"
		ip link del "$BRIDGE"
	fi
	rm -rf --one-file-system "$STATE_DIR" "$RUN_DIR"
	log "down"
}

cmd_stop() {
	need_root
	lock
	stop_containerd
}

cmd_start() {
	need_root
	lock
	start_containerd
	echo "CONTAINER_RUNTIME_ENDPOINT=$ENDPOINT" >&3
}

cmd_status() {
	local pid
	if pid=$(containerd_pid) && answers; then
		echo "running (pid $pid) CONTAINER_RUNTIME_ENDPOINT=$ENDPOINT" >&3
	elif [ -n "${pid:-}" ]; then
		echo "starting or unresponsive (pid $pid) CONTAINER_RUNTIME_ENDPOINT=$ENDPOINT" >&3
		return 3
	else
		echo "not running" >&3
		return 3
	fi
}

check_dirs
cmd=${1:-}
[ $# -gt 0 ] && shift
case $cmd in
up) cmd_up ;;
down) cmd_down ;;
stop) cmd_stop ;;
start) cmd_start ;;
env) echo "CONTAINER_RUNTIME_ENDPOINT=$ENDPOINT" >&3 ;;
status) cmd_status ;;
crictl) exec "$CRICTL" --config "$CRICTL_CONFIG" -r "$ENDPOINT" -i "$ENDPOINT" "$@" >&3 3>&- ;;
ctr) exec ctr -a "$SOCK" -n k8s.io "$@" >&3 3>&- ;;
*)
	sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "${BASH_SOURCE[0]}" >&2
	exit 2
	;;
esac
