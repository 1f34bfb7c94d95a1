// Package podmanager keeps the set of pods nodelet has been told to run (upstream's pod
// manager), indexed by UID and by full name, and the mirror pods the API server holds for
// static pods, which are never run themselves.
package podmanager

import (
	"slices"
	"sort"
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodelet/nodelet/pkg/kubetypes"
)

// Manager is the desired pods and the mirror pods.
type Manager struct {
	mu     sync.RWMutex
	byUID  map[types.UID]*v1.Pod
	byName map[string]*v1.Pod
	// Mirror pods, by their own (API) UID and by full name, which is their static pod's.
	mirrorByUID  map[types.UID]*v1.Pod
	mirrorByName map[string]*v1.Pod
	// sorted is GetPods' answer, kept until the desired pods change (nil: to be sorted
	// again): the loop asks every second, housekeeping every two, and pods rarely change.
	sorted []*v1.Pod
}

// New returns an empty manager.
func New() *Manager {
	return &Manager{
		byUID: map[types.UID]*v1.Pod{}, byName: map[string]*v1.Pod{},
		mirrorByUID: map[types.UID]*v1.Pod{}, mirrorByName: map[string]*v1.Pod{},
	}
}

// FullName is "name_namespace", the key upstream uses for pods.
func FullName(pod *v1.Pod) string { return pod.Name + "_" + pod.Namespace }

// IsMirrorPodOf reports whether mirror mirrors static: same name and the static pod's hash.
func IsMirrorPodOf(mirror, static *v1.Pod) bool {
	if mirror.Name != static.Name || mirror.Namespace != static.Namespace {
		return false
	}
	hash, ok := mirror.Annotations[kubetypes.ConfigMirrorAnnotationKey]
	return ok && hash == static.Annotations[kubetypes.ConfigHashAnnotationKey]
}

// AddPod adds or replaces a pod, or a mirror pod.
func (m *Manager) AddPod(pod *v1.Pod) {
	m.mu.Lock()
	defer m.mu.Unlock()
	byUID, byName := m.byUID, m.byName
	if kubetypes.IsMirrorPod(pod) {
		byUID, byName = m.mirrorByUID, m.mirrorByName
	}
	if old, ok := byName[FullName(pod)]; ok && old.UID != pod.UID {
		delete(byUID, old.UID)
	}
	byUID[pod.UID] = pod
	byName[FullName(pod)] = pod
	m.sorted = nil
}

// UpdatePod is AddPod; kept for readability at call sites.
func (m *Manager) UpdatePod(pod *v1.Pod) { m.AddPod(pod) }

// RemovePod forgets a pod or a mirror pod.
func (m *Manager) RemovePod(pod *v1.Pod) {
	m.mu.Lock()
	defer m.mu.Unlock()
	byUID, byName := m.byUID, m.byName
	if kubetypes.IsMirrorPod(pod) {
		byUID, byName = m.mirrorByUID, m.mirrorByName
	}
	delete(byUID, pod.UID)
	if cur, ok := byName[FullName(pod)]; ok && cur.UID == pod.UID {
		delete(byName, FullName(pod))
	}
	m.sorted = nil
}

// GetPodByUID returns the desired pod with that UID.
func (m *Manager) GetPodByUID(uid types.UID) (*v1.Pod, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	p, ok := m.byUID[uid]
	return p, ok
}

// GetPodByName returns the desired pod with that namespace and name.
func (m *Manager) GetPodByName(namespace, name string) (*v1.Pod, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	p, ok := m.byName[name+"_"+namespace]
	return p, ok
}

// GetMirrorPodByPod returns the mirror pod with the static pod's full name, if any; it
// may be outdated (IsMirrorPodOf tells).
func (m *Manager) GetMirrorPodByPod(pod *v1.Pod) (*v1.Pod, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	p, ok := m.mirrorByName[FullName(pod)]
	return p, ok
}

// GetPodByMirrorPod returns the static pod a mirror pod stands for.
func (m *Manager) GetPodByMirrorPod(mirror *v1.Pod) (*v1.Pod, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	p, ok := m.byName[FullName(mirror)]
	return p, ok
}

// TranslatePodUID maps a mirror pod's UID to its static pod's UID; any other UID is
// returned as it is (upstream's TranslatePodUID).
func (m *Manager) TranslatePodUID(uid types.UID) types.UID {
	m.mu.RLock()
	defer m.mu.RUnlock()
	mirror, ok := m.mirrorByUID[uid]
	if !ok {
		return uid
	}
	if static, ok := m.byName[FullName(mirror)]; ok {
		return static.UID
	}
	return uid
}

// GetPods lists the desired pods, oldest first. Mirror pods are not among them. The
// slice is the caller's.
func (m *Manager) GetPods() []*v1.Pod {
	m.mu.RLock()
	sorted := m.sorted
	m.mu.RUnlock()
	if sorted == nil {
		m.mu.Lock()
		if m.sorted == nil {
			m.sorted = sortedPods(m.byUID)
		}
		sorted = m.sorted
		m.mu.Unlock()
	}
	return slices.Clone(sorted)
}

func sortedPods(byUID map[types.UID]*v1.Pod) []*v1.Pod {
	pods := make([]*v1.Pod, 0, len(byUID))
	for _, p := range byUID {
		pods = append(pods, p)
	}
	sort.Slice(pods, func(i, j int) bool {
		ti, tj := pods[i].CreationTimestamp, pods[j].CreationTimestamp
		if ti.Equal(&tj) {
			return FullName(pods[i]) < FullName(pods[j])
		}
		return ti.Before(&tj)
	})
	return pods
}

// GetOrphanedMirrorPodNames lists the full names of mirror pods whose static pod is gone,
// for housekeeping to delete.
func (m *Manager) GetOrphanedMirrorPodNames() []string {
	m.mu.RLock()
	defer m.mu.RUnlock()
	var names []string
	for name := range m.mirrorByName {
		if _, ok := m.byName[name]; !ok {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	return names
}
