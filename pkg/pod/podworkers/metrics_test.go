package podworkers

import (
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodelet/nodelet/pkg/kubetypes"
	"github.com/nodelet/nodelet/pkg/metrics"
	"github.com/nodelet/nodelet/pkg/runtime/container"
)

func histogramOf(o prometheus.Observer) (uint64, float64) {
	var m dto.Metric
	_ = o.(prometheus.Metric).Write(&m)
	return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
}

// Each round is timed from the update it serves (the oldest one waiting), by update
// type, and the round that finishes the pod as "terminated", as upstream.
func TestWorkerDurationByOperation(t *testing.T) {
	w, f, _ := setup(t)
	f.block = make(chan struct{})
	ops := []string{"create", "sync", "kill", "terminated"}
	before := map[string]uint64{}
	for _, op := range ops {
		before[op], _ = histogramOf(metrics.PodWorkerDuration.WithLabelValues(op))
	}
	perPod, _ := histogramOf(metrics.ContainersPerPodCount)
	pod := testPod("m")
	pod.Spec.Containers = []v1.Container{{Name: "a"}, {Name: "b"}}

	start := time.Now()
	w.UpdatePod(UpdatePodOptions{Pod: pod, UpdateType: SyncPodCreate, StartTime: start})
	time.Sleep(30 * time.Millisecond)
	close(f.block)
	eventually(t, "create round timed", func() bool {
		n, _ := histogramOf(metrics.PodWorkerDuration.WithLabelValues("create"))
		return n == before["create"]+1
	})
	if _, sum := histogramOf(metrics.PodWorkerDuration.WithLabelValues("create")); sum < 0.03 {
		t.Errorf("create round took %vs in total, want at least the 30ms it was blocked", sum)
	}
	w.UpdatePod(UpdatePodOptions{Pod: pod, UpdateType: SyncPodKill, StartTime: time.Now()})
	eventually(t, "kill and terminated rounds timed", func() bool {
		k, _ := histogramOf(metrics.PodWorkerDuration.WithLabelValues("kill"))
		d, _ := histogramOf(metrics.PodWorkerDuration.WithLabelValues("terminated"))
		return k == before["kill"]+1 && d == before["terminated"]+1
	})
	if n, _ := histogramOf(metrics.PodWorkerDuration.WithLabelValues("sync")); n != before["sync"] {
		t.Errorf("%d sync rounds timed, want none", n-before["sync"])
	}
	if n, sum := histogramOf(metrics.ContainersPerPodCount); n != perPod+1 || sum < 2 {
		t.Errorf("containers per pod: %d observations (sum %v), want one of 2", n-perPod, sum)
	}
}

// WorkingPods describes each worker as kubelet_working_pods counts it.
func TestWorkingPods(t *testing.T) {
	w, f, _ := setup(t)
	f.block = make(chan struct{})
	defer close(f.block)
	static := testPod("static")
	static.Annotations = map[string]string{kubetypes.ConfigSourceAnnotationKey: kubetypes.FileSource}
	w.UpdatePod(UpdatePodOptions{Pod: testPod("api"), UpdateType: SyncPodCreate})
	w.UpdatePod(UpdatePodOptions{Pod: static, UpdateType: SyncPodCreate})
	w.UpdatePod(UpdatePodOptions{RunningPod: &container.Pod{ID: "orphan"}, UpdateType: SyncPodKill})

	got := map[string]metrics.WorkingPod{}
	desired := map[types.UID]bool{"api": true}
	for _, p := range w.WorkingPods(desired) {
		got[p.Lifecycle+"/"+strconv.FormatBool(p.Orphan)+"/"+strconv.FormatBool(p.HasConfig)+"/"+strconv.FormatBool(p.Static)] = p
	}
	for _, want := range []string{"sync/false/true/false", "sync/true/true/true", "terminating/true/false/false"} {
		if _, ok := got[want]; !ok {
			t.Errorf("no worker %s (lifecycle/orphan/hasConfig/static) in %v", want, got)
		}
	}
	if len(got) != 3 {
		t.Errorf("workers %v, want 3", got)
	}
}
