package kuberuntime

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/pkg/runtime/container"
)

// requirements builds resources from "cpuRequest cpuLimit memoryRequest memoryLimit"
// ("-" for none).
func requirements(spec string) v1.ResourceRequirements {
	f := strings.Fields(spec)
	r := v1.ResourceRequirements{Requests: v1.ResourceList{}, Limits: v1.ResourceList{}}
	set := func(list v1.ResourceList, name v1.ResourceName, v string) {
		if v != "-" {
			list[name] = resource.MustParse(v)
		}
	}
	set(r.Requests, v1.ResourceCPU, f[0])
	set(r.Limits, v1.ResourceCPU, f[1])
	set(r.Requests, v1.ResourceMemory, f[2])
	set(r.Limits, v1.ResourceMemory, f[3])
	return r
}

func withResources(c v1.Container, spec string) v1.Container {
	c.Resources = requirements(spec)
	return c
}

// runningStatus is a pod status in which every container of pod runs.
func runningStatus(pod *v1.Pod) *container.PodStatus {
	s := &container.PodStatus{SandboxStatuses: []*runtimeapi.PodSandboxStatus{sandbox("sb1", 0)}}
	for i := range pod.Spec.Containers {
		s.ContainerStatuses = append(s.ContainerStatuses, cs(&pod.Spec.Containers[i], running, 0))
	}
	return s
}

func TestComputeResizeActionOrdersDecreasesFirst(t *testing.T) {
	m := pureManager()
	pod := newPod("p",
		withResources(ctr("a"), "1 1 64Mi 64Mi"),
		withResources(ctr("b"), "500m 500m 256Mi 256Mi"),
		withResources(ctr("c"), "250m 250m 64Mi 64Mi"))
	actuated := map[string]string{
		"a": "500m 500m 128Mi 128Mi", // memory down, CPU up
		"b": "500m 500m 64Mi 64Mi",   // memory up
		"c": "1 1 64Mi 64Mi",         // CPU down
	}
	for name, spec := range actuated {
		if err := m.actuated.SetContainer(pod.UID, name, requirements(spec)); err != nil {
			t.Fatal(err)
		}
	}
	a := m.computePodActions(pod, runningStatus(pod))
	want := []string{"memory/a", "memory/b", "cpu/c", "cpu/a"}
	if got := updateOrder(a); !reflect.DeepEqual(got, want) {
		t.Fatalf("updates %v, want %v", got, want)
	}
	if len(a.ContainersToKill) != 0 || len(a.ContainersToStart) != 0 || a.UpdatePodResources {
		t.Fatalf("an in-place resize killed or restarted something: %v", a)
	}
	// The CPU update of a starts from the memory its memory update applies.
	mem, cpu := a.ContainersToUpdate[v1.ResourceMemory][0], a.ContainersToUpdate[v1.ResourceCPU][1]
	if mem.current != cpu.current {
		t.Fatal("the memory and CPU updates of a container do not share its current resources")
	}
}

func TestComputeResizeActionRestartPolicy(t *testing.T) {
	m := pureManager()
	pod := newPod("p", withResources(ctr("a"), "500m 500m 256Mi 256Mi"))
	pod.Spec.Containers[0].ResizePolicy = []v1.ContainerResizePolicy{
		{ResourceName: v1.ResourceMemory, RestartPolicy: v1.RestartContainer},
		{ResourceName: v1.ResourceCPU, RestartPolicy: v1.NotRequired},
	}
	status := runningStatus(pod)

	// Only CPU changed: in place, whatever memory's policy.
	if err := m.actuated.SetContainer(pod.UID, "a", requirements("250m 250m 256Mi 256Mi")); err != nil {
		t.Fatal(err)
	}
	a := m.computePodActions(pod, status)
	if got := updateOrder(a); !reflect.DeepEqual(got, []string{"cpu/a"}) || len(a.ContainersToKill) != 0 {
		t.Fatalf("CPU resize: updates %v, kills %d", got, len(a.ContainersToKill))
	}

	// Memory changed: the container restarts and the pod's cgroup follows.
	if err := m.actuated.SetContainer(pod.UID, "a", requirements("250m 250m 128Mi 128Mi")); err != nil {
		t.Fatal(err)
	}
	a = m.computePodActions(pod, status)
	kill, ok := a.ContainersToKill[status.ContainerStatuses[0].ID]
	if !ok || kill.message != "Container a resize requires restart" {
		t.Fatalf("memory resize with RestartContainer: kills %v", a.ContainersToKill)
	}
	if !reflect.DeepEqual(a.ContainersToStart, []int{0}) || !a.UpdatePodResources || len(a.ContainersToUpdate) != 0 {
		t.Fatalf("memory resize with RestartContainer: %v", a)
	}
}

