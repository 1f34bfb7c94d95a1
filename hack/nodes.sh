#!/usr/bin/env bash
# hack/nodes.sh: N nodelet nodes on this one machine, joined to the project's control plane
# (hack/controlplane.sh), for multi-node tests, demos and the scale benchmark.
#
#   hack/nodes.sh up N      start nodes 1..N that are not running (brings the control plane
#                           up first); each has its own containerd (hack/runtime.sh rig),
#                           root directory, bridge, pod subnet, cgroup root, kubelet API
#                           port and client certificate; waits until every Node is Ready;
#                           prints one line per node on stdout: NAME API_PORT CRI_ENDPOINT
#   hack/nodes.sh stop I    stop node I's nodelet (SIGTERM, SIGKILL after 15 s); its
#                           containerd and pods keep running, as when a kubelet crashes
#   hack/nodes.sh start I   start node I's nodelet again, wait until its Node is Ready
#   hack/nodes.sh status    one line per node: NAME running|stopped PID
#   hack/nodes.sh down      stop every node's nodelet, delete the Nodes and their leases
#                           from the API, take the rigs down, remove cgroup roots and state
#
# Node I is named $NODELET_NODES_PREFIX-I and labelled nodelet.dev/nodes=$NODELET_NODES_PREFIX,
# so a workload can be kept to these nodes with a nodeSelector. The set is also a zone of
# its own (topology.kubernetes.io/zone=$NODELET_NODES_PREFIX): the node lifecycle controller
# judges disruption per zone and stops evicting in a zone where more than 2 nodes and over
# 55 % are not Ready, so one stopped node of 3 would otherwise stop evictions whenever the
# cluster holds 2 other NotReady nodes (a run that was killed leaves them).
#
# Environment (defaults):
#   NODELET_NODES_PREFIX=nodelet-node      node names, and the label's value
#   NODELET_NODES_DIR=/var/lib/nodelet-nodes   per node: config, kubeconfig, root dir,
#                                          pod logs, nodelet.log, nodelet.pid, containerd state
#   NODELET_NODES_RUN=/run/nodelet-nodes   per node: containerd's sockets (kept short:
#                                          containerd 2.x shims want at most 40 characters)
#   NODELET_NODES_SUBNET=10.120            node I's pods get $SUBNET.I.0/24, bridge nodeletnI
#   NODELET_NODES_PORT=12000               node I serves its kubelet API on $PORT+10*I and
#                                          healthz on $PORT+10*I+1
#   NODELET_BIN=bin/nodelet                the node agent; any kubelet that takes the same
#                                          flags and KubeletConfiguration will do (upstream's
#                                          changes sysctls and iptables: not undone here)
#   NODELET_NODES_ARGS=                    extra flags for every node
#   NODELET_NODES_CONFIG=                  extra KubeletConfiguration lines for every node
#                                          (upstream's kubelet on cgroup v1: failCgroupV1: false)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PREFIX=${NODELET_NODES_PREFIX:-nodelet-node}
DIR=${NODELET_NODES_DIR:-/var/lib/nodelet-nodes}
RUN=${NODELET_NODES_RUN:-/run/nodelet-nodes}
SUBNET=${NODELET_NODES_SUBNET:-10.120}
PORT_BASE=${NODELET_NODES_PORT:-12000}
BIN=${NODELET_BIN:-$ROOT/bin/nodelet}
read -r -a EXTRA_ARGS <<<"${NODELET_NODES_ARGS:-}"
CGROUP_FS=/sys/fs/cgroup

log() { echo "nodes.sh: $*" >&2; }
die() {
	log "error: $*"
	exit 1
}

name_of() { echo "$PREFIX-$1"; }
node_dir() { echo "$DIR/$(name_of "$1")"; }
api_port() { echo $((PORT_BASE + 10 * $1)); }

