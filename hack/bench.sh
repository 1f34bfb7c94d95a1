#!/usr/bin/env bash
# Runs every benchmark against the project's containerd and prints their figures.
# Expects CONTAINER_RUNTIME_ENDPOINT (make bench sets it after hack/runtime.sh up).
set -euo pipefail
cd "$(dirname "$0")/.."
: "${CONTAINER_RUNTIME_ENDPOINT:?run via make bench}"
echo "== SyncPod vs raw CRI =="
go run ./test/bench/syncpod -endpoint "$CONTAINER_RUNTIME_ENDPOINT" -runs "${BENCH_RUNS:-10}"
