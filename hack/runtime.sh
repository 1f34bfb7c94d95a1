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
#   hack/runtime.sh check    report the runtime's version, RuntimeConfig (cgroup driver)
#                            and GetContainerEvents stream, with one short-lived test
#                            container (hack/cricheck; events required for containerd2)
#   hack/runtime.sh import-controlplane-images
#                            on demand (never part of `up`: ~40 MB compressed, ~120 MB
#                            unpacked): build registry.k8s.io/etcd:<etcd version>-0 and
#                            registry.k8s.io/kube-apiserver:<k8s version> from the
#                            binaries `hack/controlplane.sh build` caches (versions from
#                            hack/tools/{etcd,k8s}/go.mod), into
#                            $NODELET_CACHE_DIR/images-controlplane (shared by all rigs;
#                            warm it only re-reads the binaries), and import those missing
#                            or changed into this rig's running containerd; prints the
#                            image references on stdout, one a line. For kubeadm-shaped
#                            static pod tests (test/e2e/kubeadm_harness_test.go).
#   hack/runtime.sh crictl ARGS...   run crictl against this runtime
#   hack/runtime.sh ctr ARGS...      run ctr (namespace k8s.io) against this runtime
#
# Environment (defaults for the containerd / containerd2 flavour):
#   NODELET_RUNTIME=containerd               containerd: Debian's containerd 1.6 and runc;
#                                            containerd2: containerd 2.x built from the Go
#                                            module proxy (hack/tools/containerd2), cached
#   NODELET_STATE_DIR=/var/lib/nodelet-dev | /var/lib/nodelet-dev2
#                                            containerd root/state, config, CNI, images, log
#   NODELET_RUN_DIR=/run/nodelet-dev | /run/nodelet-dev2
#                                            sockets, pid file, runc state (and, for
#                                            containerd2, shim sockets: at most 40 chars)
#   NODELET_CACHE_DIR=/var/cache/nodelet     crictl, containerd-<v>/bin, runc-<v>/bin (kept)
#   NODELET_BRIDGE=nodelet0 | nodeletc2      pod bridge
#   NODELET_POD_CIDR=10.88.0.0/24 | 10.92.0.0/24   pod subnet
#   NODELET_RUNTIME_TIMEOUT=60               seconds to wait for containerd to answer
#
# A state directory holds one flavour at a time: `up` refuses to switch a rig that is
# still there to the other flavour (run `down` first).
#
# Nothing leaves the machine: containerd runs with HTTP(S)_PROXY pointing at a closed
# loopback port (an image pull fails at once; 127.0.0.1/localhost are exempt so a local
# registry works), pods get no default route and no masquerade, and iptables drops
# forwarding between the pod bridge and any other interface.
set -euo pipefail

FLAVOUR=${NODELET_RUNTIME:-containerd}
case $FLAVOUR in
containerd) def_state=/var/lib/nodelet-dev def_run=/run/nodelet-dev def_bridge=nodelet0 def_cidr=10.88.0.0/24 ;;
containerd2) def_state=/var/lib/nodelet-dev2 def_run=/run/nodelet-dev2 def_bridge=nodeletc2 def_cidr=10.92.0.0/24 ;;
*)
	echo "runtime.sh: error: NODELET_RUNTIME must be containerd or containerd2, not '$FLAVOUR'" >&2
	exit 2
	;;
esac
STATE_DIR=${NODELET_STATE_DIR:-$def_state}
RUN_DIR=${NODELET_RUN_DIR:-$def_run}
CACHE_DIR=${NODELET_CACHE_DIR:-/var/cache/nodelet}
BRIDGE=${NODELET_BRIDGE:-$def_bridge}
POD_CIDR=${NODELET_POD_CIDR:-$def_cidr}
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

# The containerd2 flavour runs containerd 2.x and a recent runc, both built from the Go
# module proxy (hack/tools/containerd2, hack/tools/runc: their go.mod pins the versions)
# into the cache. Debian's runc 1.1.5 runs ordinary pods under containerd 2 but lacks
# idmapped mounts, so user namespace pods (hostUsers: false) fail with it.

