#!/usr/bin/env bash
# The README's demo: bring up containerd, then run nodelet in the foreground against it.
set -euo pipefail
cd "$(dirname "$0")/.."
endpoint_line=$(hack/runtime.sh up)
endpoint=${endpoint_line#CONTAINER_RUNTIME_ENDPOINT=}
state=${NODELET_STATE_DIR:-/var/lib/nodelet-dev}
cat >&2 <<EOT

nodelet is starting against $endpoint.
  health:      curl http://127.0.0.1:10248/healthz
  containers:  hack/runtime.sh crictl ps
Stop it with Ctrl-C (containers keep running); remove the runtime with: make runtime-down

EOT
exec bin/nodelet --container-runtime-endpoint="$endpoint" --root-dir="$state/kubelet" \
  --config=examples/kubelet-config.yaml
