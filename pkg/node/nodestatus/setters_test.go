package nodestatus

import (
	"context"
	"errors"
	"net"
	goruntime "runtime"
	"slices"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/pkg/runtime/container"
)

func TestInitialNodeMetadata(t *testing.T) {
	opts := testOptions()
	opts.Hostname = "host-a"
	opts.NodeLabels = map[string]string{"example.com/rack": "r1", v1.LabelHostname: "override"}
	opts.RegisterWithTaints = []v1.Taint{{Key: "dedicated", Value: "db", Effect: v1.TaintEffectNoSchedule}}
	opts.ExternalCloudProvider = true
	opts.ProviderID = "aws:///zone/i-1"
	env := newTestController(t, opts, Deps{})
	node, err := env.c.InitialNode(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	wantLabels := map[string]string{
		v1.LabelHostname: "override", v1.LabelOSStable: goruntime.GOOS, v1.LabelArchStable: goruntime.GOARCH,
		"beta.kubernetes.io/os": goruntime.GOOS, "beta.kubernetes.io/arch": goruntime.GOARCH, "example.com/rack": "r1",
	}
	if !mapsEqual(node.Labels, wantLabels) {
		t.Errorf("labels = %v, want %v", node.Labels, wantLabels)
	}
	wantTaints := []v1.Taint{
		{Key: "dedicated", Value: "db", Effect: v1.TaintEffectNoSchedule},
		{Key: "node.cloudprovider.kubernetes.io/uninitialized", Value: "true", Effect: v1.TaintEffectNoSchedule},
	}
	if !slices.Equal(node.Spec.Taints, wantTaints) {
		t.Errorf("taints = %v, want %v", node.Spec.Taints, wantTaints)
	}
	if node.Spec.ProviderID != opts.ProviderID {
		t.Errorf("providerID = %q", node.Spec.ProviderID)
	}
	if node.Annotations[annotationControllerManagedAttach] != "true" {
		t.Errorf("annotations = %v, want the controller-managed attach/detach annotation", node.Annotations)
	}
}

func TestInitialNodeStatus(t *testing.T) {
	env := newTestController(t, testOptions(), Deps{})
	env.runtime.images = []container.Image{{ID: "sha256:a", RepoTags: []string{"busybox:1"}, Size: 100}}
	node, err := env.c.InitialNode(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	info := node.Status.NodeInfo
	want := v1.NodeSystemInfo{
		MachineID: "machine-1", SystemUUID: "uuid-1", BootID: "boot-1", KernelVersion: "6.1.0-test",
		OSImage: "Debian GNU/Linux 12 (bookworm)", ContainerRuntimeVersion: "containerd://1.7.24",
		KubeletVersion: "v1.37.2", OperatingSystem: goruntime.GOOS, Architecture: goruntime.GOARCH,
		RunningInUserNamespace: info.RunningInUserNamespace,
	}
	if info != want {
		t.Errorf("nodeInfo =\n%+v\nwant\n%+v", info, want)
	}
	if info.RunningInUserNamespace == nil || *info.RunningInUserNamespace {
		t.Errorf("runningInUserNamespace = %v, want false", info.RunningInUserNamespace)
	}
	if node.Status.DaemonEndpoints.KubeletEndpoint.Port != 10250 {
		t.Errorf("daemonEndpoints = %+v", node.Status.DaemonEndpoints)
	}
	wantAddrs := []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "192.0.2.10"}, {Type: v1.NodeHostName, Address: testNode}}
	if !slices.Equal(node.Status.Addresses, wantAddrs) {
		t.Errorf("addresses = %v, want %v", node.Status.Addresses, wantAddrs)
	}
	var types []v1.NodeConditionType
	for _, c := range node.Status.Conditions {
		types = append(types, c.Type)
	}
	wantTypes := []v1.NodeConditionType{v1.NodeMemoryPressure, v1.NodeDiskPressure, v1.NodePIDPressure, v1.NodeReady}
	if !slices.Equal(types, wantTypes) {
		t.Errorf("conditions = %v, want %v", types, wantTypes)
	}
	if len(node.Status.Images) != 1 || node.Status.Images[0].Names[0] != "busybox:1" {
		t.Errorf("images = %v", node.Status.Images)
	}
	wantEvents := []string{"NodeHasSufficientMemory", "NodeHasNoDiskPressure", "NodeHasSufficientPID"}
	if got := env.events.reasons(); !slices.Equal(got, wantEvents) {
		t.Errorf("events = %v, want %v", got, wantEvents)
	}
	ev := env.events.events[0]
	if ev.message != "Node node-a status is now: NodeHasSufficientMemory" || ev.ref.Kind != "Node" || ev.ref.Name != testNode || ev.ref.APIVersion != "v1" {
		t.Errorf("event = %+v", ev)
	}
	// A second build starts from the first one's conditions: nothing is recorded again.
	env.events.reset()
	if _, err := env.c.InitialNode(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := env.events.reasons(); len(got) != 0 {
		t.Errorf("second InitialNode recorded %v", got)
	}
}

func TestCapacityAndAllocatable(t *testing.T) {
	cases := []struct {
		name       string
		mutate     func(*Options, *MachineInfo)
		machineErr error
		capacity   map[v1.ResourceName]string
		alloc      map[v1.ResourceName]string
	}{{
		name: "hard eviction and huge pages",
		capacity: map[v1.ResourceName]string{"cpu": "4", "memory": "8Gi", "pods": "110", "ephemeral-storage": "100G",
			"hugepages-2Mi": "512Mi", "hugepages-1Gi": "0"},
		// memory: 8Gi - 100Mi - 512Mi of huge pages; storage: 10% as upstream's float32
		// fraction computes it (0.1f = 0.100000001490116...).
		alloc: map[v1.ResourceName]string{"cpu": "4", "memory": "7580Mi", "pods": "110",
			"ephemeral-storage": "89999999851", "hugepages-2Mi": "512Mi", "hugepages-1Gi": "0"},
	}, {
		name: "kube and system reserved",
		mutate: func(o *Options, _ *MachineInfo) {
			o.KubeReserved = v1.ResourceList{"cpu": q("100m"), "memory": q("256Mi"), "ephemeral-storage": q("1G")}
			o.SystemReserved = v1.ResourceList{"cpu": q("400m"), "memory": q("256Mi"), "pid": q("100")}
			o.EvictionHard = map[string]string{"memory.available": "0%", "nodefs.available": "1G"}
		},
		capacity: map[v1.ResourceName]string{"cpu": "4", "memory": "8Gi", "pods": "110", "ephemeral-storage": "100G",
			"hugepages-2Mi": "512Mi", "hugepages-1Gi": "0"},
		alloc: map[v1.ResourceName]string{"cpu": "3500m", "memory": "7Gi", "pods": "110",
			"ephemeral-storage": "98G", "hugepages-2Mi": "512Mi", "hugepages-1Gi": "0"},
	}, {
		name: "reservations larger than capacity clamp at zero",
		mutate: func(o *Options, m *MachineInfo) {
			o.KubeReserved = v1.ResourceList{"cpu": q("8"), "memory": q("16Gi")}
			m.HugePages = nil
		},
		capacity: map[v1.ResourceName]string{"cpu": "4", "memory": "8Gi", "pods": "110", "ephemeral-storage": "100G"},
		alloc:    map[v1.ResourceName]string{"cpu": "0", "memory": "0", "pods": "110", "ephemeral-storage": "89999999851"},
	}, {
		name: "percentage memory threshold and pods per core",
		mutate: func(o *Options, m *MachineInfo) {
			o.EvictionHard = map[string]string{"memory.available": "50%"}
			o.PodsPerCore = 10
			o.LocalStorageCapacityIsolation = false
			m.HugePages = nil
		},
		capacity: map[v1.ResourceName]string{"cpu": "4", "memory": "8Gi", "pods": "40"},
		alloc:    map[v1.ResourceName]string{"cpu": "4", "memory": "4Gi", "pods": "40"},
	}, {
		name:       "machine info unreadable",
		machineErr: errors.New("no /proc"),
		capacity:   map[v1.ResourceName]string{"cpu": "0", "memory": "0", "pods": "110"},
		alloc:      map[v1.ResourceName]string{"cpu": "0", "memory": "0", "pods": "110"},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			opts, machine := testOptions(), testMachine()
			if tc.mutate != nil {
				tc.mutate(&opts, machine)
			}
			env := newTestController(t, opts, Deps{Machine: func() (*MachineInfo, error) { return machine, tc.machineErr }})
			node := &v1.Node{}
			if err := env.c.setMachineInfo(context.Background(), node); err != nil {
				t.Fatal(err)
			}
			checkResources(t, "capacity", node.Status.Capacity, tc.capacity)
			checkResources(t, "allocatable", node.Status.Allocatable, tc.alloc)
		})
	}
}

