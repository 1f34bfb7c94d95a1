package stats

import (
	"bytes"
	"errors"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
)

// podCgroups finds pod cgroups under the pod cgroup root by the kubelet's
// names, for the cgroupfs driver (<root>[/burstable|/besteffort]/pod<uid>)
// and the systemd driver (kubepods[-burstable|-besteffort]-pod<uid_>.slice),
// and remembers them for the pod's life.
type podCgroups struct {
	fs   cgroupFS
	root string // "/kubepods" or "/kubepods.slice"; "" means none

	mu    sync.Mutex
	byUID map[string]string
}

func newPodCgroups(fs cgroupFS, root string) *podCgroups {
	return &podCgroups{fs: fs, root: root, byUID: map[string]string{}}
}

// find returns the cgroup name of pod uid.
func (c *podCgroups) find(uid string) (string, bool) {
	c.mu.Lock()
	name, ok := c.byUID[uid]
	c.mu.Unlock()
	if ok {
		return name, true
	}
	for _, cand := range c.candidates(uid) {
		if _, err := os.Stat(c.fs.path("memory", cand)); err == nil {
			c.mu.Lock()
			c.byUID[uid] = cand
			c.mu.Unlock()
			return cand, true
		}
	}
	return "", false
}

func (c *podCgroups) candidates(uid string) []string {
	if strings.HasSuffix(c.root, ".slice") {
		// systemd: /kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid>.slice,
		// dashes in the UID escaped as underscores.
		prefix := strings.TrimSuffix(path.Base(c.root), ".slice")
		escaped := strings.ReplaceAll(uid, "-", "_")
		return []string{
			path.Join(c.root, prefix+"-pod"+escaped+".slice"),
			path.Join(c.root, prefix+"-burstable.slice", prefix+"-burstable-pod"+escaped+".slice"),
			path.Join(c.root, prefix+"-besteffort.slice", prefix+"-besteffort-pod"+escaped+".slice"),
		}
	}
	return []string{
		path.Join(c.root, "pod"+uid),
		path.Join(c.root, "burstable", "pod"+uid),
		path.Join(c.root, "besteffort", "pod"+uid),
	}
}

// forget drops pod uid's cgroup (gone, or about to be looked up anew).
func (c *podCgroups) forget(uid string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.byUID, uid)
}

// retain forgets every pod not in uids.
func (c *podCgroups) retain(uids map[string]bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for uid := range c.byUID {
		if !uids[uid] {
			delete(c.byUID, uid)
		}
	}
}

// containerCgroupNames are the names a runtime gives container id's cgroup
// under its pod's: the ID itself (cgroupfs driver) or a systemd scope.
func containerCgroupNames(id string) []string {
	return []string{id, "cri-containerd-" + id + ".scope", "crio-" + id + ".scope"}
}

// sandboxPID is a process of the pod's sandbox (its pause process), whose
// /proc/<pid>/net/dev shows the pod's network namespace.
func (c *podCgroups) sandboxPID(podCgroup, sandboxID string) (int, bool) {
	for _, name := range containerCgroupNames(sandboxID) {
		pid := 0
		err := readFile(c.procsFile(podCgroup, name), func(data []byte) error {
			line, _, _ := bytes.Cut(data, []byte{'\n'})
			v, ok := parseUint(line)
			if !ok {
				return errors.New("no process")
			}
			pid = int(v)
			return nil
		})
		if err == nil {
			return pid, true
		}
	}
	return 0, false
}

// processCount counts the processes of the pod's running containers, not
// its sandbox's, as upstream sums its containers' process counts.
func (c *podCgroups) processCount(podCgroup string, containerIDs []string) uint64 {
	var n uint64
	for _, id := range containerIDs {
		for _, name := range containerCgroupNames(id) {
			err := readFile(c.procsFile(podCgroup, name), func(data []byte) error {
				n += uint64(bytes.Count(data, []byte{'\n'}))
				return nil
			})
			if err == nil {
				break
			}
		}
	}
	return n
}

func (c *podCgroups) procsFile(podCgroup, container string) string {
	return filepath.Join(c.fs.path("memory", path.Join(podCgroup, container)), "cgroup.procs")
}