func TestComputeResizeActionLeavesAlone(t *testing.T) {
	m := pureManager()
	pod := newPod("p", withResources(ctr("a"), "500m 500m 128Mi 128Mi"))
	if a := m.computePodActions(pod, runningStatus(pod)); a.needsResize() {
		t.Fatalf("no actuated record: want no resize, got %v", a)
	}
	if err := m.actuated.SetContainer(pod.UID, "a", requirements("500m 500m 128Mi 128Mi")); err != nil {
		t.Fatal(err)
	}
	if a := m.computePodActions(pod, runningStatus(pod)); a.needsResize() {
		t.Fatalf("actuated equal to allocated: want no resize, got %v", a)
	}
	// A container that exited restarts with its new resources: no in-place update, but
	// the pod's cgroup must follow.
	if err := m.actuated.SetContainer(pod.UID, "a", requirements("250m 250m 128Mi 128Mi")); err != nil {
		t.Fatal(err)
	}
	status := runningStatus(pod)
	status.ContainerStatuses[0].State = exited
	a := m.computePodActions(pod, status)
	if len(a.ContainersToUpdate) != 0 || !a.UpdatePodResources || !reflect.DeepEqual(a.ContainersToStart, []int{0}) {
		t.Fatalf("exited resized container: %v", a)
	}
}

// fakeResizer stands for the container manager: it logs around each resource's
// container updates, or fails before any.
type fakeResizer struct {
	log   *[]string
	err   error
	calls int
}

func (r *fakeResizer) ResizePod(pod *v1.Pod, update func(v1.ResourceName) error) error {
	r.calls++
	if r.err != nil {
		return r.err
	}
	for _, name := range []v1.ResourceName{v1.ResourceMemory, v1.ResourceCPU} {
		*r.log = append(*r.log, "pod cgroup before "+string(name))
		if err := update(name); err != nil {
			return err
		}
		*r.log = append(*r.log, "pod cgroup after "+string(name))
	}
	return nil
}

// resizeEnv is a test env with CFS quotas, a fake resizer and a running pod "app".
func resizeEnv(t *testing.T, spec string) (*testEnv, *fakeResizer, *v1.Pod, string) {
	t.Helper()
	log := &[]string{}
	resizer := &fakeResizer{log: log}
	env := newTestEnv(t, func(o *Options) { o.CPUCFSQuota = true; o.PodResizer = resizer })
	env.rt.log = log
	pod := newPod("resize", withResources(ctr("app"), spec))
	if r := syncPod(t, env, pod, nil); r.Error() != nil {
		t.Fatal(r.Error())
	}
	status := env.podStatus(t, pod)
	if len(status.ContainerStatuses) != 1 {
		t.Fatalf("containers: %v", status.ContainerStatuses)
	}
	*log = nil
	return env, resizer, pod, status.ContainerStatuses[0].ID.ID
}

func resizeResult(r *container.PodSyncResult) *container.SyncResult {
	for _, sr := range r.SyncResults {
		if sr.Action == container.ResizePodInPlace {
			return sr
		}
	}
	return nil
}

