// Package podmanager keeps the set of pods nodelet has been told to run (upstream's pod
// manager), indexed by UID and by full name.
package podmanager

import (
	"sort"
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Manager is the desired pods.
type Manager struct {
	mu     sync.RWMutex
	byUID  map[types.UID]*v1.Pod
	byName map[string]*v1.Pod
}

// New returns an empty manager.
func New() *Manager {
	return &Manager{byUID: map[types.UID]*v1.Pod{}, byName: map[string]*v1.Pod{}}
}

// FullName is "name_namespace", the key upstream uses for pods.
func FullName(pod *v1.Pod) string { return pod.Name + "_" + pod.Namespace }

// AddPod adds or replaces a pod.
func (m *Manager) AddPod(pod *v1.Pod) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if old, ok := m.byName[FullName(pod)]; ok && old.UID != pod.UID {
		delete(m.byUID, old.UID)
	}
	m.byUID[pod.UID] = pod
	m.byName[FullName(pod)] = pod
}

// UpdatePod is AddPod; kept for readability at call sites.
func (m *Manager) UpdatePod(pod *v1.Pod) { m.AddPod(pod) }

// RemovePod forgets a pod.
func (m *Manager) RemovePod(pod *v1.Pod) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.byUID, pod.UID)
	if cur, ok := m.byName[FullName(pod)]; ok && cur.UID == pod.UID {
		delete(m.byName, FullName(pod))
	}
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

// GetPods lists the desired pods, oldest first.
func (m *Manager) GetPods() []*v1.Pod {
	m.mu.RLock()
	pods := make([]*v1.Pod, 0, len(m.byUID))
	for _, p := range m.byUID {
		pods = append(pods, p)
	}
	m.mu.RUnlock()
	sort.Slice(pods, func(i, j int) bool {
		ti, tj := pods[i].CreationTimestamp, pods[j].CreationTimestamp
		if ti.Equal(&tj) {
			return FullName(pods[i]) < FullName(pods[j])
		}
		return ti.Before(&tj)
	})
	return pods
}
