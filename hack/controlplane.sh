#!/usr/bin/env bash
# hack/controlplane.sh: a real Kubernetes control plane on 127.0.0.1 for nodelet's cluster
# mode tests, demo and benchmarks: etcd, kube-apiserver, kube-controller-manager and
# kube-scheduler built from upstream sources (hack/tools/etcd, hack/tools/k8s).
#
#   hack/controlplane.sh up       build what is missing, generate the PKI on first use,
#                                 start the four components, wait until they are healthy,
#                                 apply the kubeadm-like join set-up; prints exactly one
#                                 line on stdout: KUBECONFIG=<state>/admin.kubeconfig
#                                 Idempotent: a second run changes nothing. A component
#                                 whose flags changed (e.g. NODELET_CP_SIGNING_DURATION) is
#                                 restarted.
#   hack/controlplane.sh down     stop everything by PID and delete the state directory
#                                 (the binary cache is kept). Safe when not up.
#   hack/controlplane.sh stop     stop all components, keep the state (a later up is warm)
#   hack/controlplane.sh stop-apiserver    stop only kube-apiserver (API outage tests)
#   hack/controlplane.sh start-apiserver   start it again, wait for /readyz; prints the
#                                          KUBECONFIG line
#   hack/controlplane.sh restart-controllers   restart kube-controller-manager and
#                                 kube-scheduler with fresh caches (after an API outage
#                                 test: their informers can lag for a minute or more)
#   hack/controlplane.sh status   one line on stdout; exit 0 if all four are healthy, 3 if not
#   hack/controlplane.sh env      print the KUBECONFIG=... line
#   hack/controlplane.sh kubectl ARGS...   the matching kubectl with the admin kubeconfig
#                                          (a later --kubeconfig in ARGS wins)
#   hack/controlplane.sh node-kubeconfig NODE PATH   write a client-certificate kubeconfig
#                                 for system:node:NODE (group system:nodes) to PATH
#   hack/controlplane.sh build    build every cached binary that is missing (etcd,
#                                 kube-apiserver, kube-controller-manager, kube-scheduler,
#                                 kubectl, kubelet); prints nothing on stdout
#
# Files in the state directory (NODELET_CP_DIR):
#   admin.kubeconfig          cluster admin (client cert, group system:masters)
#   bootstrap-kubeconfig      bootstrap token auth for TLS bootstrapping (--bootstrap-kubeconfig)
#   bootstrap-token           the token, <id>.<secret>
#   pki/ca.crt, pki/ca.key    cluster CA (also the CSR signing CA)
#   logs/<component>.log      component logs;  run/<component>.pid  their PIDs
#   logs/audit.log            the API server's audit log of the nodes' requests (user group
#                             system:nodes, Metadata level, JSON lines; 100 MB, 2 backups):
#                             what the benchmarks count per kubelet
#
# Ports (all on 127.0.0.1): kube-apiserver 6443, etcd 2379 (peer 2380),
# kube-controller-manager 10257, kube-scheduler 10259.
#
# Environment (defaults):
#   NODELET_CP_DIR=/var/lib/nodelet-cp          state: PKI, kubeconfigs, etcd data, logs
#   NODELET_CACHE_DIR=/var/cache/nodelet        binaries: k8s-<version>/bin, etcd-<version>/bin
#   NODELET_CP_SIGNING_DURATION=8760h           lifetime of certificates the CSR signer issues
#   NODELET_CP_TIMEOUT=120                      seconds to wait for each component
set -euo pipefail

STATE=${NODELET_CP_DIR:-/var/lib/nodelet-cp}
CACHE_DIR=${NODELET_CACHE_DIR:-/var/cache/nodelet}
SIGNING_DURATION=${NODELET_CP_SIGNING_DURATION:-8760h}
TIMEOUT=${NODELET_CP_TIMEOUT:-120}

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
K8S_MOD=$ROOT/hack/tools/k8s
ETCD_MOD=$ROOT/hack/tools/etcd
export PATH=$PATH:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/usr/local/go/bin
GO=${GO:-go}

HOST=127.0.0.1
APISERVER_PORT=6443
ETCD_PORT=2379
ETCD_PEER_PORT=2380
CM_PORT=10257
SCHEDULER_PORT=10259
SERVER=https://$HOST:$APISERVER_PORT
SERVICE_CIDR=10.96.0.0/12
KUBERNETES_SERVICE_IP=10.96.0.1
SA_ISSUER=https://kubernetes.default.svc.cluster.local
CERT_DAYS=3650
# kubeadm's names for the default node bootstrap token group and the cluster.
BOOTSTRAP_GROUP=system:bootstrappers:kubeadm:default-node-token
CLUSTER_NAME=kubernetes

