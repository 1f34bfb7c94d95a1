package kuberuntime

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/pkg/pod/prober/results"
	"github.com/nodelet/nodelet/pkg/runtime/container"
)

type sandboxOpt func(*runtimeapi.PodSandboxStatus)

func notReady(s *runtimeapi.PodSandboxStatus) { s.State = runtimeapi.PodSandboxState_SANDBOX_NOTREADY }
func noIP(s *runtimeapi.PodSandboxStatus)     { s.Network.Ip = "" }
func hostNetMode(s *runtimeapi.PodSandboxStatus) {
	s.Linux.Namespaces.Options.Network = runtimeapi.NamespaceMode_NODE
}

func sandbox(id string, attempt uint32, opts ...sandboxOpt) *runtimeapi.PodSandboxStatus {
	s := &runtimeapi.PodSandboxStatus{
		Id:       id,
		Metadata: &runtimeapi.PodSandboxMetadata{Attempt: attempt},
		State:    runtimeapi.PodSandboxState_SANDBOX_READY,
		Network:  &runtimeapi.PodSandboxNetworkStatus{Ip: "10.0.0.1"},
		Linux: &runtimeapi.LinuxPodSandboxStatus{Namespaces: &runtimeapi.Namespace{
			Options: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_POD},
		}},
	}
	for _, o := range opts {
		o(s)
	}
	return s
}

// cs builds a container status whose hash matches spec.
func cs(spec *v1.Container, state container.State, exitCode int) *container.Status {
	return &container.Status{
		ID:       container.BuildContainerID("fake", spec.Name+"-id"),
		Name:     spec.Name,
		State:    state,
		ExitCode: exitCode,
		Hash:     container.HashContainer(spec),
	}
}

const (
	running = container.ContainerStateRunning
	exited  = container.ContainerStateExited
	unknown = container.ContainerStateUnknown
	created = container.ContainerStateCreated
)

// want is the comparable part of podActions; kill maps container name to message.
type want struct {
	killPod, createSandbox bool
	attempt                uint32
	sandboxID              string
	init, start, ephemeral []int
	kill                   map[string]string
	killReason             map[string]killReason
	// resize lists the in-place updates in order, as "<resource>/<container>".
	resize []string
}

func got(a podActions) want {
	w := want{
		killPod: a.KillPod, createSandbox: a.CreateSandbox, attempt: a.Attempt, sandboxID: a.SandboxID,
		init: a.InitContainersToStart, start: a.ContainersToStart, ephemeral: a.EphemeralContainersToStart,
		resize: updateOrder(a),
	}
	for _, k := range a.ContainersToKill {
		if w.kill == nil {
			w.kill, w.killReason = map[string]string{}, map[string]killReason{}
		}
		w.kill[k.name] = k.message
		w.killReason[k.name] = k.reason
	}
	return w
}