# rig I ARGS...: hack/runtime.sh for node I's containerd.
rig() {
	local i=$1
	shift
	NODELET_STATE_DIR="$(node_dir "$i")/containerd" NODELET_RUN_DIR="$RUN/$i" \
		NODELET_BRIDGE="nodeletn$i" NODELET_POD_CIDR="$SUBNET.$i.0/24" "$ROOT/hack/runtime.sh" "$@"
}

kubectl_() { "$ROOT/hack/controlplane.sh" kubectl "$@"; }

# cgroup_hierarchies: the v2 mount itself, or each v1 controller's directory.
cgroup_hierarchies() {
	if [ -f "$CGROUP_FS/cgroup.controllers" ]; then
		echo "$CGROUP_FS"
		return
	fi
	find "$CGROUP_FS" -mindepth 1 -maxdepth 1 -type d
}

# make_cgroup_root NAME: a kubelet refuses a cgroupRoot that does not exist. A v1 cpuset
# needs its CPUs and memory nodes before anything can join it.
make_cgroup_root() {
	local h
	for h in $(cgroup_hierarchies); do
		mkdir -p "$h/$1"
		if [ "$(basename "$h")" = cpuset ]; then
			cat "$h/cpuset.cpus" >"$h/$1/cpuset.cpus"
			cat "$h/cpuset.mems" >"$h/$1/cpuset.mems"
		fi
	done
}

remove_cgroup_root() {
	local h
	for h in $(cgroup_hierarchies); do
		[ -d "$h/$1" ] && find "$h/$1" -depth -type d -exec rmdir {} + 2>/dev/null || true
	done
}

# write_config I ENDPOINT: what every node gets; the API server's kubelet client
# certificate is signed by the cluster CA, which the kubelet API trusts (as kubeadm sets up).
write_config() {
	local i=$1 endpoint=$2 d cp_dir
	d=$(node_dir "$i")
	cp_dir=${NODELET_CP_DIR:-/var/lib/nodelet-cp}
	cat >"$d/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
containerRuntimeEndpoint: $endpoint
cgroupRoot: /$(name_of "$i")
cgroupDriver: cgroupfs
failSwapOn: false
port: $(api_port "$i")
readOnlyPort: 0
healthzPort: $(($(api_port "$i") + 1))
podLogsDir: $d/pod-logs
volumePluginDir: $d/root/volume-plugins
authentication:
  x509:
    clientCAFile: $cp_dir/pki/ca.crt
${NODELET_NODES_CONFIG:-}
EOF
}

pid_of() {
	local pid
	pid=$(cat "$(node_dir "$1")/nodelet.pid" 2>/dev/null) || return 1
	# Only a process that is still the one we started (its command line names our config).
	[ -r "/proc/$pid/cmdline" ] && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "--config=$(node_dir "$1")/config.yaml" || return 1
	echo "$pid"
}

# start_agent I: run node I's kubelet in the background, detached from this shell.
start_agent() {
	local i=$1 d name
	d=$(node_dir "$i")
	name=$(name_of "$i")
	if pid_of "$i" >/dev/null; then
		return 0
	fi
	log "starting $name (log: $d/nodelet.log)"
	(
		exec setsid "$BIN" --config="$d/config.yaml" --kubeconfig="$d/kubelet.kubeconfig" \
			--root-dir="$d/root" --cert-dir="$d/root/pki" --hostname-override="$name" \
			--node-labels="nodelet.dev/nodes=$PREFIX,topology.kubernetes.io/zone=$PREFIX" "${EXTRA_ARGS[@]}" </dev/null >>"$d/nodelet.log" 2>&1
	) &
	echo $! >"$d/nodelet.pid"
}

wait_ready() {
	local name
	name=$(name_of "$1")
	for _ in $(seq 300); do
		kubectl_ get node "$name" >/dev/null 2>&1 && break
		pid_of "$1" >/dev/null || die "$name exited; see $(node_dir "$1")/nodelet.log"
		sleep 0.2
	done
	kubectl_ wait --for=condition=Ready "node/$name" --timeout=120s >/dev/null ||
		die "$name not Ready within 2 minutes; see $(node_dir "$1")/nodelet.log"
}