func checkResources(t *testing.T, what string, got v1.ResourceList, want map[v1.ResourceName]string) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s = %v, want %v", what, got, want)
	}
	for name, w := range want {
		g, ok := got[name]
		if !ok || g.Cmp(q(w)) != 0 {
			t.Errorf("%s[%s] = %v, want %s", what, name, g.String(), w)
		}
	}
}

func TestCapacityFormatsAsUpstream(t *testing.T) {
	env := newTestController(t, testOptions(), Deps{})
	node := &v1.Node{}
	_ = env.c.setMachineInfo(context.Background(), node)
	// Upstream reports cpu in DecimalSI, memory and huge pages in BinarySI and ephemeral
	// storage in DecimalSI; the strings are what `kubectl get node -o yaml` shows.
	want := map[v1.ResourceName]string{"cpu": "4", "memory": "8Gi", "hugepages-2Mi": "512Mi", "ephemeral-storage": "100G", "pods": "110"}
	for name, w := range want {
		got := node.Status.Capacity[name]
		if got.String() != w {
			t.Errorf("capacity[%s] = %s, want %s", name, got.String(), w)
		}
	}
}

func TestExtendedResourcesSurviveAndStaleOnesLeaveAllocatable(t *testing.T) {
	env := newTestController(t, testOptions(), Deps{})
	node := &v1.Node{Status: v1.NodeStatus{
		Capacity:    v1.ResourceList{"example.com/gpu": q("2")},
		Allocatable: v1.ResourceList{"example.com/gpu": q("2"), "example.com/gone": q("1")},
	}}
	_ = env.c.setMachineInfo(context.Background(), node)
	if got := node.Status.Allocatable["example.com/gpu"]; got.Cmp(q("2")) != 0 {
		t.Errorf("allocatable gpu = %v, want 2", got.String())
	}
	if _, ok := node.Status.Allocatable["example.com/gone"]; ok {
		t.Error("an extended resource no longer in capacity stayed in allocatable")
	}
}

