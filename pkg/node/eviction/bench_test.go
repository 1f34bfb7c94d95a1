package eviction

import (
	"fmt"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
)

// benchHarness has 100 pods with stats and upstream's default thresholds.
func benchHarness(b *testing.B) *harness {
	t := &testing.T{}
	h := newHarness(t, Config{Thresholds: mustThresholds(t, map[string]string{
		"memory.available": "100Mi", "nodefs.available": "10%", "nodefs.inodesFree": "5%", "imagefs.available": "15%", "imagefs.inodesFree": "5%",
	}, nil, nil, nil), LocalStorageCapacityIsolation: true})
	for i := range 100 {
		pod := newPod(podSpec{name: fmt.Sprintf("pod-%d", i), priority: int32(i % 3), requests: resources("memory", "64Mi")})
		h.pods = append(h.pods, pod)
		h.setUsage(pod, podUsage{memory: uint64(i) * Mi, rootfs: uint64(i) * Mi, logs: Mi})
	}
	return h
}

// BenchmarkSynchronize is one check of 100 pods without pressure: what the
// manager costs every 10 s on a healthy node (the summary aside).
func BenchmarkSynchronize(b *testing.B) {
	h := benchHarness(b)
	for b.Loop() {
		h.step(10 * time.Second)
		h.sync()
	}
}

// BenchmarkSynchronizeUnderMemoryPressure adds ranking the 100 pods and
// the eviction message; the kill is a no-op so every check evicts.
func BenchmarkSynchronizeUnderMemoryPressure(b *testing.B) {
	h := benchHarness(b)
	h.setNode(func(n *fakeNode) { n.memWorkingSet = n.memCapacity - 50*Mi })
	h.mgr.deps.KillPod = func(*v1.Pod, func(*v1.PodStatus), int64) error { return nil }
	h.mgr.deps.Recorder = &eventLog{}
	for b.Loop() {
		h.step(10 * time.Second)
		if len(h.sync()) != 1 {
			b.Fatal("no eviction")
		}
	}
}
