package kuberuntime

import (
	"context"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodelet/nodelet/pkg/kubetypes"
)

func gatePod(name string) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{
		kubetypes.ConfigSourceAnnotationKey: kubetypes.APIServerSource}}}
}

// acquireAsync starts an acquire and returns the channel its release arrives on.
func acquireAsync(t *testing.T, ctx context.Context, g *startGate, pod *v1.Pod, priority int) chan func() {
	t.Helper()
	got := make(chan func(), 1)
	go func() {
		release, err := g.acquire(ctx, pod, priority)
		if err == nil {
			got <- release
		}
	}()
	return got
}

func waitQueued(t *testing.T, g *startGate, priority, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		g.mu.Lock()
		queued := len(g.waiting[priority])
		g.mu.Unlock()
		if queued == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d waiting at priority %d, want %d", queued, priority, n)
		}
		time.Sleep(time.Millisecond)
	}
}

func notYet(t *testing.T, got chan func(), what string) {
	t.Helper()
	select {
	case <-got:
		t.Fatalf("%s got a slot", what)
	case <-time.After(20 * time.Millisecond):
	}
}

func granted(t *testing.T, got chan func(), what string) func() {
	t.Helper()
	select {
	case release := <-got:
		return release
	case <-time.After(5 * time.Second):
		t.Fatalf("%s got no slot", what)
		return nil
	}
}

// With the slots taken, a container of a pod that has its sandbox goes before a new
// sandbox that asked first; a release hands the slot on.
func TestStartGateContainersGoBeforeNewSandboxes(t *testing.T) {
	g := newStartGate(1, time.Hour)
	ctx := context.Background()
	first, err := g.acquire(ctx, gatePod("a"), sandboxPriority)
	if err != nil {
		t.Fatal(err)
	}
	sandbox := acquireAsync(t, ctx, g, gatePod("b"), sandboxPriority)
	waitQueued(t, g, sandboxPriority, 1)
	ctr := acquireAsync(t, ctx, g, gatePod("a"), containerPriority)
	waitQueued(t, g, containerPriority, 1)
	notYet(t, sandbox, "a sandbox beyond the limit")

	first()
	first() // a second release changes nothing
	release := granted(t, ctr, "the container")
	notYet(t, sandbox, "the new sandbox, before the container's release")
	release()
	granted(t, sandbox, "the new sandbox")()
	if g.free != 1 {
		t.Errorf("%d slots free after every release, want 1", g.free)
	}
}

// A slot held past maxHold is given back: a hung runtime call slows the others only
// that long.
func TestStartGateTakesBackAHeldSlot(t *testing.T) {
	g := newStartGate(1, 50*time.Millisecond)
	ctx := context.Background()
	hung, err := g.acquire(ctx, gatePod("hung"), sandboxPriority)
	if err != nil {
		t.Fatal(err)
	}
	defer hung()
	start := time.Now()
	granted(t, acquireAsync(t, ctx, g, gatePod("next"), sandboxPriority), "a pod behind a hung start")()
	if waited := time.Since(start); waited < 40*time.Millisecond {
		t.Errorf("waited %v, want about maxHold", waited)
	}
	hung() // late: the slot was given back already
	if g.free != 1 {
		t.Errorf("%d slots free, want 1", g.free)
	}
}

// A waiter whose context ends leaves the queue without taking a slot.
func TestStartGateWaiterGivesUp(t *testing.T) {
	g := newStartGate(1, time.Hour)
	held, err := g.acquire(context.Background(), gatePod("a"), sandboxPriority)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := g.acquire(ctx, gatePod("b"), sandboxPriority)
		errc <- err
	}()
	waitQueued(t, g, sandboxPriority, 1)
	cancel()
	if err := <-errc; err != context.Canceled {
		t.Fatalf("err %v, want context.Canceled", err)
	}
	waitQueued(t, g, sandboxPriority, 0)
	held()
	if g.free != 1 {
		t.Errorf("%d slots free, want 1", g.free)
	}
}

// Critical pods never wait, and a nil gate bounds nothing.
func TestStartGateCriticalPodsAndNoBound(t *testing.T) {
	g := newStartGate(1, time.Hour)
	ctx := context.Background()
	held, _ := g.acquire(ctx, gatePod("a"), sandboxPriority)
	defer held()
	static := gatePod("static")
	static.Annotations[kubetypes.ConfigSourceAnnotationKey] = kubetypes.FileSource
	priority := int32(kubetypes.SystemCriticalPriority)
	critical := gatePod("critical")
	critical.Spec.Priority = &priority
	for _, pod := range []*v1.Pod{static, critical} {
		granted(t, acquireAsync(t, ctx, g, pod, sandboxPriority), pod.Name)()
	}
	if g.free != 0 {
		t.Errorf("a critical pod's start took or gave a slot: %d free", g.free)
	}
	if newStartGate(0, time.Hour) != nil {
		t.Fatal("limit 0 made a gate")
	}
	var none *startGate
	for range 3 {
		release, err := none.acquire(ctx, gatePod("x"), sandboxPriority)
		if err != nil {
			t.Fatal(err)
		}
		release()
	}
}