func TestRebootEventOnce(t *testing.T) {
	env := newTestController(t, testOptions(), Deps{})
	node := &v1.Node{Status: v1.NodeStatus{NodeInfo: v1.NodeSystemInfo{BootID: "boot-0"}}}
	_ = env.c.setMachineInfo(context.Background(), node)
	node.Status.NodeInfo.BootID = "boot-0"
	_ = env.c.setMachineInfo(context.Background(), node)
	if got := env.events.reasons(); !slices.Equal(got, []string{"Rebooted"}) {
		t.Fatalf("events = %v, want one Rebooted", got)
	}
	if e := env.events.events[0]; e.eventType != v1.EventTypeWarning || e.message != "Node node-a has been rebooted, boot id: boot-1" {
		t.Errorf("event = %+v", e)
	}
}

func TestReadyCondition(t *testing.T) {
	runtimeErr := errors.New("container runtime is down: connection refused")
	networkErr := errors.New("container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:Network plugin returns error: cni plugin not initialized")
	cases := []struct {
		name                string
		runtimeErr, netErr  error
		checks              []func() error
		capacity            v1.ResourceList
		wantStatus          v1.ConditionStatus
		wantReason, wantMsg string
	}{
		{name: "ready", wantStatus: v1.ConditionTrue, wantReason: "KubeletReady", wantMsg: "kubelet is posting ready status"},
		{name: "network not ready", netErr: networkErr, wantStatus: v1.ConditionFalse, wantReason: "KubeletNotReady", wantMsg: networkErr.Error()},
		{name: "runtime and network", runtimeErr: runtimeErr, netErr: networkErr, wantStatus: v1.ConditionFalse,
			wantReason: "KubeletNotReady", wantMsg: "[" + runtimeErr.Error() + ", " + networkErr.Error() + "]"},
		{name: "extra check", checks: []func() error{func() error { return nil }, func() error {
			return errors.New("PLEG is not healthy: pleg was last seen active 3m0s ago; threshold is 3m0s")
		}},
			wantStatus: v1.ConditionFalse, wantReason: "KubeletNotReady", wantMsg: "PLEG is not healthy: pleg was last seen active 3m0s ago; threshold is 3m0s"},
		{name: "missing capacity", capacity: v1.ResourceList{"cpu": q("1")}, wantStatus: v1.ConditionFalse, wantReason: "KubeletNotReady",
			wantMsg: "missing node capacity for resources: memory, pods, ephemeral-storage"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env := newTestController(t, testOptions(), Deps{ReadyChecks: tc.checks})
			env.runtime.setErrs(tc.runtimeErr, tc.netErr)
			node := &v1.Node{}
			if tc.capacity != nil {
				node.Status.Capacity = tc.capacity
			} else {
				_ = env.c.setMachineInfo(context.Background(), node)
			}
			_ = env.c.setReady(context.Background(), node)
			c := condition(node, v1.NodeReady)
			if c == nil || c.Status != tc.wantStatus || c.Reason != tc.wantReason || c.Message != tc.wantMsg {
				t.Errorf("Ready = %+v\nwant %s %s %q", c, tc.wantStatus, tc.wantReason, tc.wantMsg)
			}
			if !c.LastTransitionTime.Equal(&c.LastHeartbeatTime) {
				t.Errorf("a new condition's transition time %v should be its heartbeat %v", c.LastTransitionTime, c.LastHeartbeatTime)
			}
			if got := env.events.reasons(); len(got) != 0 {
				t.Errorf("a new Ready condition recorded %v", got)
			}
		})
	}
}

