package cm

import (
	"path"
	"strings"

	"k8s.io/apimachinery/pkg/types"
)

// Cgroup drivers (cgroupDriver).
const (
	DriverCgroupfs = "cgroupfs"
	DriverSystemd  = "systemd"
)

const (
	podCgroupPrefix  = "pod"
	kubepodsName     = "kubepods"
	burstableName    = "burstable"
	bestEffortName   = "besteffort"
	systemdSliceType = ".slice"
)

// cgroupName is a cgroup as driver-neutral path components, e.g. {"kubepods",
// "burstable", "pod<uid>"}; the driver turns it into a cgroupfs path.
type cgroupName []string

func (n cgroupName) child(component string) cgroupName {
	return append(append(cgroupName{}, n...), component)
}

// parseCgroupfs splits a cgroupfs path ("/a/b") into components.
func parseCgroupfs(p string) cgroupName {
	p = strings.Trim(path.Clean("/"+p), "/")
	if p == "" {
		return cgroupName{}
	}
	return strings.Split(p, "/")
}

func (n cgroupName) cgroupfs() string { return "/" + path.Join(n...) }

// systemd expands the name into nested slices, as systemd lays them out:
// {"kubepods", "burstable", "pod1-2"} is
// /kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1_2.slice.
// "-" separates levels in a slice name, so a component's own dashes become "_".
func (n cgroupName) systemd() string {
	if len(n) == 0 {
		return "/"
	}
	var full strings.Builder
	unit := ""
	for i, c := range n {
		if i > 0 {
			unit += "-"
		}
		unit += strings.ReplaceAll(c, "-", "_")
		full.WriteString("/" + unit + systemdSliceType)
	}
	return full.String()
}

// parseSystemd reads a name back from a systemd slice path: only the last
// slice is needed, since it holds every level.
func parseSystemd(p string) cgroupName {
	unit := strings.TrimSuffix(path.Base(p), systemdSliceType)
	if unit == "" || unit == "/" || unit == "." {
		return cgroupName{}
	}
	parts := strings.Split(unit, "-")
	for i, part := range parts {
		parts[i] = strings.ReplaceAll(part, "_", "-")
	}
	return parts
}

// naming converts names for one cgroup driver.
type naming struct{ systemd bool }

// path is the name's cgroupfs path (relative to a hierarchy's mount point).
func (d naming) path(n cgroupName) string {
	if d.systemd {
		return n.systemd()
	}
	return n.cgroupfs()
}

// parse turns a cgroupfs path as the driver writes it back into a name.
func (d naming) parse(p string) cgroupName {
	if d.systemd {
		return parseSystemd(p)
	}
	return parseCgroupfs(p)
}

// podUID returns the UID of a pod cgroup directory's base name ("pod<uid>", or
// "kubepods-burstable-pod<uid>.slice" with systemd).
func (d naming) podUID(base string) (types.UID, bool) {
	n := d.parse(base)
	if len(n) == 0 {
		return "", false
	}
	uid, ok := strings.CutPrefix(n[len(n)-1], podCgroupPrefix)
	if !ok || uid == "" {
		return "", false
	}
	return types.UID(uid), true
}
