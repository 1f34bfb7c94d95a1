package userns

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"os/user"
	"strconv"
	"strings"

	"k8s.io/klog/v2"
)

// kubeletUser is the user whose subordinate IDs are set aside for pods, as upstream.
const kubeletUser = "kubelet"

// IDRange is a range of host IDs, the same for UIDs and GIDs.
type IDRange struct {
	First, Length uint32
}

// KubeletRange is the range pods' user namespaces are carved from: the subordinate
// UIDs and GIDs of the `kubelet` user when it exists and has some (from `getsubids`
// when installed, as upstream, else /etc/subuid and /etc/subgid), else DefaultRange.
func KubeletRange(idsPerPod uint32) (IDRange, error) {
	return subIDSources{
		lookupUser: user.Lookup,
		lookPath:   exec.LookPath,
		output:     func(name string, args ...string) ([]byte, error) { return exec.Command(name, args...).Output() },
		subuid:     "/etc/subuid",
		subgid:     "/etc/subgid",
	}.kubeletRange(idsPerPod)
}

// DefaultRange is every host ID from idsPerPod up, in whole blocks of idsPerPod. The
// first block holds the host's own users. Unlike upstream's default, the block that
// would end with ID 4294967295 is left out: that value means "no ID" and the kernel
// refuses a mapping that contains it (EINVAL from the uid_map write).
func DefaultRange(idsPerPod uint32) IDRange {
	blocks := (uint64(math.MaxUint32) - uint64(idsPerPod)) / uint64(idsPerPod)
	return IDRange{First: idsPerPod, Length: uint32(blocks * uint64(idsPerPod))}
}

// subIDSources are where the kubelet user's subordinate IDs come from; tests replace them.
type subIDSources struct {
	lookupUser     func(name string) (*user.User, error)
	lookPath       func(file string) (string, error)
	output         func(name string, args ...string) ([]byte, error)
	subuid, subgid string
}

func (s subIDSources) kubeletRange(idsPerPod uint32) (IDRange, error) {
	u, err := s.lookupUser(kubeletUser)
	var unknown user.UnknownUserError
	if errors.As(err, &unknown) {
		klog.V(5).InfoS("User namespaces: user not found, using default mappings", "user", kubeletUser)
		return DefaultRange(idsPerPod), nil
	}
	if err != nil {
		return IDRange{}, err
	}
	if path, err := s.lookPath("getsubids"); err == nil {
		return s.fromGetsubids(path)
	}
	return s.fromFiles(u, idsPerPod)
}

// fromGetsubids asks getsubids, which also knows remote (NSS) sources. As upstream, a
// user that exists but has no IDs there is an error, not the default range: the remote
// source might just be down.
func (s subIDSources) fromGetsubids(path string) (IDRange, error) {
	uids, err := s.output(path, kubeletUser)
	if err != nil {
		return IDRange{}, fmt.Errorf("error retrieving additional uids for user %q: %w", kubeletUser, err)
	}
	gids, err := s.output(path, "-g", kubeletUser)
	if err != nil {
		return IDRange{}, fmt.Errorf("error retrieving additional gids for user %q: %w", kubeletUser, err)
	}
	if !bytes.Equal(uids, gids) {
		return IDRange{}, fmt.Errorf("mismatched subuids and subgids for user %q", kubeletUser)
	}
	klog.V(5).InfoS("User namespaces: user found, using mappings from getsubids", "user", kubeletUser)
	return parseGetsubids(string(uids))
}

// parseGetsubids reads getsubids' one line, "0: kubelet 65536 2147483648".
func parseGetsubids(out string) (IDRange, error) {
	lines := strings.Split(strings.Trim(out, "\n"), "\n")
	if len(lines) != 1 {
		return IDRange{}, fmt.Errorf("error parsing line %q: it must contain only one line", out)
	}
	fields := strings.Fields(lines[0])
	if len(fields) != 4 {
		return IDRange{}, fmt.Errorf("invalid line %q", out)
	}
	return parseRange(fields[2], fields[3])
}

// fromFiles reads the user's entries in /etc/subuid and /etc/subgid: none in either
// means the default range; otherwise there must be exactly one, the same in both.
func (s subIDSources) fromFiles(u *user.User, idsPerPod uint32) (IDRange, error) {
	uids, err := readSubIDFile(s.subuid, u)
	if err != nil {
		return IDRange{}, err
	}
	gids, err := readSubIDFile(s.subgid, u)
	if err != nil {
		return IDRange{}, err
	}
	switch {
	case len(uids) == 0 && len(gids) == 0:
		klog.V(2).InfoS("User namespaces: user has no subordinate IDs, using default mappings", "user", kubeletUser)
		return DefaultRange(idsPerPod), nil
	case len(uids) != 1 || len(gids) != 1:
		return IDRange{}, fmt.Errorf("user %q must have exactly one range in %s and in %s, has %d and %d",
			kubeletUser, s.subuid, s.subgid, len(uids), len(gids))
	case uids[0] != gids[0]:
		return IDRange{}, fmt.Errorf("mismatched subuids and subgids for user %q", kubeletUser)
	}
	klog.V(5).InfoS("User namespaces: user found, using mappings from subordinate ID files", "user", kubeletUser, "first", uids[0].First, "length", uids[0].Length)
	return uids[0], nil
}

// readSubIDFile returns the user's ranges in a subuid(5)/subgid(5) file, whose lines
// are "name-or-uid:first:count". A missing file has none.
func readSubIDFile(path string, u *user.User) ([]IDRange, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var ranges []IDRange
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Split(line, ":")
		if fields[0] != u.Username && fields[0] != u.Uid {
			continue // other users' lines are theirs to get right
		}
		if len(fields) != 3 {
			return nil, fmt.Errorf("%s:%d: want name:first:count, got %q", path, n, line)
		}
		r, err := parseRange(fields[1], fields[2])
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, n, err)
		}
		ranges = append(ranges, r)
	}
	return ranges, sc.Err()
}

func parseRange(first, length string) (IDRange, error) {
	f, err := strconv.ParseUint(first, 10, 32)
	if err != nil {
		return IDRange{}, fmt.Errorf("invalid first ID %q: %w", first, err)
	}
	l, err := strconv.ParseUint(length, 10, 32)
	if err != nil {
		return IDRange{}, fmt.Errorf("invalid ID count %q: %w", length, err)
	}
	return IDRange{First: uint32(f), Length: uint32(l)}, nil
}
