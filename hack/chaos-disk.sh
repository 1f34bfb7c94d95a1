#!/usr/bin/env bash
# hack/chaos-disk.sh: a small, dedicated filesystem to fill, for disk-pressure chaos tests
# (test/e2e/diskpressure_test.go) and for trying nodelet's eviction by hand.
#
#   hack/chaos-disk.sh setup DIR [SIZE]   create a sparse file of SIZE (default 1G; any
#                                         size truncate(1) takes, at least 64M), format it
#                                         ext4 without reserved blocks, attach it to a free
#                                         loop device and mount it at DIR (created if
#                                         missing, else it must be an empty directory).
#                                         Prints CHAOS_DISK_LOOP=/dev/loopN on stdout.
#                                         Idempotent: a DIR already set up is left as is.
#   hack/chaos-disk.sh teardown DIR       unmount DIR, detach the loop device, delete the
#                                         file and the state; also after a crash, and safe
#                                         when DIR was never set up.
#   hack/chaos-disk.sh fill DIR FREE      allocate a ballast file DIR/chaos-ballast so
#                                         that FREE (e.g. 280Mi, 64M) stays available
#   hack/chaos-disk.sh unfill DIR         remove the ballast
#   hack/chaos-disk.sh status DIR         print the loop device, size and free space;
#                                         exit 0 if DIR is set up, 3 if not
#
# By hand, as root, with a nodelet whose --root-dir (and podLogsDir) are on the disk:
#
#   hack/chaos-disk.sh setup /mnt/nodefs 1G
#   bin/nodelet --root-dir=/mnt/nodefs/kubelet --config=kubelet.yaml   # evictionHard:
#                                                  #   nodefs.available: 300Mi
#   hack/chaos-disk.sh fill /mnt/nodefs 200Mi      # DiskPressure, then evictions
#   hack/chaos-disk.sh unfill /mnt/nodefs
#   hack/chaos-disk.sh teardown /mnt/nodefs        # stop nodelet and its runtime first
#
# The script only ever touches what it made: the backing file and state live in
# NODELET_CHAOS_DIR (default /var/lib/nodelet-chaos), one directory per mount point;
# teardown unmounts DIR only when our loop device is mounted there, and detaches only the
# loop devices backed by our file (found by `losetup -j`, not by a remembered number,
# which another user may have taken after a crash). A mount still busy (a process holding
# a file, a mount under DIR left by a killed runtime) is detached lazily, and its loop
# device is set to free itself once the last user lets go.
set -euo pipefail

STATE_ROOT=${NODELET_CHAOS_DIR:-/var/lib/nodelet-chaos}
BALLAST=chaos-ballast
MIN_BYTES=$((64 << 20))

exec 3>&1 1>&2
log() { echo "chaos-disk.sh: $*" >&2; }
die() {
	log "error: $*"
	exit 1
}
usage() {
	sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "${BASH_SOURCE[0]}" >&2
	exit 2
}

need_root() { [ "$(id -u)" = 0 ] || die "must run as root"; }

# Serialise every command: setup and teardown of one DIR must not interleave.
lock() {
	mkdir -p "$STATE_ROOT"
	exec 9>"$STATE_ROOT/.lock"
	flock 9
}

# abs_dir DIR: the absolute, normalised path (DIR need not exist); / is refused.
abs_dir() {
	local d
	[ -n "$1" ] || die "no directory given"
	d=$(realpath -m -- "$1")
	[ "$d" != / ] || die "refusing to use / as the mount point"
	[[ $d != *[[:space:]]* ]] || die "the mount point '$d' has white space"
	echo "$d"
}

# state_dir MOUNTPOINT: where this mount point's backing file and state live.
state_dir() { echo "$STATE_ROOT/$(printf '%s' "$1" | sha256sum | cut -c1-16)"; }