func TestReadyTransitions(t *testing.T) {
	env := newTestController(t, testOptions(), Deps{})
	ctx := context.Background()
	node := &v1.Node{}
	_ = env.c.setMachineInfo(ctx, node)
	_ = env.c.setReady(ctx, node)
	created := condition(node, v1.NodeReady).LastTransitionTime

	env.clock.Step(10 * time.Second)
	_ = env.c.setReady(ctx, node)
	c := condition(node, v1.NodeReady)
	if !c.LastTransitionTime.Equal(&created) || c.LastHeartbeatTime.Equal(&created) {
		t.Errorf("unchanged status: transition %v (want %v), heartbeat %v (want moved)", c.LastTransitionTime, created, c.LastHeartbeatTime)
	}

	env.clock.Step(10 * time.Second)
	env.runtime.setErrs(nil, errors.New("network down"))
	_ = env.c.setReady(ctx, node)
	c = condition(node, v1.NodeReady)
	if c.Status != v1.ConditionFalse || !c.LastTransitionTime.Time.Equal(env.clock.Now()) {
		t.Errorf("after flip: %+v", c)
	}
	env.runtime.setErrs(nil, nil)
	_ = env.c.setReady(ctx, node)
	if got := env.events.reasons(); !slices.Equal(got, []string{"NodeNotReady", "NodeReady"}) {
		t.Errorf("events = %v, want NodeNotReady then NodeReady", got)
	}
	if len(node.Status.Conditions) != 1 {
		t.Errorf("conditions = %v, want Ready only", node.Status.Conditions)
	}
}

