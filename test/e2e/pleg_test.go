//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/pkg/pod/pleg"
	"github.com/nodelet/nodelet/pkg/pod/podcache"
	"github.com/nodelet/nodelet/pkg/runtime/container"
)

// plegRig is a relisting PLEG, at its default period, over the rig's runtime manager.
type plegRig struct {
	gen    pleg.PodLifecycleEventGenerator
	events chan *pleg.PodLifecycleEvent
	cache  podcache.Cache
}

func newPLEGRig(t *testing.T, runtime container.Runtime) *plegRig {
	t.Helper()
	p := &plegRig{events: make(chan *pleg.PodLifecycleEvent, pleg.ChannelCapacity), cache: podcache.New()}
	p.gen = pleg.NewGenericPLEG(runtime, p.events, nil, p.cache, clock.RealClock{})
	p.gen.Start()
	t.Cleanup(p.gen.Stop)
	deadline := time.Now().Add(2 * pleg.RelistPeriod)
	for {
		ok, err := p.gen.Healthy()
		if ok {
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("PLEG not healthy %v after Start: %v", 2*pleg.RelistPeriod, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// expect waits up to within for the pod's events in want (any order; events of other
// pods on the shared containerd are ignored).
func (p *plegRig) expect(t *testing.T, uid types.UID, within time.Duration, want ...pleg.PodLifecycleEvent) {
	t.Helper()
	missing := map[pleg.PodLifecycleEvent]bool{}
	for _, e := range want {
		missing[e] = true
	}
	var seen []pleg.PodLifecycleEvent
	timeout := time.After(within)
	for len(missing) > 0 {
		select {
		case e := <-p.events:
			if e.ID == uid {
				seen = append(seen, *e)
				delete(missing, *e)
			}
		case <-timeout:
			t.Fatalf("after %v still missing %v; the pod's events were %v", within, keys(missing), seen)
		}
	}
}

func keys(m map[pleg.PodLifecycleEvent]bool) []string {
	var out []string
	for e := range m {
		out = append(out, fmt.Sprintf("%s/%v", e.Type, e.Data))
	}
	return out
}

func plegEvent(uid types.UID, t pleg.PodLifeCycleEventType, id string) pleg.PodLifecycleEvent {
	return pleg.PodLifecycleEvent{ID: uid, Type: t, Data: id}
}

func TestPLEGReportsContainerLifecycle(t *testing.T) {
	r := newRig(t)
	p := newPLEGRig(t, r.m)
	pod := newPod("pleg", v1.RestartPolicyAlways, []string{"sh", "-c", "trap 'exit 0' TERM; while true; do sleep 0.1; done"})
	r.track(t, pod)
	ctx := context.Background()

	r.syncUntil(t, pod, defaultBackOff(), 30*time.Second, func(s *container.PodStatus) bool { return running(s, "c0") })
	s := r.status(t, pod)
	cid := s.FindContainerStatusByName("c0").ID.ID
	if len(s.SandboxStatuses) != 1 {
		t.Fatalf("want one sandbox, got %d", len(s.SandboxStatuses))
	}
	sid := s.SandboxStatuses[0].Id
	// The container runs now: the next relist (at most a period away) must see it.
	p.expect(t, pod.UID, 2*pleg.RelistPeriod,
		plegEvent(pod.UID, pleg.ContainerStarted, sid), plegEvent(pod.UID, pleg.ContainerStarted, cid))
	// Events go out only once the cache holds the status they are about.
	if cached, err := p.cache.Get(pod.UID); err != nil || !running(cached, "c0") {
		t.Fatalf("cache after ContainerStarted: %v, %v", describe(cached), err)
	}

	if err := r.m.KillPod(ctx, pod, container.ConvertPodStatusToRunningPod(r.m.Type(), s), nil); err != nil {
		t.Fatal(err)
	}
	p.expect(t, pod.UID, 2*pleg.RelistPeriod,
		plegEvent(pod.UID, pleg.ContainerDied, cid), plegEvent(pod.UID, pleg.ContainerDied, sid))
	cached, err := p.cache.Get(pod.UID)
	if c := cached.FindContainerStatusByName("c0"); err != nil || c == nil || c.State != container.ContainerStateExited {
		t.Fatalf("cache after ContainerDied: %v, %v", describe(cached), err)
	}

	// Removing the sandbox removes its container too; the PLEG drops the pod from the cache.
	if err := r.rs.RemovePodSandbox(ctx, sid); err != nil {
		t.Fatal(err)
	}
	p.expect(t, pod.UID, 2*pleg.RelistPeriod,
		plegEvent(pod.UID, pleg.ContainerRemoved, cid), plegEvent(pod.UID, pleg.ContainerRemoved, sid))
	if cached, err := p.cache.Get(pod.UID); err != nil || len(cached.ContainerStatuses) != 0 || len(cached.SandboxStatuses) != 0 {
		t.Fatalf("cache after the pod was removed: %v (%d sandboxes), %v", describe(cached), len(cached.SandboxStatuses), err)
	}
	if ok, err := p.gen.Healthy(); !ok {
		t.Fatalf("PLEG unhealthy: %v", err)
	}
}
