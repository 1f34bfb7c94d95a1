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
config=examples/kubelet-config.yaml
args=(--config="$config" --root-dir="$root")
# The example config names the default rig's endpoint and log directory. A rig elsewhere
# (NODELET_STATE_DIR, NODELET_RUN_DIR) gets a drop-in that points nodelet at it instead.
if [ "$endpoint" != "$(sed -n 's/^containerRuntimeEndpoint: *//p' "$config")" ] || [ "$state" != /var/lib/nodelet-dev ]; then
	dropins=$state/kubelet-config.d
	mkdir -p "$dropins"
	printf 'apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\ncontainerRuntimeEndpoint: %s\npodLogsDir: %s\n' \
		"$endpoint" "$state/pod-logs" >"$dropins/10-runtime.conf"
	args+=(--config-dir="$dropins")
fi
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
exec bin/nodelet "${args[@]}"
