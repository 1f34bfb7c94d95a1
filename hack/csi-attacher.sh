#!/usr/bin/env bash
# hack/csi-attacher.sh: the Kubernetes CSI external-attacher (csi-attacher, from
# github.com/kubernetes-csi/external-attacher/v4 on the Go module proxy, pinned by
# hack/tools/csi-attacher/go.mod), which the e2e tests of attachable CSI volumes run
# next to the project's test driver: it turns the attach/detach controller's
# VolumeAttachments into ControllerPublishVolume calls.
#
#   hack/csi-attacher.sh build   build it into the cache if missing; prints its path
#
# Environment (defaults):
#   NODELET_CACHE_DIR=/var/cache/nodelet   binary: csi-attacher-<version>/bin/csi-attacher
set -euo pipefail

CACHE_DIR=${NODELET_CACHE_DIR:-/var/cache/nodelet}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
MOD=$ROOT/hack/tools/csi-attacher
export PATH=$PATH:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/usr/local/go/bin
GO=${GO:-go}

# stdout carries only the result line; everything else goes to stderr.
exec 3>&1 1>&2

log() { echo "csi-attacher.sh: $*" >&2; }
die() {
	log "error: $*"
	exit 1
}

VERSION=$(awk -v m=github.com/kubernetes-csi/external-attacher/v4 \
	'($1 == m && $2 ~ /^v/) { print $2; exit } ($1 == "require" && $2 == m) { print $3; exit }' "$MOD/go.mod")
[ -n "$VERSION" ] || die "cannot read the external-attacher version from $MOD/go.mod"
BIN=$CACHE_DIR/csi-attacher-$VERSION/bin/csi-attacher

build() {
	[ -x "$BIN" ] && return 0
	command -v "$GO" >/dev/null || die "go not found (needed to build $BIN)"
	mkdir -p "$CACHE_DIR"
	exec 8>"$CACHE_DIR/.build.lock"
	flock 8
	if [ ! -x "$BIN" ]; then
		local tmp start=$EPOCHREALTIME
		mkdir -p "$(dirname "$BIN")"
		tmp=$(mktemp -d "$(dirname "$BIN")/.build.XXXXXX")
		log "building csi-attacher $VERSION into $(dirname "$BIN") (about 2-3 min cold on 2 cores)"
		if ! (cd "$MOD" && CGO_ENABLED=0 "$GO" build -buildvcs=false -mod=readonly -trimpath \
			-ldflags "-s -w -X main.version=$VERSION" -o "$tmp/" \
			github.com/kubernetes-csi/external-attacher/v4/cmd/csi-attacher); then
			rm -rf "$tmp"
			die "building csi-attacher failed"
		fi
		mv -f "$tmp/csi-attacher" "$BIN"
		rmdir "$tmp"
		log "built csi-attacher in $(awk -v s="$start" -v e="$EPOCHREALTIME" 'BEGIN { printf "%.1fs", e - s }')"
	fi
	exec 8>&-
}

case ${1:-} in
build)
	build
	echo "$BIN" >&3
	;;
*)
	sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "${BASH_SOURCE[0]}" >&2
	exit 2
	;;
esac
