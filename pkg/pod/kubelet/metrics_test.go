package kubelet

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodelet/nodelet/pkg/kubetypes"
	"github.com/nodelet/nodelet/pkg/metrics"
	"github.com/nodelet/nodelet/pkg/metrics/podstartup"
	"github.com/nodelet/nodelet/pkg/runtime/container"
)

func fromSource(pod *v1.Pod, source string) *v1.Pod {
	pod.Annotations = map[string]string{kubetypes.ConfigSourceAnnotationKey: source,
		kubetypes.ConfigFirstSeenAnnotationKey: time.Now().Format(time.RFC3339Nano)}
	return pod
}

func TestHousekeepingRecordsPodCounts(t *testing.T) {
	rt := &fakeRuntime{running: []*container.Pod{{ID: "orphan", Name: "old", Namespace: "ns"}}}
	vols := &fakeVolumes{dirs: []types.UID{"gone"}}
	ready := true
	k := newTestKubelet(rt, vols, &ready) // maxPods 2
	rejected := testutil.ToFloat64(metrics.AdmissionRejectionsTotal.WithLabelValues("OutOfpods"))
	orphans := testutil.ToFloat64(metrics.OrphanedRuntimePodTotal)

	api := fromSource(testPod("a", "a"), kubetypes.APIServerSource)
	api.Spec.EphemeralContainers = []v1.EphemeralContainer{{EphemeralContainerCommon: v1.EphemeralContainerCommon{Name: "debug"}}}
	k.handlePodAdditions([]*v1.Pod{
		fromSource(testPod("s", "s"), kubetypes.FileSource), api,
		fromSource(testPod("c", "c"), kubetypes.APIServerSource), // a third pod: OutOfpods
	})
	k.housekeeper.run(context.Background())

	for _, g := range []struct {
		name      string
		got, want float64
	}{
		{"rejections OutOfpods", testutil.ToFloat64(metrics.AdmissionRejectionsTotal.WithLabelValues("OutOfpods")) - rejected, 1},
		{`desired_pods{static=""}`, testutil.ToFloat64(metrics.DesiredPodCount.WithLabelValues("")), 2},
		{`desired_pods{static="true"}`, testutil.ToFloat64(metrics.DesiredPodCount.WithLabelValues("true")), 1},
		{`active_pods{static=""}`, testutil.ToFloat64(metrics.ActivePodCount.WithLabelValues("")), 1},
		{`active_pods{static="true"}`, testutil.ToFloat64(metrics.ActivePodCount.WithLabelValues("true")), 1},
		{"mirror_pods", testutil.ToFloat64(metrics.MirrorPodCount), 0},
		{"managed_ephemeral_containers", testutil.ToFloat64(metrics.ManagedEphemeralContainers), 1},
		{"orphaned_runtime_pods_total", testutil.ToFloat64(metrics.OrphanedRuntimePodTotal) - orphans, 1},
		{"orphan_pod_cleaned_volumes", testutil.ToFloat64(metrics.OrphanPodCleanedVolumes), 1},
		// the admitted pods' workers, and the orphan's, being killed
		{`working_pods{sync,desired,""}`, testutil.ToFloat64(metrics.WorkingPodCount.WithLabelValues("sync", "desired", "")), 1},
		{`working_pods{sync,desired,"true"}`, testutil.ToFloat64(metrics.WorkingPodCount.WithLabelValues("sync", "desired", "true")), 1},
		{`working_pods{terminating,runtime_only,unknown}`, testutil.ToFloat64(metrics.WorkingPodCount.WithLabelValues("terminating", "runtime_only", "unknown")), 1},
		{`working_pods{sync,orphan,""}`, testutil.ToFloat64(metrics.WorkingPodCount.WithLabelValues("sync", "orphan", "")), 0},
	} {
		if g.got != g.want {
			t.Errorf("%s = %v, want %v", g.name, g.got, g.want)
		}
	}
}

// The loop starts a pod's trace at admission, hands it to the runtime manager through
// the sync's context and ends it when the status manager shows the pod ready.
func TestStartupTraceFollowsThePod(t *testing.T) {
	// The finished trace is counted in the start-up histogram (and logged once with it);
	// the count is read rather than the log, whose logger is process-wide.
	recordedBefore := startupsRecorded(t)
	traced := make(chan bool, 10)
	rt := &fakeRuntime{onSync: func(ctx context.Context) {
		trace := podstartup.FromContext(ctx)
		trace.Begin(podstartup.Sandbox)()
		traced <- trace != nil
	}}
	ready := true
	k := newTestKubelet(rt, &fakeVolumes{}, &ready)
	pod := fromSource(testPod("p", "p"), kubetypes.FileSource)
	k.handlePodAdditions([]*v1.Pod{pod})
	select {
	case ok := <-traced:
		if !ok {
			t.Fatal("the runtime manager's sync got no start-up trace")
		}
	case <-time.After(2 * time.Second):
		t.Fatal("pod not synced")
	}

	k.deps.Status.SetPodStatus(pod, v1.PodStatus{Phase: v1.PodRunning,
		Conditions: []v1.PodCondition{{Type: v1.PodReady, Status: v1.ConditionTrue}}})
	k.observeStartup(pod.UID)
	k.observeStartup(pod.UID)
	if got := startupsRecorded(t) - recordedBefore; got != 1 {
		t.Fatalf("%d start-ups recorded for one pod, want 1", got)
	}
	if k.startup.Len() != 0 {
		t.Errorf("%d traces left after the pod started", k.startup.Len())
	}
}

// startupsRecorded is how many pod start-ups the histogram has counted so far.
func startupsRecorded(t *testing.T) uint64 {
	t.Helper()
	var m dto.Metric
	if err := metrics.PodStartupDuration.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount()
}

// A pod removed before it is ready leaves no trace behind.
func TestRemovedPodLeavesNoTrace(t *testing.T) {
	ready := true
	k := newTestKubelet(&fakeRuntime{}, &fakeVolumes{}, &ready)
	pod := testPod("r", "r")
	k.handlePodAdditions([]*v1.Pod{pod})
	if !k.startup.Starting("r") {
		t.Fatal("admitted pod not traced")
	}
	k.handlePodRemoves([]*v1.Pod{pod})
	if k.startup.Len() != 0 {
		t.Errorf("%d traces left after the pod was removed", k.startup.Len())
	}
}
