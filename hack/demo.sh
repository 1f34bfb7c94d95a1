#!/usr/bin/env bash
# The README's demo: bring up containerd, then run nodelet in the foreground in standalone
# mode on examples/static-pods/.
set -euo pipefail
cd "$(dirname "$0")/.."
endpoint_line=$(hack/runtime.sh up)
endpoint=${endpoint_line#CONTAINER_RUNTIME_ENDPOINT=}
state=${NODELET_STATE_DIR:-/var/lib/nodelet-dev}
root=$state/kubelet
node=$(hostname | tr '[:upper:]' '[:lower:]')
cat >&2 <<EOT

nodelet is starting against $endpoint with the static pods in examples/static-pods/.
In another terminal:
  bin/nodelet pods --root-dir $root
  bin/nodelet logs web-$node ticker -f --root-dir $root
  bin/nodelet logs counter-$node -n demo --root-dir $root
  hack/runtime.sh crictl ps
  curl http://\$(hack/runtime.sh crictl inspectp \$(hack/runtime.sh crictl pods -q --name web-$node) | grep -m1 '"ip"' | cut -d'"' -f4):8080/
Add or remove files in examples/static-pods/ and watch the pods follow.
Stop with Ctrl-C (pods keep running; a restarted nodelet adopts them).
Remove everything with: make runtime-down

EOT
exec bin/nodelet --container-runtime-endpoint="$endpoint" --root-dir="$root" \
  --config=examples/kubelet-config.yaml
