#!/usr/bin/env bash
# Runs staticcheck, installing a pinned version into the cache dir on first use.
set -euo pipefail
cache=${NODELET_CACHE_DIR:-/var/cache/nodelet}
want=${STATICCHECK_VERSION:-v0.8.2}
bin=$cache/bin/staticcheck
if ! [[ -x $bin ]] || ! "$bin" -version 2>/dev/null | grep -q "(${want#v})"; then
  echo "installing staticcheck $want into $cache/bin" >&2
  GOBIN=$cache/bin go install "honnef.co/go/tools/cmd/staticcheck@$want"
fi
exec "$bin" "$@"
