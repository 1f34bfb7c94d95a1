#!/usr/bin/env bash
# hack/metrics-server.sh: metrics-server (sigs.k8s.io/metrics-server, built from the Go
# module proxy by hack/tools/metrics-server) on 127.0.0.1 next to hack/controlplane.sh's
# control plane, registered with the API server's aggregation layer, so that
# `kubectl top node` and `kubectl top pod` work against nodes run by nodelet.
#
#   hack/metrics-server.sh up      build it if missing, issue its certificates from the
#                                  control plane's CA, apply its RBAC, Service and
#                                  APIService v1beta1.metrics.k8s.io, start it and wait
#                                  until the APIService is Available; prints one line on
#                                  stdout: METRICS_SERVER=https://127.0.0.1:<port>
#                                  Idempotent. The control plane must be up.
#   hack/metrics-server.sh down    delete the APIService and its objects (if the API server
#                                  answers), stop the process by PID, delete the state.
#                                  Safe when not up.
#   hack/metrics-server.sh status  one line; exit 0 if it runs and the APIService is
#                                  Available, 3 if not
#   hack/metrics-server.sh build   build the binary into the cache if missing
#
# How it is wired (no control-plane flag needs to change):
#   - The APIService points at Service kube-system/metrics-server of type ExternalName
#     with externalName 127.0.0.1: without --enable-aggregator-routing the aggregator
#     resolves an ExternalName Service to that host and the APIService's port. (A Service
#     with manual Endpoints or an EndpointSlice cannot be used: the API server refuses
#     loopback endpoint addresses.)
#   - The aggregator verifies metrics-server's serving certificate: it is issued by the
#     cluster CA for metrics-server.kube-system.svc and 127.0.0.1, and the APIService's
#     caBundle is the cluster CA.
#   - The aggregator authenticates to metrics-server with the front-proxy client
#     certificate (--proxy-client-cert-file, --requestheader-* flags, which
#     hack/controlplane.sh sets); metrics-server reads the request-header CA from
#     kube-system/extension-apiserver-authentication.
#   - metrics-server acts as user system:metrics-server (a client certificate from the
#     cluster CA) with upstream's RBAC: nodes/metrics, nodes and pods, auth-delegator,
#     extension-apiserver-authentication-reader. It scrapes each node's
#     /metrics/resource at its InternalIP and its status port (daemonEndpoints), with
#     that certificate, without verifying the kubelet's serving certificate.
#
# Environment (defaults):
#   NODELET_CP_DIR=/var/lib/nodelet-cp           the control plane's state (CA, kubectl)
#   NODELET_MS_DIR=/var/lib/nodelet-metrics-server  state: certificates, kubeconfig, log, pid
#   NODELET_CACHE_DIR=/var/cache/nodelet         binary: metrics-server-<version>/bin
#   NODELET_MS_PORT=4443                         secure port on 127.0.0.1
#   NODELET_MS_RESOLUTION=15s                    --metric-resolution (scrape interval)
#   NODELET_MS_NODE_SELECTOR=                    --node-selector: scrape only the nodes with
#                                                these labels (e.g. nodelet.test/metrics=true,
#                                                to leave a benchmark's kubelets alone)
#   NODELET_MS_TIMEOUT=120                       seconds to wait for Available
set -euo pipefail

CP_DIR=${NODELET_CP_DIR:-/var/lib/nodelet-cp}
STATE=${NODELET_MS_DIR:-/var/lib/nodelet-metrics-server}
CACHE_DIR=${NODELET_CACHE_DIR:-/var/cache/nodelet}
PORT=${NODELET_MS_PORT:-4443}
RESOLUTION=${NODELET_MS_RESOLUTION:-15s}
NODE_SELECTOR=${NODELET_MS_NODE_SELECTOR:-}
TIMEOUT=${NODELET_MS_TIMEOUT:-120}

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
MOD=$ROOT/hack/tools/metrics-server
export PATH=$PATH:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/usr/local/go/bin
GO=${GO:-go}
HOST=127.0.0.1
USER_NAME=system:metrics-server
SERVICE_DNS=metrics-server.kube-system.svc
CERT_DAYS=3650
FIELD_MANAGER=nodelet-metrics-server