func TestPressureConditions(t *testing.T) {
	env := newTestController(t, testOptions(), Deps{})
	ctx := context.Background()
	node := &v1.Node{}
	set := func() {
		for _, k := range []pressureKind{memoryPressure, diskPressure, pidPressure} {
			_ = env.c.pressureSetter(k)(ctx, node)
		}
	}
	set()
	for _, want := range []struct {
		t               v1.NodeConditionType
		reason, message string
	}{
		{v1.NodeMemoryPressure, "KubeletHasSufficientMemory", "kubelet has sufficient memory available"},
		{v1.NodeDiskPressure, "KubeletHasNoDiskPressure", "kubelet has no disk pressure"},
		{v1.NodePIDPressure, "KubeletHasSufficientPID", "kubelet has sufficient PID available"},
	} {
		c := condition(node, want.t)
		if c == nil || c.Status != v1.ConditionFalse || c.Reason != want.reason || c.Message != want.message {
			t.Errorf("%s = %+v", want.t, c)
		}
	}
	env.events.reset()
	env.clock.Step(time.Minute)
	set()
	if got := env.events.reasons(); len(got) != 0 {
		t.Errorf("unchanged pressure recorded %v", got)
	}
	env.pressure.memory, env.pressure.disk, env.pressure.pid = true, true, true
	set()
	want := []string{"NodeHasInsufficientMemory", "NodeHasDiskPressure", "NodeHasInsufficientPID"}
	if got := env.events.reasons(); !slices.Equal(got, want) {
		t.Errorf("events = %v, want %v", got, want)
	}
	c := condition(node, v1.NodeDiskPressure)
	if c.Status != v1.ConditionTrue || c.Reason != "KubeletHasDiskPressure" || c.Message != "kubelet has disk pressure" {
		t.Errorf("DiskPressure = %+v", c)
	}
	if c := condition(node, v1.NodeMemoryPressure); c.Message != "kubelet has insufficient memory available" {
		t.Errorf("MemoryPressure = %+v", c)
	}
	if c := condition(node, v1.NodePIDPressure); c.Reason != "KubeletHasInsufficientPID" || c.Message != "kubelet has insufficient PID available" {
		t.Errorf("PIDPressure = %+v", c)
	}
}

func TestNodeImages(t *testing.T) {
	images := []container.Image{
		{ID: "a", RepoTags: []string{"small:1"}, Size: 10},
		{ID: "b", RepoDigests: []string{"big@sha256:1"}, RepoTags: []string{"big:1", "big:latest"}, Size: 300},
		{ID: "c", RepoTags: []string{"mid:1"}, Size: 200},
		{ID: "d", RepoTags: []string{"mid-twin:1"}, Size: 200},
		{ID: "e", RepoDigests: []string{"d1", "d2", "d3"}, RepoTags: []string{"t1", "t2", "t3"}, Size: 5},
	}
	names := func(imgs []v1.ContainerImage) [][]string {
		var out [][]string
		for _, i := range imgs {
			out = append(out, i.Names)
		}
		return out
	}
	cases := []struct {
		limit int
		want  [][]string
	}{
		{limit: 3, want: [][]string{{"big@sha256:1", "big:1", "big:latest"}, {"mid-twin:1"}, {"mid:1"}}},
		{limit: 0, want: nil},
		{limit: -1, want: [][]string{{"big@sha256:1", "big:1", "big:latest"}, {"mid-twin:1"}, {"mid:1"}, {"small:1"}, {"d1", "d2", "d3", "t1", "t2"}}},
	}
	for _, tc := range cases {
		got := nodeImages(images, tc.limit)
		if !slices.EqualFunc(names(got), tc.want, slices.Equal) {
			t.Errorf("limit %d: %v, want %v", tc.limit, names(got), tc.want)
		}
	}
	if got := nodeImages(images, 1); got[0].SizeBytes != 300 {
		t.Errorf("size = %d, want 300", got[0].SizeBytes)
	}
	if images[0].ID != "a" {
		t.Error("nodeImages reordered its input")
	}
}

