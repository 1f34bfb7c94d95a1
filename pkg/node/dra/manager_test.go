package dra

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
	drapbv1beta1 "k8s.io/kubelet/pkg/apis/dra/v1beta1"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/pkg/node/dra/state"
)

func mustPrepare(t *testing.T, m *Manager, pod *v1.Pod) {
	t.Helper()
	if err := m.PrepareResources(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
}

func mustUnprepare(t *testing.T, m *Manager, pod *v1.Pod) {
	t.Helper()
	if err := m.UnprepareResources(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
}

func cdiDevices(t *testing.T, m *Manager, pod *v1.Pod, container int) []string {
	t.Helper()
	ids, err := m.GetResources(pod, &pod.Spec.Containers[container])
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

func checkpointedClaims(t *testing.T, dir string) state.ClaimInfoStateList {
	t.Helper()
	blob, err := os.ReadFile(filepath.Join(dir, state.CheckpointFileName))
	if err != nil {
		t.Fatal(err)
	}
	list, err := state.UnmarshalCheckpoint(blob)
	if err != nil {
		t.Fatal(err)
	}
	return list
}

func TestClaimSharedByTwoPods(t *testing.T) {
	for _, service := range []string{drapb.DRAPluginService, drapbv1beta1.DRAPluginService} {
		t.Run(service, func(t *testing.T) {
			pod1, pod2 := podWithClaim("pod1", "shared"), podWithClaim("pod2", "shared")
			claim := allocatedClaim("shared", []string{"req"}, pod1, pod2)
			dir := t.TempDir()
			m := newTestManager(t, fakeClient(claim), Options{StateDir: dir})
			d, _, _ := startDriver(t, m, []string{service})

			mustPrepare(t, m, pod1)
			mustPrepare(t, m, pod2)
			if prepared, _ := d.calls(claim.UID); prepared != 1 {
				t.Errorf("NodePrepareResources calls = %d, want 1", prepared)
			}
			for _, pod := range []*v1.Pod{pod1, pod2} {
				if got := cdiDevices(t, m, pod, 0); !slices.Equal(got, []string{"example.com/gpu=shared-req"}) {
					t.Errorf("%s: CDI devices = %q", pod.Name, got)
				}
			}
			if list := checkpointedClaims(t, dir); len(list) != 1 || list[0].PodUIDs.Len() != 2 {
				t.Errorf("checkpoint = %+v, want the claim with both pods", list)
			}

			mustUnprepare(t, m, pod1)
			if _, released := d.calls(claim.UID); released != 0 {
				t.Errorf("claim unprepared while pod2 still uses it")
			}
			if m.PodMightNeedToUnprepareResources(pod1.UID) || !m.PodMightNeedToUnprepareResources(pod2.UID) {
				t.Error("PodMightNeedToUnprepareResources wrong after pod1 left")
			}
			mustUnprepare(t, m, pod2)
			mustUnprepare(t, m, pod2)
			mustUnprepare(t, m, pod1)
			if _, released := d.calls(claim.UID); released != 1 {
				t.Errorf("NodeUnprepareResources calls = %d, want 1", released)
			}
			if m.PodMightNeedToUnprepareResources(pod2.UID) {
				t.Error("pod2 still has claims")
			}
			if list := checkpointedClaims(t, dir); len(list) != 0 {
				t.Errorf("checkpoint still has %+v", list)
			}
		})
	}
}

func TestPrepareValidationErrors(t *testing.T) {
	pod := podWithClaim("p", "c")
	templated := func() *v1.Pod {
		p := podWithClaim("p", "c")
		p.Spec.ResourceClaims[0] = v1.PodResourceClaim{Name: "gpu", ResourceClaimTemplateName: ptr.To("tmpl")}
		return p
	}
	withStatus := templated()
	withStatus.Status.ResourceClaimStatuses = []v1.PodResourceClaimStatus{{Name: "gpu", ResourceClaimName: ptr.To("c")}}
	noSource := podWithClaim("p", "c")
	noSource.Spec.ResourceClaims[0].ResourceClaimName = nil
	otherDriver := allocatedClaim("c", []string{"req"}, pod)
	otherDriver.Status.Allocation.Devices.Results[0].Driver = "other.example.com"
	notAllocated := allocatedClaim("c", nil, pod)
	notAllocated.Status.Allocation = nil
	skipping := allocatedClaim("c", []string{"req"}, pod)
	skipping.Status.Allocation.Devices.Results[0].SkipNodeOperations = []resourceapi.SkipNodeOperation{resourceapi.SkipNodeOperationAll}

	for name, tc := range map[string]struct {
		pod   *v1.Pod
		claim *resourceapi.ResourceClaim
		noAPI bool
		err   string
	}{
		"claim missing":      {pod: pod, err: `prepare dynamic resources: fetch ResourceClaim c: resourceclaims.resource.k8s.io "c" not found`},
		"not allocated":      {pod: pod, claim: notAllocated, err: "prepare dynamic resources: ResourceClaim c: not allocated"},
		"not reserved":       {pod: pod, claim: allocatedClaim("c", []string{"req"}), err: "prepare dynamic resources: pod p (uid-p) is not allowed to use ResourceClaim c (uid-c)"},
		"driver missing":     {pod: pod, claim: otherDriver, err: "prepare dynamic resources: DRA driver other.example.com is not registered"},
		"not generated yet":  {pod: templated(), err: `prepare dynamic resources: pod "default/p": ResourceClaim not created yet`},
		"not the pod's":      {pod: withStatus, claim: allocatedClaim("c", []string{"req"}, pod), err: "prepare dynamic resources: ResourceClaim default/c was not created for Pod default/p (Pod is not owner)"},
		"no source":          {pod: noSource, err: `prepare dynamic resources: pod "default/p", spec.resourceClaim "gpu": none of the supported fields are set`},
		"standalone":         {pod: pod, noAPI: true, err: "prepare dynamic resources: fetch ResourceClaim c: no API server client (standalone mode), ResourceClaims cannot be read"},
		"skips not accepted": {pod: pod, claim: skipping, err: "prepare dynamic resources: ResourceClaim c: DRAOptionalNodeOperations feature gate is disabled on kubelet"},
	} {
		t.Run(name, func(t *testing.T) {
			var client kubernetes.Interface
			if !tc.noAPI {
				var objects []runtime.Object
				if tc.claim != nil {
					objects = append(objects, tc.claim)
				}
				client = fakeClient(objects...)
			}
			m := newTestManager(t, client, Options{})
			d, _, _ := startDriver(t, m, []string{drapb.DRAPluginService})
			err := m.PrepareResources(context.Background(), tc.pod)
			if err == nil || err.Error() != tc.err {
				t.Fatalf("err = %v\nwant %s", err, tc.err)
			}
			if m.PodMightNeedToUnprepareResources(tc.pod.UID) {
				t.Error("a pod that failed validation was added to a claim")
			}
			if prepared, _ := d.calls("uid-c"); prepared != 0 {
				t.Error("driver called")
			}
		})
	}
}

func TestPrepareWithoutGeneratedClaim(t *testing.T) {
	pod := podWithClaim("p", "c")
	pod.Spec.ResourceClaims[0] = v1.PodResourceClaim{Name: "gpu", ResourceClaimTemplateName: ptr.To("tmpl")}
	pod.Status.ResourceClaimStatuses = []v1.PodResourceClaimStatus{{Name: "gpu"}} // controller decided: no claim
	m := newTestManager(t, fakeClient(), Options{})
	mustPrepare(t, m, pod)
	if got := cdiDevices(t, m, pod, 0); len(got) != 0 {
		t.Errorf("CDI devices = %q", got)
	}
}

func TestPrepareGeneratedClaim(t *testing.T) {
	pod := podWithClaim("p", "c")
	pod.Spec.ResourceClaims[0] = v1.PodResourceClaim{Name: "gpu", ResourceClaimTemplateName: ptr.To("tmpl")}
	pod.Status.ResourceClaimStatuses = []v1.PodResourceClaimStatus{{Name: "gpu", ResourceClaimName: ptr.To("p-gpu-x")}}
	claim := allocatedClaim("p-gpu-x", []string{"req"}, pod)
	claim.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID, Controller: ptr.To(true)}}
	m := newTestManager(t, fakeClient(claim), Options{})
	startDriver(t, m, []string{drapb.DRAPluginService})
	mustPrepare(t, m, pod)
	if got := cdiDevices(t, m, pod, 0); !slices.Equal(got, []string{"example.com/gpu=p-gpu-x-req"}) {
		t.Errorf("CDI devices = %q", got)
	}
}

func TestPrepareDriverErrors(t *testing.T) {
	pod := podWithClaim("p", "c")
	claim := allocatedClaim("c", []string{"req"}, pod)
	m := newTestManager(t, fakeClient(claim), Options{})
	d, _, _ := startDriver(t, m, []string{drapb.DRAPluginService})

	d.failClaim["c"] = "device on fire"
	err := m.PrepareResources(context.Background(), pod)
	if err == nil || err.Error() != "prepare dynamic resources: NodePrepareResources failed for ResourceClaim c: device on fire" {
		t.Fatalf("err = %v", err)
	}
	// The pod was recorded before the call: the reconcile loop cleans up if it goes away.
	if !m.PodMightNeedToUnprepareResources(pod.UID) {
		t.Error("pod not recorded as a user of the claim")
	}

	d.mu.Lock()
	d.failClaim["c"], d.skipClaim["c"] = "", true
	d.mu.Unlock()
	err = m.PrepareResources(context.Background(), pod)
	if err == nil || err.Error() != "prepare dynamic resources: NodePrepareResources skipped 1 ResourceClaims" {
		t.Fatalf("err = %v", err)
	}

	d.mu.Lock()
	d.skipClaim["c"] = false
	d.mu.Unlock()
	mustPrepare(t, m, pod)
	mustPrepare(t, m, pod)
	if prepared, _ := d.calls(claim.UID); prepared != 3 {
		t.Errorf("NodePrepareResources calls = %d, want 3 (two failures, one success)", prepared)
	}
}

func TestGetResourcesPerRequest(t *testing.T) {
	pod := podWithClaim("p", "multi")
	pod.Spec.Containers = []v1.Container{
		{Name: "whole", Resources: v1.ResourceRequirements{Claims: []v1.ResourceClaim{{Name: "gpu"}}}},
		{Name: "gpu-only", Resources: v1.ResourceRequirements{Claims: []v1.ResourceClaim{{Name: "gpu", Request: "gpu"}}}},
		{Name: "extended", Resources: v1.ResourceRequirements{Requests: v1.ResourceList{"example.com/gpu": resource.MustParse("1")}}},
		{Name: "nothing"},
	}
	pod.Status.ExtendedResourceClaimStatus = &v1.PodExtendedResourceClaimStatus{
		ResourceClaimName: "ext",
		RequestMappings:   []v1.ContainerExtendedResourceRequest{{ContainerName: "extended", ResourceName: "example.com/gpu", RequestName: "container-2-request-0"}},
	}
	multi := allocatedClaim("multi", []string{"gpu", "nic"}, pod)
	ext := allocatedClaim("ext", []string{"container-2-request-0"}, pod)
	m := newTestManager(t, fakeClient(multi, ext), Options{})
	d, _, _ := startDriver(t, m, []string{drapb.DRAPluginService})
	d.requests["multi"] = []string{"gpu", "nic"}
	d.requests["ext"] = []string{"container-2-request-0"}
	mustPrepare(t, m, pod)

	for i, want := range [][]string{
		{"example.com/gpu=multi-gpu", "example.com/gpu=multi-nic"},
		{"example.com/gpu=multi-gpu"},
		{"example.com/gpu=ext-container-2-request-0"},
		{},
	} {
		if got := cdiDevices(t, m, pod, i); !slices.Equal(got, want) {
			t.Errorf("container %s: CDI devices = %q, want %q", pod.Spec.Containers[i].Name, got, want)
		}
	}
	if prepared, _ := d.calls(ext.UID); prepared != 1 {
		t.Error("the extended resource claim was not prepared")
	}
	mustUnprepare(t, m, pod)
	if _, released := d.calls(ext.UID); released != 1 {
		t.Error("the extended resource claim was not unprepared")
	}
	if _, err := m.GetResources(pod, &pod.Spec.Containers[0]); err == nil ||
		err.Error() != "internal error: unable to get claim info for ResourceClaim multi in namespace default" {
		t.Errorf("after unprepare: err = %v", err)
	}
}

// managerCheckpoint is the file upstream's kubelet writes for claim c prepared for pod
// p with testDriver's device: its JSON data, by upstream's struct definitions, inside
// {"Data": <string>, "Checksum": <crc32 IEEE of the data>}.
func managerCheckpoint(t *testing.T) string {
	const data = `{"kind":"DRACheckpoint","apiVersion":"checkpoint.dra.kubelet.k8s.io/v1","ClaimInfoStateList":[` +
		`{"ClaimUID":"uid-c","ClaimName":"c","Namespace":"default","PodUIDs":{"uid-p":{}},` +
		`"DriverState":{"gpu.example.com":{"Devices":[{"PoolName":"pool","DeviceName":"c-req","ShareID":null,` +
		`"RequestNames":["req"],"CDIDeviceIDs":["example.com/gpu=c-req"]}]}}}]}`
	quoted, err := json.Marshal(data)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf(`{"Data":%s,"Checksum":%d}`, quoted, crc32.ChecksumIEEE([]byte(data)))
}

func TestRestartKeepsPreparedClaims(t *testing.T) {
	dir := t.TempDir()
	pod := podWithClaim("p", "c")
	claim := allocatedClaim("c", []string{"req"}, pod)
	client := fakeClient(claim)
	m := newTestManager(t, client, Options{StateDir: dir})
	startDriver(t, m, []string{drapb.DRAPluginService})
	mustPrepare(t, m, pod)
	m.Stop()

	blob, err := os.ReadFile(filepath.Join(dir, state.CheckpointFileName))
	if err != nil {
		t.Fatal(err)
	}
	if want := managerCheckpoint(t); string(blob) != want {
		t.Errorf("checkpoint:\n got %s\nwant %s", blob, want)
	}

	restarted := newTestManager(t, client, Options{StateDir: dir})
	d, _, _ := startDriver(t, restarted, []string{drapb.DRAPluginService})
	if !restarted.PodMightNeedToUnprepareResources(pod.UID) {
		t.Error("the restarted manager forgot the pod's claim")
	}
	if got := cdiDevices(t, restarted, pod, 0); !slices.Equal(got, []string{"example.com/gpu=c-req"}) {
		t.Errorf("CDI devices after restart = %q", got)
	}
	// As upstream's, a restored claim is not trusted to be prepared: a pod sync that
	// prepares again calls the (idempotent) driver once more.
	mustPrepare(t, restarted, pod)
	mustPrepare(t, restarted, pod)
	if prepared, _ := d.calls(claim.UID); prepared != 1 {
		t.Errorf("NodePrepareResources calls after restart = %d, want 1", prepared)
	}
	mustUnprepare(t, restarted, pod)
	if _, released := d.calls(claim.UID); released != 1 {
		t.Errorf("NodeUnprepareResources calls after restart = %d, want 1", released)
	}
}

func TestReadsUpstreamCheckpoint(t *testing.T) {
	// A file written by upstream's kubelet (its checkpointer_test.go fixture).
	const upstream = `{"Data":"{\"kind\":\"DRACheckpoint\",\"apiVersion\":\"checkpoint.dra.kubelet.k8s.io/v1\",\"ClaimInfoStateList\":[{\"ClaimUID\":\"067798be-454e-4be4-9047-1aa06aea63f7\",\"ClaimName\":\"example\",\"Namespace\":\"default\",\"PodUIDs\":{\"139cdb46-f989-4f17-9561-ca10cfb509a6\":{}},\"DriverState\":{\"test-driver.cdi.k8s.io\":{\"Devices\":[{\"PoolName\":\"worker-1\",\"DeviceName\":\"dev-1\",\"ShareID\":null,\"RequestNames\":[\"test request\"],\"CDIDeviceIDs\":[\"example.com/example=cdi-example\"]}]}}}]}","Checksum":2570581864}`
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, state.CheckpointFileName), []byte(upstream), 0o600); err != nil {
		t.Fatal(err)
	}
	m := newTestManager(t, nil, Options{StateDir: dir})
	pod := podWithClaim("p", "example")
	pod.UID = "139cdb46-f989-4f17-9561-ca10cfb509a6"
	if !m.PodMightNeedToUnprepareResources(pod.UID) {
		t.Error("pod of upstream's checkpoint unknown")
	}
	if got := cdiDevices(t, m, pod, 0); !slices.Equal(got, []string{"example.com/example=cdi-example"}) {
		t.Errorf("CDI devices = %q", got)
	}

	corrupt := strings.Replace(upstream, "2570581864", "2570581865", 1)
	if err := os.WriteFile(filepath.Join(dir, state.CheckpointFileName), []byte(corrupt), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := New(Options{StateDir: dir})
	if err == nil || err.Error() != "create ResourceClaim cache: failed to get checkpoint dra_manager_state: checkpoint is corrupted" {
		t.Errorf("corrupt checkpoint: err = %v", err)
	}
}

