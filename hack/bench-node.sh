#!/usr/bin/env bash
# Node-level benchmarks, nodelet only (no upstream column), printing their figures:
#
#   - the container manager's cost per pod start: pkg/node/cm EnsurePod and Remove on this
#     host's cgroup filesystem with 100 active pods (test/bench/cgroups, issue 11);
#   - a standalone nodelet with 100 pods on containerd 2.x: idle CPU and container
#     exit → restarted with the relisting vs the evented PLEG (issue 12), and the
#     eviction manager's CPU, on vs off and one check timed in-process (issue 11)
#     (test/bench/node).
#
# The second brings up a containerd 2.x rig of its own (hack/runtime.sh, flavour
# containerd2: built into the cache on first use; docs/runtimes.md) and takes it down
# at the end. Expects bin/nodelet (make bench builds it); needs root.
#
# Environment (defaults):
#   BENCH_NODE_PODS=100 BENCH_NODE_ROUNDS=3 BENCH_NODE_KILLS=5 BENCH_IDLE=60s
#   BENCH_NODE_SETTLE=30s BENCH_CGROUP_PODS=300 (0 skips the container manager's bench)
#   BENCH_NODE_VARIANTS= (all windows: relist,evented,noevict,none)
#   BENCH_NODE_EVICTION_CHECKS=50 (0 skips the in-process eviction check)
#   BENCH_NODE_PROFILE= (a directory: CPU profiles of nodelet and containerd per idle window)
#   BENCH_NODELET_BEFORE= (a second nodelet binary, e.g. main's: its windows run next to
#                          bin/nodelet's, for before/after figures from one run)
# e.g. idle CPU only, relisting vs evented:
#   BENCH_CGROUP_PODS=0 BENCH_NODE_KILLS=0 BENCH_NODE_EVICTION_CHECKS=0 BENCH_NODE_VARIANTS=relist,evented hack/bench-node.sh
set -euo pipefail
cd "$(dirname "$0")/.."
pods=${BENCH_NODE_PODS:-100}

if [[ ${BENCH_CGROUP_PODS:-300} != 0 ]]; then
	echo "== container manager: pod cgroup set-up per pod start with $pods active pods =="
	go run ./test/bench/cgroups -active "$pods" -pods "${BENCH_CGROUP_PODS:-300}"
	echo
fi

echo "== nodelet with $pods pods on containerd 2.x: relisting vs evented PLEG; eviction manager on vs off =="
rig=(env NODELET_RUNTIME=containerd2 NODELET_STATE_DIR=/var/lib/nodelet-bench2 NODELET_RUN_DIR=/run/nodelet-b2
	NODELET_BRIDGE=nodeletb2 NODELET_POD_CIDR=10.93.0.0/24)
rig_log=$(mktemp)
trap '"${rig[@]}" hack/runtime.sh down >>"$rig_log" 2>&1 || cat "$rig_log" >&2; rm -f "$rig_log"' EXIT
endpoint=$("${rig[@]}" hack/runtime.sh up 2>"$rig_log") || { cat "$rig_log" >&2; exit 1; }
go run ./test/bench/node -endpoint "${endpoint#CONTAINER_RUNTIME_ENDPOINT=}" -nodelet bin/nodelet -pods "$pods" \
	-rounds "${BENCH_NODE_ROUNDS:-3}" -kills "${BENCH_NODE_KILLS:-5}" -idle "${BENCH_IDLE:-60s}" -settle "${BENCH_NODE_SETTLE:-30s}" \
	-variants "${BENCH_NODE_VARIANTS:-}" -eviction-checks "${BENCH_NODE_EVICTION_CHECKS:-50}" -profile "${BENCH_NODE_PROFILE:-}" \
	-nodelet-before "${BENCH_NODELET_BEFORE:-}"