func TestImagesSetterCachesAndKeepsLastGoodList(t *testing.T) {
	env := newTestController(t, testOptions(), Deps{})
	ctx := context.Background()
	env.runtime.imagesErr = errors.New("runtime down")
	node := &v1.Node{}
	if err := env.c.setImages(ctx, node); err == nil || err.Error() != "error getting image list: runtime down" {
		t.Errorf("err = %v", err)
	}
	env.runtime.imagesErr = nil
	env.runtime.images = []container.Image{{ID: "x", RepoTags: []string{"x:1"}, Size: 1}}
	_ = env.c.setImages(ctx, node)
	if len(node.Status.Images) != 0 {
		t.Error("the runtime was asked again before the cache period passed")
	}
	env.clock.Step(imageListTTL)
	_ = env.c.setImages(ctx, node)
	if len(node.Status.Images) != 1 {
		t.Fatalf("images = %v", node.Status.Images)
	}
	env.runtime.imagesErr = errors.New("runtime down again")
	env.clock.Step(imageListTTL)
	if err := env.c.setImages(ctx, node); err != nil || len(node.Status.Images) != 1 {
		t.Errorf("a failed refresh should keep the last list: err %v, images %v", err, node.Status.Images)
	}
	if env.runtime.imageCalls != 3 {
		t.Errorf("ListImages calls = %d, want 3", env.runtime.imageCalls)
	}
}

func TestRuntimeVersion(t *testing.T) {
	cases := map[string]string{"v1.7.24": "1.7.24", "1.6.20~ds1": "1.6.20", "2.1.0-rc.1": "2.1.0-rc.1", "garbage": "Unknown"}
	for raw, want := range cases {
		env := newTestController(t, testOptions(), Deps{})
		env.runtime.version = raw
		if got := env.c.runtimeVersion(context.Background()); got != want {
			t.Errorf("%q: got %q, want %q", raw, got, want)
		}
	}
	env := newTestController(t, testOptions(), Deps{})
	env.runtime.versionErr = errors.New("down")
	node := &v1.Node{}
	_ = env.c.setVersionInfo(context.Background(), node)
	if node.Status.NodeInfo.ContainerRuntimeVersion != "containerd://Unknown" {
		t.Errorf("containerRuntimeVersion = %q", node.Status.NodeInfo.ContainerRuntimeVersion)
	}
}

type fakeCRIStatus struct{ resp *runtimeapi.StatusResponse }

func (f fakeCRIStatus) Status(context.Context, bool) (*runtimeapi.StatusResponse, error) {
	return f.resp, nil
}

func TestRuntimeHandlersAndFeatures(t *testing.T) {
	resp := &runtimeapi.StatusResponse{
		RuntimeHandlers: []*runtimeapi.RuntimeHandler{
			{Name: "", Features: &runtimeapi.RuntimeHandlerFeatures{RecursiveReadOnlyMounts: true, UserNamespaces: true}},
			{Name: "runc"},
		},
		Features: &runtimeapi.RuntimeFeatures{SupplementalGroupsPolicy: true},
	}
	env := newTestController(t, testOptions(), Deps{CRIStatus: fakeCRIStatus{resp}})
	node := &v1.Node{}
	_ = env.c.setRuntimeHandlers(context.Background(), node)
	_ = env.c.setFeatures(context.Background(), node)
	h := node.Status.RuntimeHandlers
	if len(h) != 2 || h[0].Name != "" || !*h[0].Features.RecursiveReadOnlyMounts || !*h[0].Features.UserNamespaces ||
		h[1].Name != "runc" || *h[1].Features.RecursiveReadOnlyMounts || *h[1].Features.UserNamespaces {
		t.Errorf("runtimeHandlers = %+v", h)
	}
	if f := node.Status.Features; f == nil || !*f.SupplementalGroupsPolicy {
		t.Errorf("features = %+v", f)
	}
	env = newTestController(t, testOptions(), Deps{})
	node = &v1.Node{}
	_ = env.c.setRuntimeHandlers(context.Background(), node)
	_ = env.c.setFeatures(context.Background(), node)
	if len(node.Status.RuntimeHandlers) != 0 || node.Status.Features != nil {
		t.Errorf("without CRI status: handlers %v, features %v", node.Status.RuntimeHandlers, node.Status.Features)
	}
}