func TestComputePodActions(t *testing.T) {
	always := v1.ContainerRestartPolicyAlways
	type tc struct {
		name  string
		pod   func() *v1.Pod
		state func(p *v1.Pod) *container.PodStatus
		setup func(m *Manager, p *v1.Pod)
		want  want
	}
	twoContainers := func() *v1.Pod { return newPod("p", ctr("a"), ctr("b")) }
	withPolicy := func(policy v1.RestartPolicy) func() *v1.Pod {
		return func() *v1.Pod { p := newPod("p", ctr("a")); p.Spec.RestartPolicy = policy; return p }
	}
	withInits := func(policy v1.RestartPolicy) func() *v1.Pod {
		return func() *v1.Pod {
			p := newPod("p", ctr("a"))
			p.Spec.RestartPolicy = policy
			p.Spec.InitContainers = []v1.Container{ctr("i0"), ctr("i1")}
			return p
		}
	}
	ready := func(statuses ...func(p *v1.Pod) *container.Status) func(p *v1.Pod) *container.PodStatus {
		return func(p *v1.Pod) *container.PodStatus {
			s := &container.PodStatus{SandboxStatuses: []*runtimeapi.PodSandboxStatus{sandbox("sb1", 0)}}
			for _, f := range statuses {
				s.ContainerStatuses = append(s.ContainerStatuses, f(p))
			}
			return s
		}
	}
	regular := func(i int, state container.State, code int) func(p *v1.Pod) *container.Status {
		return func(p *v1.Pod) *container.Status { return cs(&p.Spec.Containers[i], state, code) }
	}
	initc := func(i int, state container.State, code int) func(p *v1.Pod) *container.Status {
		return func(p *v1.Pod) *container.Status { return cs(&p.Spec.InitContainers[i], state, code) }
	}

	cases := []tc{
		{
			name: "no sandbox: create one and start every container",
			pod:  twoContainers, state: func(*v1.Pod) *container.PodStatus { return &container.PodStatus{} },
			want: want{killPod: true, createSandbox: true, attempt: 0, start: []int{0, 1}},
		},
		{
			name: "sandbox not ready: recreate with next attempt",
			pod:  twoContainers,
			state: func(p *v1.Pod) *container.PodStatus {
				return &container.PodStatus{SandboxStatuses: []*runtimeapi.PodSandboxStatus{sandbox("sb2", 2, notReady), sandbox("sb1", 1, notReady)}}
			},
			want: want{killPod: true, createSandbox: true, attempt: 3, sandboxID: "sb2", start: []int{0, 1}},
		},
		{
			name: "network namespace mode changed: recreate, no sandbox ID",
			pod:  twoContainers,
			state: func(p *v1.Pod) *container.PodStatus {
				return &container.PodStatus{SandboxStatuses: []*runtimeapi.PodSandboxStatus{sandbox("sb1", 0, hostNetMode)}}
			},
			want: want{killPod: true, createSandbox: true, attempt: 1, start: []int{0, 1}},
		},
		{
			name: "more than one ready sandbox: recreate",
			pod:  twoContainers,
			state: func(p *v1.Pod) *container.PodStatus {
				return &container.PodStatus{SandboxStatuses: []*runtimeapi.PodSandboxStatus{sandbox("sb2", 1), sandbox("sb1", 0)}}
			},
			want: want{killPod: true, createSandbox: true, attempt: 2, sandboxID: "sb2", start: []int{0, 1}},
		},
		{
			name: "sandbox without IP: recreate",
			pod:  twoContainers,
			state: func(p *v1.Pod) *container.PodStatus {
				return &container.PodStatus{SandboxStatuses: []*runtimeapi.PodSandboxStatus{sandbox("sb1", 0, noIP)}}
			},
			want: want{killPod: true, createSandbox: true, attempt: 1, sandboxID: "sb1", start: []int{0, 1}},
		},
		{
			name: "Never pod whose sandbox died after its containers ran: kill, no new sandbox",
			pod:  withPolicy(v1.RestartPolicyNever),
			state: func(p *v1.Pod) *container.PodStatus {
				return &container.PodStatus{
					SandboxStatuses:   []*runtimeapi.PodSandboxStatus{sandbox("sb1", 0, notReady)},
					ContainerStatuses: []*container.Status{cs(&p.Spec.Containers[0], exited, 0)},
				}
			},
			want: want{killPod: true, attempt: 1, sandboxID: "sb1"},
		},
		{
			name: "OnFailure pod all succeeded and sandbox dead: no new sandbox",
			pod:  withPolicy(v1.RestartPolicyOnFailure),
			state: func(p *v1.Pod) *container.PodStatus {
				return &container.PodStatus{
					SandboxStatuses:   []*runtimeapi.PodSandboxStatus{sandbox("sb1", 0, notReady)},
					ContainerStatuses: []*container.Status{cs(&p.Spec.Containers[0], exited, 0)},
				}
			},
			want: want{killPod: true, attempt: 1, sandboxID: "sb1"},
		},
		{
			name: "new sandbox with init containers: start the first init container only",
			pod:  withInits(v1.RestartPolicyAlways), state: func(*v1.Pod) *container.PodStatus { return &container.PodStatus{} },
			want: want{killPod: true, createSandbox: true, init: []int{0}},
		},
		{name: "Always, exit 0: restart", pod: withPolicy(v1.RestartPolicyAlways), state: ready(regular(0, exited, 0)),
			want: want{sandboxID: "sb1", start: []int{0}}},
		{name: "Always, exit 1: restart", pod: withPolicy(v1.RestartPolicyAlways), state: ready(regular(0, exited, 1)),
			want: want{sandboxID: "sb1", start: []int{0}}},
		{name: "OnFailure, exit 0: done, kill pod", pod: withPolicy(v1.RestartPolicyOnFailure), state: ready(regular(0, exited, 0)),
			want: want{killPod: true, sandboxID: "sb1"}},
		{name: "OnFailure, exit 1: restart", pod: withPolicy(v1.RestartPolicyOnFailure), state: ready(regular(0, exited, 1)),
			want: want{sandboxID: "sb1", start: []int{0}}},
		{name: "Never, exit 0: done, kill pod", pod: withPolicy(v1.RestartPolicyNever), state: ready(regular(0, exited, 0)),
			want: want{killPod: true, sandboxID: "sb1"}},
		{name: "Never, exit 1: done, kill pod", pod: withPolicy(v1.RestartPolicyNever), state: ready(regular(0, exited, 1)),
			want: want{killPod: true, sandboxID: "sb1"}},
		{
			name:  "Never, one running one exited: keep the pod",
			pod:   func() *v1.Pod { p := twoContainers(); p.Spec.RestartPolicy = v1.RestartPolicyNever; return p },
			state: ready(regular(0, running, 0), regular(1, exited, 1)),
			want:  want{sandboxID: "sb1"},
		},
		{name: "running and unchanged: nothing to do", pod: twoContainers, state: ready(regular(0, running, 0), regular(1, running, 0)),
			want: want{sandboxID: "sb1"}},
		{name: "created but not started: start again", pod: withPolicy(v1.RestartPolicyNever), state: ready(regular(0, created, 0)),
			want: want{sandboxID: "sb1", start: []int{0}}},
		{
			name: "unknown state: kill before restart", pod: withPolicy(v1.RestartPolicyAlways), state: ready(regular(0, unknown, 0)),
			want: want{sandboxID: "sb1", start: []int{0},
				kill:       map[string]string{"a": `Container is in "unknown" state, try killing it before restart`},
				killReason: map[string]killReason{"a": reasonUnknown}},
		},
		{
			name: "spec hash changed: replace, even under Never",
			pod:  withPolicy(v1.RestartPolicyNever),
			state: ready(func(p *v1.Pod) *container.Status {
				s := cs(&p.Spec.Containers[0], running, 0)
				s.Hash++
				return s
			}),
			want: want{sandboxID: "sb1", start: []int{0},
				kill:       map[string]string{"a": "Container a definition changed, will be restarted"},
				killReason: map[string]killReason{"a": ""}},
		},
		{
			name: "liveness failure: kill and restart", pod: withPolicy(v1.RestartPolicyAlways), state: ready(regular(0, running, 0)),
			setup: func(m *Manager, p *v1.Pod) {
				m.liveness.Set(container.BuildContainerID("fake", "a-id"), results.Failure, p)
			},
			want: want{sandboxID: "sb1", start: []int{0},
				kill:       map[string]string{"a": "Container a failed liveness probe, will be restarted"},
				killReason: map[string]killReason{"a": reasonLivenessProbe}},
		},
		{
			name: "liveness failure under Never: kill without restart, pod done", pod: withPolicy(v1.RestartPolicyNever), state: ready(regular(0, running, 0)),
			setup: func(m *Manager, p *v1.Pod) {
				m.liveness.Set(container.BuildContainerID("fake", "a-id"), results.Failure, p)
			},
			want: want{killPod: true, sandboxID: "sb1",
				kill:       map[string]string{"a": "Container a failed liveness probe"},
				killReason: map[string]killReason{"a": reasonLivenessProbe}},
		},
		{
			name: "liveness failure of a container with restartPolicy Never: not restarted under an Always pod",
			pod: func() *v1.Pod {
				p := withPolicy(v1.RestartPolicyAlways)()
				never := v1.ContainerRestartPolicyNever
				p.Spec.Containers[0].RestartPolicy = &never
				return p
			},
			state: ready(regular(0, running, 0)),
			setup: func(m *Manager, p *v1.Pod) {
				m.liveness.Set(container.BuildContainerID("fake", "a-id"), results.Failure, p)
			},
			want: want{killPod: true, sandboxID: "sb1",
				kill:       map[string]string{"a": "Container a failed liveness probe"},
				killReason: map[string]killReason{"a": reasonLivenessProbe}},
		},
		{
			name: "liveness failure of a container with restartPolicy OnFailure: restarted under a Never pod",
			pod: func() *v1.Pod {
				p := withPolicy(v1.RestartPolicyNever)()
				onFailure := v1.ContainerRestartPolicyOnFailure
				p.Spec.Containers[0].RestartPolicy = &onFailure
				return p
			},
			state: ready(regular(0, running, 0)),
			setup: func(m *Manager, p *v1.Pod) {
				m.liveness.Set(container.BuildContainerID("fake", "a-id"), results.Failure, p)
			},
			want: want{sandboxID: "sb1", start: []int{0},
				kill:       map[string]string{"a": "Container a failed liveness probe, will be restarted"},
				killReason: map[string]killReason{"a": reasonLivenessProbe}},
		},
		{
			name: "startup failure: kill and restart", pod: withPolicy(v1.RestartPolicyOnFailure), state: ready(regular(0, running, 0)),
			setup: func(m *Manager, p *v1.Pod) {
				m.startup.Set(container.BuildContainerID("fake", "a-id"), results.Failure, p)
			},
			want: want{sandboxID: "sb1", start: []int{0},
				kill:       map[string]string{"a": "Container a failed startup probe, will be restarted"},
				killReason: map[string]killReason{"a": reasonStartupProbe}},
		},
		{
			name: "liveness success keeps the container", pod: withPolicy(v1.RestartPolicyAlways), state: ready(regular(0, running, 0)),
			setup: func(m *Manager, p *v1.Pod) {
				m.liveness.Set(container.BuildContainerID("fake", "a-id"), results.Success, p)
			},
			want: want{sandboxID: "sb1"},
		},
		{
			name: "pod being deleted: nothing restarts",
			pod: func() *v1.Pod {
				p := withPolicy(v1.RestartPolicyAlways)()
				p.DeletionTimestamp = &metav1.Time{Time: time.Now()}
				return p
			},
			state: ready(regular(0, exited, 1)),
			want:  want{killPod: true, sandboxID: "sb1"},
		},
		{name: "first init container done: start the second", pod: withInits(v1.RestartPolicyAlways), state: ready(initc(0, exited, 0)),
			want: want{sandboxID: "sb1", init: []int{1}}},
		{name: "init container running: wait", pod: withInits(v1.RestartPolicyAlways), state: ready(initc(0, running, 0)),
			want: want{sandboxID: "sb1"}},
		{name: "init container failed under Never: pod fails", pod: withInits(v1.RestartPolicyNever), state: ready(initc(0, exited, 1)),
			want: want{killPod: true, sandboxID: "sb1"}},
		{name: "init container failed under Always: rerun it", pod: withInits(v1.RestartPolicyAlways), state: ready(initc(0, exited, 1)),
			want: want{sandboxID: "sb1", init: []int{0}}},
		{name: "init container failed under OnFailure: rerun it", pod: withInits(v1.RestartPolicyOnFailure), state: ready(initc(0, exited, 0), initc(1, exited, 2)),
			want: want{sandboxID: "sb1", init: []int{1}}},
		{
			name: "init container OOM-killed counts as failed", pod: withInits(v1.RestartPolicyNever),
			state: ready(func(p *v1.Pod) *container.Status {
				s := cs(&p.Spec.InitContainers[0], exited, 0)
				s.Reason = "OOMKilled"
				return s
			}),
			want: want{killPod: true, sandboxID: "sb1"},
		},
		{
			name: "init container unknown: kill then rerun", pod: withInits(v1.RestartPolicyAlways), state: ready(initc(0, unknown, 0)),
			want: want{sandboxID: "sb1", init: []int{0},
				kill:       map[string]string{"i0": `Init container is in "unknown" state, try killing it before restart`},
				killReason: map[string]killReason{"i0": reasonUnknown}},
		},
		{name: "init containers done: start regular containers", pod: withInits(v1.RestartPolicyAlways), state: ready(initc(0, exited, 0), initc(1, exited, 0)),
			want: want{sandboxID: "sb1", start: []int{0}}},
		{name: "init containers gone but app running: initialized, nothing to do", pod: withInits(v1.RestartPolicyAlways), state: ready(regular(0, running, 0)),
			want: want{sandboxID: "sb1"}},
		{
			name: "ephemeral container: started once, even before init completes",
			pod: func() *v1.Pod {
				p := withInits(v1.RestartPolicyAlways)()
				p.Spec.EphemeralContainers = []v1.EphemeralContainer{{EphemeralContainerCommon: v1.EphemeralContainerCommon{Name: "dbg", Image: testImage}}}
				return p
			},
			state: ready(initc(0, running, 0)),
			want:  want{sandboxID: "sb1", ephemeral: []int{0}},
		},
		{
			name: "exited ephemeral container is never restarted",
			pod: func() *v1.Pod {
				p := withPolicy(v1.RestartPolicyAlways)()
				p.Spec.EphemeralContainers = []v1.EphemeralContainer{{EphemeralContainerCommon: v1.EphemeralContainerCommon{Name: "dbg", Image: testImage}}}
				return p
			},
			state: ready(regular(0, running, 0), func(p *v1.Pod) *container.Status {
				return &container.Status{ID: container.BuildContainerID("fake", "dbg"), Name: "dbg", State: exited, ExitCode: 1}
			}),
			want: want{sandboxID: "sb1"},
		},
		{
			name: "sidecar started: next init container starts while it runs",
			pod: func() *v1.Pod {
				p := withInits(v1.RestartPolicyNever)()
				p.Spec.InitContainers[0].RestartPolicy = &always
				return p
			},
			state: ready(initc(0, running, 0)),
			want:  want{sandboxID: "sb1", init: []int{1}},
		},
		{
			name: "sidecar exited: restarted even under Never, app keeps running",
			pod: func() *v1.Pod {
				p := withInits(v1.RestartPolicyNever)()
				p.Spec.InitContainers[0].RestartPolicy = &always
				return p
			},
			state: ready(initc(0, exited, 1), initc(1, exited, 0), regular(0, running, 0)),
			want:  want{sandboxID: "sb1", init: []int{0}},
		},
		{
			name: "sidecar does not keep a finished pod alive",
			pod: func() *v1.Pod {
				p := withInits(v1.RestartPolicyNever)()
				p.Spec.InitContainers[0].RestartPolicy = &always
				return p
			},
			state: ready(initc(0, running, 0), initc(1, exited, 0), regular(0, exited, 0)),
			want:  want{killPod: true, sandboxID: "sb1"},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := pureManager()
			pod := c.pod()
			status := c.state(pod)
			if c.setup != nil {
				c.setup(m, pod)
			}
			if g := got(m.computePodActions(pod, status)); !reflect.DeepEqual(normalize(g), normalize(c.want)) {
				t.Errorf("got  %+v\nwant %+v", g, c.want)
			}
		})
	}
}

// normalize treats nil and empty slices alike.
func normalize(w want) string {
	nz := func(s []int) []int {
		if len(s) == 0 {
			return nil
		}
		return s
	}
	w.init, w.start, w.ephemeral = nz(w.init), nz(w.start), nz(w.ephemeral)
	if len(w.resize) == 0 {
		w.resize = nil
	}
	return fmt.Sprintf("%+v", w)
}

// updateOrder lists a's in-place updates, memory then CPU, as "<resource>/<container>".
func updateOrder(a podActions) []string {
	var out []string
	for _, name := range []v1.ResourceName{v1.ResourceMemory, v1.ResourceCPU} {
		for _, u := range a.ContainersToUpdate[name] {
			out = append(out, string(name)+"/"+u.spec.Name)
		}
	}
	return out
}
