// Package prober runs the liveness, readiness and startup probes of pods' containers
// (upstream's pkg/kubelet/prober). The manager keeps one worker goroutine per container and
// probe kind; each worker probes on its period and writes its verdicts to a results
// manager, from which the runtime manager (liveness, startup: restart the container) and the
// status manager (readiness, startup: Ready and Started) take them.
package prober

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/pkg/pod/prober/results"
	"github.com/nodelet/nodelet/pkg/runtime/container"
)

// Manager manages pod probing.
type Manager interface {
	// AddPod starts one worker per container and probe kind the pod has a probe for
	// (containers and restartable init containers). Workers that already run are kept:
	// probe changes of a running pod are not picked up, as upstream.
	AddPod(pod *v1.Pod)
	// StopLivenessAndStartup stops the liveness and startup workers of a terminating pod,
	// sidecars included; readiness keeps being probed until the pod is removed.
	StopLivenessAndStartup(pod *v1.Pod)
	// RemovePod stops every worker of the pod; each removes its results as it exits.
	RemovePod(pod *v1.Pod)
	// CleanupPods stops the workers of every pod not in desiredPods.
	CleanupPods(desiredPods map[types.UID]sets.Empty)
	// TriggerReadinessProbes probes every running, unready container of the status at
	// once rather than at its next period, so that a container that just started becomes
	// ready as soon as it can. (Started and Ready themselves are computed from the probe
	// results by the status package.)
	TriggerReadinessProbes(pod *v1.Pod, podStatus *v1.PodStatus)
}

// StatusProvider is where workers read the pod's current status: container IDs, states,
// start times, Started, and the pod IP. The status manager implements it.
type StatusProvider interface {
	GetPodStatus(uid types.UID) (v1.PodStatus, bool)
}

// probeKey identifies a worker.
type probeKey struct {
	podUID        types.UID
	containerName string
	kind          probeType
}

type manager struct {
	mu      sync.RWMutex
	workers map[probeKey]*worker

	statusProvider               StatusProvider
	liveness, readiness, startup results.Manager
	prober                       *prober
	metrics                      *metrics
	clock                        clock.WithTicker
	// start is when the manager was made: workers of containers that were already running
	// then are the ones a kubelet restart found.
	start time.Time
}

// NewManager returns a manager whose workers run exec probes through runner, report to the
// three results managers, record events with recorder, read pod status from statusProvider,
// and count probes in metrics registered on reg (nil: not registered).
func NewManager(runner container.CommandRunner, liveness, readiness, startup results.Manager, recorder record.EventRecorder, statusProvider StatusProvider, reg prometheus.Registerer) Manager {
	return newManager(runner, liveness, readiness, startup, recorder, statusProvider, reg, clock.RealClock{})
}

func newManager(runner container.CommandRunner, liveness, readiness, startup results.Manager, recorder record.EventRecorder, statusProvider StatusProvider, reg prometheus.Registerer, clk clock.WithTicker) *manager {
	return &manager{
		workers:        map[probeKey]*worker{},
		statusProvider: statusProvider,
		liveness:       liveness,
		readiness:      readiness,
		startup:        startup,
		prober:         newProber(runner, recorder),
		metrics:        newMetrics(reg),
		clock:          clk,
		start:          clk.Now(),
	}
}

func (m *manager) AddPod(pod *v1.Pod) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, c := range probedContainers(pod) {
		for _, kind := range [...]probeType{startup, readiness, liveness} {
			if kind.spec(&c) == nil {
				continue
			}
			key := probeKey{pod.UID, c.Name, kind}
			if _, ok := m.workers[key]; ok {
				klog.V(8).InfoS("Probe worker already exists", "probeType", kind, "pod", klog.KObj(pod), "containerName", c.Name)
				continue
			}
			w := newWorker(m, kind, pod, c)
			m.workers[key] = w
			go w.run()
		}
	}
}

func (m *manager) StopLivenessAndStartup(pod *v1.Pod) {
	m.stopWorkers(pod, probedContainers(pod), liveness, startup)
}

func (m *manager) RemovePod(pod *v1.Pod) {
	m.stopWorkers(pod, probedContainers(pod), readiness, liveness, startup)
}

func (m *manager) stopWorkers(pod *v1.Pod, containers []v1.Container, kinds ...probeType) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	for _, c := range containers {
		for _, kind := range kinds {
			if w, ok := m.workers[probeKey{pod.UID, c.Name, kind}]; ok {
				w.stop()
			}
		}
	}
}

func (m *manager) CleanupPods(desiredPods map[types.UID]sets.Empty) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	for key, w := range m.workers {
		if _, ok := desiredPods[key.podUID]; !ok {
			w.stop()
		}
	}
}

func (m *manager) TriggerReadinessProbes(pod *v1.Pod, podStatus *v1.PodStatus) {
	statuses := append(append([]v1.ContainerStatus{}, podStatus.InitContainerStatuses...), podStatus.ContainerStatuses...)
	for _, cs := range statuses {
		if cs.State.Running == nil || cs.Ready {
			continue
		}
		if w, ok := m.getWorker(pod.UID, cs.Name, readiness); ok {
			w.trigger()
		}
	}
}

func (m *manager) getWorker(podUID types.UID, name string, kind probeType) (*worker, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	w, ok := m.workers[probeKey{podUID, name, kind}]
	return w, ok
}

// removeWorker is called by a worker as it exits; it leaves a successor under the same
// key alone.
func (m *manager) removeWorker(w *worker) {
	m.mu.Lock()
	defer m.mu.Unlock()
	key := probeKey{w.pod.UID, w.container.Name, w.kind}
	if m.workers[key] == w {
		delete(m.workers, key)
	}
}

func (m *manager) workerCount() int {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return len(m.workers)
}

// probedContainers are the containers that can have probes: the pod's containers and its
// restartable init containers (sidecars).
func probedContainers(pod *v1.Pod) []v1.Container {
	out := append([]v1.Container(nil), pod.Spec.Containers...)
	for _, c := range pod.Spec.InitContainers {
		if isRestartableInitContainer(&c) {
			out = append(out, c)
		}
	}
	return out
}

func isRestartableInitContainer(c *v1.Container) bool {
	return c != nil && c.RestartPolicy != nil && *c.RestartPolicy == v1.ContainerRestartPolicyAlways
}