func TestReconcileUnpreparesInactivePods(t *testing.T) {
	pod := podWithClaim("p", "c")
	claim := allocatedClaim("c", []string{"req"}, pod)
	m := newTestManager(t, fakeClient(claim), Options{ReconcilePeriod: 10 * time.Millisecond})
	d, _, _ := startDriver(t, m, []string{drapb.DRAPluginService})
	mustPrepare(t, m, pod)

	var ready, active atomic.Bool
	var checks atomic.Int32
	active.Store(true)
	activePods := func() []*v1.Pod {
		if active.Load() {
			return []*v1.Pod{pod}
		}
		return nil
	}
	sourcesReady := func() bool {
		checks.Add(1)
		return ready.Load()
	}
	if err := m.Start(context.Background(), activePods, sourcesReady); err != nil {
		t.Fatal(err)
	}
	// Not ready: a pod missing from the list may just not be known yet.
	active.Store(false)
	eventually(t, "a few reconciles", func() bool { return checks.Load() >= 3 })
	if _, released := d.calls(claim.UID); released != 0 {
		t.Fatal("unprepared before the sources were ready")
	}
	active.Store(true)
	ready.Store(true)
	n := checks.Load()
	eventually(t, "a few reconciles", func() bool { return checks.Load() >= n+3 })
	if _, released := d.calls(claim.UID); released != 0 {
		t.Fatal("unprepared an active pod's claim")
	}
	active.Store(false)
	eventually(t, "the gone pod's claim to be unprepared", func() bool {
		_, released := d.calls(claim.UID)
		return released == 1 && !m.PodMightNeedToUnprepareResources(pod.UID)
	})
}

