# hack/lib-gobuild.sh: sourced by the hack/ scripts that build a pinned tool from the Go
# module proxy into the cache once (metrics-server.sh, csi-attacher.sh). Expects GO,
# CACHE_DIR and the caller's die() and log().

# module_version GO_MOD MODULE: the version GO_MOD requires of MODULE.
module_version() {
	awk -v m="$2" '($1 == m && $2 ~ /^v/) { print $2; exit } ($1 == "require" && $2 == m) { print $3; exit }' "$1"
}

# cached_go_build BIN MOD_DIR PACKAGE LDFLAGS WHAT: builds PACKAGE (in module MOD_DIR,
# -mod=readonly) into BIN unless it is there already. Builds are serialised over the
# cache by a lock, so that concurrent callers build once; the binary appears whole or
# not at all (built aside, then renamed).
cached_go_build() {
	local bin=$1 mod=$2 pkg=$3 ldflags=$4 what=$5 tmp start
	[ -x "$bin" ] && return 0
	command -v "$GO" >/dev/null || die "go not found (needed to build $bin)"
	mkdir -p "$CACHE_DIR"
	exec 8>"$CACHE_DIR/.build.lock"
	flock 8
	if [ ! -x "$bin" ]; then
		start=$EPOCHREALTIME
		mkdir -p "$(dirname "$bin")"
		tmp=$(mktemp -d "$(dirname "$bin")/.build.XXXXXX")
		log "building $what into $(dirname "$bin")"
		if ! (cd "$mod" && CGO_ENABLED=0 "$GO" build -buildvcs=false -mod=readonly -trimpath \
			-ldflags "$ldflags" -o "$tmp/" "$pkg"); then
			rm -rf "$tmp"
			die "building $(basename "$bin") failed"
		fi
		mv -f "$tmp/$(basename "$bin")" "$bin"
		rmdir "$tmp"
		log "built $(basename "$bin") in $(awk -v s="$start" -v e="$EPOCHREALTIME" 'BEGIN { printf "%.1fs", e - s }')"
	fi
	exec 8>&-
}