func TestSyncPodResizesCPUInPlace(t *testing.T) {
	env, _, pod, id := resizeEnv(t, "250m 500m 64Mi 128Mi")
	if env.m.IsPodResizeInProgress(pod, env.podStatus(t, pod)) {
		t.Fatal("a pod just started reports a resize in progress")
	}
	resized := pod.DeepCopy()
	resized.Spec.Containers[0].Resources.Limits[v1.ResourceCPU] = resource.MustParse("800m")
	if !env.m.IsPodResizeInProgress(resized, env.podStatus(t, pod)) {
		t.Fatal("allocated CPU limit differs from the actuated one: want a resize in progress")
	}

	r := syncPod(t, env, resized, nil)
	if rr := resizeResult(r); rr == nil || rr.Error != nil {
		t.Fatalf("resize result %+v", rr)
	}
	if started := startedNames(r); len(started) != 0 {
		t.Fatalf("an in-place resize started %v", started)
	}
	want := []string{
		"pod cgroup before memory", "pod cgroup after memory",
		"pod cgroup before cpu", "update " + id + " mem=134217728 quota=80000 shares=256", "pod cgroup after cpu",
	}
	if !reflect.DeepEqual(*env.rt.log, want) {
		t.Fatalf("resize steps\n got %q\nwant %q", *env.rt.log, want)
	}
	status := env.podStatus(t, resized)
	if len(status.ContainerStatuses) != 1 || status.ContainerStatuses[0].ID.ID != id {
		t.Fatalf("the container was replaced: %v", status.ContainerStatuses)
	}
	if env.m.IsPodResizeInProgress(resized, status) {
		t.Fatal("resize still in progress after it was applied")
	}
	if got, _ := env.m.ActuatedContainerResources(resized.UID, "app"); got.Limits.Cpu().MilliValue() != 800 {
		t.Fatalf("actuated CPU limit %v, want 800m", got.Limits.Cpu())
	}
	if r := syncPod(t, env, resized, nil); resizeResult(r) != nil {
		t.Fatalf("a resized pod is resized again: %+v", r.SyncResults)
	}
}

func TestSyncPodRefusesMemoryLimitBelowUsage(t *testing.T) {
	env, resizer, pod, id := resizeEnv(t, "250m 500m 64Mi 128Mi")
	setUsage := func(bytes uint64) {
		env.rt.Lock()
		defer env.rt.Unlock()
		env.rt.FakeContainerStats[id] = &runtimeapi.ContainerStats{Memory: &runtimeapi.MemoryUsage{UsageBytes: &runtimeapi.UInt64Value{Value: bytes}}}
	}
	setUsage(100 << 20)
	resized := pod.DeepCopy()
	resized.Spec.Containers[0].Resources.Limits[v1.ResourceMemory] = resource.MustParse("96Mi")

	rr := resizeResult(syncPod(t, env, resized, nil))
	want := `cannot decrease memory limits: attempting to set container "app" memory limit (100663296) below current usage (104857600)`
	if rr == nil || !errors.Is(rr.Error, container.ErrResizePodInPlace) || rr.Message != want {
		t.Fatalf("resize result %+v, want message %q", rr, want)
	}
	if resizer.calls != 0 || len(env.rt.takeUpdates()) != 0 {
		t.Fatal("a refused memory decrease changed something")
	}
	if !env.m.IsPodResizeInProgress(resized, env.podStatus(t, pod)) {
		t.Fatal("a refused resize is not in progress any more")
	}

	// Once the usage is below the new limit, the next sync applies it.
	setUsage(10 << 20)
	if rr := resizeResult(syncPod(t, env, resized, nil)); rr == nil || rr.Error != nil {
		t.Fatalf("resize result %+v", rr)
	}
	updates := env.rt.takeUpdates()
	if len(updates) != 1 || updates[0].resources.MemoryLimitInBytes != 96<<20 || updates[0].resources.CpuQuota != 50000 {
		t.Fatalf("updates %+v", updates)
	}
}

