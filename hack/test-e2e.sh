#!/usr/bin/env bash
# The runtime-backed tests (`make test-e2e`, part of `make test`):
#  1. everything on Debian's containerd 1.6 with the project's control plane and
#     metrics-server: test/e2e plus the packages' own runtime tests (build tag e2e);
#  2. the node-local suite on containerd 2.x (hack/runtime.sh flavour containerd2): the
#     standalone, runtime-manager and probe tests, container events (evented PLEG) and
#     user namespaces, the static-pod switch with upstream's kubelet. Of the cluster tests
#     only those that need CDI (device plugins' and DRA drivers' CDI devices) run on 2.x too;
#     the rest, the kubelet-API and the kubeadm control-plane tests run on 1.6 only, to keep
#     CI short.
# NODELET_E2E_RUN / NODELET_E2E_RUNTIMES narrow a run by hand (a -run pattern; "1.6", "2").
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
export NODELET_BIN=$PWD/bin/nodelet
run=(-run "${NODELET_E2E_RUN:-.}")
runtimes=${NODELET_E2E_RUNTIMES:-1.6 2}
# The cluster tests that also run on containerd 2.x: containerd 1.6 has no CDI.
CDI_CLUSTER_TESTS='TestClusterUpstreamSampleDevicePlugin|TestClusterDRA'

on_containerd16() {
	eval "$(hack/runtime.sh up | grep '^CONTAINER_RUNTIME_ENDPOINT=')"
	export CONTAINER_RUNTIME_ENDPOINT
	local cp_env ms_env
	cp_env=$(hack/controlplane.sh up)
	export "${cp_env?}"
	NODELET_CP_DIR=$(dirname "$KUBECONFIG")
	export NODELET_CP_DIR
	ms_env=$(hack/metrics-server.sh up)
	export "${ms_env?}"
	"$GO" test -count=1 -p 1 -timeout 40m -tags e2e "${run[@]}" \
		./test/e2e/... ./pkg/runtime/cri/ ./pkg/pod/pleg/ ./pkg/runtime/imagegc/ ./pkg/runtime/kuberuntime/
}

on_containerd2() {
	export NODELET_RUNTIME=containerd2
	eval "$(hack/runtime.sh up | grep '^CONTAINER_RUNTIME_ENDPOINT=')"
	export CONTAINER_RUNTIME_ENDPOINT
	# The registry tests write containerd's hosts config under the dev rig's state dir.
	export NODELET_STATE_DIR=/var/lib/nodelet-dev2
	"$GO" test -count=1 -p 1 -timeout 30m -tags e2e "${run[@]}" \
		-skip 'TestCluster|TestKubeletAPI|TestKubectl|TestKubeadm' ./test/e2e/... ./pkg/runtime/cri/ ./pkg/pod/pleg/
	local cp_env
	cp_env=$(hack/controlplane.sh up)
	export "${cp_env?}"
	NODELET_CP_DIR=$(dirname "$KUBECONFIG")
	export NODELET_CP_DIR
	"$GO" test -count=1 -p 1 -timeout 15m -tags e2e -run "${NODELET_E2E_RUN:-$CDI_CLUSTER_TESTS}" ./test/e2e/
}



# Upstream's kubelet (the switch tests) is built with the control plane's binaries but
# not by `up`: build whatever is missing first, so that a fresh machine has it too.
hack/controlplane.sh build
# The external-attacher of the attachable-CSI-volume test, likewise.
hack/csi-attacher.sh build >/dev/null

for r in $runtimes; do
	echo "== e2e on containerd $r" >&2
	case $r in
	1.6) (on_containerd16) ;;
	2) (on_containerd2) ;;
	*) echo "unknown runtime $r (want 1.6 or 2)" >&2; exit 2 ;;
	esac
done