func TestUnprepareRetriedWhenDriverIsGone(t *testing.T) {
	pod, other := podWithClaim("p", "c"), podWithClaim("other", "c")
	claim := allocatedClaim("c", []string{"req"}, pod, other)
	m := newTestManager(t, fakeClient(claim), Options{})
	_, endpoint, _ := startDriver(t, m, []string{drapb.DRAPluginService})
	mustPrepare(t, m, pod)
	m.PluginHandler().DeRegisterPlugin(context.Background(), testDriver, endpoint)

	err := m.UnprepareResources(context.Background(), pod)
	if err == nil || err.Error() != "unprepare dynamic resources: DRA driver gpu.example.com is not registered" {
		t.Fatalf("err = %v", err)
	}
	if !m.PodMightNeedToUnprepareResources(pod.UID) {
		t.Error("claim forgotten although not unprepared")
	}
	d, _, _ := startDriver(t, m, []string{drapb.DRAPluginService})
	err = m.PrepareResources(context.Background(), other)
	if err == nil || err.Error() != "prepare dynamic resources: ResourceClaim c is being unprepared" {
		t.Errorf("preparing a claim being unprepared: err = %v", err)
	}
	mustUnprepare(t, m, pod)
	if _, released := d.calls(claim.UID); released != 1 || m.PodMightNeedToUnprepareResources(pod.UID) {
		t.Error("retry did not unprepare")
	}
	mustPrepare(t, m, other)
}