# stdout carries only the result line; everything else goes to stderr.
exec 3>&1 1>&2

log() { echo "metrics-server.sh: $*" >&2; }
die() {
	log "error: $*"
	exit 1
}

need_root() { [ "$(id -u)" = 0 ] || die "must run as root"; }

check_dirs() {
	local d
	for d in "$STATE" "$CACHE_DIR" "$CP_DIR"; do
		[[ $d == /?* && $d != *[[:space:]]* && $(realpath -m "$d") != / ]] ||
			die "bad directory '$d' (must be absolute, not /, without spaces)"
	done
}

lock() {
	mkdir -p "$(dirname "$STATE")"
	exec 9>"${STATE%/}.lock"
	flock 9
}

# shellcheck source=hack/lib-gobuild.sh
. "$ROOT/hack/lib-gobuild.sh"

VERSION=$(module_version "$MOD/go.mod" sigs.k8s.io/metrics-server)
[ -n "$VERSION" ] || die "cannot read the metrics-server version from $MOD/go.mod"
K8S_VERSION=$(module_version "$ROOT/hack/tools/k8s/go.mod" k8s.io/kubernetes)
BIN=$CACHE_DIR/metrics-server-$VERSION/bin/metrics-server
KUBECTL=$CACHE_DIR/k8s-$K8S_VERSION/bin/kubectl
PKI=$CP_DIR/pki
PIDFILE=$STATE/metrics-server.pid
LOG=$STATE/metrics-server.log
KUBECONFIG_FILE=$STATE/metrics-server.kubeconfig

# ---------------------------------------------------------------- binary

# The flags of metrics-server's own release build (its Makefile).
build() {
	cached_go_build "$BIN" "$MOD" sigs.k8s.io/metrics-server/cmd/metrics-server \
		"-s -w -X k8s.io/client-go/pkg/version.gitVersion=$VERSION" \
		"metrics-server $VERSION (about 3 min cold on 2 cores)"
}

# ---------------------------------------------------------------- certificates

