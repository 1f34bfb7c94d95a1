package kuberuntime

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"google.golang.org/protobuf/proto"
	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/pkg/runtime/container"
	"github.com/nodelet/nodelet/pkg/runtime/criconfig"
	"github.com/nodelet/nodelet/pkg/runtime/userns"
)

// usernsRecorder keeps the configs the runtime was asked to create.
type usernsRecorder struct {
	*fakeRuntime
	mu         sync.Mutex
	sandboxes  []*runtimeapi.PodSandboxConfig
	containers []*runtimeapi.ContainerConfig
}

func (r *usernsRecorder) RunPodSandbox(ctx context.Context, config *runtimeapi.PodSandboxConfig, handler string) (string, error) {
	r.mu.Lock()
	r.sandboxes = append(r.sandboxes, config)
	r.mu.Unlock()
	return r.fakeRuntime.RunPodSandbox(ctx, config, handler)
}

func (r *usernsRecorder) CreateContainer(ctx context.Context, sandboxID string, config *runtimeapi.ContainerConfig, sandbox *runtimeapi.PodSandboxConfig) (string, error) {
	r.mu.Lock()
	r.containers = append(r.containers, config)
	r.mu.Unlock()
	return r.fakeRuntime.CreateContainer(ctx, sandboxID, config, sandbox)
}

// handlers answers SupportsUserNamespaces from a map and records the handlers asked about.
type handlers struct {
	supported map[string]bool
	asked     []string
}

func (h *handlers) SupportsUserNamespaces(_ context.Context, handler string) (bool, error) {
	h.asked = append(h.asked, handler)
	return h.supported[handler], nil
}

// newUsernsEnv is a test env whose runtime records configs and whose user namespaces come
// from a userns.Manager over the env's root dir.
func newUsernsEnv(t *testing.T, h *handlers, runtimeHandler string) (*testEnv, *usernsRecorder, *userns.Manager) {
	t.Helper()
	var rec *usernsRecorder
	var um *userns.Manager
	env := newTestEnv(t, func(o *Options) {
		rec = &usernsRecorder{fakeRuntime: o.RuntimeService.(*fakeRuntime)}
		o.RuntimeService = rec
		o.RuntimeClasses = everyPodOn(runtimeHandler)
		var err error
		um, err = userns.NewManager(userns.Config{PodsDir: filepath.Join(o.RootDir, "pods"), MaxPods: 4, Handlers: h,
			Range: &userns.IDRange{First: 65536, Length: 4 * 65536}})
		if err != nil {
			t.Fatal(err)
		}
		o.UserNamespaces = um
	})
	return env, rec, um
}

func hostUsersFalse(p *v1.Pod) *v1.Pod {
	no := false
	p.Spec.HostUsers = &no
	return p
}

