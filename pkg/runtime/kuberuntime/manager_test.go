package kuberuntime

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	critest "k8s.io/cri-api/pkg/apis/testing"

	"github.com/nodelet/nodelet/pkg/runtime/container"
)

func TestNewManagerVersion(t *testing.T) {
	env := newTestEnv(t)
	if env.m.Type() != critest.FakeRuntimeName {
		t.Errorf("Type %q", env.m.Type())
	}
	ctx := context.Background()
	calls := func() int {
		n := 0
		for _, c := range env.rt.GetCalls() {
			if c == "Version" {
				n++
			}
		}
		return n
	}
	before := calls()
	if v, err := env.m.APIVersion(ctx); err != nil || v != critest.FakeVersion {
		t.Fatalf("APIVersion %q %v", v, err)
	}
	if calls() != before {
		t.Error("APIVersion did not answer from its cache")
	}
	env.clock.Step(versionCacheTTL + time.Second)
	if _, err := env.m.APIVersion(ctx); err != nil || calls() != before+1 {
		t.Errorf("APIVersion after the TTL: %v, Version calls %d", err, calls()-before)
	}
	if v, err := env.m.Version(ctx); err != nil || v != critest.FakeVersion {
		t.Errorf("Version %q %v", v, err)
	}

	rt := critest.NewFakeRuntimeService()
	rt.InjectError("Version", errors.New("down"))
	if _, err := NewManager(ctx, Options{RuntimeService: rt, ImageService: critest.NewFakeImageService(), Recorder: env.rec}); err == nil {
		t.Error("NewManager succeeded with a failing runtime")
	}
	if _, err := NewManager(ctx, Options{RuntimeService: rt}); err == nil {
		t.Error("NewManager succeeded without image service and recorder")
	}
}

func TestStreamingAndCommands(t *testing.T) {
	env := newTestEnv(t)
	ctx := context.Background()
	pod := newPod("stream", ctr("app"))
	startPod(t, env, pod)
	id := container.BuildContainerID(env.m.Type(), containerID(t, env, pod, "app"))

	if _, err := env.m.GetExec(ctx, id, []string{"sh"}, true, true, true, true); err != nil {
		t.Errorf("GetExec: %v", err)
	}
	if _, err := env.m.GetAttach(ctx, id, true, true, false, true); err != nil {
		t.Errorf("GetAttach: %v", err)
	}
	if _, err := env.m.GetPortForward(ctx, pod.Name, pod.Namespace, pod.UID, []int32{80}); err != nil {
		t.Errorf("GetPortForward: %v", err)
	}
	if _, err := env.m.GetPortForward(ctx, "none", "ns", "none-uid", []int32{80}); err == nil ||
		!strings.Contains(err.Error(), "failed to find sandboxID for pod none_ns(none-uid)") {
		t.Errorf("GetPortForward of an unknown pod: %v", err)
	}
	env.rt.InjectError("Exec", errors.New("no exec"))
	if _, err := env.m.GetExec(ctx, id, []string{"sh"}, false, true, false, false); err == nil {
		t.Error("GetExec hid the runtime error")
	}

	env.rt.execSync = func(context.Context, string, []string) ([]byte, []byte, error) {
		return []byte("out;"), []byte("err"), errors.New("exit 1")
	}
	out, err := env.m.RunInContainer(ctx, id, []string{"x"}, time.Second)
	if string(out) != "out;err" || err == nil {
		t.Errorf("RunInContainer %q %v", out, err)
	}

	env.rt.InjectError("ContainerStatus", errors.New("gone"))
	if err := env.m.GetContainerLogs(ctx, pod, id, nil, &strings.Builder{}, &strings.Builder{}); err == nil ||
		!strings.Contains(err.Error(), "unable to retrieve container logs for") {
		t.Errorf("GetContainerLogs: %v", err)
	}
}

func TestPassThroughs(t *testing.T) {
	env := newTestEnv(t)
	ctx := context.Background()
	env.rt.FakeStatus = &runtimeapi.RuntimeStatus{Conditions: []*runtimeapi.RuntimeCondition{{Type: "RuntimeReady", Status: true}}}
	if s, err := env.m.Status(ctx); err != nil || len(s.Conditions) != 1 {
		t.Errorf("Status %v %v", s, err)
	}
	env.rt.FakeStatus = nil
	if _, err := env.m.Status(ctx); err == nil {
		t.Error("nil runtime status accepted")
	}
	if err := env.m.UpdatePodCIDR(ctx, "10.1.0.0/24"); err != nil {
		t.Error(err)
	}
	if _, err := env.m.ListMetricDescriptors(ctx); err != nil {
		t.Error(err)
	}
	if _, err := env.m.ListPodSandboxMetrics(ctx); err != nil {
		t.Error(err)
	}
	if ref, err := env.m.GetImageRef(ctx, container.ImageSpec{Image: testImage}); err != nil || ref == "" {
		t.Errorf("GetImageRef %q %v", ref, err)
	}
}

func TestGeneratePodStatus(t *testing.T) {
	env := newTestEnv(t)
	now := time.Now()
	ev := &runtimeapi.ContainerEventResponse{
		PodSandboxStatus: &runtimeapi.PodSandboxStatus{
			Id: "sb", State: runtimeapi.PodSandboxState_SANDBOX_READY,
			Metadata: &runtimeapi.PodSandboxMetadata{Name: "p", Namespace: "ns", Uid: "u"},
			Network:  &runtimeapi.PodSandboxNetworkStatus{Ip: "10.0.0.2", AdditionalIps: []*runtimeapi.PodIP{{Ip: "fd00::2"}}},
		},
		ContainersStatuses: []*runtimeapi.ContainerStatus{
			{Id: "old", CreatedAt: now.Add(-time.Minute).UnixNano(), State: runtimeapi.ContainerState_CONTAINER_EXITED,
				Labels: map[string]string{"io.kubernetes.container.name": "app"}, Metadata: &runtimeapi.ContainerMetadata{Name: "app"}},
			{Id: "new", CreatedAt: now.UnixNano(), State: runtimeapi.ContainerState_CONTAINER_RUNNING,
				Labels: map[string]string{"io.kubernetes.container.name": "app"}, Metadata: &runtimeapi.ContainerMetadata{Name: "app"}},
		},
	}
	s := env.m.GeneratePodStatus(ev)
	if s.ID != "u" || s.Name != "p" || len(s.IPs) != 2 || s.IPs[1] != "fd00::2" {
		t.Fatalf("status %+v", s)
	}
	if len(s.ContainerStatuses) != 2 || s.ContainerStatuses[0].ID.ID != "new" {
		t.Fatalf("containers not newest first: %+v", s.ContainerStatuses)
	}
}