func TestSyncPodResizeErrorsAreRetried(t *testing.T) {
	env, _, pod, _ := resizeEnv(t, "250m 500m 64Mi 128Mi")
	env.rt.updateErr = errors.New("runtime refused")
	resized := pod.DeepCopy()
	resized.Spec.Containers[0].Resources.Requests[v1.ResourceCPU] = resource.MustParse("400m")

	rr := resizeResult(syncPod(t, env, resized, nil))
	if rr == nil || rr.Message != "runtime refused" {
		t.Fatalf("resize result %+v", rr)
	}
	if !env.m.IsPodResizeInProgress(resized, env.podStatus(t, pod)) {
		t.Fatal("a failed resize is recorded as applied")
	}
	env.rt.updateErr = nil
	if rr := resizeResult(syncPod(t, env, resized, nil)); rr == nil || rr.Error != nil {
		t.Fatalf("retry: resize result %+v", rr)
	}
	if updates := env.rt.takeUpdates(); len(updates) != 1 || updates[0].resources.CpuShares != 409 {
		t.Fatalf("retry: updates %+v", updates)
	}
}

func TestSyncPodRestartsContainerWhosePolicySaysSo(t *testing.T) {
	env, resizer, pod, id := resizeEnv(t, "250m 500m 64Mi 128Mi")
	resized := pod.DeepCopy()
	resized.Spec.Containers[0].ResizePolicy = []v1.ContainerResizePolicy{{ResourceName: v1.ResourceMemory, RestartPolicy: v1.RestartContainer}}
	resized.Spec.Containers[0].Resources.Limits[v1.ResourceMemory] = resource.MustParse("256Mi")

	r := syncPod(t, env, resized, nil)
	if rr := resizeResult(r); rr == nil || rr.Error != nil || resizer.calls != 1 {
		t.Fatalf("the pod's cgroup was not resized for the restart: %+v (%d calls)", rr, resizer.calls)
	}
	if updates := env.rt.takeUpdates(); len(updates) != 0 {
		t.Fatalf("a restarted container was updated in place: %+v", updates)
	}
	if started := startedNames(r); !reflect.DeepEqual(started, []string{"app"}) {
		t.Fatalf("started %v", started)
	}
	status := env.podStatus(t, resized)
	newest := status.FindContainerStatusByName("app")
	if newest.ID.ID == id || newest.State != container.ContainerStateRunning {
		t.Fatalf("the container was not restarted: %+v", newest)
	}
	if env.m.IsPodResizeInProgress(resized, status) {
		t.Fatal("the restarted container is not recorded with its new resources")
	}
}

func TestSyncPodResizesSidecarsAndPodLevelResources(t *testing.T) {
	env, resizer, _, _ := resizeEnv(t, "250m 500m 64Mi 128Mi")
	always := v1.ContainerRestartPolicyAlways
	p := newPod("plr", withResources(ctr("app"), "100m 200m 32Mi 64Mi"))
	p.Spec.InitContainers = []v1.Container{withResources(ctr("side"), "100m 200m 32Mi 64Mi")}
	p.Spec.InitContainers[0].RestartPolicy = &always
	p.Spec.Resources = &v1.ResourceRequirements{Limits: v1.ResourceList{v1.ResourceCPU: resource.MustParse("1")}}
	if r := syncPod(t, env, p, nil); r.Error() != nil {
		t.Fatal(r.Error())
	}
	env.rt.takeUpdates()
	resizer.calls = 0

	resized := p.DeepCopy()
	resized.Spec.Resources.Limits[v1.ResourceCPU] = resource.MustParse("2")
	resized.Spec.InitContainers[0].Resources.Limits[v1.ResourceCPU] = resource.MustParse("300m")
	if !env.m.IsPodResizeInProgress(resized, env.podStatus(t, p)) {
		t.Fatal("want a resize in progress")
	}
	if rr := resizeResult(syncPod(t, env, resized, nil)); rr == nil || rr.Error != nil || resizer.calls != 1 {
		t.Fatalf("resize result %+v (%d calls)", rr, resizer.calls)
	}
	if updates := env.rt.takeUpdates(); len(updates) != 1 || updates[0].resources.CpuQuota != 30000 {
		t.Fatalf("sidecar updates %+v", updates)
	}
	if env.m.IsPodResizeInProgress(resized, env.podStatus(t, p)) {
		t.Fatal("pod-level resources not recorded as applied")
	}
}

