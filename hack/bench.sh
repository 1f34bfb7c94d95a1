#!/usr/bin/env bash
# Runs every benchmark against real containerd and prints their figures. Each benchmark
# measures nodelet and its baseline side by side in one run (the machine is noisy).
# Expects CONTAINER_RUNTIME_ENDPOINT (make bench sets it after hack/runtime.sh up).
set -euo pipefail
cd "$(dirname "$0")/.."
: "${CONTAINER_RUNTIME_ENDPOINT:?run via make bench}"
# nodelet processes get a containerd of their own: a kubelet removes pods it does not own.
isolated=$(NODELET_STATE_DIR=/var/lib/nodelet-e2e NODELET_RUN_DIR=/run/nodelet-e2e \
  NODELET_BRIDGE=nodelet1 NODELET_POD_CIDR=10.89.0.0/24 hack/runtime.sh up)
isolated=${isolated#CONTAINER_RUNTIME_ENDPOINT=}

echo "== runtime manager: GetPodStatus+SyncPod vs raw CRI =="
go run ./test/bench/syncpod -endpoint "$CONTAINER_RUNTIME_ENDPOINT" -runs "${BENCH_RUNS:-10}" 2>/dev/null
echo
echo "== standalone nodelet vs raw CRI and upstream's kubelet: manifest → running; 20 pods; idle cost =="
# Upstream's kubelet (built as the cluster-mode issue describes) gets a containerd of its
# own; the bench starts and stops it and undoes the sysctls and iptables chains it sets.
upstream=${UPSTREAM_KUBELET:-/var/cache/nodelet/k8s-v1.37.2/bin/kubelet}
upstream_args=()
if [ -x "$upstream" ]; then
	rig=$(NODELET_STATE_DIR=/var/lib/nodelet-bench-up NODELET_RUN_DIR=/run/nodelet-bench-up \
		NODELET_BRIDGE=nodelet2 NODELET_POD_CIDR=10.90.0.0/24 hack/runtime.sh up)
	upstream_args=(-upstream "$upstream" -upstream-endpoint "${rig#CONTAINER_RUNTIME_ENDPOINT=}")
else
	echo "(no upstream kubelet at $upstream: set UPSTREAM_KUBELET for the upstream column)"
fi
go run ./test/bench/standalone -endpoint "$isolated" -nodelet bin/nodelet "${upstream_args[@]}" \
	-runs "${BENCH_RUNS:-10}" -pods "${BENCH_PODS:-20}" -idle "${BENCH_IDLE:-60s}" 2>/dev/null
echo
echo "== probes: CPU per exec readiness probe, 100 containers =="
go run ./test/bench/probes -endpoint "$CONTAINER_RUNTIME_ENDPOINT" 2>/dev/null
echo
echo "== hostile manifest directory: 1,000 bad entries next to 5 pods (issue 14) =="
go run ./test/bench/hostile -endpoint "$isolated" -nodelet bin/nodelet -baseline "${BENCH_HOSTILE_BASELINE:-30s}" -quiet "${BENCH_IDLE:-60s}" 2>/dev/null
