package eviction

import (
	"context"
	"reflect"
	"slices"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// memoryPods are four pods whose upstream eviction order under memory
// pressure is besteffort, burstable-low, burstable-high, guaranteed:
// those over their requests first, then lower priority, then the most
// memory above the request.
func memoryPods(h *harness) (guaranteed, burstableHigh, burstableLow, besteffort *v1.Pod) {
	guaranteed = newPod(podSpec{name: "guaranteed", requests: resources("cpu", "100m", "memory", "1Gi"), limits: resources("cpu", "100m", "memory", "1Gi")})
	burstableHigh = newPod(podSpec{name: "burstable-high", priority: 1000, requests: resources("memory", "100Mi")})
	burstableLow = newPod(podSpec{name: "burstable-low", requests: resources("memory", "100Mi")})
	besteffort = newPod(podSpec{name: "besteffort"})
	h.pods = []*v1.Pod{guaranteed, burstableHigh, burstableLow, besteffort}
	h.setUsage(guaranteed, podUsage{memory: 800 * Mi})
	h.setUsage(burstableHigh, podUsage{memory: 600 * Mi})
	h.setUsage(burstableLow, podUsage{memory: 300 * Mi})
	h.setUsage(besteffort, podUsage{memory: 250 * Mi})
	return
}

func TestHardMemoryThresholdEvictsOnePodInUpstreamOrder(t *testing.T) {
	h := newHarness(t, Config{Thresholds: mustThresholds(t, map[string]string{"memory.available": "1Gi"}, nil, nil, nil)})
	_, _, burstableLow, besteffort := memoryPods(h)
	h.setNode(func(n *fakeNode) { n.memWorkingSet = n.memCapacity - 500*Mi })

	evicted := h.sync()
	if len(evicted) != 1 || evicted[0] != besteffort {
		t.Fatalf("evicted %v, want only besteffort", h.killedNames())
	}
	k := h.killed[0]
	wantMessage := "The node was low on resource: memory. Threshold quantity: 1Gi, available: 500Mi. Container c was using 250Mi, request is 0, has larger consumption of memory. "
	if k.grace != 1 || k.status.Phase != v1.PodFailed || k.status.Reason != "Evicted" || k.status.Message != wantMessage {
		t.Errorf("killed with grace %d, status %s/%s %q; want 1, Failed/Evicted %q", k.grace, k.status.Phase, k.status.Reason, k.status.Message, wantMessage)
	}
	wantCondition := v1.PodCondition{Type: v1.DisruptionTarget, ObservedGeneration: 3, Status: v1.ConditionTrue,
		Reason: v1.PodReasonTerminationByKubelet, Message: wantMessage}
	if len(k.status.Conditions) != 1 || !k.status.Conditions[0].LastTransitionTime.Time.Equal(h.clock.Now()) {
		t.Fatalf("conditions %+v, want one DisruptionTarget set now", k.status.Conditions)
	}
	got := k.status.Conditions[0]
	got.LastTransitionTime = wantCondition.LastTransitionTime
	if !reflect.DeepEqual(got, wantCondition) {
		t.Errorf("condition %+v, want %+v", got, wantCondition)
	}

	podEvents := h.events.withReason("Evicted")
	wantAnnotations := map[string]string{"offending_containers": "c", "offending_containers_usage": "250Mi", "starved_resource": "memory"}
	if len(podEvents) != 1 || podEvents[0].object != besteffort || podEvents[0].kind != v1.EventTypeWarning ||
		podEvents[0].message != wantMessage || !reflect.DeepEqual(podEvents[0].annotations, wantAnnotations) {
		t.Errorf("pod events %+v, want one Warning Evicted on besteffort with %v", podEvents, wantAnnotations)
	}
	nodeEvents := h.events.withReason("EvictionThresholdMet")
	if len(nodeEvents) != 1 || nodeEvents[0].message != "Attempting to reclaim memory" || nodeEvents[0].object.(*v1.ObjectReference).Kind != "Node" {
		t.Errorf("node events %+v, want one EvictionThresholdMet: Attempting to reclaim memory", nodeEvents)
	}
	if !h.mgr.IsUnderMemoryPressure() || h.mgr.IsUnderDiskPressure() || h.mgr.IsUnderPIDPressure() || !h.mgr.MemoryPressure() {
		t.Errorf("conditions %v, want MemoryPressure only", h.mgr.PressureConditions())
	}
	if slices.Contains(h.calls, "containers") || slices.Contains(h.calls, "images") {
		t.Errorf("memory pressure ran disk reclaim: %v", h.calls)
	}

	// The same stats never evict twice; the next reading evicts the next pod.
	if evicted := h.sync(); len(evicted) != 0 {
		t.Fatalf("second check on unchanged stats evicted %v", h.killedNames())
	}
	h.step(10 * time.Second)
	if evicted := h.sync(); len(evicted) != 1 || evicted[0] != burstableLow {
		t.Fatalf("evicted %v, want besteffort then burstable-low", h.killedNames())
	}
	if msg := h.killed[1].status.Message; msg != "The node was low on resource: memory. Threshold quantity: 1Gi, available: 500Mi. Container c was using 300Mi, request is 100Mi, has larger consumption of memory. " {
		t.Errorf("message %q", msg)
	}
}

func TestRankMemoryPressure(t *testing.T) {
	h := newHarness(t, Config{})
	guaranteed, burstableHigh, burstableLow, besteffort := memoryPods(h)
	noStats := newPod(podSpec{name: "no-stats", priority: 5000, requests: resources("memory", "1Gi")})
	pods := []*v1.Pod{guaranteed, noStats, burstableHigh, burstableLow, besteffort}
	summary, _ := h.buildSummary(context.Background())
	_, stats := observe(summary)
	rankMemoryPressure(pods, stats)
	want := []*v1.Pod{noStats, besteffort, burstableLow, burstableHigh, guaranteed}
	if !slices.Equal(pods, want) {
		t.Errorf("order %v, want %v", names(pods), names(want))
	}
}

func TestPIDPressureRanksByPriorityThenProcesses(t *testing.T) {
	h := newHarness(t, Config{Thresholds: mustThresholds(t, map[string]string{"pid.available": "1000"}, nil, nil, nil)})
	few := newPod(podSpec{name: "few"})
	many := newPod(podSpec{name: "many"})
	low := newPod(podSpec{name: "low-priority", priority: -10})
	h.pods = []*v1.Pod{few, many, low}
	h.setUsage(few, podUsage{processes: 10})
	h.setUsage(many, podUsage{processes: 50})
	h.setUsage(low, podUsage{processes: 1})
	h.setNode(func(n *fakeNode) { n.processes = 9500 })

	pods := slices.Clone(h.pods)
	summary, _ := h.buildSummary(context.Background())
	_, stats := observe(summary)
	rankPIDPressure(pods, stats)
	if want := []string{"low-priority", "many", "few"}; !slices.Equal(names(pods), want) {
		t.Errorf("order %v, want %v", names(pods), want)
	}
	if evicted := h.sync(); len(evicted) != 1 || evicted[0] != low {
		t.Fatalf("evicted %v, want low-priority", h.killedNames())
	}
	if !h.mgr.IsUnderPIDPressure() || h.mgr.IsUnderMemoryPressure() {
		t.Errorf("conditions %v, want PIDPressure", h.mgr.PressureConditions())
	}
	if msg := h.killed[0].status.Message; msg != "The node was low on resource: pids. Threshold quantity: 1k, available: 500. " {
		t.Errorf("message %q", msg)
	}
}

func TestSoftThresholdWaitsForItsGracePeriod(t *testing.T) {
	h := newHarness(t, Config{
		Thresholds:               mustThresholds(t, nil, map[string]string{"memory.available": "1Gi"}, map[string]string{"memory.available": "90s"}, nil),
		MaxPodGracePeriodSeconds: 30,
	})
	pod := newPod(podSpec{name: "besteffort", grace: ptr(int64(60))})
	h.pods = []*v1.Pod{pod}
	h.setUsage(pod, podUsage{memory: Gi})
	h.setNode(func(n *fakeNode) { n.memWorkingSet = 7*Gi + 512*Mi })

	for _, d := range []time.Duration{0, 60 * time.Second, 29 * time.Second} {
		h.step(d)
		if evicted := h.sync(); len(evicted) != 0 {
			t.Fatalf("evicted %v %v after the threshold was first met, before its 90s grace period", h.killedNames(), d)
		}
		if !h.mgr.IsUnderMemoryPressure() {
			t.Fatal("a soft threshold met reports MemoryPressure at once")
		}
	}
	h.step(time.Second)
	if evicted := h.sync(); len(evicted) != 1 {
		t.Fatal("no eviction once the grace period passed")
	}
	if h.killed[0].grace != 30 {
		t.Errorf("grace period %d, want the pod's 60 capped at evictionMaxPodGracePeriod 30", h.killed[0].grace)
	}
	if g := h.mgr.gracePeriod(h.mgr.cfg.Thresholds[0], newPod(podSpec{grace: ptr(int64(10))})); g != 10 {
		t.Errorf("grace period %d, want the pod's own 10 under the cap", g)
	}
}

func TestSoftThresholdGracePeriodRestartsWhenResolved(t *testing.T) {
	h := newHarness(t, Config{
		Thresholds: mustThresholds(t, nil, map[string]string{"memory.available": "1Gi"}, map[string]string{"memory.available": "1m"}, nil),
	})
	pod := newPod(podSpec{name: "besteffort"})
	h.pods = []*v1.Pod{pod}
	h.setUsage(pod, podUsage{memory: Gi})
	low := func(n *fakeNode) { n.memWorkingSet = 7*Gi + 512*Mi }
	h.setNode(low)
	h.sync()
	h.step(50 * time.Second)
	h.setNode(func(n *fakeNode) { n.memWorkingSet = 2 * Gi })
	h.sync()
	h.setNode(low)
	h.step(20 * time.Second)
	if evicted := h.sync(); len(evicted) != 0 {
		t.Fatal("evicted although the threshold was met again only now")
	}
	h.step(time.Minute)
	if evicted := h.sync(); len(evicted) != 1 {
		t.Fatal("no eviction a grace period after the threshold was met again")
	}
}

func TestPressureConditionHoldsForTransitionPeriod(t *testing.T) {
	h := newHarness(t, Config{Thresholds: mustThresholds(t, map[string]string{"memory.available": "1Gi"}, nil, nil, nil)})
	h.setNode(func(n *fakeNode) { n.memWorkingSet = 7*Gi + 512*Mi })
	h.sync()
	if !h.mgr.IsUnderMemoryPressure() {
		t.Fatal("no MemoryPressure under the threshold")
	}
	h.setNode(func(n *fakeNode) { n.memWorkingSet = 2 * Gi })
	for _, d := range []time.Duration{time.Minute, 3*time.Minute + 59*time.Second} {
		h.step(d)
		h.sync()
		if !h.mgr.IsUnderMemoryPressure() {
			t.Fatalf("MemoryPressure left before the 5m transition period")
		}
	}
	h.step(time.Second)
	h.sync()
	if h.mgr.IsUnderMemoryPressure() || len(h.mgr.PressureConditions()) != 0 {
		t.Fatalf("conditions %v five minutes after the threshold was last met, want none", h.mgr.PressureConditions())
	}
}

func TestMinimumReclaimKeepsEvictingUntilReclaimed(t *testing.T) {
	h := newHarness(t, Config{Thresholds: mustThresholds(t, map[string]string{"memory.available": "1Gi"}, nil, nil, map[string]string{"memory.available": "512Mi"})})
	memoryPods(h)
	setAvailable := func(a uint64) { h.setNode(func(n *fakeNode) { n.memWorkingSet = n.memCapacity - a }) }

	setAvailable(900 * Mi)
	if len(h.sync()) != 1 {
		t.Fatal("no eviction under the threshold")
	}
	h.step(10 * time.Second)
	setAvailable(1200 * Mi) // above 1Gi, below 1Gi + 512Mi
	if len(h.sync()) != 1 {
		t.Fatal("no eviction above the threshold but short of its minimum reclaim")
	}
	h.step(10 * time.Second)
	setAvailable(1600 * Mi)
	if evicted := h.sync(); len(evicted) != 0 {
		t.Fatalf("evicted %v with the minimum reclaim met", h.killedNames())
	}
	// Without a prior eviction, 1200Mi is above the threshold: nothing to do.
	h.step(10 * time.Second)
	setAvailable(1200 * Mi)
	if evicted := h.sync(); len(evicted) != 0 {
		t.Fatalf("evicted %v above a threshold not met before", h.killedNames())
	}
}

// diskPods: "big" has 3Gi in its writable layer, "medium" 2Gi, "requested"
// 4Gi but asks for 5Gi of ephemeral storage.
func diskPods(h *harness) (big, medium, requested *v1.Pod) {
	big = newPod(podSpec{name: "big"})
	medium = newPod(podSpec{name: "medium"})
	requested = newPod(podSpec{name: "requested", requests: resources("ephemeral-storage", "5Gi"),
		volumes: []v1.Volume{{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}}})
	h.pods = []*v1.Pod{requested, medium, big}
	h.setUsage(big, podUsage{rootfs: 3 * Gi})
	h.setUsage(medium, podUsage{rootfs: 2 * Gi})
	h.setUsage(requested, podUsage{rootfs: Gi, volumes: map[string]uint64{"scratch": 3 * Gi}})
	return
}

func TestDiskPressureReclaimsBeforeEvicting(t *testing.T) {
	h := newHarness(t, Config{Thresholds: mustThresholds(t, map[string]string{"nodefs.available": "10Gi"}, nil, nil, nil)})
	diskPods(h)
	h.setNode(func(n *fakeNode) { n.fsAvailable = 5 * Gi })
	h.onReclaim = func(name string) {
		if name == "images" {
			h.node.fsAvailable = 20 * Gi // called with h.mu unlocked
		}
	}
	if evicted := h.sync(); len(evicted) != 0 {
		t.Fatalf("evicted %v although image GC freed enough", h.killedNames())
	}
	if want := []string{"summary", "containers", "images", "summary"}; !slices.Equal(h.calls, want) {
		t.Errorf("calls %v, want %v", h.calls, want)
	}
	if e := h.events.withReason("EvictionThresholdMet"); len(e) != 1 || e[0].message != "Attempting to reclaim ephemeral-storage" {
		t.Errorf("node events %+v", e)
	}
	if !h.mgr.IsUnderDiskPressure() {
		t.Error("no DiskPressure under the nodefs threshold")
	}
}

func TestDiskPressureEvictsWhenReclaimFallsShort(t *testing.T) {
	h := newHarness(t, Config{Thresholds: mustThresholds(t, map[string]string{"nodefs.available": "10Gi"}, nil, nil, map[string]string{"nodefs.available": "5Gi"})})
	big, _, _ := diskPods(h)
	h.setNode(func(n *fakeNode) { n.fsAvailable = 5 * Gi })
	h.onReclaim = func(string) { h.node.fsAvailable += 3 * Gi } // 11Gi: above 10Gi, short of 15Gi
	evicted := h.sync()
	if len(evicted) != 1 || evicted[0] != big {
		t.Fatalf("evicted %v, want big (most disk above its request)", h.killedNames())
	}
	want := "The node was low on resource: ephemeral-storage. Threshold quantity: 10Gi, available: 5Gi. Container c was using 3Gi, request is 0, has larger consumption of ephemeral-storage. "
	if msg := h.killed[0].status.Message; msg != want {
		t.Errorf("message %q, want %q", msg, want)
	}
}

func TestRankDiskPressure(t *testing.T) {
	h := newHarness(t, Config{})
	big, medium, requested := diskPods(h)
	summary, _ := h.buildSummary(context.Background())
	_, stats := observe(summary)
	pods := []*v1.Pod{requested, medium, big}
	rankFuncs(false)[SignalNodeFsAvailable](pods, stats)
	if want := []*v1.Pod{big, medium, requested}; !slices.Equal(pods, want) {
		t.Errorf("one filesystem: order %v, want %v", names(pods), names(want))
	}
	// With a dedicated image filesystem, nodefs counts logs and local
	// volumes only: the emptyDir's 3Gi make "requested" the biggest.
	h.setUsage(requested, podUsage{rootfs: Gi, volumes: map[string]uint64{"scratch": 6 * Gi}})
	summary, _ = h.buildSummary(context.Background())
	_, stats = observe(summary)
	pods = []*v1.Pod{big, medium, requested}
	rankFuncs(true)[SignalNodeFsAvailable](pods, stats)
	if pods[0] != requested {
		t.Errorf("dedicated imagefs, nodefs: order %v, want requested first", names(pods))
	}
	pods = []*v1.Pod{requested, medium, big}
	rankFuncs(true)[SignalImageFsAvailable](pods, stats)
	if want := []*v1.Pod{big, medium, requested}; !slices.Equal(pods, want) {
		t.Errorf("dedicated imagefs, imagefs: order %v, want %v", names(pods), names(want))
	}
}

func TestDedicatedImageFsNodeFsPressureDoesNotReclaimImages(t *testing.T) {
	h := newHarness(t, Config{Thresholds: mustThresholds(t, map[string]string{"nodefs.available": "10Gi", "imagefs.available": "10Gi"}, nil, nil, nil)})
	h.mgr.deps.HasDedicatedImageFs = func(context.Context) (bool, error) { return true, nil }
	diskPods(h)
	h.setNode(func(n *fakeNode) { n.fsAvailable = 5 * Gi; n.imageFs = &[2]uint64{100 * Gi, 50 * Gi} })
	if len(h.sync()) != 1 {
		t.Fatal("no eviction under nodefs pressure")
	}
	if slices.Contains(h.calls, "images") || slices.Contains(h.calls, "containers") {
		t.Errorf("nodefs pressure with a dedicated imagefs reclaimed %v", h.calls)
	}
	// containerfs follows imagefs there.
	if !slices.ContainsFunc(h.mgr.thresholds, func(t Threshold) bool {
		return t.Signal == SignalContainerFsAvailable && t.Value.Quantity.Cmp(resource.MustParse("10Gi")) == 0
	}) {
		t.Errorf("thresholds %v, want containerfs.available<10Gi from imagefs", h.mgr.thresholds)
	}
}

func TestLocalStorageLimitsEvictEveryOffender(t *testing.T) {
	sizeLimit := resource.MustParse("1Mi")
	scratch := []v1.Volume{{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{SizeLimit: &sizeLimit}}}}
	emptyDir := newPod(podSpec{name: "emptydir", volumes: scratch})
	staticEmptyDir := newPod(podSpec{name: "static", volumes: scratch, static: true})
	container := newPod(podSpec{name: "container", limits: resources("ephemeral-storage", "10Mi")})
	podTotal := newPod(podSpec{name: "pod-total", limits: resources("ephemeral-storage", "10Mi")})
	fine := newPod(podSpec{name: "fine", volumes: scratch, limits: resources("ephemeral-storage", "10Mi")})

	h := newHarness(t, Config{LocalStorageCapacityIsolation: true}, emptyDir, staticEmptyDir, container, podTotal, fine)
	h.setUsage(emptyDir, podUsage{volumes: map[string]uint64{"scratch": 2 * Mi}})
	h.setUsage(staticEmptyDir, podUsage{volumes: map[string]uint64{"scratch": 2 * Mi}})
	h.setUsage(container, podUsage{rootfs: 8 * Mi, logs: 4 * Mi})
	h.setUsage(podTotal, podUsage{rootfs: Mi, ephemeral: 20 * Mi})
	h.setUsage(fine, podUsage{rootfs: Mi, logs: Mi, ephemeral: 3 * Mi, volumes: map[string]uint64{"scratch": Mi / 2}})

	evicted := h.sync()
	if want := []string{"emptydir", "container", "pod-total"}; !slices.Equal(names(evicted), want) {
		t.Fatalf("evicted %v, want %v", names(evicted), want)
	}
	want := map[string]string{
		"emptydir":  `Usage of EmptyDir volume "scratch" exceeds the limit "1Mi". `,
		"container": `Container c exceeded its local ephemeral storage limit "10Mi". `,
		"pod-total": "Pod ephemeral local storage usage exceeds the total limit of containers 10Mi. ",
	}
	for _, k := range h.killed {
		if k.status.Message != want[k.pod.Name] || k.grace != 1 || k.status.Reason != "Evicted" || len(k.status.Conditions) != 0 {
			t.Errorf("%s: grace %d, status %+v; want grace 1, Evicted %q, no condition", k.pod.Name, k.grace, k.status, want[k.pod.Name])
		}
	}
	if len(h.events.withReason("EvictionThresholdMet")) != 0 {
		t.Error("a local storage eviction recorded EvictionThresholdMet")
	}
}

