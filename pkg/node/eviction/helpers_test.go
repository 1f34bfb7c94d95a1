package eviction

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	testingclock "k8s.io/utils/clock/testing"
)

const (
	Ki = uint64(1) << 10
	Mi = Ki << 10
	Gi = Mi << 10
)

// fakeNode is what the fake summary reports of the node.
type fakeNode struct {
	memCapacity, memWorkingSet, memInactiveFile uint64
	fsCapacity, fsAvailable                     uint64
	inodes, inodesFree                          uint64
	imageFs                                     *[2]uint64 // capacity, available; nil: same as nodefs
	maxPID, processes                           int64
}

// podUsage is what the fake summary reports of a pod.
type podUsage struct {
	memory    uint64            // working set of its one container "c"
	rootfs    uint64            // writable layer of "c"
	logs      uint64            // logs of "c"
	volumes   map[string]uint64 // volume name → used bytes
	processes uint64
	ephemeral uint64 // the pod's ephemeral storage total
}

type killedPod struct {
	pod    *v1.Pod
	status v1.PodStatus
	grace  int64
}

type event struct {
	object      runtime.Object
	annotations map[string]string
	kind        string
	reason      string
	message     string
}

// eventLog is a record.EventRecorder keeping what it is given.
type eventLog struct {
	mu     sync.Mutex
	events []event
}

func (l *eventLog) Event(obj runtime.Object, kind, reason, message string) {
	l.AnnotatedEventf(obj, nil, kind, reason, "%s", message)
}

func (l *eventLog) Eventf(obj runtime.Object, kind, reason, format string, args ...any) {
	l.AnnotatedEventf(obj, nil, kind, reason, format, args...)
}

func (l *eventLog) AnnotatedEventf(obj runtime.Object, annotations map[string]string, kind, reason, format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, event{obj, annotations, kind, reason, fmt.Sprintf(format, args...)})
}

func (l *eventLog) withReason(reason string) []event {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []event
	for _, e := range l.events {
		if e.reason == reason {
			out = append(out, e)
		}
	}
	return out
}

// harness runs a Manager against a fake clock, a summary built from node
// and usage at each call, and a pod list from which killed pods disappear.
type harness struct {
	t       *testing.T
	clock   *testingclock.FakeClock
	mu      sync.Mutex
	node    fakeNode
	usage   map[types.UID]podUsage
	pods    []*v1.Pod
	killed  []killedPod
	events  *eventLog
	calls   []string // reclaim calls and summaries, in order
	summary int      // number of summaries taken
	mgr     *Manager
	// onReclaim runs inside each reclaim function.
	onReclaim func(name string)
}

func newHarness(t *testing.T, cfg Config, pods ...*v1.Pod) *harness {
	h := &harness{
		t:      t,
		clock:  testingclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)),
		node:   fakeNode{memCapacity: 8 * Gi, fsCapacity: 100 * Gi, fsAvailable: 50 * Gi, inodes: 1000000, inodesFree: 900000, maxPID: 10000, processes: 100},
		usage:  map[types.UID]podUsage{},
		pods:   pods,
		events: &eventLog{},
	}
	if cfg.PressureTransitionPeriod == 0 {
		cfg.PressureTransitionPeriod = 5 * time.Minute
	}
	reclaim := func(name string) func(context.Context) error {
		return func(context.Context) error {
			h.mu.Lock()
			h.calls = append(h.calls, name)
			h.mu.Unlock()
			if h.onReclaim != nil {
				h.onReclaim(name)
			}
			return nil
		}
	}
	mgr, err := NewManager(cfg, Deps{
		Summary:                   h.buildSummary,
		ActivePods:                h.activePods,
		KillPod:                   h.killPod,
		DeleteAllUnusedContainers: reclaim("containers"),
		DeleteUnusedImages:        reclaim("images"),
		Recorder:                  h.events,
		NodeRef:                   &v1.ObjectReference{Kind: "Node", Name: "node-a", UID: "node-a"},
		Clock:                     h.clock,
	})
	if err != nil {
		t.Fatal(err)
	}
	h.mgr = mgr
	return h
}

func (h *harness) sync() []*v1.Pod {
	h.t.Helper()
	return h.mgr.synchronize(context.Background())
}

// step moves the clock on, so the next summary is fresh.
func (h *harness) step(d time.Duration) { h.clock.Step(d) }

func (h *harness) setNode(f func(n *fakeNode)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	f(&h.node)
}

func (h *harness) setUsage(pod *v1.Pod, u podUsage) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.usage[pod.UID] = u
}

func (h *harness) activePods() []*v1.Pod {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.pods)
}

func (h *harness) killPod(pod *v1.Pod, statusFn func(*v1.PodStatus), grace int64) error {
	status := v1.PodStatus{Phase: v1.PodRunning}
	statusFn(&status)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.killed = append(h.killed, killedPod{pod, status, grace})
	h.pods = slices.DeleteFunc(h.pods, func(p *v1.Pod) bool { return p.UID == pod.UID })
	return nil
}