# read_state FILE: sets MOUNTPOINT, IMAGE, LOOP, CREATED from a state file (key=value;
# nothing in it is executed).
read_state() {
	local key value
	MOUNTPOINT='' IMAGE='' LOOP='' CREATED=''
	while IFS='=' read -r key value; do
		case $key in
		mountpoint) MOUNTPOINT=$value ;;
		image) IMAGE=$value ;;
		loop) LOOP=$value ;;
		created) CREATED=$value ;;
		esac
	done <"$1"
}

# mount_source DIR: the device mounted at DIR (the topmost mount there), empty if none.
mount_source() {
	{ findmnt -n -o SOURCE --mountpoint "$1" 2>/dev/null || true; } | tail -n 1
}

# loops_of FILE: the loop devices backed by FILE.
loops_of() {
	[ -e "$1" ] || return 0
	losetup -n -O NAME -j "$1" 2>/dev/null || true
}

# to_bytes SIZE: 1G, 512M, 300Mi, 1048576 → bytes (K/M/G/T and Ki/Mi/Gi/Ti are binary).
to_bytes() {
	local s=$1 n unit
	[[ $s =~ ^([0-9]+)([KMGT]i?)?$ ]] || die "bad size '$s' (want e.g. 1G, 300Mi, 1048576)"
	n=${BASH_REMATCH[1]} unit=${BASH_REMATCH[2]%i}
	case $unit in
	K) n=$((n << 10)) ;;
	M) n=$((n << 20)) ;;
	G) n=$((n << 30)) ;;
	T) n=$((n << 40)) ;;
	esac
	echo "$n"
}

# is_set_up DIR STATE: whether DIR is mounted from a loop device backed by our file.
is_set_up() {
	local dir=$1 state=$2 src
	[ -f "$state/state" ] || return 1
	read_state "$state/state"
	src=$(mount_source "$dir")
	[ -n "$src" ] && loops_of "$IMAGE" | grep -qxF -- "$src" && LOOP=$src
}

cmd_setup() {
	local dir state size bytes loop created=0
	dir=$(abs_dir "${1:-}")
	size=${2:-1G}
	bytes=$(to_bytes "$size")
	[ "$bytes" -ge "$MIN_BYTES" ] || die "size $size is below the 64M this script accepts"
	state=$(state_dir "$dir")
	if is_set_up "$dir" "$state"; then
		log "$dir is already set up on $LOOP"
		echo "CHAOS_DISK_LOOP=$LOOP" >&3
		return 0
	fi
	# Leftovers of a run that died half-way: clear them before starting afresh.
	[ -d "$state" ] && teardown_state "$dir" "$state"
	[ -z "$(mount_source "$dir")" ] || die "$dir is already a mount point (not one of ours)"
	if [ -e "$dir" ]; then
		[ -d "$dir" ] || die "$dir exists and is not a directory"
		[ -z "$(ls -A -- "$dir")" ] || die "$dir is not empty: mounting over it would hide its files"
	else
		mkdir -p -- "$dir"
		created=1
	fi
	mkdir -p "$state"
	printf 'mountpoint=%s\nimage=%s\ncreated=%s\n' "$dir" "$state/disk.img" "$created" >"$state/state"
	truncate -s "$bytes" "$state/disk.img"
	# No blocks reserved for root: nodelet runs as root, and the eviction thresholds
	# compare with statfs' available blocks; inode tables written now, not by a
	# background thread that would race the test's measurements.
	mkfs.ext4 -q -F -m 0 -L nodelet-chaos -E lazy_itable_init=0,lazy_journal_init=0 "$state/disk.img"
	loop=$(losetup --find --show -- "$state/disk.img")
	echo "loop=$loop" >>"$state/state"
	if ! mount -t ext4 -- "$loop" "$dir"; then
		losetup -d "$loop" || true
		die "mounting $loop at $dir failed"
	fi
	log "mounted $loop ($size) at $dir"
	echo "CHAOS_DISK_LOOP=$loop" >&3
}