new_key() { (umask 077 && openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1"); }

# issue NAME SUBJECT EXTENSIONS...: STATE/NAME.{key,crt} signed by the cluster CA.
issue() {
	local name=$1 subj=$2 err
	shift 2
	new_key "$STATE/$name.key"
	openssl req -new -key "$STATE/$name.key" -subj "$subj" -out "$STATE/$name.csr" \
		-config <(printf '%s\n' '[req]' 'distinguished_name = dn' 'prompt = no' '[dn]')
	if ! err=$(openssl x509 -req -in "$STATE/$name.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" \
		-set_serial "0x$(openssl rand -hex 16)" -days "$CERT_DAYS" -sha256 -out "$STATE/$name.crt" \
		-extfile <(printf '%s\n' 'basicConstraints = critical,CA:FALSE' \
			'keyUsage = critical,digitalSignature,keyEncipherment' "$@") 2>&1); then
		die "signing $name: $err"
	fi
	rm -f "$STATE/$name.csr"
}

# ensure_certs: certificates from the current cluster CA (a control plane made anew
# has a new CA: reissue).
ensure_certs() {
	if [ -f "$STATE/client.crt" ] && [ -f "$STATE/serving.crt" ] &&
		openssl verify -CAfile "$PKI/ca.crt" "$STATE/client.crt" "$STATE/serving.crt" >/dev/null 2>&1; then
		return 0
	fi
	log "issuing metrics-server's certificates from $PKI/ca.crt"
	issue client "/CN=$USER_NAME" 'extendedKeyUsage = clientAuth'
	issue serving "/CN=metrics-server" 'extendedKeyUsage = serverAuth' \
		"subjectAltName = DNS:$SERVICE_DNS,DNS:metrics-server.kube-system,DNS:localhost,IP:$HOST"
	write_kubeconfig
}

write_kubeconfig() {
	(umask 077 && cat >"$KUBECONFIG_FILE") <<EOF
apiVersion: v1
kind: Config
clusters:
- name: kubernetes
  cluster:
    server: https://$HOST:6443
    certificate-authority-data: $(base64 -w0 <"$PKI/ca.crt")
users:
- name: $USER_NAME
  user:
    client-certificate-data: $(base64 -w0 <"$STATE/client.crt")
    client-key-data: $(base64 -w0 <"$STATE/client.key")
contexts:
- name: $USER_NAME@kubernetes
  context: {cluster: kubernetes, user: $USER_NAME}
current-context: $USER_NAME@kubernetes
EOF
}

# ---------------------------------------------------------------- API objects

kubectl_() { "$KUBECTL" --kubeconfig "$CP_DIR/admin.kubeconfig" "$@"; }

# manifests: upstream's RBAC (manifests/base/rbac.yaml) bound to our user instead of
# a ServiceAccount, the ExternalName Service and the APIService.
manifests() {
	local user="- {kind: User, apiGroup: rbac.authorization.k8s.io, name: \"$USER_NAME\"}"
	cat <<EOF
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: system:aggregated-metrics-reader
  labels:
    rbac.authorization.k8s.io/aggregate-to-view: "true"
    rbac.authorization.k8s.io/aggregate-to-edit: "true"
    rbac.authorization.k8s.io/aggregate-to-admin: "true"
rules:
- {apiGroups: [metrics.k8s.io], resources: [pods, nodes], verbs: [get, list, watch]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: "system:metrics-server"}
rules:
- {apiGroups: [""], resources: [nodes/metrics], verbs: [get]}
- {apiGroups: [""], resources: [pods, nodes], verbs: [get, list, watch]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "system:metrics-server"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "system:metrics-server"}
subjects:
$user
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "metrics-server:system:auth-delegator"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "system:auth-delegator"}
subjects:
$user
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: metrics-server-auth-reader, namespace: kube-system}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: extension-apiserver-authentication-reader}
subjects:
$user
---
apiVersion: v1
kind: Service
metadata:
  name: metrics-server
  namespace: kube-system
  labels: {k8s-app: metrics-server}
spec:
  type: ExternalName
  externalName: "$HOST"
  ports:
  - {name: https, port: $PORT, protocol: TCP}
---
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata:
  name: v1beta1.metrics.k8s.io
  labels: {k8s-app: metrics-server}
spec:
  service: {name: metrics-server, namespace: kube-system, port: $PORT}
  group: metrics.k8s.io
  version: v1beta1
  caBundle: $(base64 -w0 <"$PKI/ca.crt")
  groupPriorityMinimum: 100
  versionPriority: 100
EOF
}

apply_manifests() {
	manifests | kubectl_ apply --server-side --field-manager="$FIELD_MANAGER" --force-conflicts -f - |
		{ grep -v ' serverside-applied$' || true; } >&2
}

delete_manifests() {
	# The APIService first: while it points at nothing, API discovery reports it.
	kubectl_ delete --ignore-not-found --wait=false apiservice v1beta1.metrics.k8s.io >&2 || true
	manifests | kubectl_ delete --ignore-not-found --wait=false -f - >&2 || true
}

# ---------------------------------------------------------------- process

args() {
	ARGV=("$BIN" --bind-address="$HOST" --secure-port="$PORT"
		--tls-cert-file="$STATE/serving.crt" --tls-private-key-file="$STATE/serving.key"
		--kubeconfig="$KUBECONFIG_FILE" --authentication-kubeconfig="$KUBECONFIG_FILE"
		--authorization-kubeconfig="$KUBECONFIG_FILE"
		--kubelet-insecure-tls --kubelet-preferred-address-types=InternalIP
		--kubelet-use-node-status-port --metric-resolution="$RESOLUTION")
	[ -z "$NODE_SELECTOR" ] || ARGV+=(--node-selector="$NODE_SELECTOR")
}

