// Package cm manages the cgroups nodelet owns. For now: the per-pod cgroups under the QoS
// tree (<cgroupRoot>/kubepods[/burstable|/besteffort]/pod<uid>) with the cgroupfs driver.
// runc creates missing parents but removes only a container's own cgroup, so the pod
// level is the kubelet's to remove.
package cm

import (
	"bufio"
	"errors"
	"os"
	"path"
	"path/filepath"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodelet/nodelet/pkg/qos"
)

const podCgroupPrefix = "pod"

// PodCgroups names and removes pod cgroups.
type PodCgroups struct {
	// root is the cgroup path of the QoS tree ("/kubepods" under cgroupRoot); "" disables it.
	root string
	// mounts are the cgroup hierarchies' mount points (v1 controllers and the v2 unified tree).
	mounts []string
}

// NewPodCgroups returns the manager; with cgroupsPerQOS false pods get no parent cgroup.
func NewPodCgroups(cgroupRoot string, cgroupsPerQOS bool) *PodCgroups {
	if !cgroupsPerQOS {
		return &PodCgroups{}
	}
	if cgroupRoot == "" {
		cgroupRoot = "/"
	}
	return &PodCgroups{root: path.Join(cgroupRoot, "kubepods"), mounts: cgroupMounts()}
}

// Parent is the cgroup parent for a pod's sandbox and containers.
func (c *PodCgroups) Parent(pod *v1.Pod) string {
	if c.root == "" {
		return ""
	}
	return path.Join(c.qosDir(qos.GetPodQOS(pod)), podCgroupPrefix+string(pod.UID))
}

func (c *PodCgroups) qosDir(class v1.PodQOSClass) string {
	switch class {
	case v1.PodQOSBurstable:
		return path.Join(c.root, "burstable")
	case v1.PodQOSBestEffort:
		return path.Join(c.root, "besteffort")
	default:
		return c.root
	}
}

// Pods lists the UIDs that have a pod cgroup in any hierarchy.
func (c *PodCgroups) Pods() map[types.UID]bool {
	found := map[types.UID]bool{}
	for _, m := range c.mounts {
		for _, class := range []v1.PodQOSClass{v1.PodQOSGuaranteed, v1.PodQOSBurstable, v1.PodQOSBestEffort} {
			entries, _ := os.ReadDir(filepath.Join(m, c.qosDir(class)))
			for _, e := range entries {
				if uid, ok := strings.CutPrefix(e.Name(), podCgroupPrefix); ok && e.IsDir() {
					found[types.UID(uid)] = true
				}
			}
		}
	}
	return found
}

// Remove deletes a pod's cgroup (and empty children) in every hierarchy. It fails while
// processes remain, which is the caller's cue to retry later.
func (c *PodCgroups) Remove(uid types.UID) error {
	var errs []error
	for _, m := range c.mounts {
		for _, class := range []v1.PodQOSClass{v1.PodQOSGuaranteed, v1.PodQOSBurstable, v1.PodQOSBestEffort} {
			dir := filepath.Join(m, c.qosDir(class), podCgroupPrefix+string(uid))
			if err := removeCgroupTree(dir); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// removeCgroupTree removes a cgroup directory bottom-up; cgroup dirs are removed with
// rmdir even though they contain control files.
func removeCgroupTree(dir string) error {
	entries, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.IsDir() {
			if err := removeCgroupTree(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	if err := os.Remove(dir); err != nil && !os.IsNotExist(err) {
		return err
	}
	return nil
}

// cgroupMounts reads the cgroup and cgroup2 mount points from /proc/self/mountinfo.
func cgroupMounts() []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var mounts []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		sep := -1
		for i, fl := range fields {
			if fl == "-" {
				sep = i
				break
			}
		}
		if sep < 0 || sep+1 >= len(fields) || len(fields) < 5 {
			continue
		}
		if fstype := fields[sep+1]; fstype == "cgroup" || fstype == "cgroup2" {
			mounts = append(mounts, fields[4])
		}
	}
	return mounts
}
