#!/usr/bin/env bash
# record.sh: asks upstream's kubelet which UIDs it gives the manifests in this directory
# (and in ../kubeadm) and writes them to uids.json, the expectations of
# TestStaticPodUIDsMatchUpstream. Run as root from anywhere:
#
#   KUBELET=/var/cache/nodelet/k8s-v1.37.2/bin/kubelet pkg/pod/sources/testdata/staticuid/record.sh
#
# It starts a containerd of its own (hack/runtime.sh with the nodelet-uid directories),
# copies the manifests to $MANIFESTS, serves url/*.yaml over HTTP, and runs the kubelet in
# standalone mode twice, once per URL manifest. The UIDs come from the runtime's sandboxes
# (label io.kubernetes.pod.uid) and, for pods the kubelet cannot start (volumes it cannot
# mount, or rejects after hashing them), from its "Generated UID" log line. A UID depends
# on the node name and on the manifest's path or URL, so these are fixed and recorded.
# The kubelet's sysctls, iptables chains and files under /var/lib/kubelet are put back
# and everything it ran is removed afterwards. Hold /run/nodelet-shared.lock around it.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../../../.." && pwd)
KUBELET=${KUBELET:-/var/cache/nodelet/k8s-v1.37.2/bin/kubelet}
NODE="uid-node-1"
export NODELET_STATE_DIR=/var/lib/nodelet-uid NODELET_RUN_DIR=/run/nodelet-uid
export NODELET_BRIDGE=nodeletuid NODELET_POD_CIDR=10.97.9.0/24
WORK=${WORK:-/tmp/staticuid-record} # kept afterwards: the kubelet's logs
MANIFESTS=$NODELET_STATE_DIR/manifests
PORT=18089
CGROOT=nodelet-uid
SYSCTLS=(vm/overcommit_memory vm/panic_on_oom kernel/panic kernel/panic_on_oops
	kernel/keys/root_maxkeys kernel/keys/root_maxbytes)
# The one place outside its root directory where the kubelet writes: its device plugin
# socket and checkpoint (a fixed path).
KUBELET_FIXED_DIR=/var/lib/kubelet
# Chains and rules the kubelet adds; rules first so that deleting in this order works.
IPT_RULES=("filter INPUT -j KUBE-FIREWALL" "filter OUTPUT -j KUBE-FIREWALL")
IPT_CHAINS=("filter KUBE-FIREWALL" "mangle KUBE-IPTABLES-HINT" "mangle KUBE-KUBELET-CANARY"
	"nat KUBE-KUBELET-CANARY" "filter KUBE-KUBELET-CANARY")

runtime() { "$REPO/hack/runtime.sh" "$@"; }
log() { echo "record.sh: $*" >&2; }

declare -A SAVED_SYSCTL=() HAD_RULE=() HAD_CHAIN=()
record_host() {
	local s r c ipt
	find "$KUBELET_FIXED_DIR" 2>/dev/null | sort >"$WORK/fixed-before.txt" || true
	for s in "${SYSCTLS[@]}"; do
		SAVED_SYSCTL[$s]=$(cat "/proc/sys/$s")
		echo "$s=${SAVED_SYSCTL[$s]}" >>"$WORK/host-before.txt"
	done
	for ipt in iptables ip6tables; do
		for r in "${IPT_RULES[@]}"; do
			set -- $r
			$ipt -w -t "$1" -C "$2" "${@:3}" 2>/dev/null && HAD_RULE[$ipt $r]=1 || true
		done
		for c in "${IPT_CHAINS[@]}"; do
			set -- $c
			$ipt -w -t "$1" -S "$2" >/dev/null 2>&1 && HAD_CHAIN[$ipt $c]=1 || true
		done
	done
}
restore_host() {
	local s r c ipt
	find "$KUBELET_FIXED_DIR" 2>/dev/null | sort | comm -13 "$WORK/fixed-before.txt" - | sort -r |
		while read -r f; do rm -d "$f" 2>/dev/null || rm -f "$f"; done
	for s in "${!SAVED_SYSCTL[@]}"; do echo "${SAVED_SYSCTL[$s]}" >"/proc/sys/$s"; done
	for ipt in iptables ip6tables; do
		for r in "${IPT_RULES[@]}"; do
			set -- $r
			[[ -n ${HAD_RULE[$ipt $r]:-} ]] || $ipt -w -t "$1" -D "$2" "${@:3}" 2>/dev/null || true
		done
		for c in "${IPT_CHAINS[@]}"; do
			set -- $c
			[[ -n ${HAD_CHAIN[$ipt $c]:-} ]] && continue
			$ipt -w -t "$1" -F "$2" 2>/dev/null && $ipt -w -t "$1" -X "$2" 2>/dev/null || true
		done
	done
}