# our_pid: the PID of our running metrics-server (its command line names our state).
our_pid() {
	local pid a
	pid=$(cat "$PIDFILE" 2>/dev/null || true)
	[[ $pid =~ ^[0-9]+$ ]] || return 1
	[ -r "/proc/$pid/cmdline" ] || return 1
	mapfile -d '' a <"/proc/$pid/cmdline" || return 1
	[[ ${a[0]:-} == "$BIN" && " ${a[*]} " == *" --kubeconfig=$KUBECONFIG_FILE "* ]] || return 1
	echo "$pid"
}

start() {
	local pid
	args
	if pid=$(our_pid); then
		local a
		mapfile -d '' a <"/proc/$pid/cmdline"
		[ "${a[*]}" = "${ARGV[*]}" ] && return 0
		log "metrics-server (pid $pid) runs with other flags: restarting it"
		stop
	fi
	log "starting metrics-server on https://$HOST:$PORT (log: $LOG)"
	(
		exec 3>&- 8>&- 9>&-
		exec setsid env -u HTTP_PROXY -u HTTPS_PROXY -u http_proxy -u https_proxy -u ALL_PROXY \
			-u all_proxy -u NO_PROXY -u no_proxy "${ARGV[@]}" </dev/null >>"$LOG" 2>&1
	) &
	echo $! >"$PIDFILE"
}

stop() {
	local pid i
	pid=$(our_pid) || {
		rm -f "$PIDFILE"
		return 0
	}
	log "stopping metrics-server (pid $pid)"
	kill -TERM "$pid" 2>/dev/null || true
	for ((i = 0; i < 100; i++)); do
		[ -d "/proc/$pid" ] || break
		sleep 0.1
	done
	if [ -d "/proc/$pid" ]; then
		kill -KILL "$pid" 2>/dev/null || true
	fi
	rm -f "$PIDFILE"
}

available() {
	[ "$(kubectl_ get apiservice v1beta1.metrics.k8s.io \
		-o jsonpath='{.status.conditions[?(@.type=="Available")].status}' 2>/dev/null)" = True ]
}

wait_available() {
	local i pid
	for ((i = 0; i < TIMEOUT * 2; i++)); do
		available && return 0
		pid=$(cat "$PIDFILE" 2>/dev/null || true)
		if [ -n "$pid" ] && ! [ -d "/proc/$pid" ]; then
			tail -n 20 "$LOG" >&2 || true
			die "metrics-server exited; see $LOG"
		fi
		sleep 0.5
	done
	tail -n 20 "$LOG" >&2 || true
	kubectl_ get apiservice v1beta1.metrics.k8s.io -o yaml >&2 || true
	die "APIService v1beta1.metrics.k8s.io not Available within ${TIMEOUT}s"
}

# ---------------------------------------------------------------- commands

cp_up() {
	[ -f "$PKI/.complete" ] && [ -x "$KUBECTL" ] && kubectl_ get --raw /readyz >/dev/null 2>&1
}

cmd_up() {
	need_root
	lock
	command -v openssl >/dev/null || die "openssl not found"
	cp_up || die "the control plane is not up: run hack/controlplane.sh up first"
	build
	mkdir -p "$STATE"
	chmod 700 "$STATE"
	ensure_certs
	apply_manifests
	start
	wait_available
	log "APIService v1beta1.metrics.k8s.io Available"
	echo "METRICS_SERVER=https://$HOST:$PORT" >&3
}

cmd_down() {
	need_root
	lock
	if cp_up; then
		delete_manifests
	fi
	stop
	rm -rf --one-file-system "$STATE"
}

cmd_status() {
	local state=stopped rc=3
	if our_pid >/dev/null; then
		state=running
		if cp_up && available; then
			state="running, APIService Available"
			rc=0
		fi
	fi
	echo "metrics-server $VERSION: $state" >&3
	return $rc
}

check_dirs
cmd=${1:-}
case $cmd in
up) cmd_up ;;
down) cmd_down ;;
status) cmd_status ;;
build) build ;;
*)
	sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "${BASH_SOURCE[0]}" >&2
	exit 2
	;;
esac
