#!/usr/bin/env bash
# Many nodes, one control plane: N nodelet nodes against N upstream kubelets (v1.37.2) for
# N in BENCH_SCALE_NODES, each node on its own containerd with BENCH_SCALE_PODS idle pods,
# started in turn with hack/nodes.sh; prints the kubelets' API request rate (from the
# control plane's audit log, itemised), the control plane's CPU and the kubelets' own
# (test/bench/scale). Expects bin/nodelet (make bench builds it); needs root.
#
# Environment (defaults):
#   BENCH_SCALE_NODES=1,3,5 BENCH_SCALE_PODS=20 BENCH_SCALE_WINDOW=60s BENCH_SCALE_SETTLE=2m
#   UPSTREAM_KUBELET=/var/cache/nodelet/k8s-v1.37.2/bin/kubelet
#   NODELET_BENCH_LOCK=/run/nodelet-shared.lock   (empty: take no lock)
set -euo pipefail
cd "$(dirname "$0")/.."
echo "== many nodes: control-plane load of N nodelet nodes vs N upstream kubelets, ${BENCH_SCALE_PODS:-20} pods each =="
upstream=${UPSTREAM_KUBELET:-/var/cache/nodelet/k8s-v1.37.2/bin/kubelet}
[ -x "$upstream" ] || hack/controlplane.sh build
exec go run ./test/bench/scale -nodelet bin/nodelet -upstream "$upstream" \
	-nodes "${BENCH_SCALE_NODES:-1,3,5}" -pods "${BENCH_SCALE_PODS:-20}" \
	-window "${BENCH_SCALE_WINDOW:-60s}" -settle "${BENCH_SCALE_SETTLE:-2m}" \
	-lock "${NODELET_BENCH_LOCK-/run/nodelet-shared.lock}"