func TestSyncPodRunsHostUsersFalseInThePodsUserNamespace(t *testing.T) {
	h := &handlers{supported: map[string]bool{"runc": true}}
	env, rec, um := newUsernsEnv(t, h, "runc")
	pod := hostUsersFalse(newPod("userns", ctr("app")))
	pod.Spec.InitContainers = []v1.Container{ctr("init")}
	pod.Spec.InitContainers[0].TerminationMessagePath = "/dev/termination-log" // a mount to idmap
	if err := syncPod(t, env, pod, nil).Error(); err != nil {
		t.Fatalf("SyncPod: %v", err)
	}
	first, ok := um.Allocated(pod.UID)
	if !ok {
		t.Fatal("the pod got no ID block")
	}
	mapping := []*runtimeapi.IDMapping{{HostId: first, ContainerId: 0, Length: 65536}}
	want := &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_POD, Uids: mapping, Gids: mapping}
	if len(rec.sandboxes) != 1 || len(rec.containers) != 1 {
		t.Fatalf("%d sandboxes, %d containers created; want 1 and 1 (init first)", len(rec.sandboxes), len(rec.containers))
	}
	if got := rec.sandboxes[0].Linux.SecurityContext.NamespaceOptions.UsernsOptions; !proto.Equal(got, want) {
		t.Errorf("sandbox user namespace %v, want %v", got, want)
	}
	c := rec.containers[0]
	if got := c.Linux.SecurityContext.NamespaceOptions.UsernsOptions; !proto.Equal(got, want) {
		t.Errorf("container user namespace %v, want %v", got, want)
	}
	if len(c.Mounts) == 0 {
		t.Fatal("the container has no mounts (want at least the termination-message file)")
	}
	for _, m := range c.Mounts {
		if !proto.Equal(&runtimeapi.Mount{UidMappings: m.UidMappings, GidMappings: m.GidMappings},
			&runtimeapi.Mount{UidMappings: mapping, GidMappings: mapping}) {
			t.Errorf("mount %s is not idmapped with the pod's mapping: %v", m.ContainerPath, m)
		}
	}
	for _, asked := range h.asked {
		if asked != "runc" {
			t.Errorf("support asked for handler %q, want the manager's runc", asked)
		}
	}

	// The init container done, the next sync starts app in the same namespace, read back
	// from the pod directory by a new manager (a restarted nodelet).
	env.exitContainer(t, pod, "init", 0, env.clock.Now())
	um2, err := userns.NewManager(userns.Config{PodsDir: filepath.Join(env.dir, "root", "pods"), Handlers: h,
		Range: &userns.IDRange{First: 65536, Length: 4 * 65536}})
	if err != nil {
		t.Fatal(err)
	}
	env.m.opts.UserNamespaces = um2
	if err := syncPod(t, env, pod, nil).Error(); err != nil {
		t.Fatalf("second SyncPod: %v", err)
	}
	if len(rec.containers) != 2 || rec.containers[1].Metadata.Name != "app" {
		t.Fatalf("containers created: %d", len(rec.containers))
	}
	if got := rec.containers[1].Linux.SecurityContext.NamespaceOptions.UsernsOptions; !proto.Equal(got, want) {
		t.Errorf("after restart: container user namespace %v, want %v", got, want)
	}
}

func TestSyncPodRefusesHostUsersFalseWithoutRuntimeSupport(t *testing.T) {
	env, rec, um := newUsernsEnv(t, &handlers{}, "")
	pod := hostUsersFalse(newPod("nouserns", ctr("app")))
	r := syncPod(t, env, pod, nil)
	failed := failedResult(r, container.CreatePodSandbox)
	if failed == nil || !errors.Is(failed.Error, container.ErrCreatePodSandbox) {
		t.Fatalf("want ErrCreatePodSandbox, got %+v", r.SyncResults)
	}
	const reason = "can't set `spec.hostUsers: false`, runtime does not support user namespaces"
	if !strings.Contains(failed.Message, reason) {
		t.Errorf("message %q does not give the reason %q", failed.Message, reason)
	}
	if !hasEvent(env.events(), "Warning FailedCreatePodSandBox Failed to create pod sandbox: "+reason) {
		t.Error("no FailedCreatePodSandBox event with the reason")
	}
	if len(rec.sandboxes) != 0 {
		t.Error("a sandbox was created")
	}
	if _, ok := um.Allocated(pod.UID); ok {
		t.Error("a refused pod holds an ID block")
	}

	// A pod in the node's user namespace runs there, saying so to the runtime.
	host := newPod("hostusers", ctr("app"))
	if err := syncPod(t, env, host, nil).Error(); err != nil {
		t.Fatalf("host-users pod: %v", err)
	}
	node := &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_NODE}
	if got := rec.sandboxes[0].Linux.SecurityContext.NamespaceOptions.UsernsOptions; !proto.Equal(got, node) {
		t.Errorf("host-users sandbox user namespace %v, want NODE", got)
	}
	if got := rec.containers[0].Linux.SecurityContext.NamespaceOptions.UsernsOptions; !proto.Equal(got, node) {
		t.Errorf("host-users container user namespace %v, want NODE", got)
	}
}

func TestSyncPodWithoutUserNamespaceManagerRefusesHostUsersFalse(t *testing.T) {
	env := newTestEnv(t)
	r := syncPod(t, env, hostUsersFalse(newPod("nomanager", ctr("app"))), nil)
	failed := failedResult(r, container.CreatePodSandbox)
	if failed == nil || !strings.Contains(failed.Message, criconfig.ErrUserNamespacesNotSupported.Error()) {
		t.Fatalf("want the criconfig refusal, got %+v", r.SyncResults)
	}
	if len(env.rt.Sandboxes) != 0 {
		t.Error("a sandbox was created")
	}
}
