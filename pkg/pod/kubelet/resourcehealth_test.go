package kubelet

import (
	"context"
	"errors"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodelet/nodelet/pkg/runtime/container"
)

// fakeResourceHealth marks every container's "example.com/gpu" device dev-1 with health.
type fakeResourceHealth struct {
	health  v1.ResourceHealthStatus
	updates chan []types.UID
}

func (f *fakeResourceHealth) Updates() <-chan []types.UID { return f.updates }
func (f *fakeResourceHealth) UpdateAllocatedResourcesStatus(_ *v1.Pod, st *v1.PodStatus) {
	for i := range st.ContainerStatuses {
		st.ContainerStatuses[i].AllocatedResourcesStatus = []v1.ResourceStatus{{Name: "example.com/gpu",
			Resources: []v1.ResourceHealth{{ResourceID: "dev-1", Health: f.health}}}}
	}
}

// TestResourceHealthInStatusAndSyncs: the generated status carries the devices' health,
// and a health change syncs the pods it names (and ignores pods the loop does not know).
func TestResourceHealthInStatusAndSyncs(t *testing.T) {
	ready := true
	rt := &fakeRuntime{}
	k := newTestKubelet(rt, &fakeVolumes{}, &ready)
	health := &fakeResourceHealth{health: v1.ResourceHealthStatusUnhealthy, updates: make(chan []types.UID, 1)}
	k.deps.ResourceHealth = health
	pod := testPod("p1", "gpu")

	st := k.generateStatusFrom(pod, &container.PodStatus{ID: pod.UID}, v1.PodStatus{}, false)
	if len(st.ContainerStatuses) != 1 || len(st.ContainerStatuses[0].AllocatedResourcesStatus) != 1 ||
		st.ContainerStatuses[0].AllocatedResourcesStatus[0].Resources[0].Health != v1.ResourceHealthStatusUnhealthy {
		t.Fatalf("container statuses %+v: want the device's health", st.ContainerStatuses)
	}

	k.handlePodAdditions([]*v1.Pod{pod})
	eventually(t, "the pod's first sync", func() bool { return rt.syncCount(pod.UID) == 1 })
	health.updates <- []types.UID{"unknown", pod.UID}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	k.syncLoopIteration(ctx, nil, nil, nil)
	eventually(t, "a sync for the health change", func() bool { return rt.syncCount(pod.UID) == 2 })
}

type fakeReleaser struct {
	unprepared []types.UID
	err        error
}

func (f *fakeReleaser) ReleaseResources(_ context.Context, pod *v1.Pod) error {
	f.unprepared = append(f.unprepared, pod.UID)
	return f.err
}

// TestTerminatingPodUnpreparesClaims: a stopping pod's claims are released once its
// containers stopped, and a failure to release them fails the termination (retried), so
// the final status that lets the claims be deallocated is not published yet.
func TestTerminatingPodUnpreparesClaims(t *testing.T) {
	ready := true
	k := newTestKubelet(&fakeRuntime{}, &fakeVolumes{}, &ready)
	dra := &fakeReleaser{err: errors.New("driver gone")}
	k.deps.Releaser = dra
	pod := testPod("p1", "claims")
	ctx := context.Background()
	ps := &container.PodStatus{ID: pod.UID, Name: pod.Name, Namespace: pod.Namespace}
	if err := k.SyncTerminatingPod(ctx, pod, ps, nil, nil); err == nil {
		t.Fatal("termination succeeded though the claims were not released")
	}
	dra.err = nil
	if err := k.SyncTerminatingPod(ctx, pod, ps, nil, nil); err != nil {
		t.Fatal(err)
	}
	if len(dra.unprepared) != 2 || dra.unprepared[1] != pod.UID {
		t.Errorf("unprepared %v", dra.unprepared)
	}
}