# mod_version DIR MODULE: the version DIR/go.mod requires of MODULE.
# Both forms: `require M vX` and M vX inside a require block.
mod_version() {
	awk -v m="$2" '($1 == m && $2 ~ /^v/) { print $2; exit } ($1 == "require" && $2 == m) { print $3; exit }' "$1/go.mod"
}
C2_MOD=$ROOT/hack/tools/containerd2
C2_VERSION=$(mod_version "$C2_MOD" github.com/containerd/containerd/v2)
C2_BIN=$CACHE_DIR/containerd-$C2_VERSION/bin
RUNC_MOD=$ROOT/hack/tools/runc
RUNC_VERSION=$(mod_version "$RUNC_MOD" github.com/opencontainers/runc)
RUNC_BIN=$CACHE_DIR/runc-$RUNC_VERSION/bin
if [ "$FLAVOUR" = containerd2 ]; then
	# runc needs cgo and libseccomp's headers; Debian's runc and containerd are not used.
	PACKAGES=(containernetworking-plugins busybox-static iptables iproute2 gcc libc6-dev pkg-config libseccomp-dev)
	CONTAINERD=$C2_BIN/containerd
	CTR=$C2_BIN/ctr
	# containerd finds its shim on PATH: ours must come before Debian's.
	DAEMON_PATH=$C2_BIN:$SYS_PATH
else
	CONTAINERD=containerd
	CTR=ctr
	DAEMON_PATH=$SYS_PATH