func TestClaimReplacedUnderTheSameName(t *testing.T) {
	pod, next := podWithClaim("p", "c"), podWithClaim("next", "c")
	claim := allocatedClaim("c", []string{"req"}, pod)
	client := fakeClient(claim)
	m := newTestManager(t, client, Options{})
	startDriver(t, m, []string{drapb.DRAPluginService})
	mustPrepare(t, m, pod)
	// The pod was force-deleted and a new claim of the same name created.
	replacement := allocatedClaim("c", []string{"req"}, next)
	replacement.UID = "uid-c2"
	if _, err := client.ResourceV1().ResourceClaims(testNS).Update(context.Background(), replacement, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	err := m.PrepareResources(context.Background(), next)
	if err == nil || err.Error() != "prepare dynamic resources: old ResourceClaim with same name c and different UID uid-c still exists (previous pod force-deleted?!)" {
		t.Errorf("err = %v", err)
	}
}

func TestOptionalNodeOperations(t *testing.T) {
	pod := podWithClaim("p", "c")
	claim := allocatedClaim("c", []string{"req"}, pod)
	claim.Status.Allocation.Devices.Results[0].SkipNodeOperations = []resourceapi.SkipNodeOperation{resourceapi.SkipNodeOperationAll}
	m := newTestManager(t, fakeClient(claim), Options{OptionalNodeOperations: true})
	// No driver registered: none is needed.
	mustPrepare(t, m, pod)
	if got := cdiDevices(t, m, pod, 0); len(got) != 0 {
		t.Errorf("CDI devices = %q", got)
	}
	mustUnprepare(t, m, pod)
	if m.PodMightNeedToUnprepareResources(pod.UID) {
		t.Error("claim not released")
	}
	if got := counterValue(t, m, "dra_node_prepare_skips_total") + counterValue(t, m, "dra_node_unprepare_skips_total"); got != 2 {
		t.Errorf("skip counters sum = %v, want 2", got)
	}
}

func TestCommonSkips(t *testing.T) {
	prep, unprep, all := resourceapi.SkipNodeOperationNodePrepareResources, resourceapi.SkipNodeOperationNodeUnprepareResources, resourceapi.SkipNodeOperationAll
	results := []resourceapi.DeviceRequestAllocationResult{
		{Driver: "a", SkipNodeOperations: []resourceapi.SkipNodeOperation{all}},
		{Driver: "a", SkipNodeOperations: []resourceapi.SkipNodeOperation{prep}},
		{Driver: "b", SkipNodeOperations: []resourceapi.SkipNodeOperation{all}},
		{Driver: "c", SkipNodeOperations: []resourceapi.SkipNodeOperation{unprep}},
		{Driver: "c"},
	}
	got, err := driverStates(results, true)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got["a"].SkipNodeOperations, []resourceapi.SkipNodeOperation{prep}) ||
		!slices.Equal(got["b"].SkipNodeOperations, []resourceapi.SkipNodeOperation{all}) ||
		got["c"].SkipNodeOperations != nil {
		t.Errorf("driver states = %+v", got)
	}
}

func TestStandaloneWithoutClaims(t *testing.T) {
	m := newTestManager(t, nil, Options{})
	pod := podWithClaim("p", "c")
	pod.Spec.ResourceClaims = nil
	mustPrepare(t, m, pod)
	mustUnprepare(t, m, pod)
}

func TestPrepareCallTimeout(t *testing.T) {
	pod := podWithClaim("p", "c")
	m := newTestManager(t, fakeClient(allocatedClaim("c", []string{"req"}, pod)), Options{})
	d := newFakeDriver()
	d.hang = true
	endpoint := filepath.Join(socketDir(t), "dra.sock")
	serve(t, d, endpoint, serveOptions{})
	timeout := 50 * time.Millisecond
	if err := m.PluginHandler().RegisterPlugin(context.Background(), testDriver, endpoint, []string{drapb.DRAPluginService}, &timeout); err != nil {
		t.Fatal(err)
	}
	err := m.PrepareResources(context.Background(), pod)
	if err == nil || !strings.HasPrefix(err.Error(), "prepare dynamic resources: NodePrepareResources: rpc error: code = DeadlineExceeded") {
		t.Errorf("err = %v", err)
	}
}