PKI=$STATE/pki
LOGS=$STATE/logs
PIDS=$STATE/run
ADMIN_KUBECONFIG=$STATE/admin.kubeconfig
BOOTSTRAP_KUBECONFIG=$STATE/bootstrap-kubeconfig
TOKEN_FILE=$STATE/bootstrap-token
COMPONENTS=(etcd kube-apiserver kube-controller-manager kube-scheduler)

# stdout carries only the result line; everything else goes to stderr.
exec 3>&1 1>&2

log() { echo "controlplane.sh: $*" >&2; }
die() {
	log "error: $*"
	exit 1
}

check_dirs() {
	local d
	for d in "$STATE" "$CACHE_DIR"; do
		[[ $d == /?* && $d != *[[:space:]]* && $(realpath -m "$d") != / ]] ||
			die "bad directory '$d' (must be absolute, not /, without spaces)"
	done
}

need_root() { [ "$(id -u)" = 0 ] || die "must run as root"; }

# Serialize invocations on one state directory. The lock lives next to the state
# directory so down can delete it while holding the lock; fd 9 is closed in the daemons.
lock() {
	mkdir -p "$(dirname "$STATE")"
	exec 9>"${STATE%/}.lock"
	flock 9
}

# elapsed START: seconds since START (an $EPOCHREALTIME value), one decimal.
elapsed() { awk -v s="$1" -v e="$EPOCHREALTIME" 'BEGIN { printf "%.1fs", e - s }'; }

# ---------------------------------------------------------------- binaries

# module_version GO_MOD MODULE: the version GO_MOD requires of MODULE.
module_version() {
	awk -v m="$2" '($1 == m && $2 ~ /^v/) { print $2; exit } ($1 == "require" && $2 == m) { print $3; exit }' "$1"
}

K8S_VERSION=$(module_version "$K8S_MOD/go.mod" k8s.io/kubernetes)
ETCD_VERSION=$(module_version "$ETCD_MOD/go.mod" go.etcd.io/etcd/server/v3)
if [ -z "$K8S_VERSION" ] || [ -z "$ETCD_VERSION" ]; then
	die "cannot read the k8s/etcd versions from hack/tools/*/go.mod"
fi
K8S_BIN=$CACHE_DIR/k8s-$K8S_VERSION/bin
ETCD_BIN=$CACHE_DIR/etcd-$ETCD_VERSION/bin
# The last three are upstream's own test plugins (a device plugin, a DRA driver and its
# e2e mock CSI driver, wrapped by hack/tools/k8s/csi-mock) that the e2e tests run against
# nodelet and upstream's kubelet.
K8S_ALL=(kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet sample-device-plugin test-driver csi-mock)

# k8s_package NAME: the package (in k8s.io/kubernetes, or of hack/tools/k8s) that builds
# the command NAME.
k8s_package() {
	case $1 in
	sample-device-plugin) echo k8s.io/kubernetes/test/images/sample-device-plugin ;;
	test-driver) echo k8s.io/kubernetes/test/e2e/dra/test-driver ;;
	csi-mock) echo github.com/nodelet/nodelet/hack/tools/k8s/csi-mock ;; # hack/tools/k8s's own
	*) echo "k8s.io/kubernetes/cmd/$1" ;;
	esac
}

