package kuberuntime

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/outage"
	"github.com/nodelet/nodelet/pkg/runtime/container"
	"github.com/nodelet/nodelet/pkg/runtime/criconfig"
)

// gcContainer is a dead container considered for removal.
type gcContainer struct {
	id, name   string
	createTime time.Time
	// unknown containers may still run: they are stopped before removal.
	unknown bool
	attempt uint32
}

// gcSandbox is a sandbox considered for removal.
type gcSandbox struct {
	id         string
	createTime time.Time
	// active sandboxes (ready, or still holding containers) are never removed.
	active  bool
	attempt uint32
}

// evictUnit groups the dead instances of one container of one pod.
type evictUnit struct {
	uid  types.UID
	name string
}

// GarbageCollect removes dead containers and sandboxes and the logs of deleted pods, as
// upstream's containerGC:
//   - dead containers created more than MinAge ago are candidates; those of deleted pods
//     (and, with evictNonDeletedPods, of terminated pods) all go once allSourcesReady;
//   - per (pod, container) at most MaxPerPodContainer stay, newest first;
//   - at most MaxContainers stay overall, removing the oldest first;
//   - sandboxes that are not ready and hold no containers go, except the newest of a pod
//     that still exists;
//   - pod log directories of deleted pods go once allSourcesReady, and dangling legacy
//     log symlinks of exited containers go.
func (m *Manager) GarbageCollect(ctx context.Context, policy container.GCPolicy, allSourcesReady, evictNonDeletedPods bool) error {
	var errs []error
	// The actuated resources of deleted pods go (upstream drops them here too).
	m.actuated.RemoveOrphans(func(uid types.UID) bool { return !m.podState.IsPodDeleted(uid) })
	if err := m.evictContainers(ctx, policy, allSourcesReady, evictNonDeletedPods); err != nil {
		errs = append(errs, err)
	}
	if err := m.evictSandboxes(ctx, evictNonDeletedPods); err != nil {
		errs = append(errs, err)
	}
	if err := m.evictPodLogsDirectories(ctx, allSourcesReady); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// podGone says whether everything of the pod may be removed.
func (m *Manager) podGone(uid types.UID, evictNonDeletedPods bool) bool {
	return m.podState.IsPodDeleted(uid) || (evictNonDeletedPods && m.podState.IsPodTerminated(uid))
}

func (m *Manager) evictContainers(ctx context.Context, policy container.GCPolicy, allSourcesReady, evictNonDeletedPods bool) error {
	units, err := m.evictableContainers(ctx, policy.MinAge)
	if err != nil {
		return err
	}
	// Only when all sources are ready do we know which pods are really gone.
	if allSourcesReady {
		for key, unit := range units {
			if m.podGone(key.uid, evictNonDeletedPods) {
				m.removeOldestN(ctx, unit, len(unit))
				delete(units, key)
			}
		}
	}
	if policy.MaxPerPodContainer >= 0 {
		m.enforceMaxContainersPerEvictUnit(ctx, units, policy.MaxPerPodContainer)
	}
	if policy.MaxContainers < 0 || countContainers(units) <= policy.MaxContainers {
		return nil
	}
	// Leave an equal share per unit (at least one), then remove the oldest overall.
	m.enforceMaxContainersPerEvictUnit(ctx, units, max(policy.MaxContainers/len(units), 1))
	if n := countContainers(units); n > policy.MaxContainers {
		var flat []gcContainer
		for _, unit := range units {
			flat = append(flat, unit...)
		}
		sortByAttemptNewestFirst(flat)
		m.removeOldestN(ctx, flat, n-policy.MaxContainers)
	}
	return nil
}

// evictableContainers groups the containers that are not running and older than minAge.
func (m *Manager) evictableContainers(ctx context.Context, minAge time.Duration) (map[evictUnit][]gcContainer, error) {
	containers, err := m.listContainers(ctx, true)
	if err != nil {
		return nil, err
	}
	units := map[evictUnit][]gcContainer{}
	newestGCTime := m.clock.Now().Add(-minAge)
	for _, c := range containers {
		if c.State == runtimeapi.ContainerState_CONTAINER_RUNNING {
			continue
		}
		created := time.Unix(0, c.CreatedAt)
		if newestGCTime.Before(created) {
			continue
		}
		info := gcContainer{
			id: c.Id, name: c.GetMetadata().GetName(), createTime: created,
			unknown: c.State == runtimeapi.ContainerState_CONTAINER_UNKNOWN,
			attempt: c.GetMetadata().GetAttempt(),
		}
		key := evictUnit{uid: criconfig.GetContainerInfoFromLabels(c.Labels).PodUID, name: info.name}
		units[key] = append(units[key], info)
	}
	return units, nil
}

func countContainers(units map[evictUnit][]gcContainer) int {
	n := 0
	for _, u := range units {
		n += len(u)
	}
	return n
}

func (m *Manager) enforceMaxContainersPerEvictUnit(ctx context.Context, units map[evictUnit][]gcContainer, maxPerUnit int) {
	for key, unit := range units {
		if over := len(unit) - maxPerUnit; over > 0 {
			units[key] = m.removeOldestN(ctx, unit, over)
		}
	}
}

// removeOldestN removes the n oldest containers (highest attempt, then newest, are kept)
// and returns the rest. Containers in unknown state are stopped first.
func (m *Manager) removeOldestN(ctx context.Context, cs []gcContainer, n int) []gcContainer {
	keep := len(cs) - n
	if keep > 0 {
		sortByAttemptNewestFirst(cs)
	}
	for i := len(cs) - 1; i >= keep; i-- {
		if cs[i].unknown {
			id := container.BuildContainerID(m.runtimeName, cs[i].id)
			if err := m.killContainer(ctx, nil, id, cs[i].name, "Container is in unknown state, try killing it before removal", reasonUnknown, nil, nil); err != nil {
				outage.ErrorS(err, "Failed to stop container", "containerID", cs[i].id)
				continue
			}
		}
		if err := m.removeContainer(ctx, cs[i].id); err != nil {
			outage.ErrorS(err, "Failed to remove container", "containerID", cs[i].id)
		}
	}
	// Assume the removals worked, so as not to be too aggressive.
	return cs[:max(keep, 0)]
}

func sortByAttemptNewestFirst(cs []gcContainer) {
	sort.SliceStable(cs, func(i, j int) bool {
		if cs[i].attempt == cs[j].attempt {
			return cs[i].createTime.After(cs[j].createTime)
		}
		return cs[i].attempt > cs[j].attempt
	})
}

// evictSandboxes removes sandboxes that are not ready and hold no containers, keeping the
// newest of each pod that still exists.
func (m *Manager) evictSandboxes(ctx context.Context, evictNonDeletedPods bool) error {
	containers, err := m.listContainers(ctx, true)
	if err != nil {
		return err
	}
	sandboxes, err := m.listSandboxes(ctx, true)
	if err != nil {
		return err
	}
	withContainers := map[string]bool{}
	for _, c := range containers {
		withContainers[c.PodSandboxId] = true
	}
	byPod := map[types.UID][]gcSandbox{}
	for _, s := range sandboxes {
		uid := types.UID(s.GetMetadata().GetUid())
		byPod[uid] = append(byPod[uid], gcSandbox{
			id: s.Id, createTime: time.Unix(0, s.CreatedAt), attempt: s.GetMetadata().GetAttempt(),
			active: s.State == runtimeapi.PodSandboxState_SANDBOX_READY || withContainers[s.Id],
		})
	}
	for uid, sbs := range byPod {
		if m.podGone(uid, evictNonDeletedPods) {
			// Even the newest dead one goes.
			m.removeOldestNSandboxes(ctx, sbs, len(sbs))
		} else {
			m.removeOldestNSandboxes(ctx, sbs, len(sbs)-1)
		}
	}
	return nil
}

func (m *Manager) removeOldestNSandboxes(ctx context.Context, sbs []gcSandbox, n int) {
	keep := len(sbs) - n
	if keep > 0 {
		sort.SliceStable(sbs, func(i, j int) bool {
			if sbs[i].attempt == sbs[j].attempt {
				return sbs[i].createTime.After(sbs[j].createTime)
			}
			return sbs[i].attempt > sbs[j].attempt
		})
	}
	for i := len(sbs) - 1; i >= keep; i-- {
		if !sbs[i].active {
			m.removeSandbox(ctx, sbs[i].id)
		}
	}
}

// removeSandbox stops (in case nobody did) and removes a sandbox.
func (m *Manager) removeSandbox(ctx context.Context, id string) {
	klog.V(4).InfoS("Removing sandbox", "sandboxID", id)
	if err := m.runtime.StopPodSandbox(ctx, id); err != nil {
		outage.ErrorS(err, "Failed to stop sandbox before removing", "sandboxID", id)
		return
	}
	if err := m.runtime.RemovePodSandbox(ctx, id); err != nil {
		outage.ErrorS(err, "Failed to remove sandbox", "sandboxID", id)
	}
}

// evictPodLogsDirectories removes the log directories of deleted pods (once all sources
// are ready) and dangling legacy symlinks of exited containers.
func (m *Manager) evictPodLogsDirectories(ctx context.Context, allSourcesReady bool) error {
	if allSourcesReady && m.opts.PodLogsDir != "" {
		entries, err := os.ReadDir(m.opts.PodLogsDir)
		if err != nil && !os.IsNotExist(err) {
			return fmt.Errorf("failed to read podLogsDirectory %q: %w", m.opts.PodLogsDir, err)
		}
		for _, e := range entries {
			if !m.podState.IsPodDeleted(podUIDFromLogsDirectory(e.Name())) {
				continue
			}
			if err := os.RemoveAll(filepath.Join(m.opts.PodLogsDir, e.Name())); err != nil {
				klog.ErrorS(err, "Failed to remove pod logs directory", "path", e.Name())
			}
		}
	}
	m.removeDeadLegacySymlinks(ctx)
	return nil
}

// podUIDFromLogsDirectory reads the UID from <ns>_<name>_<uid> (or a bare <uid>).
func podUIDFromLogsDirectory(name string) types.UID {
	parts := strings.Split(name, "_")
	return types.UID(parts[len(parts)-1])
}

// removeDeadLegacySymlinks removes links whose log is gone, unless the container still
// runs (its log may be briefly missing while being rotated).
func (m *Manager) removeDeadLegacySymlinks(ctx context.Context) {
	links, _ := filepath.Glob(filepath.Join(m.opts.LegacyLogSymlinkDir, "*."+legacyLogSuffix))
	for _, link := range links {
		if _, err := os.Stat(link); !os.IsNotExist(err) {
			continue
		}
		if id, err := containerIDFromLegacyLogSymlink(link); err == nil {
			resp, err := m.runtime.ContainerStatus(ctx, id, false)
			if err != nil {
				klog.V(4).InfoS("Error getting ContainerStatus for containerID", "containerID", id, "err", err)
			} else if resp.GetStatus().GetState() != runtimeapi.ContainerState_CONTAINER_EXITED {
				continue
			}
		}
		if err := os.Remove(link); err != nil {
			klog.ErrorS(err, "Failed to remove container log dead symlink", "path", link)
		}
	}
}
