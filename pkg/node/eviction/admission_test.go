package eviction

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodelet/nodelet/pkg/node/nodestatus"
	"github.com/nodelet/nodelet/pkg/pod/admission"
)

// *Manager is what node status asks about pressure.
var _ nodestatus.Pressure = (*Manager)(nil)

// TestAdmissionUnderPressure wires the manager into pkg/pod/admission as the
// kubelet does (Options.PressureConditions) and checks upstream's eviction
// admit handler's answers.
func TestAdmissionUnderPressure(t *testing.T) {
	h := newHarness(t, Config{Thresholds: mustThresholds(t, map[string]string{"memory.available": "1Gi", "nodefs.available": "10Gi"}, nil, nil, nil)})
	node := &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "node-a", Labels: map[string]string{"kubernetes.io/os": "linux"}},
		Status: v1.NodeStatus{Allocatable: v1.ResourceList{
			v1.ResourceCPU: resource.MustParse("4"), v1.ResourceMemory: resource.MustParse("8Gi"),
			v1.ResourcePods: resource.MustParse("110"), v1.ResourceEphemeralStorage: resource.MustParse("100Gi"),
		}},
	}
	admit, err := admission.New(func() (*v1.Node, error) { return node, nil }, admission.Options{PressureConditions: h.mgr.PressureConditions})
	if err != nil {
		t.Fatal(err)
	}
	besteffort := newPod(podSpec{name: "besteffort"})
	tolerating := newPod(podSpec{name: "tolerating", tolerations: []v1.Toleration{{Key: v1.TaintNodeMemoryPressure, Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoSchedule}}})
	diskTolerating := newPod(podSpec{name: "disk-tolerating", requests: resources("cpu", "100m"), tolerations: []v1.Toleration{{Key: v1.TaintNodeDiskPressure, Operator: v1.TolerationOpExists}}})
	burstable := newPod(podSpec{name: "burstable", requests: resources("cpu", "100m")})
	static := newPod(podSpec{name: "static", static: true})

	check := func(pod *v1.Pod, wantAdmit bool, wantMessage string) {
		t.Helper()
		r := admit.Admit(pod, nil)
		if r.Admit != wantAdmit || (!wantAdmit && (r.Reason != "Evicted" || r.Message != wantMessage)) {
			t.Errorf("%s: %+v, want admit %v, Evicted %q", pod.Name, r, wantAdmit, wantMessage)
		}
	}
	check(besteffort, true, "")

	h.setNode(func(n *fakeNode) { n.memWorkingSet = 7*Gi + 512*Mi })
	h.sync()
	check(besteffort, false, "The node had condition: [MemoryPressure]. ")
	check(tolerating, true, "")
	check(burstable, true, "")
	check(static, true, "")

	h.step(10 * time.Second)
	h.setNode(func(n *fakeNode) { n.fsAvailable = 5 * Gi })
	h.sync()
	check(burstable, false, "The node had condition: [MemoryPressure DiskPressure]. ")
	check(diskTolerating, false, "The node had condition: [MemoryPressure DiskPressure]. ")
	check(static, true, "")
}