// A pod-level limit that changes resizes the containers that inherit it, and a resized
// container gets the CRI resources a container started with its new resources gets.
func TestSyncPodResizesPodLevelLimitsIntoContainers(t *testing.T) {
	env, _, _, _ := resizeEnv(t, "250m 500m 64Mi 128Mi")
	podLevel := requirements("1 2 256Mi 512Mi")
	p := newPod("plr", withResources(ctr("limited"), "250m 500m 64Mi 128Mi"), withResources(ctr("free"), "- - - -"))
	p.Spec.Resources = &podLevel
	if r := syncPod(t, env, p, nil); r.Error() != nil {
		t.Fatal(r.Error())
	}
	created := createdResources(t, env, p)
	for name, want := range map[string]string{
		"limited": "mem=134217728 quota=50000 shares=256",
		// No limits of its own: the pod's, with shares from its CPU limit.
		"free": "mem=536870912 quota=200000 shares=2048",
	} {
		if got := resourceString(created[name]); got != want {
			t.Errorf("%s created with %s, want %s", name, got, want)
		}
	}
	// Recorded as upstream records it: with the limits it inherits.
	if got, _ := env.m.ActuatedContainerResources(p.UID, "free"); got.Limits.Cpu().String() != "2" || got.Limits.Memory().String() != "512Mi" || len(got.Requests) != 0 {
		t.Fatalf("actuated resources of free: %+v", got)
	}
	env.rt.takeUpdates()
	*env.rt.log = nil

	resized := p.DeepCopy()
	resized.Spec.Resources.Limits = v1.ResourceList{v1.ResourceCPU: resource.MustParse("3"), v1.ResourceMemory: resource.MustParse("768Mi")}
	if !env.m.IsPodResizeInProgress(resized, env.podStatus(t, p)) {
		t.Fatal("want a resize in progress")
	}
	r := syncPod(t, env, resized, nil)
	if rr := resizeResult(r); rr == nil || rr.Error != nil {
		t.Fatalf("resize result %+v", rr)
	}
	if started := startedNames(r); len(started) != 0 {
		t.Fatalf("an in-place resize started %v", started)
	}
	updates := env.rt.takeUpdates()
	var got []string
	for _, u := range updates {
		got = append(got, resourceString(u.resources))
	}
	// Memory first, with the CPU it runs with; then CPU. The container with limits of its
	// own is left alone.
	want := []string{"mem=805306368 quota=200000 shares=2048", "mem=805306368 quota=300000 shares=3072"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("updates %q, want %q", got, want)
	}
	if env.m.IsPodResizeInProgress(resized, env.podStatus(t, resized)) {
		t.Fatal("resize still in progress after it was applied")
	}

	// The same pod started afresh gets exactly what the resize gave.
	fresh := resized.DeepCopy()
	fresh.Name, fresh.UID = "fresh", "fresh-uid"
	if r := syncPod(t, env, fresh, nil); r.Error() != nil {
		t.Fatal(r.Error())
	}
	if c := createdResources(t, env, fresh)["free"]; !proto.Equal(c, updates[1].resources) {
		t.Fatalf("started with\n%v\nresized to\n%v", c, updates[1].resources)
	}
}

// createdResources are the CRI resources the pod's running containers were created with.
func createdResources(t *testing.T, env *testEnv, pod *v1.Pod) map[string]*runtimeapi.LinuxContainerResources {
	t.Helper()
	out := map[string]*runtimeapi.LinuxContainerResources{}
	env.rt.Lock()
	defer env.rt.Unlock()
	for _, c := range env.rt.Containers {
		if c.Labels["io.kubernetes.pod.uid"] == string(pod.UID) && c.State == runtimeapi.ContainerState_CONTAINER_RUNNING {
			out[c.Metadata.Name] = c.LinuxResources
		}
	}
	return out
}

func resourceString(r *runtimeapi.LinuxContainerResources) string {
	return fmt.Sprintf("mem=%d quota=%d shares=%d", r.GetMemoryLimitInBytes(), r.GetCpuQuota(), r.GetCpuShares())
}
