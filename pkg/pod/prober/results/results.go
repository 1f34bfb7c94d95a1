// Package results carries probe outcomes from the probe workers to whoever acts on them:
// the runtime manager (liveness, startup) and the status manager (readiness).
package results

import (
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodelet/nodelet/pkg/runtime/container"
)

// Result is a probe outcome.
type Result int

const (
	// Unknown means no probe has finished yet.
	Unknown Result = iota - 1
	Success
	Failure
)

func (r Result) String() string {
	switch r {
	case Success:
		return "Success"
	case Failure:
		return "Failure"
	default:
		return "UNKNOWN"
	}
}

// ToPrometheusType names the result in probe metrics.
func (r Result) ToPrometheusType() string {
	switch r {
	case Success:
		return "successful"
	case Failure:
		return "failed"
	default:
		return "unknown"
	}
}

// Update is a change of a container's result.
type Update struct {
	ContainerID container.ContainerID
	Result      Result
	PodUID      types.UID
}

// Manager keeps the latest result per container and announces changes.
type Manager interface {
	Get(id container.ContainerID) (Result, bool)
	// Set records result; an update is sent only when the result changed.
	Set(id container.ContainerID, result Result, pod *v1.Pod)
	Remove(id container.ContainerID)
	Updates() <-chan Update
}

type manager struct {
	mu      sync.RWMutex
	cache   map[container.ContainerID]Result
	updates chan Update
}

// NewManager returns an empty results manager.
func NewManager() Manager {
	return &manager{cache: map[container.ContainerID]Result{}, updates: make(chan Update, 20)}
}

func (m *manager) Get(id container.ContainerID) (Result, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	r, ok := m.cache[id]
	return r, ok
}

func (m *manager) Set(id container.ContainerID, result Result, pod *v1.Pod) {
	if m.setIfChanged(id, result) {
		m.updates <- Update{ContainerID: id, Result: result, PodUID: pod.UID}
	}
}

func (m *manager) setIfChanged(id container.ContainerID, result Result) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	prev, exists := m.cache[id]
	if exists && prev == result {
		return false
	}
	m.cache[id] = result
	return true
}

func (m *manager) Remove(id container.ContainerID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.cache, id)
}

func (m *manager) Updates() <-chan Update { return m.updates }
