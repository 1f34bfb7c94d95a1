package deviceplugin

import (
	"errors"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/nodelet/nodelet/pkg/node/deviceplugin/checkpoint"
)

const gpu = "example.com/gpu"

// deviceIDs lists the container's devices of the resource.
func deviceIDs(m *Manager, podUID, containerName, resourceName string) []string {
	var ids []string
	for id := range m.GetDevices(podUID, containerName)[resourceName] {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

func wantDevices(t *testing.T, m *Manager, podUID, containerName string, want ...string) {
	t.Helper()
	if got := deviceIDs(m, podUID, containerName, gpu); !reflect.DeepEqual(got, want) {
		t.Errorf("devices of %s/%s = %v, want %v", podUID, containerName, got, want)
	}
}

func wantError(t *testing.T, err error, want string) {
	t.Helper()
	if err == nil || err.Error() != want {
		t.Errorf("error = %v, want %q", err, want)
	}
}

func allocationSamples(t *testing.T, resourceName string) uint64 {
	t.Helper()
	var m dto.Metric
	if err := AllocationDuration.WithLabelValues(resourceName).(prometheus.Histogram).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount()
}

// A regular init container's devices go to the containers after it; a sidecar keeps
// what it takes; the app container gets the rest of what it needs from free devices.
func TestAllocateReusesInitContainerDevices(t *testing.T) {
	env := newTestEnv(t)
	p := env.plugin("gpu.sock", gpu, nil, healthy("d1", "d2", "d3", "d4"))
	always := v1.ContainerRestartPolicyAlways
	sidecar := container("side", map[string]int64{gpu: 1})
	sidecar.RestartPolicy = &always
	pod := testPod("u1", []v1.Container{container("init", map[string]int64{gpu: 2}), sidecar},
		container("app", map[string]int64{gpu: 2}))
	env.setActive(pod)
	before := allocationSamples(t, gpu)

	if err := env.admit(pod); err != nil {
		t.Fatal(err)
	}
	wantDevices(t, env.m, "u1", "init", "d1", "d2")
	wantDevices(t, env.m, "u1", "side", "d1")
	wantDevices(t, env.m, "u1", "app", "d2", "d3")
	want := [][]string{{"d1", "d2"}, {"d1"}, {"d2", "d3"}}
	if got := p.allocateCalls(); !reflect.DeepEqual(got, want) {
		t.Errorf("plugin Allocate calls = %v, want %v", got, want)
	}
	if got := allocationSamples(t, gpu) - before; got != 3 {
		t.Errorf("allocation durations observed = %d, want 3", got)
	}

	// Only d4 is left.
	other := testPod("u2", nil, container("app", map[string]int64{gpu: 2}))
	env.setActive(pod, other)
	wantError(t, env.admit(other), "requested number of devices unavailable for example.com/gpu. Requested: 2, Available: 1")

	// The allocations are checkpointed.
	entries, registered, err := checkpoint.Read(env.dir)
	if err != nil || len(entries) != 3 || len(registered[gpu]) != 4 {
		t.Errorf("checkpoint: %d entries, registered %v, err %v; want 3 entries and 4 devices", len(entries), registered, err)
	}
}

// A container allocated again (it restarted) keeps its devices without calling the
// plugin; a changed request is refused.
func TestAllocateAgainKeepsDevices(t *testing.T) {
	env := newTestEnv(t)
	p := env.plugin("gpu.sock", gpu, nil, healthy("d1", "d2", "d3"))
	pod := testPod("u1", nil, container("app", map[string]int64{gpu: 2}))
	env.setActive(pod)
	if err := env.admit(pod); err != nil {
		t.Fatal(err)
	}
	if err := env.admit(pod); err != nil {
		t.Fatal(err)
	}
	wantDevices(t, env.m, "u1", "app", "d1", "d2")
	if got := len(p.allocateCalls()); got != 1 {
		t.Errorf("plugin Allocate calls = %d, want 1", got)
	}
	grown := testPod("u1", nil, container("app", map[string]int64{gpu: 3}))
	wantError(t, env.admit(grown), `pod "u1" container "app" changed request for resource "example.com/gpu" from 2 to 3`)
}

// Devices of pods no longer active are freed before picking.
func TestAllocateFreesInactivePods(t *testing.T) {
	env := newTestEnv(t)
	env.plugin("gpu.sock", gpu, nil, healthy("d1", "d2"))
	first := testPod("u1", nil, container("app", map[string]int64{gpu: 2}))
	second := testPod("u2", nil, container("app", map[string]int64{gpu: 2}))
	env.setActive(first, second)
	if err := env.admit(first); err != nil {
		t.Fatal(err)
	}
	wantError(t, env.admit(second), "requested number of devices unavailable for example.com/gpu. Requested: 2, Available: 0")

	env.setActive(second)
	if err := env.admit(second); err != nil {
		t.Fatalf("Allocate once the first pod is gone: %v", err)
	}
	wantDevices(t, env.m, "u2", "app", "d1", "d2")
	if got := env.m.GetDevices("u1", "app"); got != nil {
		t.Errorf("devices of the gone pod = %v, want none", got)
	}

	env.setActive()
	env.m.UpdateAllocatedDevices()
	if got := env.m.GetDevices("u2", "app"); got != nil {
		t.Errorf("devices after UpdateAllocatedDevices = %v, want none", got)
	}
}

// Resources no plugin serves are left to the scheduler and admission's resource fit, as
// are extended resources the scheduler mapped to a DRA claim.
func TestAllocateSkipsOtherResources(t *testing.T) {
	env := newTestEnv(t)
	p := env.plugin("gpu.sock", gpu, nil, healthy("d1"))
	pod := testPod("u1", nil, container("app", map[string]int64{"example.com/other": 1, gpu: 1}))
	pod.Status.ExtendedResourceClaimStatus = &v1.PodExtendedResourceClaimStatus{
		RequestMappings:   []v1.ContainerExtendedResourceRequest{{ContainerName: "app", ResourceName: gpu, RequestName: "r"}},
		ResourceClaimName: "claim",
	}
	env.setActive(pod)
	if err := env.admit(pod); err != nil {
		t.Fatal(err)
	}
	if calls := p.allocateCalls(); len(calls) != 0 {
		t.Errorf("plugin Allocate calls = %v, want none", calls)
	}
}

func TestAllocateWithoutHealthyDevices(t *testing.T) {
	env := newTestEnv(t)
	env.plugin("gpu.sock", gpu, nil, []*pluginapi.Device{device("d1", pluginapi.Unhealthy)})
	pod := testPod("u1", nil, container("app", map[string]int64{gpu: 1}))
	env.setActive(pod)
	err := env.admit(pod)
	wantError(t, err, "no healthy devices present; cannot allocate unhealthy devices example.com/gpu")
	if got, want := AdmissionMessage(err), "Allocate failed due to no healthy devices present; cannot allocate unhealthy devices example.com/gpu, which is unexpected"; got != want {
		t.Errorf("admission message = %q, want %q", got, want)
	}
}

// A failed plugin Allocate releases the devices picked for it.
func TestAllocateFailureReleasesDevices(t *testing.T) {
	env := newTestEnv(t)
	p := env.plugin("gpu.sock", gpu, nil, healthy("d1", "d2"))
	p.mu.Lock()
	p.allocErr = errors.New("device busy")
	p.mu.Unlock()
	pod := testPod("u1", nil, container("app", map[string]int64{gpu: 2}))
	env.setActive(pod)
	if err := env.admit(pod); err == nil || !strings.Contains(err.Error(), "device busy") {
		t.Fatalf("Allocate with a failing plugin = %v, want the plugin's error", err)
	}
	if err := env.admit(pod); err != nil {
		t.Fatalf("Allocate after the failure: %v", err)
	}
	wantDevices(t, env.m, "u1", "app", "d1", "d2")
}

// A plugin announcing GetPreferredAllocation chooses among the available devices.
func TestPreferredAllocation(t *testing.T) {
	env := newTestEnv(t)
	p := env.plugin("gpu.sock", gpu, &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: true},
		[]*pluginapi.Device{device("d1", pluginapi.Healthy), device("d2", pluginapi.Healthy, 0), device("d3", pluginapi.Healthy, 1), device("d4", pluginapi.Healthy, 0, 1)})
	p.prefer = []string{"d4", "d3"}
	pod := testPod("u1", nil, container("app", map[string]int64{gpu: 2}))
	env.setActive(pod)
	if err := env.admit(pod); err != nil {
		t.Fatal(err)
	}
	wantDevices(t, env.m, "u1", "app", "d3", "d4")
	want := &pluginapi.ContainerPreferredAllocationRequest{AvailableDeviceIDs: []string{"d1", "d2", "d3", "d4"}, AllocationSize: 2}
	if len(p.preferred) != 1 || !reflect.DeepEqual(p.preferred[0].AvailableDeviceIDs, want.AvailableDeviceIDs) ||
		len(p.preferred[0].MustIncludeDeviceIDs) != 0 || p.preferred[0].AllocationSize != 2 {
		t.Errorf("GetPreferredAllocation requests = %v, want %v", p.preferred, want)
	}
	// The pod-resources view carries the devices' NUMA nodes.
	devs := env.m.GetDevices("u1", "app")[gpu]
	if nodes := devs["d4"].GetTopology().GetNodes(); len(nodes) != 2 || nodes[0].ID != 0 || nodes[1].ID != 1 {
		t.Errorf("NUMA nodes of d4 = %v, want 0 and 1", nodes)
	}
	// The preferred devices are not there any more: the plugin's answer is ignored.
	second := testPod("u2", nil, container("app", map[string]int64{gpu: 1}))
	env.setActive(pod, second)
	if err := env.admit(second); err != nil {
		t.Fatal(err)
	}
	wantDevices(t, env.m, "u2", "app", "d1")
}

// Admission raises allocatable to what is allocated for pods that hold devices.
func TestUpdatePluginResources(t *testing.T) {
	env := newTestEnv(t)
	env.plugin("gpu.sock", gpu, nil, healthy("d1", "d2"))
	pod := testPod("u1", nil, container("app", map[string]int64{gpu: 2}))
	env.setActive(pod)
	if err := env.admit(pod); err != nil {
		t.Fatal(err)
	}
	node := v1.ResourceList{v1.ResourceCPU: resource.MustParse("2")}
	got := env.m.UpdatePluginResources(pod, node)
	if q := got[gpu]; q.Value() != 2 || len(node) != 1 {
		t.Errorf("allocatable = %v (given %v), want %s: 2 in a copy", got, node, gpu)
	}
	other := testPod("u2", nil)
	if got := env.m.UpdatePluginResources(other, node); len(got) != 1 {
		t.Errorf("allocatable for a pod without devices = %v, want unchanged", got)
	}
}

// A device changing health is reported for the pods holding it, and shows in their
// containers' allocatedResourcesStatus.
func TestDeviceHealthUpdates(t *testing.T) {
	env := newTestEnv(t)
	p := env.plugin("gpu.sock", gpu, nil, healthy("d1", "d2"))
	pod := testPod("u1", nil, container("app", map[string]int64{gpu: 1}))
	env.setActive(pod)
	if err := env.admit(pod); err != nil {
		t.Fatal(err)
	}
	p.setDevices([]*pluginapi.Device{device("d1", pluginapi.Unhealthy), device("d2", pluginapi.Healthy)})
	update := <-env.m.Updates()
	if !reflect.DeepEqual(update.PodUIDs, []string{"u1"}) {
		t.Errorf("update = %v, want pod u1", update)
	}
	status := &v1.PodStatus{ContainerStatuses: []v1.ContainerStatus{{Name: "app"}}}
	env.m.UpdateAllocatedResourcesStatus(pod, status)
	want := []v1.ResourceStatus{{Name: gpu, Resources: []v1.ResourceHealth{{ResourceID: "d1", Health: v1.ResourceHealthStatusUnhealthy}}}}
	if got := status.ContainerStatuses[0].AllocatedResourcesStatus; !reflect.DeepEqual(got, want) {
		t.Errorf("allocatedResourcesStatus = %v, want %v", got, want)
	}
}

// The container's options merge its plugins' answers in resource name order; the first
// setting of a key wins. Plugins asking for PreStartContainer get it with the devices.
func TestDeviceRunContainerOptions(t *testing.T) {
	env := newTestEnv(t)
	gpuPlugin := startFakePlugin(t, env.dir, "gpu.sock", gpu, &pluginapi.DevicePluginOptions{PreStartRequired: true}, healthy("g1"))
	gpuPlugin.allocResp = func(ids []string) *pluginapi.ContainerAllocateResponse {
		return &pluginapi.ContainerAllocateResponse{
			Envs:        map[string]string{"GPU": strings.Join(ids, ","), "SHARED": "gpu"},
			Mounts:      []*pluginapi.Mount{{ContainerPath: "/usr/lib/gpu", HostPath: "/opt/gpu/lib", ReadOnly: true}},
			Devices:     []*pluginapi.DeviceSpec{{ContainerPath: "/dev/gpu0", HostPath: "/dev/nvidia0", Permissions: "rw"}},
			Annotations: map[string]string{"gpu.example.com/id": "g1"},
			CdiDevices:  []*pluginapi.CDIDevice{{Name: "example.com/gpu=g1"}},
		}
	}
	env.register(gpuPlugin, 1)
	nicPlugin := startFakePlugin(t, env.dir, "nic.sock", "example.com/nic", nil, healthy("n1"))
	nicPlugin.allocResp = func([]string) *pluginapi.ContainerAllocateResponse {
		return &pluginapi.ContainerAllocateResponse{
			Envs:       map[string]string{"NIC": "n1", "SHARED": "nic"},
			Mounts:     []*pluginapi.Mount{{ContainerPath: "/usr/lib/gpu", HostPath: "/elsewhere"}},
			Devices:    []*pluginapi.DeviceSpec{{ContainerPath: "/dev/nic", HostPath: "/dev/nic0", Permissions: "r"}},
			CdiDevices: []*pluginapi.CDIDevice{{Name: "example.com/gpu=g1"}, {Name: "example.com/nic=n1"}},
		}
	}
	env.register(nicPlugin, 1)
	pod := testPod("u1", nil, container("app", map[string]int64{gpu: 1, "example.com/nic": 1}), container("plain", nil))
	env.setActive(pod)
	if err := env.admit(pod); err != nil {
		t.Fatal(err)
	}

	opts, err := env.m.GetDeviceRunContainerOptions(env.ctx, pod, &pod.Spec.Containers[0])
	if err != nil {
		t.Fatal(err)
	}
	want := &DeviceRunContainerOptions{
		Envs:        []EnvVar{{"GPU", "g1"}, {"SHARED", "gpu"}, {"NIC", "n1"}},
		Mounts:      []Mount{{Name: "/usr/lib/gpu", ContainerPath: "/usr/lib/gpu", HostPath: "/opt/gpu/lib", ReadOnly: true}},
		Devices:     []DeviceInfo{{PathOnHost: "/dev/nvidia0", PathInContainer: "/dev/gpu0", Permissions: "rw"}, {PathOnHost: "/dev/nic0", PathInContainer: "/dev/nic", Permissions: "r"}},
		Annotations: []Annotation{{"gpu.example.com/id", "g1"}},
		CDIDevices:  []CDIDevice{{"example.com/gpu=g1"}, {"example.com/nic=n1"}},
	}
	if !reflect.DeepEqual(opts, want) {
		t.Errorf("options =\n%+v\nwant\n%+v", opts, want)
	}
	if got := gpuPlugin.preStartCalls(); !reflect.DeepEqual(got, [][]string{{"g1"}}) {
		t.Errorf("gpu PreStartContainer calls = %v, want [[g1]]", got)
	}
	if got := nicPlugin.preStartCalls(); len(got) != 0 {
		t.Errorf("nic PreStartContainer calls = %v, want none", got)
	}
	if opts, err := env.m.GetDeviceRunContainerOptions(env.ctx, pod, &pod.Spec.Containers[1]); err != nil || opts != nil {
		t.Errorf("options of a container without devices = %v, %v; want none", opts, err)
	}
}

// A container of an active pod without an allocation (kubelet restarted before
// checkpointing it) is allocated when it starts; one of an inactive pod is not.
func TestRunContainerOptionsAllocatesMissing(t *testing.T) {
	env := newTestEnv(t)
	p := env.plugin("gpu.sock", gpu, nil, healthy("d1"))
	gone := testPod("gone", nil, container("app", map[string]int64{gpu: 1}))
	if opts, err := env.m.GetDeviceRunContainerOptions(env.ctx, gone, &gone.Spec.Containers[0]); err != nil || opts != nil {
		t.Errorf("options of an inactive pod = %v, %v; want none", opts, err)
	}
	pod := testPod("u1", nil, container("app", map[string]int64{gpu: 1}))
	env.setActive(pod)
	opts, err := env.m.GetDeviceRunContainerOptions(env.ctx, pod, &pod.Spec.Containers[0])
	if err != nil {
		t.Fatal(err)
	}
	if want := []EnvVar{{"DEVICES", "d1"}}; opts == nil || !reflect.DeepEqual(opts.Envs, want) {
		t.Errorf("options = %+v, want envs %v", opts, want)
	}
	if got := len(p.allocateCalls()); got != 1 {
		t.Errorf("plugin Allocate calls = %d, want 1", got)
	}
}