func TestContainerEphemeralLimitLeavesOutDedicatedImageFs(t *testing.T) {
	container := newPod(podSpec{name: "container", limits: resources("ephemeral-storage", "10Mi")})
	h := newHarness(t, Config{LocalStorageCapacityIsolation: true}, container)
	h.mgr.deps.HasDedicatedImageFs = func(context.Context) (bool, error) { return true, nil }
	h.setUsage(container, podUsage{rootfs: 8 * Mi, logs: 4 * Mi})
	if evicted := h.sync(); len(evicted) != 0 {
		t.Errorf("evicted %v: the writable layer is on the image filesystem and does not count", names(evicted))
	}
}

func TestNoThresholdsNoWork(t *testing.T) {
	h := newHarness(t, Config{})
	h.sync()
	if h.summary != 0 {
		t.Errorf("took %d summaries with no thresholds and no local storage isolation", h.summary)
	}
}

func TestObserveSignals(t *testing.T) {
	h := newHarness(t, Config{})
	h.setNode(func(n *fakeNode) { n.memWorkingSet = 3 * Gi; n.processes = 400 })
	summary, _ := h.buildSummary(context.Background())
	summary.Node.SystemContainers = []statsapi.ContainerStats{{Name: statsapi.SystemContainerPods,
		Memory: &statsapi.MemoryStats{AvailableBytes: ptr(Gi), WorkingSetBytes: ptr(2 * Gi)}}}
	obs, _ := observe(summary)
	check := func(s Signal, available, capacity string) {
		t.Helper()
		o, ok := obs[s]
		if !ok || o.available.Cmp(resource.MustParse(available)) != 0 || o.capacity.Cmp(resource.MustParse(capacity)) != 0 {
			t.Errorf("%s: %+v, want %s of %s", s, o, available, capacity)
		}
	}
	check(SignalMemoryAvailable, "5Gi", "8Gi")
	check(SignalAllocatableMemoryAvailable, "1Gi", "3Gi")
	check(SignalNodeFsAvailable, "50Gi", "100Gi")
	check(SignalNodeFsInodesFree, "900000", "1000000")
	check(SignalImageFsAvailable, "50Gi", "100Gi")
	check(SignalContainerFsInodesFree, "900000", "1000000")
	check(SignalPIDAvailable, "9600", "10000")
}