# teardown_state DIR STATE: undo whatever of a setup is left, in reverse order.
teardown_state() {
	local dir=$1 state=$2 src loop
	read_state "$state/state" 2>/dev/null || IMAGE=$state/disk.img CREATED=0
	IMAGE=${IMAGE:-$state/disk.img}
	[ "$IMAGE" = "$state/disk.img" ] || die "state file $state/state names a foreign file '$IMAGE'"
	[ -z "$MOUNTPOINT" ] || [ "$MOUNTPOINT" = "$dir" ] || die "state file $state/state is for $MOUNTPOINT, not $dir"
	src=$(mount_source "$dir")
	if [ -n "$src" ] && loops_of "$IMAGE" | grep -qxF -- "$src"; then
		rm -f -- "$dir/$BALLAST"
		if ! umount -- "$dir" 2>/dev/null; then
			log "$dir is busy: detaching it lazily"
			umount -l -- "$dir"
		fi
		log "unmounted $dir"
	fi
	for loop in $(loops_of "$IMAGE"); do
		# On a device still in use this only sets autoclear: it goes once released.
		losetup -d "$loop" || log "warning: cannot detach $loop"
		log "detached $loop"
	done
	if [ "${CREATED:-0}" = 1 ] && [ -d "$dir" ] && [ -z "$(mount_source "$dir")" ]; then
		rmdir -- "$dir" 2>/dev/null || true
	fi
	rm -f -- "$IMAGE" "$state/state"
	rmdir -- "$state"
}

cmd_teardown() {
	local dir state
	dir=$(abs_dir "${1:-}")
	state=$(state_dir "$dir")
	if [ ! -d "$state" ]; then
		log "$dir is not set up: nothing to do"
		return 0
	fi
	teardown_state "$dir" "$state"
}

# need_set_up DIR: sets STATE and fails unless DIR is one of our mounts.
need_set_up() {
	STATE=$(state_dir "$1")
	is_set_up "$1" "$STATE" || die "$1 is not set up by this script"
}

# avail_bytes DIR: what statfs says is available to an unprivileged writer.
avail_bytes() { echo $(($(stat -f -c '%a * %S' -- "$1"))); }

cmd_fill() {
	local dir free have ballast=0 want
	dir=$(abs_dir "${1:-}")
	free=$(to_bytes "${2:-}")
	need_set_up "$dir"
	have=$(avail_bytes "$dir")
	[ -f "$dir/$BALLAST" ] && ballast=$(($(stat -c '%b * %B' -- "$dir/$BALLAST")))
	want=$((have + ballast - free))
	[ "$want" -gt 0 ] || die "only $((have + ballast)) bytes to play with, cannot leave $free free"
	rm -f -- "$dir/$BALLAST"
	# fallocate reserves real blocks without writing them: instant, and statfs sees it.
	fallocate -l "$want" -- "$dir/$BALLAST"
	log "ballast of $want bytes: $(avail_bytes "$dir") bytes available on $dir"
}

cmd_unfill() {
	local dir
	dir=$(abs_dir "${1:-}")
	need_set_up "$dir"
	rm -f -- "$dir/$BALLAST"
	log "$(avail_bytes "$dir") bytes available on $dir"
}

cmd_status() {
	local dir state
	dir=$(abs_dir "${1:-}")
	state=$(state_dir "$dir")
	if ! is_set_up "$dir" "$state"; then
		echo "$dir: not set up" >&3
		return 3
	fi
	echo "$dir: $LOOP, $(($(stat -f -c '%b * %S' -- "$dir"))) bytes, $(avail_bytes "$dir") available" >&3
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case $cmd in
setup | teardown | fill | unfill)
	need_root
	lock
	"cmd_$cmd" "$@"
	;;
status)
	lock
	cmd_status "$@"
	;;
*) usage ;;
esac