fi
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
	# containerd 2 refuses a shim socket directory longer than 42 bytes.
	if [ "$FLAVOUR" = containerd2 ] && [ ${#RUN_DIR} -gt 40 ]; then
		die "NODELET_RUN_DIR '$RUN_DIR' is too long for containerd 2's shim sockets (max 40 chars)"
	fi
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
ctr_() { "$CTR" -a "$SOCK" -n k8s.io "$@"; }

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

# cached DIR NAMES...: whether DIR holds an executable for every NAME.
cached() {
	local dir=$1 n
	shift
	for n in "$@"; do
		[ -x "$dir/$n" ] || return 1
	done
}

# build_cached WHAT VERSION BIN BUILD_FN NAMES...: unless BIN holds all NAMES, run
# `BUILD_FN TMPDIR` and move what it built into BIN. One build per BIN at a time (a
# second `up` waits for the first), and nothing half-built ever lands in BIN.
build_cached() {
	local what=$1 version=$2 bin=$3 fn=$4 tmp start
	shift 4
	cached "$bin" "$@" && return 0
	[ -n "$version" ] || die "cannot read the $what version from hack/tools/*/go.mod"
	command -v "$GO" >/dev/null || die "go not found (needed to build $what $version)"
	mkdir -p "$(dirname "$bin")"
	exec 8>"$bin.lock"
	flock 8
	if ! cached "$bin" "$@"; then
		log "building $what $version into $bin"
		start=$EPOCHREALTIME
		tmp=$(mktemp -d "$(dirname "$bin")/.build.XXXXXX")
		if ! (export GOWORK=off GOFLAGS=-buildvcs=false && "$fn" "$tmp"); then
			rm -rf "$tmp"
			die "building $what $version failed"
		fi
		mkdir -p "$bin"
		mv -f "$tmp"/* "$bin/"
		rmdir "$tmp"
		log "built $what $version in $(awk -v s="$start" -v e="$EPOCHREALTIME" 'BEGIN { printf "%.0fs", e - s }')"
	fi
	exec 8>&-
}

# Like containerd's Makefile (its tags; the shim without gRPC), but with CGO off for all
# three and without the btrfs, devmapper and zfs snapshotters (C headers, tools we lack).
build_containerd2() {
	local pkg=github.com/containerd/containerd/v2 tags=urfave_cli_no_docs,no_btrfs,no_devmapper,no_zfs ld
	ld="-s -w -X $pkg/version.Version=$C2_VERSION -X $pkg/version.Package=$pkg"
	cd "$C2_MOD" &&
		CGO_ENABLED=0 "$GO" build -trimpath -tags "$tags" -ldflags "$ld" -o "$1/" "$pkg/cmd/containerd" "$pkg/cmd/ctr" &&
		CGO_ENABLED=0 "$GO" build -trimpath -tags "$tags,no_grpc" -ldflags "$ld" -o "$1/" "$pkg/cmd/containerd-shim-runc-v2"
}

# As runc's Makefile (cgo for nsenter, seccomp), without libpathrs: Debian 12 lacks it.
build_runc() {
	cd "$RUNC_MOD" &&
		CGO_ENABLED=1 "$GO" build -trimpath -buildmode=pie -tags seccomp,urfave_cli_no_docs -o "$1/" github.com/opencontainers/runc
}

ensure_containerd2() {
	build_cached containerd "$C2_VERSION" "$C2_BIN" build_containerd2 containerd containerd-shim-runc-v2 ctr
	build_cached runc "$RUNC_VERSION" "$RUNC_BIN" build_runc runc
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
	if [ "$FLAVOUR" = containerd2 ]; then containerd2_config; else containerd1_config; fi
}

# containerd 1.6: config version 2, the CRI plugin is io.containerd.grpc.v1.cri.
containerd1_config() {
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

      # A second runc handler for the RuntimeClass tests (upstream's e2e calls it the same).
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.test-handler]
        runtime_type = "io.containerd.runc.v2"

        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.test-handler.options]
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

# containerd 2.x: config version 3 (read by every 2.x; 2.3+ migrates it in memory). The
# CRI settings moved: runtime ones to io.containerd.cri.v1.runtime, image ones (sandbox
# image, snapshotter, registry) to io.containerd.cri.v1.images; io.containerd.grpc.v1.cri
# keeps only the streaming server. NRI is off: its socket would be one per machine.
containerd2_config() {
	cat <<EOF
# Written by hack/runtime.sh; changes are overwritten.
version = 3
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

  [plugins."io.containerd.shim.v1.manager"]
    socket_dir = "$RUN_DIR/s"

  [plugins."io.containerd.nri.v1.nri"]
    disable = true

  [plugins."io.containerd.grpc.v1.cri"]
    disable_tcp_service = true
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"

  [plugins."io.containerd.cri.v1.images"]
    snapshotter = "overlayfs"

    [plugins."io.containerd.cri.v1.images".pinned_images]
      sandbox = "$PAUSE_IMAGE"

    [plugins."io.containerd.cri.v1.images".registry]
      config_path = "$STATE_DIR/certs.d"

  [plugins."io.containerd.cri.v1.runtime"]
    # Root here lacks CAP_SYS_RESOURCE: without this every RunPodSandbox fails.
    restrict_oom_score_adj = true
    disable_apparmor = true
    netns_mounts_under_state_dir = true

    [plugins."io.containerd.cri.v1.runtime".containerd]
      default_runtime_name = "runc"

      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"

        [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
          SystemdCgroup = false
          Root = "$RUN_DIR/runc"
          BinaryName = "$RUNC_BIN/runc"

      # A second runc handler for the RuntimeClass tests (upstream's e2e calls it the same).
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.test-handler]
        runtime_type = "io.containerd.runc.v2"

        [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.test-handler.options]
          SystemdCgroup = false
          Root = "$RUN_DIR/runc"
          BinaryName = "$RUNC_BIN/runc"

    [plugins."io.containerd.cri.v1.runtime".cni]
      bin_dirs = ["$CNI_BIN_DIR"]
      conf_dir = "$CNI_CONF_DIR"
      max_conf_num = 1
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
		timeout 5 "$CTR" -a "$SOCK" version >/dev/null 2>&1
	fi
}

start_containerd() {
	local pid i
	if pid=$(containerd_pid); then
		log "containerd already running (pid $pid)"
	else
		[ -f "$CONFIG" ] || die "no config at $CONFIG: run '$0 up' first"
		command -v "$CONTAINERD" >/dev/null || die "$CONTAINERD not installed: run '$0 up'"
		mkdir -p "$RUN_DIR"
		rm -f "$SOCK" "$SOCK.ttrpc" "$RUN_DIR/containerd-debug.sock"
		log "starting containerd (log: $LOG)"
		(
			exec 3>&- 9>&-
			exec setsid env -u ALL_PROXY -u all_proxy PATH="$DAEMON_PATH" \
				HTTP_PROXY="$DEAD_PROXY" HTTPS_PROXY="$DEAD_PROXY" http_proxy="$DEAD_PROXY" https_proxy="$DEAD_PROXY" \
				NO_PROXY=127.0.0.1,localhost,::1 no_proxy=127.0.0.1,localhost,::1 \
				"$CONTAINERD" --config "$CONFIG" </dev/null >>"$LOG" 2>&1
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

# The control-plane images are built from the binaries hack/controlplane.sh caches.
CP_IMAGES_DIR=$CACHE_DIR/images-controlplane
K8S_VERSION=$(mod_version "$ROOT/hack/tools/k8s" k8s.io/kubernetes)
ETCD_VERSION=$(mod_version "$ROOT/hack/tools/etcd" go.etcd.io/etcd/server/v3)
APISERVER_BIN=$CACHE_DIR/k8s-$K8S_VERSION/bin/kube-apiserver
ETCD_BIN=$CACHE_DIR/etcd-$ETCD_VERSION/bin/etcd

# build_controlplane_images: one build at a time (the directory is shared by all rigs).
build_controlplane_images() {
	local b
	if [ -z "$K8S_VERSION" ] || [ -z "$ETCD_VERSION" ]; then
		die "cannot read the k8s/etcd versions from hack/tools/{k8s,etcd}/go.mod"
	fi
	for b in "$APISERVER_BIN" "$ETCD_BIN"; do
		[ -x "$b" ] || die "$b is missing: build it first with 'hack/controlplane.sh build'" \
			"(NODELET_CACHE_DIR=$CACHE_DIR)"
	done
	command -v "$GO" >/dev/null || die "go not found (needed to build the control-plane images)"
	mkdir -p "$CP_IMAGES_DIR"
	exec 8>"$CP_IMAGES_DIR.lock"
	flock 8
	(cd "$ROOT" && "$GO" run ./test/images/build -out "$CP_IMAGES_DIR" -set controlplane \
		-kube-apiserver "$APISERVER_BIN" -k8s-version "$K8S_VERSION" \
		-etcd "$ETCD_BIN" -etcd-version "$ETCD_VERSION")
	exec 8>&-
}

# import_images [LIST]: import the archives of LIST (default: the test images' list)
# whose tag is missing from containerd or has another digest.
import_images() {
	local list=${1:-$IMAGES_DIR/images.txt} have file ref digest f
	local -A todo=()
	have=$(ctr_ images ls)
	while IFS=$'\t' read -r file ref digest; do
		[ "$(awk -v r="$ref" '$1 == r { print $3 }' <<<"$have")" = "$digest" ] || todo[$file]=1
	done <"$list"
	for f in "${!todo[@]}"; do
		log "importing $f"
		ctr_ images import "$f"
	done
}

# ---------------------------------------------------------------- commands

# rig_flavour: the flavour of the rig in STATE_DIR, empty if there is none (a rig set up
# before flavours existed has a config but no marker: it is containerd 1.6's).
rig_flavour() {
	if [ -f "$STATE_DIR/flavour" ]; then
		cat "$STATE_DIR/flavour"
	elif [ -f "$CONFIG" ]; then
		echo containerd
	fi
}

# check_flavour: refuse to turn one flavour's rig into the other's under its pods.
check_flavour() {
	local have
	have=$(rig_flavour)
	[ -z "$have" ] || [ "$have" = "$FLAVOUR" ] ||
		die "$STATE_DIR holds a $have rig, not $FLAVOUR: take it down first" \
			"(NODELET_RUNTIME=$have $0 down) or choose other NODELET_STATE_DIR/NODELET_RUN_DIR"
}

cmd_up() {
	need_root
	lock
	check_flavour
	ensure_packages
	ensure_crictl
	if [ "$FLAVOUR" = containerd2 ]; then
		ensure_containerd2
	fi
	mkdir -p "$STATE_DIR" "$RUN_DIR" "$CNI_CONF_DIR" "$STATE_DIR/certs.d" "$IMAGES_DIR"
	echo "$FLAVOUR" | write_if_changed "$STATE_DIR/flavour" || true
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
	check_flavour
	start_containerd
	echo "CONTAINER_RUNTIME_ENDPOINT=$ENDPOINT" >&3
}

cmd_import_controlplane_images() {
	need_root
	lock
	check_flavour
	if ! containerd_pid >/dev/null || ! answers; then
		die "containerd is not running: run '$0 up' first"
	fi
	build_controlplane_images
	import_images "$CP_IMAGES_DIR/images.txt"
	cut -f2 "$CP_IMAGES_DIR/images.txt" >&3
}

cmd_check() {
	local require=()
	[ "$FLAVOUR" = containerd2 ] && require=(-require-events)
	(cd "$ROOT" && "$GO" run ./hack/cricheck -endpoint "$ENDPOINT" "${require[@]}") >&3
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
check) cmd_check ;;
import-controlplane-images) cmd_import_controlplane_images ;;
crictl) exec "$CRICTL" --config "$CRICTL_CONFIG" -r "$ENDPOINT" -i "$ENDPOINT" "$@" >&3 3>&- ;;
ctr) exec "$CTR" -a "$SOCK" -n k8s.io "$@" >&3 3>&- ;;
*)
	sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "${BASH_SOURCE[0]}" >&2
	exit 2
	;;
esac