func (h *harness) killedNames() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, k := range h.killed {
		out = append(out, k.pod.Name)
	}
	return out
}

func (h *harness) buildSummary(context.Context) (*statsapi.Summary, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.summary++
	h.calls = append(h.calls, "summary")
	now := metav1.NewTime(h.clock.Now())
	n := h.node
	fs := &statsapi.FsStats{Time: now, CapacityBytes: ptr(n.fsCapacity), AvailableBytes: ptr(n.fsAvailable),
		Inodes: ptr(n.inodes), InodesFree: ptr(n.inodesFree), UsedBytes: ptr(n.fsCapacity - n.fsAvailable)}
	imageFs := fs
	if n.imageFs != nil {
		imageFs = &statsapi.FsStats{Time: now, CapacityBytes: ptr(n.imageFs[0]), AvailableBytes: ptr(n.imageFs[1]), Inodes: ptr(n.inodes), InodesFree: ptr(n.inodesFree)}
	}
	s := &statsapi.Summary{Node: statsapi.NodeStats{
		NodeName: "node-a",
		Memory: &statsapi.MemoryStats{Time: now, AvailableBytes: ptr(n.memCapacity - n.memWorkingSet),
			WorkingSetBytes: ptr(n.memWorkingSet), UsageBytes: ptr(n.memWorkingSet + n.memInactiveFile)},
		Fs:      fs,
		Runtime: &statsapi.RuntimeStats{ImageFs: imageFs, ContainerFs: imageFs},
		Rlimit:  &statsapi.RlimitStats{Time: now, MaxPID: ptr(n.maxPID), NumOfRunningProcesses: ptr(n.processes)},
	}}
	for _, pod := range h.pods {
		u, ok := h.usage[pod.UID]
		if !ok {
			continue
		}
		ps := statsapi.PodStats{
			PodRef:           statsapi.PodReference{Name: pod.Name, Namespace: pod.Namespace, UID: string(pod.UID)},
			Memory:           &statsapi.MemoryStats{Time: now, WorkingSetBytes: ptr(u.memory)},
			ProcessStats:     &statsapi.ProcessStats{ProcessCount: ptr(u.processes)},
			EphemeralStorage: &statsapi.FsStats{Time: now, UsedBytes: ptr(u.ephemeral)},
			Containers: []statsapi.ContainerStats{{
				Name:   "c",
				Memory: &statsapi.MemoryStats{Time: now, WorkingSetBytes: ptr(u.memory)},
				Rootfs: &statsapi.FsStats{Time: now, UsedBytes: ptr(u.rootfs), InodesUsed: ptr(u.rootfs / Mi)},
				Logs:   &statsapi.FsStats{Time: now, UsedBytes: ptr(u.logs), InodesUsed: ptr(uint64(1))},
			}},
		}
		for name, used := range u.volumes {
			ps.VolumeStats = append(ps.VolumeStats, statsapi.VolumeStats{Name: name, FsStats: statsapi.FsStats{Time: now, UsedBytes: ptr(used)}})
		}
		s.Pods = append(s.Pods, ps)
	}
	return s, nil
}

func ptr[T any](v T) *T { return &v }

// podSpec is a pod with one container "c".
type podSpec struct {
	name        string
	priority    int32
	requests    v1.ResourceList
	limits      v1.ResourceList
	volumes     []v1.Volume
	grace       *int64
	static      bool
	tolerations []v1.Toleration
}

func newPod(s podSpec) *v1.Pod {
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: s.name, Namespace: "default", UID: types.UID(s.name + "-uid"), Generation: 3},
		Spec: v1.PodSpec{
			Priority:                      ptr(s.priority),
			TerminationGracePeriodSeconds: s.grace,
			Volumes:                       s.volumes,
			Tolerations:                   s.tolerations,
			Containers: []v1.Container{{Name: "c", Image: "busybox",
				Resources: v1.ResourceRequirements{Requests: s.requests, Limits: s.limits}}},
		},
	}
	if s.static {
		pod.Annotations = map[string]string{"kubernetes.io/config.source": "file"}
	}
	return pod
}

func resources(pairs ...string) v1.ResourceList {
	out := v1.ResourceList{}
	for i := 0; i+1 < len(pairs); i += 2 {
		out[v1.ResourceName(pairs[i])] = resource.MustParse(pairs[i+1])
	}
	return out
}

func mustThresholds(t *testing.T, hard, soft, grace, minReclaim map[string]string) []Threshold {
	t.Helper()
	ts, err := ParseThresholds(nil, hard, soft, grace, minReclaim)
	if err != nil {
		t.Fatal(err)
	}
	return ts
}
