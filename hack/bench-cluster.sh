#!/usr/bin/env bash
# Cluster-mode benchmark: nodelet and upstream's kubelet v1.37.2 side by side in one run,
# each on a containerd of its own, joined to the project's control plane (see
# test/bench/cluster). The bench brings up the control plane and its two rigs
# (/run/nodelet-bench-a, /run/nodelet-bench-b) itself, and removes all it made but the
# control plane. Expects bin/nodelet (make bench builds it; the output names its build).
#
# Environment (defaults):
#   UPSTREAM_KUBELET=/var/cache/nodelet/k8s-v1.37.2/bin/kubelet   built when missing
#   NODELET_BENCH_LOCK=/run/nodelet-shared.lock   held while the kubelets use the shared
#                      control plane; set it empty when running under that lock already
#   KUBECTL=/var/cache/nodelet/k8s-v1.37.2/bin/kubectl   for the exec round trips
#   BENCH_ROUNDS=7 BENCH_BATCH_ROUNDS=5 BENCH_IDLE=60s
#   BENCH_API_PODS=100 (0: no kubelet API figures) BENCH_API_CLIENTS=4 BENCH_API_ROUNDS=2
#   BENCH_API_WINDOW=10s BENCH_EXEC_RUNS=11
#   BENCH_SCENARIOS=all   or a comma-separated list of pods, api, volumes, requests,
#                         density, churn (e.g. density,churn)
#   BENCH_VOLUME_ROUNDS=7 BENCH_VOLUME_PODS=100 BENCH_VOLUME_WINDOW=15s
#   BENCH_REQUESTS_PODS=20 BENCH_REQUESTS_WINDOW=60s
#   BENCH_DENSITY_PODS=110 BENCH_DENSITY_ROUNDS=1   (BENCH_IDLE is its idle window too)
#   BENCH_CHURN_LIVE=100 BENCH_CHURN_RATE=2 BENCH_CHURN_DURATION=5m
#   BENCH_CHURN_FLOOR=2m   the containerd floor's churn window (direct CRI calls); 0: none
#   BENCH_RUNTIME=containerd   or containerd2: both rigs on containerd 2.x, whose container
#                         events make nodelet's PLEG evented (upstream's stays relisting)
set -euo pipefail
cd "$(dirname "$0")/.."
# pods: API create → Ready, 20 pods, RSS and idle CPU; api: kubelet API /pods,
# /stats/summary and kubectl exec with BENCH_API_PODS pods; volumes: pods with configMap +
# secret + token volumes, create → Ready and RSS with BENCH_VOLUME_PODS pods; requests: API
# requests per pod lifecycle from the API server's audit log; density: BENCH_DENSITY_PODS
# pods by one Deployment scale-up, CPU, RSS, idle CPU and heap profile with them up;
# churn: BENCH_CHURN_RATE pods/s created and deleted with BENCH_CHURN_LIVE live, create →
# Ready percentiles, and the same churn by direct CRI calls (BENCH_CHURN_FLOOR) as its
# containerd floor. At the defaults these three add roughly half an hour (churn: 5 min a
# kubelet, 2 min of floor, plus set-up).
echo "== cluster mode: nodelet vs upstream's kubelet on ${BENCH_RUNTIME:-containerd}, scenarios: ${BENCH_SCENARIOS:-all} (of pods, api, volumes, requests, density, churn) =="
exec go run ./test/bench/cluster -nodelet bin/nodelet \
	-upstream "${UPSTREAM_KUBELET:-/var/cache/nodelet/k8s-v1.37.2/bin/kubelet}" \
	-kubectl "${KUBECTL:-/var/cache/nodelet/k8s-v1.37.2/bin/kubectl}" \
	-lock "${NODELET_BENCH_LOCK-/run/nodelet-shared.lock}" \
	-rounds "${BENCH_ROUNDS:-7}" -batch-rounds "${BENCH_BATCH_ROUNDS:-5}" -pods 20 -idle "${BENCH_IDLE:-60s}" \
	-api-pods "${BENCH_API_PODS:-100}" -api-clients "${BENCH_API_CLIENTS:-4}" -api-rounds "${BENCH_API_ROUNDS:-2}" \
	-api-window "${BENCH_API_WINDOW:-10s}" -exec-runs "${BENCH_EXEC_RUNS:-11}" \
	-scenarios "${BENCH_SCENARIOS:-all}" -volume-rounds "${BENCH_VOLUME_ROUNDS:-7}" \
	-volume-pods "${BENCH_VOLUME_PODS:-100}" -volume-window "${BENCH_VOLUME_WINDOW:-15s}" \
	-requests-pods "${BENCH_REQUESTS_PODS:-20}" -requests-window "${BENCH_REQUESTS_WINDOW:-60s}" \
	-density-pods "${BENCH_DENSITY_PODS:-110}" -density-rounds "${BENCH_DENSITY_ROUNDS:-1}" \
	-churn-live "${BENCH_CHURN_LIVE:-100}" -churn-rate "${BENCH_CHURN_RATE:-2}" \
	-churn-duration "${BENCH_CHURN_DURATION:-5m}" -churn-floor-duration "${BENCH_CHURN_FLOOR:-2m}" -runtime "${BENCH_RUNTIME:-containerd}"
