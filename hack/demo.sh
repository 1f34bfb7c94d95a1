#!/usr/bin/env bash
# The README's demo: bring up containerd, then run nodelet in the foreground in standalone
# mode on examples/static-pods/. With --cluster (make demo-cluster) the project's control
# plane comes up too, nodelet joins it as a node, and a Deployment is scheduled to it.
set -euo pipefail
cd "$(dirname "$0")/.."
cluster=false
[ "${1:-}" = --cluster ] && cluster=true
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

if ! $cluster; then
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
fi

# Cluster mode: the control plane (built on first use, see docs/controlplane.md), a client
# certificate for system:node:<node>, nodelet in the background, then a Deployment.
echo "demo: starting the control plane (a cold machine builds it first, ~20 min)" >&2
cp_line=$(hack/controlplane.sh up)
export "$cp_line"
kubectl() { hack/controlplane.sh kubectl "$@"; }
kubeconfig=$state/kubelet.kubeconfig
hack/controlplane.sh node-kubeconfig "$node" "$kubeconfig"
# What kubeadm sets up for a node: the kubelet API trusts client certificates of the
# cluster CA (the API server's, for logs, exec, port-forward; metrics-server's) and asks
# the API server about everyone else (webhook authentication and authorization are the
# defaults). A drop-in, so the example config stays the standalone one.
cp_dir=${NODELET_CP_DIR:-/var/lib/nodelet-cp}
dropins=$state/kubelet-config.d
mkdir -p "$dropins"
printf 'apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nauthentication:\n  x509:\n    clientCAFile: %s\n' \
	"$cp_dir/pki/ca.crt" >"$dropins/20-cluster.conf"
[[ " ${args[*]} " == *" --config-dir="* ]] || args+=(--config-dir="$dropins")
# metrics-server, for kubectl top.
hack/metrics-server.sh up >/dev/null
# The static counter pod lives in namespace demo: its mirror pod needs the namespace.
kubectl create namespace demo --dry-run=client -o yaml | kubectl apply -f - >&2
log=$state/nodelet-demo.log
bin/nodelet "${args[@]}" --kubeconfig="$kubeconfig" >"$log" 2>&1 &
pid=$!
# Ctrl-C or a TERM stops nodelet too (its pods keep running).
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null' EXIT
trap 'exit 130' INT TERM
echo "demo: nodelet (pid $pid) joining as node $node; log in $log" >&2
for _ in $(seq 300); do kubectl get node "$node" >/dev/null 2>&1 && break; sleep 0.2; done
kubectl wait --for=condition=Ready "node/$node" --timeout=60s >&2
sed "s/NODE_NAME/$node/" examples/cluster/web.yaml | kubectl apply -f - >&2
kubectl rollout status deployment/hello --timeout=120s >&2
kubectl get nodes,pods -o wide -A
{
	echo
	echo "nodelet is node $node of the cluster at \$KUBECONFIG=${KUBECONFIG}. Try:"
	grep -v '^#' examples/cluster/try.sh | sed 's/^/  /'
	echo "Stop with Ctrl-C (pods keep running). Remove everything with:"
	echo "  make runtime-down controlplane-down"
	echo
} >&2
wait $pid
