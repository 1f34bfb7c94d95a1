package deviceplugin

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/nodelet/nodelet/pkg/node/deviceplugin/checkpoint"
)

// upstreamCheckpoint was written by upstream's kubelet (v1.37.2) for pod1/ctr1 holding
// dev1 (no NUMA node), dev2 and dev3 (NUMA node 0) of example.com/gpu, with an Allocate
// answer of env GPU=dev1, mount /h on /c read-only, device /dev/h as /dev/c rw,
// annotation a=b and CDI device vendor.com/gpu=0; example.com/gpu had 3 healthy devices
// and example.com/nic none.
const upstreamCheckpoint = `{"Data":{"PodDeviceEntries":[{"PodUID":"pod1","ContainerName":"ctr1","ResourceName":"example.com/gpu",` +
	`"DeviceIDs":{"-1":["dev1"],"0":["dev2","dev3"]},"AllocResp":"CgsKA0dQVRIEZGV2MRIKCgIvYxICL2gYARoUCgYvZGV2L2MSBi9kZXYvaBoCcnciBgoBYRIBYioSChB2ZW5kb3IuY29tL2dwdT0w"}],` +
	`"RegisteredDevices":{"example.com/gpu":["dev1","dev2","dev3"],"example.com/nic":[]}},"Checksum":116669118}`

// Starting from upstream's checkpoint, the container keeps its devices and its run
// options; the registered resources have no capacity until their plugins return.
func TestStartFromUpstreamCheckpoint(t *testing.T) {
	dir := shortTempDir(t)
	if err := os.WriteFile(filepath.Join(dir, checkpoint.FileName), []byte(upstreamCheckpoint), 0o600); err != nil {
		t.Fatal(err)
	}
	env := newTestEnvIn(t, dir, nil)
	pod := testPod("pod1", nil, container("ctr1", map[string]int64{gpu: 3}))
	env.setActive(pod)

	wantDevices(t, env.m, "pod1", "ctr1", "dev1", "dev2", "dev3")
	devs := env.m.GetDevices("pod1", "ctr1")[gpu]
	if devs["dev1"].Topology != nil || len(devs["dev2"].GetTopology().GetNodes()) != 1 {
		t.Errorf("NUMA nodes: dev1 %v, dev2 %v; want none and node 0", devs["dev1"].Topology, devs["dev2"].Topology)
	}
	assertCapacity(t, env.m, gpu, 0, 0)
	assertCapacity(t, env.m, "example.com/nic", 0, 0)

	opts, err := env.m.GetDeviceRunContainerOptions(env.ctx, pod, &pod.Spec.Containers[0])
	if err != nil {
		t.Fatal(err)
	}
	want := &DeviceRunContainerOptions{
		Envs:        []EnvVar{{"GPU", "dev1"}},
		Mounts:      []Mount{{Name: "/c", ContainerPath: "/c", HostPath: "/h", ReadOnly: true}},
		Devices:     []DeviceInfo{{PathOnHost: "/dev/h", PathInContainer: "/dev/c", Permissions: "rw"}},
		Annotations: []Annotation{{"a", "b"}},
		CDIDevices:  []CDIDevice{{"vendor.com/gpu=0"}},
	}
	if !reflect.DeepEqual(opts, want) {
		t.Errorf("options =\n%+v\nwant\n%+v", opts, want)
	}
}

