package volumes

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// claimPatches records the claim statuses written.
type claimPatches struct{ written []*v1.PersistentVolumeClaim }

func (p *claimPatches) PatchPersistentVolumeClaimStatus(_ context.Context, _, updated *v1.PersistentVolumeClaim) (*v1.PersistentVolumeClaim, error) {
	p.written = append(p.written, updated.DeepCopy())
	return updated, nil
}

// resizeFixture is a 1Gi claim whose volume grew to 2Gi, with the given resize status.
func resizeFixture(resizeStatus v1.ClaimResourceStatus) (*v1.PersistentVolumeClaim, *v1.PersistentVolume) {
	pvc := &v1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "data", Namespace: "ns1"},
		Status: v1.PersistentVolumeClaimStatus{Capacity: v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")},
			Conditions: []v1.PersistentVolumeClaimCondition{
				{Type: v1.PersistentVolumeClaimFileSystemResizePending, Status: v1.ConditionTrue},
				{Type: "Unused", Status: v1.ConditionFalse},
			}}}
	if resizeStatus != "" {
		pvc.Status.AllocatedResourceStatuses = map[v1.ResourceName]v1.ClaimResourceStatus{v1.ResourceStorage: resizeStatus}
	}
	pv := &v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv-data"}, Spec: v1.PersistentVolumeSpec{
		Capacity:               v1.ResourceList{v1.ResourceStorage: resource.MustParse("2Gi")},
		PersistentVolumeSource: v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{Driver: "d", VolumeHandle: "h"}}}}
	return pvc, pv
}

func newExpandManager(t *testing.T, expand func(context.Context, *v1.PersistentVolume, string, int64) error) (*Manager, *claimPatches, *record.FakeRecorder) {
	m := newCSITestManager(t, &fakeCSIObjects{})
	patches, recorder := &claimPatches{}, record.NewFakeRecorder(10)
	m.SetAPI(API{ClaimStatus: patches, Recorder: recorder})
	m.expandOnNode = expand
	return m, patches, recorder
}

// A grown volume waiting for the node is expanded, then the claim gets its capacity and
// loses its resize status and conditions; an event says so.
func TestExpandCSIClaim(t *testing.T) {
	var asked int64
	m, patches, recorder := newExpandManager(t, func(_ context.Context, _ *v1.PersistentVolume, target string, size int64) error {
		if target != "/target" {
			t.Errorf("target %q", target)
		}
		asked = size
		return nil
	})
	pvc, pv := resizeFixture(v1.PersistentVolumeClaimNodeResizePending)
	pod := newPod("uid-1")
	if err := m.expandCSIClaim(context.Background(), pod, &v1.Volume{Name: "data"}, pvc, pv, "/target"); err != nil {
		t.Fatal(err)
	}
	if asked != 2<<30 {
		t.Errorf("driver asked for %d bytes", asked)
	}
	if len(patches.written) != 2 {
		t.Fatalf("%d status patches, want in progress then done", len(patches.written))
	}
	if s := patches.written[0].Status.AllocatedResourceStatuses[v1.ResourceStorage]; s != v1.PersistentVolumeClaimNodeResizeInProgress {
		t.Errorf("first patch resize status %q", s)
	}
	done := patches.written[1].Status
	if c := done.Capacity[v1.ResourceStorage]; c.String() != "2Gi" || done.AllocatedResourceStatuses != nil {
		t.Errorf("final status: capacity %s, resize statuses %v", c.String(), done.AllocatedResourceStatuses)
	}
	if len(done.Conditions) != 1 || done.Conditions[0].Type != "Unused" {
		t.Errorf("final conditions %v, want only the non-resize one", done.Conditions)
	}
	if len(recorder.Events) != 2 {
		t.Fatalf("%d events, want one on the pod and one on the claim", len(recorder.Events))
	}
	if e := <-recorder.Events; !strings.Contains(e, `FileSystemResizeSuccessful MountVolume.NodeExpandVolume succeeded for volume "pv-data"`) {
		t.Errorf("event %q", e)
	}
}

// Nothing happens without growth or while the controller side has not finished.
func TestExpandCSIClaimNotNeeded(t *testing.T) {
	for name, status := range map[string]v1.ClaimResourceStatus{"no resize status": "", "controller in progress": v1.PersistentVolumeClaimControllerResizeInProgress} {
		t.Run(name, func(t *testing.T) {
			m, patches, _ := newExpandManager(t, func(context.Context, *v1.PersistentVolume, string, int64) error {
				t.Error("driver asked")
				return nil
			})
			pvc, pv := resizeFixture(status)
			if err := m.expandCSIClaim(context.Background(), newPod("uid-1"), &v1.Volume{Name: "data"}, pvc, pv, "/t"); err != nil || len(patches.written) > 0 {
				t.Errorf("err %v, %d patches", err, len(patches.written))
			}
		})
	}
	m, patches, _ := newExpandManager(t, nil)
	pvc, pv := resizeFixture(v1.PersistentVolumeClaimNodeResizePending)
	pvc.Status.Capacity[v1.ResourceStorage] = resource.MustParse("2Gi")
	if err := m.expandCSIClaim(context.Background(), newPod("uid-1"), &v1.Volume{Name: "data"}, pvc, pv, "/t"); err != nil || len(patches.written) > 0 {
		t.Errorf("same size: err %v, %d patches", err, len(patches.written))
	}
}

// Failures: an infeasible size is marked so and not retried; other failures are
// retried; both leave a NodeResizeError condition.
func TestExpandCSIClaimFailures(t *testing.T) {
	for _, tc := range []struct {
		err        error
		wantErr    bool
		wantStatus v1.ClaimResourceStatus
	}{
		{status.Error(codes.OutOfRange, "too big"), false, v1.PersistentVolumeClaimNodeResizeInfeasible},
		{fmt.Errorf("Expander.NodeExpand failed to expand the volume: %w", status.Error(codes.InvalidArgument, "bad")), false, v1.PersistentVolumeClaimNodeResizeInfeasible},
		{status.Error(codes.FailedPrecondition, "in use"), false, v1.PersistentVolumeClaimNodeResizeInProgress},
		{status.Error(codes.Internal, "oops"), true, v1.PersistentVolumeClaimNodeResizeInProgress},
		{errors.New("not a gRPC error"), true, v1.PersistentVolumeClaimNodeResizeInProgress},
	} {
		t.Run(tc.err.Error(), func(t *testing.T) {
			m, patches, _ := newExpandManager(t, func(context.Context, *v1.PersistentVolume, string, int64) error { return tc.err })
			pvc, pv := resizeFixture(v1.PersistentVolumeClaimNodeResizePending)
			err := m.expandCSIClaim(context.Background(), newPod("uid-1"), &v1.Volume{Name: "data"}, pvc, pv, "/t")
			if (err != nil) != tc.wantErr {
				t.Errorf("error %v, want an error: %v", err, tc.wantErr)
			}
			last := patches.written[len(patches.written)-1].Status
			if s := last.AllocatedResourceStatuses[v1.ResourceStorage]; s != tc.wantStatus {
				t.Errorf("resize status %q, want %q", s, tc.wantStatus)
			}
			found := false
			for _, c := range last.Conditions {
				found = found || (c.Type == v1.PersistentVolumeClaimNodeResizeError && strings.Contains(c.Message, "failed to expand pvc with"))
			}
			if !found {
				t.Errorf("conditions %v lack NodeResizeError", last.Conditions)
			}
		})
	}
}