# k8s_ldflags: the version stamps upstream's build sets (hack/lib/version.sh), so that
# `kubectl version` and the API server's /version report the real release.
k8s_ldflags() {
	local v=${K8S_VERSION#v} major minor
	major=${v%%.*}
	minor=${v#*.}
	minor=${minor%%.*}
	echo "-s -w -X k8s.io/component-base/version.gitVersion=$K8S_VERSION" \
		"-X k8s.io/component-base/version.gitMajor=$major -X k8s.io/component-base/version.gitMinor=$minor" \
		"-X k8s.io/client-go/pkg/version.gitVersion=$K8S_VERSION"
}

# cmdline PID: sets ARGS to the command line of PID (empty if gone).
cmdline() {
	ARGS=()
	if [ -r "/proc/$1/cmdline" ]; then
		mapfile -d '' ARGS <"/proc/$1/cmdline" 2>/dev/null || true
	fi
}

# build_running_into DIR: whether some `go build ... -o DIR/` (another shell's
# build, e.g. started by hand) is writing into DIR right now.
build_running_into() {
	local p a
	for p in /proc/[0-9]*; do
		cmdline "${p#/proc/}"
		[[ ${#ARGS[@]} -gt 2 && ${ARGS[0]##*/} == go && ${ARGS[1]} == build ]] || continue
		for a in "${ARGS[@]}"; do
			[[ $a == "$1" || $a == "$1/" ]] && return 0
		done
	done
	return 1
}

wait_for_other_build() {
	local waited=0
	while build_running_into "$1"; do
		((waited % 60 == 0)) && log "another go build is writing into $1; waiting for it (${waited}s so far)"
		sleep 5
		waited=$((waited + 5))
	done
}

# missing_in DIR NAMES...: print the NAMES without an executable in DIR.
missing_in() {
	local dir=$1 n
	shift
	for n in "$@"; do
		[ -x "$dir/$n" ] || echo "$n"
	done
}

# go_build_into MODULE_DIR BIN_DIR GO_BUILD_ARGS...: build in a temporary directory
# and move the binaries into BIN_DIR only when all are built, so an interrupted build
# never leaves a truncated binary in the cache.
go_build_into() {
	local mod=$1 bin=$2 tmp start f built=()
	shift 2
	command -v "$GO" >/dev/null || die "go not found (needed to build into $bin)"
	mkdir -p "$bin"
	tmp=$(mktemp -d "$(dirname "$bin")/.build.XXXXXX")
	start=$EPOCHREALTIME
	if ! (cd "$mod" && "$GO" build -buildvcs=false -o "$tmp/" "$@"); then
		rm -rf "$tmp"
		die "building into $bin failed"
	fi
	for f in "$tmp"/*; do
		built+=("${f##*/}")
		mv -f "$f" "$bin/"
	done
	rmdir "$tmp"
	log "built ${built[*]} in $(elapsed "$start")"
}

build_etcd() {
	[ -x "$ETCD_BIN/etcd" ] && return 0
	wait_for_other_build "$ETCD_BIN"
	[ -x "$ETCD_BIN/etcd" ] && return 0
	log "building etcd $ETCD_VERSION into $ETCD_BIN (about 2 min cold on 2 cores)"
	# hack/tools/etcd is a main package named etcd that calls upstream's etcdmain.
	CGO_ENABLED=0 go_build_into "$ETCD_MOD" "$ETCD_BIN" -trimpath -ldflags "-s -w" .
}

# build_k8s NAMES...: build the named upstream commands that are not cached yet, in
# one go build (they share most packages). Flags as upstream's release build.
build_k8s() {
	local missing pkgs=() n
	mapfile -t missing < <(missing_in "$K8S_BIN" "$@")
	[ ${#missing[@]} -eq 0 ] && return 0
	wait_for_other_build "$K8S_BIN"
	mapfile -t missing < <(missing_in "$K8S_BIN" "$@")
	[ ${#missing[@]} -eq 0 ] && return 0
	for n in "${missing[@]}"; do
		pkgs+=("$(k8s_package "$n")")
	done
	log "building ${missing[*]} $K8S_VERSION into $K8S_BIN" \
		"(cold on 2 cores: 15-25 min; see docs/controlplane.md)"
	go_build_into "$K8S_MOD" "$K8S_BIN" -trimpath -tags selinux,notest,grpcnotrace \
		-ldflags "$(k8s_ldflags)" "${pkgs[@]}"
}

# ensure_binaries NAMES...: build what is missing, one build at a time per cache.
ensure_binaries() {
	local need_etcd='' k8s=() n
	for n in "$@"; do
		if [ "$n" = etcd ]; then need_etcd=1; else k8s+=("$n"); fi
	done
	if { [ -n "$need_etcd" ] && [ ! -x "$ETCD_BIN/etcd" ]; } ||
		[ -n "$(missing_in "$K8S_BIN" "${k8s[@]}")" ]; then
		mkdir -p "$CACHE_DIR"
		exec 8>"$CACHE_DIR/.build.lock"
		flock 8
		[ -n "$need_etcd" ] && build_etcd
		build_k8s "${k8s[@]}"
		exec 8>&-
	fi
}

bin_of() {
	case $1 in
	etcd) echo "$ETCD_BIN/etcd" ;;
	*) echo "$K8S_BIN/$1" ;;
	esac
}

# ---------------------------------------------------------------- PKI

new_key() {
	(umask 077 && openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1")
}

# A self-contained openssl config, so that the system's openssl.cnf adds nothing.
openssl_conf() {
	printf '%s\n' '[req]' 'distinguished_name = dn' 'x509_extensions = ca' 'prompt = no' '[dn]' \
		'[ca]' 'basicConstraints = critical,CA:TRUE' \
		'keyUsage = critical,digitalSignature,keyEncipherment,keyCertSign' \
		'subjectKeyIdentifier = hash'
}

# sign CA OUT_DIR NAME SUBJECT EXTENSIONS...: a new key OUT_DIR/NAME.key and a
# certificate OUT_DIR/NAME.crt for SUBJECT signed by CA.crt with CA.key.
sign() {
	local ca=$1 out=$2 name=$3 subj=$4 err
	shift 4
	new_key "$out/$name.key"
	openssl req -new -config <(openssl_conf) -key "$out/$name.key" -subj "$subj" -out "$out/$name.csr"
	# openssl reports "Certificate request self-signature ok" on stderr: keep only failures.
	if ! err=$(openssl x509 -req -in "$out/$name.csr" -CA "$ca.crt" -CAkey "$ca.key" \
		-set_serial "0x$(openssl rand -hex 16)" -days "$CERT_DAYS" -sha256 -out "$out/$name.crt" \
		-extfile <(printf '%s\n' 'basicConstraints = critical,CA:FALSE' \
			'keyUsage = critical,digitalSignature,keyEncipherment' \
			'subjectKeyIdentifier = hash' 'authorityKeyIdentifier = keyid' "$@") 2>&1); then
		die "signing $name: $err"
	fi
	rm -f "$out/$name.csr"
}

# client_cert CA OUT_DIR NAME SUBJECT
client_cert() { sign "$1" "$2" "$3" "$4" 'extendedKeyUsage = clientAuth'; }

# new_ca PREFIX CN: a self-signed CA, PREFIX.key and PREFIX.crt.
new_ca() {
	new_key "$1.key"
	openssl req -x509 -new -config <(openssl_conf) -key "$1.key" -sha256 -days "$CERT_DAYS" \
		-subj "/CN=$2" -out "$1.crt"
}

# gen_pki DIR: everything the components need, kubeadm's layout and subjects.
gen_pki() {
	local d=$1
	new_ca "$d/ca" nodelet-cp-ca
	sign "$d/ca" "$d" apiserver "/CN=kube-apiserver" 'extendedKeyUsage = serverAuth' \
		"subjectAltName = IP:$HOST,IP:::1,IP:$KUBERNETES_SERVICE_IP,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
	client_cert "$d/ca" "$d" apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client"
	client_cert "$d/ca" "$d" admin "/O=system:masters/CN=kubernetes-admin"
	client_cert "$d/ca" "$d" controller-manager "/CN=system:kube-controller-manager"
	client_cert "$d/ca" "$d" scheduler "/CN=system:kube-scheduler"
	new_key "$d/sa.key"
	openssl pkey -in "$d/sa.key" -pubout -out "$d/sa.pub"
	gen_front_proxy "$d"
}

# gen_front_proxy DIR: the request-header CA and the API server's proxy client
# certificate. Without them the API server publishes no requestheader CA and the
# controller manager and scheduler keep logging "missing content for CA bundle".
gen_front_proxy() {
	new_ca "$1/front-proxy-ca" front-proxy-ca
	client_cert "$1/front-proxy-ca" "$1" front-proxy-client /CN=front-proxy-client
}

ensure_pki() {
	local tmp=$STATE/.pki.tmp
	if [ -f "$PKI/.complete" ]; then
		# State from before the front proxy was added: add it, keep everything else.
		[ -f "$PKI/front-proxy-client.crt" ] || gen_front_proxy "$PKI"
		return 0
	fi
	log "generating the PKI in $PKI"
	rm -rf "$tmp" "$PKI"
	mkdir -m 700 "$tmp"
	gen_pki "$tmp"
	touch "$tmp/.complete"
	mv "$tmp" "$PKI"
}

b64() { base64 -w0 <"$1"; }

# write_if_changed FILE < content: atomic (temp + rename), mode 600; status 0 if the
# file changed, 1 if it already had this content.
write_if_changed() {
	local dst=$1 tmp
	tmp=$(dirname "$dst")/.$(basename "$dst").tmp
	(umask 077 && cat >"$tmp")
	if [ -f "$dst" ] && cmp -s "$tmp" "$dst"; then
		rm -f "$tmp"
		return 1
	fi
	mv -f "$tmp" "$dst"
}

# kubeconfig USER CA_FILE then either CERT_FILE KEY_FILE or "token" TOKEN.
kubeconfig() {
	local user=$1 ca=$2
	cat <<EOF
apiVersion: v1
kind: Config
clusters:
- name: $CLUSTER_NAME
  cluster:
    server: $SERVER
    certificate-authority-data: $(b64 "$ca")
users:
- name: $user
  user:
EOF
	if [ "$3" = token ]; then
		echo "    token: $4"
	else
		echo "    client-certificate-data: $(b64 "$3")"
		echo "    client-key-data: $(b64 "$4")"
	fi
	cat <<EOF
contexts:
- name: $user@$CLUSTER_NAME
  context:
    cluster: $CLUSTER_NAME
    user: $user
current-context: $user@$CLUSTER_NAME
EOF
}

ensure_token() {
	[ -s "$TOKEN_FILE" ] && return 0
	# Bootstrap token format: [a-z0-9]{6}.[a-z0-9]{16}; hex digits qualify.
	echo "$(openssl rand -hex 3).$(openssl rand -hex 8)" | write_if_changed "$TOKEN_FILE" || true
}

# The audit policy records only the kubelets' requests (group system:nodes): the
# benchmarks count them per node, and the log stays small next to the controllers'.
ensure_audit_policy() {
	write_if_changed "$STATE/audit-policy.yaml" <<'EOF' || true
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  userGroups: [system:nodes]
- level: None
EOF
}

ensure_kubeconfigs() {
	local n
	kubeconfig kubernetes-admin "$PKI/ca.crt" "$PKI/admin.crt" "$PKI/admin.key" |
		write_if_changed "$ADMIN_KUBECONFIG" || true
	for n in controller-manager scheduler; do
		kubeconfig "system:kube-$n" "$PKI/ca.crt" "$PKI/$n.crt" "$PKI/$n.key" |
			write_if_changed "$STATE/$n.kubeconfig" || true
	done
	kubeconfig tls-bootstrap-token-user "$PKI/ca.crt" token "$(cat "$TOKEN_FILE")" |
		write_if_changed "$BOOTSTRAP_KUBECONFIG" || true
}

# ---------------------------------------------------------------- components

# args_of NAME: sets ARGV to the exact command line NAME runs with.
args_of() {
	case $1 in
	etcd)
		ARGV=("$(bin_of etcd)" --name=nodelet-cp --data-dir="$STATE/etcd"
			--listen-client-urls="http://$HOST:$ETCD_PORT" --advertise-client-urls="http://$HOST:$ETCD_PORT"
			--listen-peer-urls="http://$HOST:$ETCD_PEER_PORT"
			--initial-advertise-peer-urls="http://$HOST:$ETCD_PEER_PORT"
			--initial-cluster="nodelet-cp=http://$HOST:$ETCD_PEER_PORT")
		;;
	kube-apiserver)
		# --endpoint-reconciler-type=none: with a loopback advertise address the default
		# reconciler refuses to start.
		# shellcheck disable=SC2054 # commas inside flag values
		ARGV=("$(bin_of kube-apiserver)" --bind-address="$HOST" --advertise-address="$HOST"
			--secure-port="$APISERVER_PORT" --etcd-servers="http://$HOST:$ETCD_PORT"
			--tls-cert-file="$PKI/apiserver.crt" --tls-private-key-file="$PKI/apiserver.key"
			--client-ca-file="$PKI/ca.crt"
			--kubelet-client-certificate="$PKI/apiserver-kubelet-client.crt"
			--kubelet-client-key="$PKI/apiserver-kubelet-client.key"
			--kubelet-preferred-address-types=InternalIP,Hostname
			--authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction
			--enable-bootstrap-token-auth=true --allow-privileged=true
			--service-cluster-ip-range="$SERVICE_CIDR" --endpoint-reconciler-type=none
			--service-account-issuer="$SA_ISSUER" --service-account-key-file="$PKI/sa.pub"
			--service-account-signing-key-file="$PKI/sa.key"
			--requestheader-client-ca-file="$PKI/front-proxy-ca.crt"
			--requestheader-allowed-names=front-proxy-client
			--requestheader-username-headers=X-Remote-User --requestheader-group-headers=X-Remote-Group
			--requestheader-extra-headers-prefix=X-Remote-Extra-
			--proxy-client-cert-file="$PKI/front-proxy-client.crt"
			--proxy-client-key-file="$PKI/front-proxy-client.key"
			--audit-policy-file="$STATE/audit-policy.yaml" --audit-log-path="$LOGS/audit.log"
			--audit-log-format=json --audit-log-maxsize=100 --audit-log-maxbackup=2)
		;;
	kube-controller-manager)
		ARGV=("$(bin_of kube-controller-manager)" --bind-address="$HOST" --secure-port="$CM_PORT"
			--kubeconfig="$STATE/controller-manager.kubeconfig"
			--authentication-kubeconfig="$STATE/controller-manager.kubeconfig"
			--authorization-kubeconfig="$STATE/controller-manager.kubeconfig"
			--client-ca-file="$PKI/ca.crt" --leader-elect=false
			--cluster-signing-cert-file="$PKI/ca.crt" --cluster-signing-key-file="$PKI/ca.key"
			--cluster-signing-duration="$SIGNING_DURATION"
			--root-ca-file="$PKI/ca.crt" --service-account-private-key-file="$PKI/sa.key"
			--use-service-account-credentials=true --controllers='*,bootstrapsigner,tokencleaner')
		;;
	kube-scheduler)
		ARGV=("$(bin_of kube-scheduler)" --bind-address="$HOST" --secure-port="$SCHEDULER_PORT"
			--kubeconfig="$STATE/scheduler.kubeconfig"
			--authentication-kubeconfig="$STATE/scheduler.kubeconfig"
			--authorization-kubeconfig="$STATE/scheduler.kubeconfig"
			--leader-elect=false)
		;;
	*) die "unknown component $1" ;;
	esac
}

# is_ours PID NAME: PID runs NAME with an argument in our state directory.
is_ours() {
	local a
	cmdline "$1"
	[ ${#ARGS[@]} -gt 1 ] && [[ ${ARGS[0]##*/} == "$2" ]] || return 1
	for a in "${ARGS[@]:1}"; do
		[[ $a == *"=$STATE/"* ]] && return 0
	done
	return 1
}

# pid_of NAME: print the PID of our running NAME.
pid_of() {
	local pid p
	pid=$(cat "$PIDS/$1.pid" 2>/dev/null || true)
	if [[ $pid =~ ^[0-9]+$ ]] && is_ours "$pid" "$1"; then
		echo "$pid"
		return 0
	fi
	# The pid file is gone or stale: look for NAME using our state directory.
	for p in /proc/[0-9]*; do
		p=${p#/proc/}
		if is_ours "$p" "$1"; then
			echo "$p"
			return 0
		fi
	done
	return 1
}

proc_alive() {
	local s
	s=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
	s=${s##*) }
	[[ ${s:0:1} != Z ]]
}

# healthy NAME: whether NAME answers its health endpoint.
healthy() {
	local out
	case $1 in
	etcd) out=$(curl -sf --max-time 3 "http://$HOST:$ETCD_PORT/health") && [[ $out == *'"health":"true"'* ]] ;;
	kube-apiserver)
		out=$(curl -sf --max-time 3 --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" \
			"$SERVER/readyz") && [ "$out" = ok ]
		;;
	# Their serving certificates are self-signed in memory (like kubeadm's).
	kube-controller-manager) out=$(curl -skf --max-time 3 "https://$HOST:$CM_PORT/healthz") && [ "$out" = ok ] ;;
	kube-scheduler) out=$(curl -skf --max-time 3 "https://$HOST:$SCHEDULER_PORT/healthz") && [ "$out" = ok ] ;;
	esac
}

# same_args: whether ARGS (a running command line) equals ARGV (the wanted one).
same_args() {
	local i
	[ ${#ARGS[@]} -eq ${#ARGV[@]} ] || return 1
	for i in "${!ARGV[@]}"; do
		[ "${ARGS[i]}" = "${ARGV[i]}" ] || return 1
	done
}

# start NAME: start NAME unless it already runs with the wanted flags; a NAME that
# runs with other flags (changed environment, new binary) is restarted.
start() {
	local pid
	args_of "$1"
	mkdir -p "$LOGS" "$PIDS"
	if pid=$(pid_of "$1"); then
		cmdline "$pid"
		if same_args; then
			echo "$pid" >"$PIDS/$1.pid"
			return 0
		fi
		log "$1 (pid $pid) runs with other flags: restarting it"
		stop "$1"
	fi
	log "starting $1 (log: $LOGS/$1.log)"
	(
		cd "$STATE"
		exec 3>&- 8>&- 9>&-
		# No proxy: the API server reaches kubelets by host name.
		exec setsid env -u HTTP_PROXY -u HTTPS_PROXY -u http_proxy -u https_proxy -u ALL_PROXY \
			-u all_proxy -u NO_PROXY -u no_proxy "${ARGV[@]}" </dev/null >>"$LOGS/$1.log" 2>&1
	) &
	echo $! >"$PIDS/$1.pid"
}

# wait_healthy NAME
wait_healthy() {
	local pid i start=$EPOCHREALTIME
	pid=$(cat "$PIDS/$1.pid" 2>/dev/null || true)
	for ((i = 0; i < TIMEOUT * 5; i++)); do
		if healthy "$1"; then
			[ "$i" -gt 0 ] && log "$1 healthy after $(elapsed "$start")"
			return 0
		fi
		# Liveness, not the command line: a fresh child may not have exec'd yet.
		if [ -n "$pid" ] && ! proc_alive "$pid"; then
			tail -n 20 "$LOGS/$1.log" >&2 || true
			die "$1 exited; see $LOGS/$1.log"
		fi
		sleep 0.2
	done
	tail -n 20 "$LOGS/$1.log" >&2 || true
	die "$1 not healthy within ${TIMEOUT}s; see $LOGS/$1.log"
}

wait_gone() {
	local i
	for ((i = 0; i < $2 * 10; i++)); do
		proc_alive "$1" || return 0
		sleep 0.1
	done
	return 1
}

stop() {
	local pid grace=30
	if ! pid=$(pid_of "$1"); then
		rm -f "$PIDS/$1.pid"
		return 0
	fi
	# kube-apiserver stops listening at once on SIGTERM but then waits up to its
	# --request-timeout (60s) for clients' watch connections; it keeps no state of its
	# own, so do not wait that long.
	[ "$1" = kube-apiserver ] && grace=5
	log "stopping $1 (pid $pid)"
	kill -TERM "$pid" 2>/dev/null || true
	if ! wait_gone "$pid" "$grace"; then
		log "$1 did not exit within ${grace}s of SIGTERM; killing it"
		kill -KILL "$pid" 2>/dev/null || true
		wait_gone "$pid" 5 || die "cannot kill $1 (pid $pid)"
	fi
	rm -f "$PIDS/$1.pid"
}

stop_all() {
	local i
	for ((i = ${#COMPONENTS[@]} - 1; i >= 0; i--)); do
		stop "${COMPONENTS[i]}"
	done
}

# ---------------------------------------------------------------- join set-up

# What `kubeadm init` sets up for `kubeadm join` (bootstrap-token phase): the token,
# RBAC for TLS bootstrapping and CSR auto-approval, and the cluster-info ConfigMap.
join_manifests() {
	local id secret group_subject
	IFS=. read -r id secret <"$TOKEN_FILE"
	group_subject="- {kind: Group, apiGroup: rbac.authorization.k8s.io, name: $BOOTSTRAP_GROUP}"
	cat <<EOF
apiVersion: v1
kind: Secret
metadata: {name: bootstrap-token-$id, namespace: kube-system}
type: bootstrap.kubernetes.io/token
data:
  description: $(printf 'bootstrap token for test nodes (hack/controlplane.sh)' | base64 -w0)
  token-id: $(printf %s "$id" | base64 -w0)
  token-secret: $(printf %s "$secret" | base64 -w0)
  usage-bootstrap-authentication: $(printf true | base64 -w0)
  usage-bootstrap-signing: $(printf true | base64 -w0)
  auth-extra-groups: $(printf %s "$BOOTSTRAP_GROUP" | base64 -w0)
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "kubeadm:kubelet-bootstrap"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "system:node-bootstrapper"}
subjects:
$group_subject
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: "kubeadm:get-nodes"}
rules:
- {apiGroups: [""], resources: [nodes], verbs: [get]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "kubeadm:get-nodes"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "kubeadm:get-nodes"}
subjects:
$group_subject
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "kubeadm:node-autoapprove-bootstrap"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "system:certificates.k8s.io:certificatesigningrequests:nodeclient"}
subjects:
$group_subject
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "kubeadm:node-autoapprove-certificate-rotation"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient"}
subjects:
- {kind: Group, apiGroup: rbac.authorization.k8s.io, name: "system:nodes"}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: cluster-info, namespace: kube-public}
data:
  kubeconfig: |
    apiVersion: v1
    kind: Config
    clusters:
    - name: ""
      cluster:
        certificate-authority-data: $(b64 "$PKI/ca.crt")
        server: $SERVER
    contexts: null
    current-context: ""
    preferences: {}
    users: null
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: "kubeadm:bootstrap-signer-clusterinfo", namespace: kube-public}
rules:
- {apiGroups: [""], resources: [configmaps], resourceNames: [cluster-info], verbs: [get]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: "kubeadm:bootstrap-signer-clusterinfo", namespace: kube-public}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: "kubeadm:bootstrap-signer-clusterinfo"}
subjects:
- {kind: User, apiGroup: rbac.authorization.k8s.io, name: "system:anonymous"}
EOF
}

kubectl_() { "$K8S_BIN/kubectl" --kubeconfig "$ADMIN_KUBECONFIG" "$@"; }

apply_join_setup() {
	# Server-side apply: idempotent, and no last-applied annotation to drift.
	join_manifests | kubectl_ apply --server-side --field-manager=nodelet-controlplane \
		--force-conflicts -f - | { grep -v ' serverside-applied$' || true; } >&2
}

# api_get PATH: whether the admin can GET PATH on the API server.
api_get() {
	curl -sf --max-time 3 -o /dev/null --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" \
		--key "$PKI/admin.key" "$SERVER$1"
}

# Pods can only be created once the controller manager made the namespace's default
# ServiceAccount and kube-root-ca.crt ConfigMap: wait for both in "default".
wait_default_namespace() {
	local i
	for ((i = 0; i < TIMEOUT * 5; i++)); do
		api_get /api/v1/namespaces/default/serviceaccounts/default &&
			api_get /api/v1/namespaces/default/configmaps/kube-root-ca.crt && return 0
		sleep 0.2
	done
	die "no default ServiceAccount in namespace default after ${TIMEOUT}s; see $LOGS/kube-controller-manager.log"
}

# ---------------------------------------------------------------- commands

kubeconfig_line() { echo "KUBECONFIG=$ADMIN_KUBECONFIG" >&3; }

cmd_up() {
	local t0=$EPOCHREALTIME
	need_root
	lock
	command -v openssl >/dev/null || die "openssl not found"
	command -v curl >/dev/null || die "curl not found"
	ensure_binaries "${COMPONENTS[@]}" kubectl
	mkdir -p "$STATE"
	chmod 700 "$STATE"
	ensure_pki
	ensure_token
	ensure_kubeconfigs
	ensure_audit_policy
	start etcd
	wait_healthy etcd
	start kube-apiserver
	wait_healthy kube-apiserver
	start kube-controller-manager
	start kube-scheduler
	apply_join_setup
	wait_healthy kube-controller-manager
	wait_healthy kube-scheduler
	wait_default_namespace
	log "up in $(elapsed "$t0") (API server $SERVER)"
	kubeconfig_line
}

cmd_down() {
	local t0=$EPOCHREALTIME
	need_root
	lock
	stop_all
	rm -rf --one-file-system "$STATE"
	log "down in $(elapsed "$t0")"
}

cmd_stop() {
	need_root
	lock
	stop_all
}

cmd_stop_apiserver() {
	need_root
	lock
	stop kube-apiserver
}

cmd_start_apiserver() {
	need_root
	lock
	[ -f "$PKI/.complete" ] || die "no control plane state in $STATE: run '$0 up' first"
	start kube-apiserver
	wait_healthy kube-apiserver
	kubeconfig_line
}

cmd_restart_controllers() {
	need_root
	lock
	[ -f "$PKI/.complete" ] || die "no control plane state in $STATE: run '$0 up' first"
	local n
	for n in kube-controller-manager kube-scheduler; do
		stop "$n"
		start "$n"
		wait_healthy "$n"
	done
}

cmd_status() {
	local n pid states=() bad=''
	for n in "${COMPONENTS[@]}"; do
		if ! pid=$(pid_of "$n"); then
			states+=("$n=stopped")
			bad=1
		elif healthy "$n"; then
			states+=("$n=ok")
		else
			states+=("$n=unhealthy(pid $pid)")
			bad=1
		fi
	done
	echo "${states[*]} KUBECONFIG=$ADMIN_KUBECONFIG" >&3
	[ -z "$bad" ] || return 3
}

cmd_kubectl() {
	[ -x "$K8S_BIN/kubectl" ] || die "no kubectl in $K8S_BIN: run '$0 build' or '$0 up'"
	exec "$K8S_BIN/kubectl" --kubeconfig "$ADMIN_KUBECONFIG" "$@" >&3 3>&-
}

# node-kubeconfig NODE PATH: what a kubelet joined by hand (plain --kubeconfig, no
# bootstrap) uses; the Node authorizer and NodeRestriction apply to it.
cmd_node_kubeconfig() {
	[ $# -eq 2 ] || die "usage: $0 node-kubeconfig NODE PATH"
	local node=$1 path=$2 tmp
	[[ $node =~ ^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$ ]] || die "bad node name '$node'"
	[ -f "$PKI/.complete" ] || die "no control plane PKI in $PKI: run '$0 up' first"
	tmp=$(mktemp -d)
	# shellcheck disable=SC2064 # expand now: tmp is local
	trap "rm -rf '$tmp'" EXIT
	client_cert "$PKI/ca" "$tmp" node "/O=system:nodes/CN=system:node:$node"
	mkdir -p "$(dirname "$path")"
	kubeconfig "system:node:$node" "$PKI/ca.crt" "$tmp/node.crt" "$tmp/node.key" | write_if_changed "$path" || true
}

cmd_build() {
	ensure_binaries etcd "${K8S_ALL[@]}"
	log "binaries: $ETCD_BIN/etcd, $K8S_BIN/{$(
		IFS=,
		echo "${K8S_ALL[*]}"
	)}"
}

check_dirs
cmd=${1:-}
[ $# -gt 0 ] && shift
case $cmd in
up) cmd_up ;;
down) cmd_down ;;
stop) cmd_stop ;;
stop-apiserver) cmd_stop_apiserver ;;
start-apiserver) cmd_start_apiserver ;;
restart-controllers) cmd_restart_controllers ;;
status) cmd_status ;;
env) kubeconfig_line ;;
kubectl) cmd_kubectl "$@" ;;
node-kubeconfig) cmd_node_kubeconfig "$@" ;;
build) cmd_build ;;
*)
	sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "${BASH_SOURCE[0]}" >&2
	exit 2
	;;
esac