func names(pods []*v1.Pod) []string {
	var out []string
	for _, p := range pods {
		out = append(out, p.Name)
	}
	return out
}

func TestNodeSummaryUntilAThresholdIsMet(t *testing.T) {
	h := newHarness(t, Config{Thresholds: mustThresholds(t, map[string]string{"memory.available": "1Gi"}, nil, nil, nil), LocalStorageCapacityIsolation: true})
	_, _, _, besteffort := memoryPods(h)
	nodeOnly := 0
	h.mgr.deps.NodeSummary = func(ctx context.Context) (*statsapi.Summary, error) {
		nodeOnly++
		s, err := h.buildSummary(ctx)
		s.Pods = nil
		return s, err
	}
	// No pressure, no local storage limits: the node's summary is enough.
	h.summary = 0
	h.sync()
	if nodeOnly != 1 || h.summary != 1 {
		t.Fatalf("without pressure: %d node summaries of %d, want the one summary node-only", nodeOnly, h.summary)
	}
	// Under pressure: the pods' usage is read to rank them, and the right pod goes.
	h.step(10 * time.Second)
	h.setNode(func(n *fakeNode) { n.memWorkingSet = n.memCapacity - 500*Mi })
	if evicted := h.sync(); len(evicted) != 1 || evicted[0] != besteffort {
		t.Fatalf("evicted %v, want besteffort", h.killedNames())
	}
	// A pod with an emptyDir size limit needs its usage at every check.
	h.step(10 * time.Second)
	h.setNode(func(n *fakeNode) { n.memWorkingSet = 0 })
	limited := newPod(podSpec{name: "limited"})
	limited.Spec.Volumes = []v1.Volume{{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{SizeLimit: func() *resource.Quantity { q := resource.MustParse("1Gi"); return &q }()}}}}
	h.mu.Lock()
	h.pods = append(h.pods, limited)
	h.mu.Unlock()
	before := nodeOnly
	h.sync()
	if nodeOnly != before {
		t.Errorf("a pod with an emptyDir sizeLimit was checked from the node's summary only")
	}
}