// Across a kubelet restart: a container found running keeps its devices while sources
// are not ready; anything else needing the resource fails until the plugin registers
// again, after which the restored allocations are respected.
func TestRestartRecoversAllocations(t *testing.T) {
	dir := shortTempDir(t)
	first := newTestEnvIn(t, dir, nil)
	p := first.plugin("gpu.sock", gpu, nil, healthy("d1", "d2"))
	running := testPod("u1", nil, container("app", map[string]int64{gpu: 1}))
	first.setActive(running)
	if err := first.admit(running); err != nil {
		t.Fatal(err)
	}
	first.m.Stop(first.ctx)

	env := newTestEnvIn(t, dir, []ContainerKey{{PodUID: "u1", ContainerName: "app"}})
	newcomer := testPod("u2", nil, container("app", map[string]int64{gpu: 1}))
	env.setActive(running, newcomer)
	wantDevices(t, env.m, "u1", "app", "d1")
	assertCapacity(t, env.m, gpu, 0, 0)
	allocatable := env.m.UpdatePluginResources(running, v1.ResourceList{})
	if q := allocatable[gpu]; q.Value() != 1 {
		t.Errorf("allocatable for the running pod's admission = %v, want %s: 1", allocatable, gpu)
	}

	if err := env.admit(running); err != nil {
		t.Errorf("admission of the running container: %v", err)
	}
	wantError(t, env.admit(newcomer), "no healthy devices present; cannot allocate unhealthy devices example.com/gpu")
	env.setReady()
	wantError(t, env.admit(running), "no healthy devices present; cannot allocate unhealthy devices example.com/gpu")

	// The manager removed the plugin's socket at start: the plugin serves again and
	// registers, as plugins do when kubelet.sock is created.
	p.restart(t)
	env.register(p, 2)
	if err := env.admit(newcomer); err != nil {
		t.Fatalf("admission once the plugin is back: %v", err)
	}
	wantDevices(t, env.m, "u2", "app", "d2")
	wantDevices(t, env.m, "u1", "app", "d1")
}

// When the plugin does not come back within the grace period, its resource is deleted:
// a pod still holding its devices is refused, and its containers cannot start.
func TestRestartWithoutPlugin(t *testing.T) {
	dir := shortTempDir(t)
	first := newTestEnvIn(t, dir, nil)
	first.plugin("gpu.sock", gpu, nil, healthy("d1", "d2"))
	pod := testPod("u1", nil, container("app", map[string]int64{gpu: 1}))
	first.setActive(pod)
	if err := first.admit(pod); err != nil {
		t.Fatal(err)
	}
	first.m.Stop(first.ctx)

	env := newTestEnvIn(t, dir, nil)
	env.setActive(pod)
	env.clock.SetTime(env.clock.Now().Add(DefaultStopGracePeriod + time.Second))
	if _, _, deleted := env.m.GetCapacity(); len(deleted) != 1 || deleted[0] != gpu {
		t.Fatalf("deleted = %v, want [%s]", deleted, gpu)
	}
	wantError(t, env.admit(pod), "cannot allocate unregistered device example.com/gpu")
	_, err := env.m.GetDeviceRunContainerOptions(env.ctx, pod, &pod.Spec.Containers[0])
	wantError(t, err, "endpoint not found in cache for a registered resource: example.com/gpu")
}

// A plugin that asks for PreStartContainer is called with the devices even when they
// were restored from the checkpoint, once it registered again.
func TestPreStartAfterRestart(t *testing.T) {
	dir := shortTempDir(t)
	first := newTestEnvIn(t, dir, nil)
	opts := &pluginapi.DevicePluginOptions{PreStartRequired: true}
	p := first.plugin("gpu.sock", gpu, opts, healthy("d1"))
	pod := testPod("u1", nil, container("app", map[string]int64{gpu: 1}))
	first.setActive(pod)
	if err := first.admit(pod); err != nil {
		t.Fatal(err)
	}
	first.m.Stop(first.ctx)

	env := newTestEnvIn(t, dir, nil)
	env.setActive(pod)
	p.restart(t)
	env.register(p, 1)
	if _, err := env.m.GetDeviceRunContainerOptions(env.ctx, pod, &pod.Spec.Containers[0]); err != nil {
		t.Fatal(err)
	}
	if got := p.preStartCalls(); !reflect.DeepEqual(got, [][]string{{"d1"}}) {
		t.Errorf("PreStartContainer calls = %v, want [[d1]]", got)
	}
	if got := len(p.allocateCalls()); got != 1 {
		t.Errorf("Allocate calls = %d, want 1 (before the restart only)", got)
	}
}
