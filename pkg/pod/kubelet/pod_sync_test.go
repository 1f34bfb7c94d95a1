package kubelet

import (
	"context"
	"errors"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/client-go/tools/record"

	"github.com/nodelet/nodelet/pkg/node/volumes"
	"github.com/nodelet/nodelet/pkg/pod/podworkers"
	"github.com/nodelet/nodelet/pkg/runtime/container"
)

// setUpVolumes is fakeVolumes whose SetUpPod fails with err, and writes "volumes" to the
// log each time it is called.
type setUpVolumes struct {
	*fakeVolumes
	err error
	log *[]string
}

func (v *setUpVolumes) SetUpPod(context.Context, *v1.Pod) error {
	*v.log = append(*v.log, "volumes")
	return v.err
}

// newVolumesTestKubelet is a kubelet whose volume set-up fails with err, and log, in
// order, the calls to SetUpPod and to the runtime's SyncPod.
func newVolumesTestKubelet(err error) (*Kubelet, *fakeRuntime, *[]string) {
	var log []string
	rt := &fakeRuntime{onSync: func(context.Context) { log = append(log, "runtime") }}
	ready := true
	k := newTestKubelet(rt, &fakeVolumes{}, &ready)
	k.deps.Volumes = &setUpVolumes{fakeVolumes: &fakeVolumes{}, err: err, log: &log}
	return k, rt, &log
}

// The runtime manager only mounts volumes: the kubelet sets them up first, on every sync.
func TestSyncPodSetsVolumesUpBeforeTheRuntime(t *testing.T) {
	k, _, log := newVolumesTestKubelet(nil)
	pod := testPod("a", "a")
	k.pods.AddPod(pod)
	ps := &container.PodStatus{ID: "a", Name: "a", Namespace: "ns"}
	for range 2 {
		if _, _, err := k.SyncPod(context.Background(), podworkers.SyncPodSync, pod, ps); err != nil {
			t.Fatal(err)
		}
	}
	if want := []string{"volumes", "runtime", "volumes", "runtime"}; !slices.Equal(*log, want) {
		t.Errorf("calls %v, want %v", *log, want)
	}
}

// A pod whose volumes fail is not started: no runtime sync, a FailedMount event per failed
// volume worded as upstream's, and an error that makes the pod worker back off.
func TestSyncPodStopsWhenVolumesFail(t *testing.T) {
	mountErr := utilerrors.NewAggregate([]error{
		&volumes.MountError{Volume: "cfg", Err: errors.New(`configmap "later" not found`)},
		&volumes.MountError{Volume: "data", Err: errors.New("volume type csi is not supported by nodelet yet")},
	})
	for _, tc := range []struct {
		name   string
		err    error
		events []string
	}{
		{"mount errors", mountErr, []string{
			`Warning FailedMount MountVolume.SetUp failed for volume "cfg" : configmap "later" not found`,
			`Warning FailedMount MountVolume.SetUp failed for volume "data" : volume type csi is not supported by nodelet yet`,
		}},
		{"pod-level error", errors.New(`invalid pod UID "../x"`), []string{
			`Warning FailedMount Unable to attach or mount volumes: invalid pod UID "../x"`,
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k, rt, log := newVolumesTestKubelet(tc.err)
			pod := testPod("a", "a")
			k.pods.AddPod(pod)
			ps := &container.PodStatus{ID: "a", Name: "a", Namespace: "ns"}
			_, _, err := k.SyncPod(context.Background(), podworkers.SyncPodSync, pod, ps)
			if err == nil || errors.Is(err, podworkers.ErrBackOffWait) {
				t.Fatalf("err %v, want a sync error (the pod worker backs off)", err)
			}
			if want := `unable to attach or mount volumes for pod "ns/a": ` + tc.err.Error(); err.Error() != want {
				t.Errorf("err %q, want %q", err, want)
			}
			if rt.syncCount("a") != 0 || !slices.Equal(*log, []string{"volumes"}) {
				t.Errorf("the runtime synced a pod whose volumes failed: calls %v", *log)
			}
			if got := drain(k.deps.Recorder.(*record.FakeRecorder)); !slices.Equal(got, tc.events) {
				t.Errorf("events %q, want %q", got, tc.events)
			}
		})
	}
}

// A host-network pod's containers get the node's IPs as pod IPs (downward API, hosts file):
// its sandbox reports none, and the runtime manager is given the API status's, as upstream.
func TestSyncPodGivesHostNetworkPodsTheNodeIPs(t *testing.T) {
	k, rt, _ := newVolumesTestKubelet(nil)
	k.cfg.HostIPs = []string{"192.168.5.5"}
	pod := testPod("h", "h")
	pod.Spec.HostNetwork = true
	k.pods.AddPod(pod)
	ps := &container.PodStatus{ID: "h", Name: "h", Namespace: "ns"}
	if _, _, err := k.SyncPod(context.Background(), podworkers.SyncPodSync, pod, ps); err != nil {
		t.Fatal(err)
	}
	if got := rt.lastStatus.IPs; !slices.Equal(got, []string{"192.168.5.5"}) {
		t.Errorf("the runtime manager was given pod IPs %v, want the node's", got)
	}
	if len(ps.IPs) != 0 {
		t.Errorf("the cached status was changed: %v", ps.IPs)
	}
}
