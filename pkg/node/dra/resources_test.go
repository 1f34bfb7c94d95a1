package dra

import (
	"maps"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/pkg/node/dra/state"
)

func TestGetDynamicResources(t *testing.T) {
	pod := podWithClaim("p", "c")
	pod.Spec.Containers = append(pod.Spec.Containers, v1.Container{Name: "other"})
	m := newTestManager(t, nil, Options{})
	share := types.UID("share-1")
	m.cache.add(&claimInfo{ClaimInfoState: state.ClaimInfoState{
		ClaimUID: "uid-c", ClaimName: "c", Namespace: testNS,
		DriverState: map[string]state.DriverState{
			testDriver: {Devices: []state.Device{
				{PoolName: "pool", DeviceName: "d0", CDIDeviceIDs: []string{"example.com/gpu=d0"}},
				{PoolName: "pool", DeviceName: "d1", ShareID: &share, CDIDeviceIDs: []string{"example.com/gpu=d1", "example.com/gpu=d1-extra"}},
			}},
			"net.example.com": {},
		},
	}})
	got := m.GetDynamicResources(klog.Background(), pod, &pod.Spec.Containers[0])
	want := []*podresourcesv1.DynamicResource{{
		ClaimName: "c", ClaimNamespace: testNS,
		ClaimResources: []*podresourcesv1.ClaimResource{
			{DriverName: testDriver, PoolName: "pool", DeviceName: "d0", CdiDevices: []*podresourcesv1.CDIDevice{{Name: "example.com/gpu=d0"}}},
			{DriverName: testDriver, PoolName: "pool", DeviceName: "d1", ShareId: ptr.To("share-1"), CdiDevices: []*podresourcesv1.CDIDevice{{Name: "example.com/gpu=d1"}, {Name: "example.com/gpu=d1-extra"}}},
		},
	}}
	if len(got) != len(want) || !proto.Equal(got[0], want[0]) {
		t.Errorf("got %v\nwant %v", got, want)
	}
	if got := m.GetDynamicResources(klog.Background(), pod, &pod.Spec.Containers[1]); len(got) != 0 {
		t.Errorf("container without claims: %v", got)
	}
	// A claim that is not prepared reads as no resources.
	unknown := podWithClaim("q", "unprepared")
	if got := m.GetDynamicResources(klog.Background(), unknown, &unknown.Spec.Containers[0]); got == nil || len(got) != 0 {
		t.Errorf("unprepared claim: %v", got)
	}
}

func gather(t *testing.T, m *Manager) map[string]*dto.MetricFamily {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	for _, c := range m.Collectors() {
		if err := reg.Register(c); err != nil {
			t.Fatal(err)
		}
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*dto.MetricFamily{}
	for _, f := range families {
		out[f.GetName()] = f
	}
	return out
}

func labels(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, l := range m.GetLabel() {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

func counterValue(t *testing.T, m *Manager, name string) float64 {
	var sum float64
	for _, metric := range gather(t, m)[name].GetMetric() {
		sum += metric.GetCounter().GetValue()
	}
	return sum
}

func TestMetrics(t *testing.T) {
	pod := podWithClaim("p", "c")
	m := newTestManager(t, fakeClient(allocatedClaim("c", []string{"req"}, pod)), Options{})
	startDriver(t, m, []string{drapb.DRAPluginService})
	mustPrepare(t, m, pod)

	families := gather(t, m)
	ops := families["dra_operations_duration_seconds"].GetMetric()
	if len(ops) != 1 || ops[0].GetHistogram().GetSampleCount() != 1 ||
		labels(ops[0])["operation_name"] != "PrepareResources" || labels(ops[0])["is_error"] != "false" {
		t.Errorf("dra_operations_duration_seconds = %v", ops)
	}
	calls := families["dra_grpc_operations_duration_seconds"].GetMetric()
	wantCall := map[string]string{"driver_name": testDriver, "method_name": "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodePrepareResources", "grpc_status_code": "OK"}
	if len(calls) != 1 || !maps.Equal(labels(calls[0]), wantCall) {
		t.Errorf("dra_grpc_operations_duration_seconds = %v", calls)
	}
	inUse := map[string]float64{}
	for _, metric := range families["dra_resource_claims_in_use"].GetMetric() {
		inUse[labels(metric)["driver_name"]] = metric.GetGauge().GetValue()
	}
	if inUse["<any>"] != 1 || inUse[testDriver] != 1 || len(inUse) != 2 {
		t.Errorf("dra_resource_claims_in_use = %v", inUse)
	}
}

// The pod-resources server's provider (pkg/api/podresources.DynamicResourcesProvider).
var _ interface {
	GetDynamicResources(logger klog.Logger, pod *v1.Pod, container *v1.Container) []*podresourcesv1.DynamicResource
} = (*Manager)(nil)