make_cgroup_root() {
	local h
	for h in /sys/fs/cgroup/*/; do
		mkdir -p "$h$CGROOT"
		if [[ $h == */cpuset/ ]]; then
			cat "${h}cpuset.cpus" >"$h$CGROOT/cpuset.cpus"
			cat "${h}cpuset.mems" >"$h$CGROOT/cpuset.mems"
		fi
	done
}
remove_cgroup_root() {
	local h
	for h in /sys/fs/cgroup/*/; do
		[[ -d $h$CGROOT ]] && find "$h$CGROOT" -depth -type d -exec rmdir {} + 2>/dev/null || true
	done
}
unmount_work() {
	{ grep -oE " ($NODELET_STATE_DIR|$WORK)/[^ ]*" /proc/self/mountinfo || true; } | sort -r |
		while read -r m; do umount "$m" || umount -l "$m" || true; done
}

KUBELET_PID='' HTTPD_PID=''
stop_kubelet() {
	[[ -n $KUBELET_PID ]] || return 0
	kill "$KUBELET_PID" 2>/dev/null || true
	wait "$KUBELET_PID" 2>/dev/null || true
	KUBELET_PID=''
}
cleanup() {
	set +e # undo all that can be undone
	stop_kubelet
	[[ -z $HTTPD_PID ]] || kill "$HTTPD_PID" 2>/dev/null || true
	runtime down >/dev/null || true
	unmount_work
	remove_cgroup_root
	restore_host
}

# run_kubelet URL_FILE PODS LOG: one standalone kubelet run until every pod but the one
# with a UID of its own has a generated UID (PODS: how many pods URL_FILE holds).
run_kubelet() {
	local url=$1 urlpods=$2 logf=$3 root=$WORK/root
	mkdir -p "$root" "$WORK/logs"
	cat >"$WORK/config.yaml" <<-EOF
		apiVersion: kubelet.config.k8s.io/v1beta1
		kind: KubeletConfiguration
		containerRuntimeEndpoint: unix://$NODELET_RUN_DIR/containerd.sock
		staticPodPath: $MANIFESTS
		staticPodURL: http://127.0.0.1:$PORT/$url
		podLogsDir: $WORK/logs
		cgroupRoot: /$CGROOT
		cgroupDriver: cgroupfs
		failCgroupV1: false
		failSwapOn: false
		enableServer: false
		healthzPort: 0
		readOnlyPort: 0
		volumePluginDir: $root/volume-plugins
		authentication:
		  webhook:
		    enabled: false
		authorization:
		  mode: AlwaysAllow
	EOF
	"$KUBELET" --config="$WORK/config.yaml" --root-dir="$root" --cert-dir="$root/pki" \
		--hostname-override=$NODE --v=5 >"$logf" 2>&1 &
	KUBELET_PID=$!
	local want=$(($(ls "$MANIFESTS" | wc -l) - 1 + urlpods))
	for _ in $(seq 120); do
		sleep 1
		local n
		n=$(uids_from_log "$logf" | jq -s 'length')
		((n >= want)) && break
	done
	sleep 15
	runtime crictl pods -o json >"$logf.pods.json"
	stop_kubelet
	runtime crictl rmp -fa >/dev/null 2>&1 || true
	unmount_work
	rm -rf "$root"
}

# uids_from_log prints {name, namespace, uid, source} per "Generated UID" line.
uids_from_log() {
	grep '"Generated UID"' "$1" | sed -E 's/.*pod="([^"]*)" podUID="([^"]*)" source="([^"]*)".*/\1 \2 \3/' |
		while read -r pod uid src; do
			jq -nc --arg pod "$pod" --arg uid "$uid" --arg src "$src" \
				'{pod: $pod, uid: $uid, source: $src}'
		done | sort -u
}

main() {
	[[ $(id -u) == 0 ]] || { log "must run as root"; exit 1; }
	[[ -x $KUBELET ]] || { log "no kubelet at $KUBELET"; exit 1; }
	rm -rf "$WORK"
	mkdir -p "$WORK"
	trap cleanup EXIT
	record_host
	runtime up >/dev/null
	make_cgroup_root
	rm -rf "$MANIFESTS"
	mkdir -p "$MANIFESTS"
	cp "$HERE"/manifests/* "$HERE"/../kubeadm/* "$MANIFESTS"/
	busybox httpd -f -p 127.0.0.1:$PORT -h "$HERE/url" &
	HTTPD_PID=$!
	local url
	log "kubelet run with podlist.yaml"
	run_kubelet podlist.yaml 2 "$WORK/kubelet-podlist.log"
	log "kubelet run with pod.yaml"
	run_kubelet pod.yaml 1 "$WORK/kubelet-pod.log"
	"$KUBELET" --version
	collect >"$HERE/uids.json"
	log "wrote $HERE/uids.json"
}

# collect writes the expectations: the UID of each pod by its source (from the log), and
# the UID of each sandbox by its pod's namespace and name.
collect() {
	local logs=("$WORK"/kubelet-*.log)
	for f in "${logs[@]}"; do uids_from_log "$f"; done | jq -s 'unique_by(.source, .pod) | sort_by(.source, .pod)' >"$WORK/generated.json"
	jq -s '[.[].items[] | {namespace: .metadata.namespace, name: .metadata.name, uid: .metadata.uid}] | unique' \
		"$WORK"/kubelet-*.log.pods.json >"$WORK/sandboxes.json"
	jq -n --arg node $NODE --arg version "$("$KUBELET" --version)" \
		--slurpfile gen "$WORK/generated.json" --slurpfile sb "$WORK/sandboxes.json" \
		'{kubelet: $version, node: $node, generated: $gen[0], sandboxes: $sb[0]}'
}

main "$@"