func TestAddresses(t *testing.T) {
	addrs := func(pairs ...string) []v1.NodeAddress {
		var out []v1.NodeAddress
		for i := 0; i < len(pairs); i += 2 {
			out = append(out, v1.NodeAddress{Type: v1.NodeAddressType(pairs[i]), Address: pairs[i+1]})
		}
		return out
	}
	cases := []struct {
		name       string
		nodeIPs    string
		hostname   string
		lookup     []string
		external   bool
		existing   []v1.NodeAddress
		want       []v1.NodeAddress
		wantErr    string
		annotation string
	}{
		{name: "dual-stack --node-ip", nodeIPs: "10.0.0.5,fd00::5", want: addrs("InternalIP", "10.0.0.5", "InternalIP", "fd00::5", "Hostname", "node-a")},
		{name: "single --node-ip", nodeIPs: "10.0.0.5", want: addrs("InternalIP", "10.0.0.5", "Hostname", "node-a")},
		{name: "hostname is an IP", hostname: "10.1.1.1", want: addrs("InternalIP", "10.1.1.1", "Hostname", "10.1.1.1")},
		{name: "DNS prefers IPv4", lookup: []string{"fd00::9", "10.0.0.9"}, want: addrs("InternalIP", "10.0.0.9", "Hostname", "node-a")},
		{name: "--node-ip :: prefers IPv6", nodeIPs: "::", lookup: []string{"10.0.0.9", "fd00::9"}, want: addrs("InternalIP", "fd00::9", "Hostname", "node-a")},
		{name: "loopback DNS answer falls back to the default route", lookup: []string{"127.0.0.1"}, want: addrs("InternalIP", "192.0.2.10", "Hostname", "node-a")},
		{name: "invalid --node-ip", nodeIPs: "127.0.0.1", wantErr: "failed to validate nodeIP: nodeIP can't be loopback address"},
		{name: "external cloud provider without --node-ip", external: true, want: addrs("Hostname", "node-a")},
		{name: "external cloud provider keeps its addresses", external: true, nodeIPs: "10.0.0.5",
			existing: addrs("InternalIP", "10.9.9.9"), want: addrs("InternalIP", "10.9.9.9"), annotation: "10.0.0.5"},
		{name: "external cloud provider bootstraps with --node-ip", external: true, nodeIPs: "10.0.0.5,fd00::5",
			want: addrs("InternalIP", "10.0.0.5", "InternalIP", "fd00::5", "Hostname", "node-a"), annotation: "10.0.0.5,fd00::5"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			opts := testOptions()
			if tc.hostname != "" {
				opts.Hostname = tc.hostname
			}
			opts.NodeIPs, _ = ParseNodeIPs(tc.nodeIPs)
			opts.ExternalCloudProvider = tc.external
			env := newTestController(t, opts, Deps{})
			env.c.ips = fakeResolver(tc.lookup...)
			node := &v1.Node{}
			node.Name = testNode
			node.Status.Addresses = tc.existing
			err := env.c.setAddresses(context.Background(), node)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(node.Status.Addresses, tc.want) {
				t.Errorf("addresses = %v, want %v", node.Status.Addresses, tc.want)
			}
			if got := node.Annotations[annotationProvidedIPAddr]; got != tc.annotation {
				t.Errorf("provided-node-ip annotation = %q, want %q", got, tc.annotation)
			}
		})
	}
}