# up_node I: the rig, the credentials, the config and the agent of node I.
up_node() {
	local i=$1 d endpoint
	d=$(node_dir "$i")
	mkdir -p "$d/root" "$d/pod-logs" "$RUN"
	endpoint=$(rig "$i" up)
	endpoint=${endpoint#CONTAINER_RUNTIME_ENDPOINT=}
	[ -s "$d/kubelet.kubeconfig" ] || "$ROOT/hack/controlplane.sh" node-kubeconfig "$(name_of "$i")" "$d/kubelet.kubeconfig"
	write_config "$i" "$endpoint"
	make_cgroup_root "$(name_of "$i")"
	start_agent "$i"
	echo "$endpoint" >"$d/endpoint"
}

# nodes_on_disk: the indexes of the nodes this prefix has state for.
nodes_on_disk() {
	local d
	for d in "$DIR/$PREFIX"-*; do
		[ -d "$d" ] && echo "${d##*-}"
	done | sort -n
}

stop_agent() {
	local i=$1 pid
	pid=$(pid_of "$i") || return 0
	log "stopping $(name_of "$i") (pid $pid)"
	kill -TERM "$pid" 2>/dev/null || true
	for _ in $(seq 150); do
		[ -d "/proc/$pid" ] || return 0
		sleep 0.1
	done
	kill -KILL "$pid" 2>/dev/null || true
}

cmd_up() {
	local n=${1:?usage: nodes.sh up N} i
	[[ $n =~ ^[1-9][0-9]?$ ]] || die "N must be a number from 1 to 99, not '$n'"
	[ -x "$BIN" ] || die "$BIN not found: run make build"
	"$ROOT/hack/controlplane.sh" up >/dev/null
	for i in $(seq "$n"); do
		up_node "$i"
	done
	for i in $(seq "$n"); do
		wait_ready "$i"
		echo "$(name_of "$i") $(api_port "$i") $(cat "$(node_dir "$i")/endpoint")"
	done
}

cmd_down() {
	local i name
	for i in $(nodes_on_disk); do
		stop_agent "$i"
	done
	for i in $(nodes_on_disk); do
		name=$(name_of "$i")
		kubectl_ delete node "$name" --ignore-not-found >/dev/null 2>&1 || true
		kubectl_ -n kube-node-lease delete lease "$name" --ignore-not-found >/dev/null 2>&1 || true
		rig "$i" down >/dev/null
		remove_cgroup_root "$name"
		# A pod's volumes may still be mounted under the root dir.
		{ grep -F " $(node_dir "$i")/" /proc/self/mounts || true; } | cut -d' ' -f2 | sort -r | xargs -r -n1 umount -l
		rm -rf --one-file-system "$(node_dir "$i")" "${RUN:?}/$i" "$RUN/$i.lock"
	done
}

cmd_status() {
	local i pid
	for i in $(nodes_on_disk); do
		if pid=$(pid_of "$i"); then
			echo "$(name_of "$i") running $pid"
		else
			echo "$(name_of "$i") stopped -"
		fi
	done
}

index_arg() {
	[[ ${1:-} =~ ^[1-9][0-9]?$ ]] || die "give a node number, not '${1:-}'"
	[ -f "$(node_dir "$1")/config.yaml" ] || die "no node $1 under $DIR (run up first)"
}

[ "$(id -u)" = 0 ] || die "must run as root"
cmd=${1:-}
shift || true
case $cmd in
up) cmd_up "$@" ;;
down) cmd_down ;;
stop)
	index_arg "${1:-}"
	stop_agent "$1"
	;;
start)
	index_arg "${1:-}"
	start_agent "$1"
	wait_ready "$1"
	;;
status) cmd_status ;;
*)
	sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "${BASH_SOURCE[0]}" >&2
	exit 2
	;;
esac
