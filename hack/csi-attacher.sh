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

# shellcheck source=hack/lib-gobuild.sh
. "$ROOT/hack/lib-gobuild.sh"

VERSION=$(module_version "$MOD/go.mod" github.com/kubernetes-csi/external-attacher/v4)
[ -n "$VERSION" ] || die "cannot read the external-attacher version from $MOD/go.mod"
BIN=$CACHE_DIR/csi-attacher-$VERSION/bin/csi-attacher

build() {
	cached_go_build "$BIN" "$MOD" github.com/kubernetes-csi/external-attacher/v4/cmd/csi-attacher \
		"-s -w -X main.version=$VERSION" "csi-attacher $VERSION (about 2-3 min cold on 2 cores)"
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