func TestAddressesFailWhenNothingResolves(t *testing.T) {
	env := newTestController(t, testOptions(), Deps{})
	env.c.ips = fakeResolver("127.0.0.1")
	env.c.ips.hostInterface = func(net.IP) (net.IP, error) { return nil, errors.New("no default route") }
	node := &v1.Node{}
	node.Name = testNode
	err := env.c.setAddresses(context.Background(), node)
	if err == nil || err.Error() != "can't get ip address of node node-a. error: no default route" {
		t.Errorf("err = %v", err)
	}
}

func TestSchedulableEvents(t *testing.T) {
	env := newTestController(t, testOptions(), Deps{})
	ctx := context.Background()
	node := &v1.Node{}
	_ = env.c.recordSchedulableChange(ctx, node)
	node.Spec.Unschedulable = true
	_ = env.c.recordSchedulableChange(ctx, node)
	_ = env.c.recordSchedulableChange(ctx, node)
	node.Spec.Unschedulable = false
	_ = env.c.recordSchedulableChange(ctx, node)
	if got := env.events.reasons(); !slices.Equal(got, []string{"NodeNotSchedulable", "NodeSchedulable"}) {
		t.Errorf("events = %v", got)
	}
}

func TestNodeStatusHasChanged(t *testing.T) {
	t0, t1 := time.Unix(100, 0), time.Unix(200, 0)
	base := func() *v1.NodeStatus {
		return &v1.NodeStatus{Conditions: []v1.NodeCondition{
			{Type: v1.NodeReady, Status: v1.ConditionTrue, LastHeartbeatTime: metaTime(t0), LastTransitionTime: metaTime(t0)},
			{Type: v1.NodeMemoryPressure, Status: v1.ConditionFalse, LastHeartbeatTime: metaTime(t0)},
		}}
	}
	heartbeat := base()
	heartbeat.Conditions[0].LastHeartbeatTime = metaTime(t1)
	reordered := base()
	reordered.Conditions[0], reordered.Conditions[1] = reordered.Conditions[1], reordered.Conditions[0]
	flipped := base()
	flipped.Conditions[0].Status = v1.ConditionFalse
	image := base()
	image.Images = []v1.ContainerImage{{Names: []string{"x"}}}
	cases := map[string]struct {
		status *v1.NodeStatus
		want   bool
	}{
		"heartbeat only": {heartbeat, false},
		"reordered":      {reordered, false},
		"status flipped": {flipped, true},
		"new image":      {image, true},
	}
	for name, tc := range cases {
		if got := nodeStatusHasChanged(base(), tc.status); got != tc.want {
			t.Errorf("%s: changed = %v, want %v", name, got, tc.want)
		}
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// The device plugins' resources: every device in the capacity, the healthy ones
// allocatable, and a resource whose plugin went away kept at 0.
func TestDevicePluginResources(t *testing.T) {
	env := newTestController(t, testOptions(), Deps{DevicePlugins: func() (v1.ResourceList, v1.ResourceList, []string) {
		return v1.ResourceList{"example.com/dev": q("3")}, v1.ResourceList{"example.com/dev": q("2")}, []string{"example.com/old"}
	}})
	node := &v1.Node{Status: v1.NodeStatus{Capacity: v1.ResourceList{"example.com/old": q("4")}}}
	_ = env.c.setMachineInfo(context.Background(), node)
	for name, want := range map[v1.ResourceName][2]string{"example.com/dev": {"3", "2"}, "example.com/old": {"0", "0"}} {
		c, a := node.Status.Capacity[name], node.Status.Allocatable[name]
		if c.String() != want[0] || a.String() != want[1] {
			t.Errorf("%s: capacity %s allocatable %s, want %s and %s", name, c.String(), a.String(), want[0], want[1])
		}
	}
}
