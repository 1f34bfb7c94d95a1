package main

// The churn's containerd floor: the same churn by direct CRI calls on nodelet's rig, with
// nodelet frozen (SIGSTOP; it would rightly remove pods nobody asked it for). -churn-live
// pods are started at once; then every 1/-churn-rate seconds one pod is started
// (RunPodSandbox, CreateContainer, StartContainer, its configs made before the clock) and
// the oldest stopped and removed, for -churn-floor-duration, after the same settle as a
// kubelet's churn has. A started pod's time from its
// RunPodSandbox call to StartContainer's return is what no kubelet's create → Ready can
// beat: the percentiles of those times, against each kubelet's, say how much of its
// create → Ready is its own. The frozen nodelet's lease lapses meanwhile and its Node goes
// NotReady; the step waits for it to be Ready again.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	internalapi "k8s.io/cri-api/pkg/apis"
)

// churnRawPod is a raw pod of the churn floor; started is closed once its start returned,
// so that its removal, a lifetime later, never races it.
type churnRawPod struct {
	rawPod
	started chan struct{}
}

func (b *bench) newChurnRawPod(ctx context.Context, name string) (*churnRawPod, error) {
	p, err := b.newRawPod(ctx, name)
	return &churnRawPod{rawPod: p, started: make(chan struct{})}, err
}

// churnFloor runs the floor's churn and records its start times, or why there are none.
func (b *bench) churnFloor(ctx context.Context) error {
	r := &b.results.churn
	took, err := b.rawChurn(ctx, b.rawRuntime)
	if err == nil {
		err = b.waitNodeReady(ctx, b.nodelet)
	}
	if err != nil {
		if ctx.Err() != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "bench: raw CRI churn failed, no churn floor: %v\n", err)
		r.floorErr = err
		return b.pause(ctx)
	}
	r.floor = took
	fmt.Fprintf(os.Stderr, "bench: raw CRI churn: %d started, p50 %.2f s, p99 %.2f s\n",
		len(took), churnPercentile(took, 0, 0.5), churnPercentile(took, 0, 0.99))
	return b.pause(ctx)
}

// rawChurn starts the base pods, churns for -churn-floor-duration and removes what is
// left, nodelet frozen throughout. It returns the churned pods' start times.
func (b *bench) rawChurn(ctx context.Context, rs internalapi.RuntimeService) ([]time.Duration, error) {
	live := make([]*churnRawPod, b.o.churnLive)
	for i := range live {
		p, err := b.newChurnRawPod(ctx, fmt.Sprintf("raw-churn-base-%d", i))
		if err != nil {
			return nil, err
		}
		live[i] = p
	}
	rec := &churnRecord{}
	err := b.freeze([]*kubelet{b.nodelet}, func() error { return b.rawChurnFrozen(ctx, rs, live, rec) })
	return rec.took, err
}

// rawChurnFrozen is rawChurn's part while nodelet is frozen.
func (b *bench) rawChurnFrozen(ctx context.Context, rs internalapi.RuntimeService, live []*churnRawPod, rec *churnRecord) error {
	for _, p := range live {
		rec.start(ctx, rs, p, false)
	}
	rec.wg.Wait()
	if err := rec.err(); err != nil {
		rec.removeAll(ctx, rs, live)
		return fmt.Errorf("base pods: %w", err)
	}
	// As before a kubelet's churn: the base pods' start-up work (shims, networks) must be
	// over.
	if err := b.sleep(ctx, b.o.idleSettle); err != nil {
		rec.removeAll(ctx, rs, live)
		return err
	}
	windowStart := time.Now()
	live, err := b.rawChurnWindow(ctx, rs, live, rec)
	rec.removeAll(ctx, rs, live)
	if s := rec.slowest; s.name != "" {
		fmt.Fprintf(os.Stderr, "bench: raw CRI churn: slowest start %s, %.2f s, begun %.1f s into the window\n",
			s.name, s.took.Seconds(), s.at.Sub(windowStart).Seconds())
	}
	return errors.Join(err, rec.err())
}

// rawChurnWindow starts a pod and removes the oldest every 1/-churn-rate seconds for
// -churn-floor-duration, and returns the pods live at its end.
func (b *bench) rawChurnWindow(ctx context.Context, rs internalapi.RuntimeService, live []*churnRawPod, rec *churnRecord) ([]*churnRawPod, error) {
	interval := time.Duration(float64(time.Second) / b.o.churnRate)
	start := time.Now()
	for i := 0; time.Duration(i)*interval < b.o.churnFloorDuration && rec.err() == nil; i++ {
		p, err := b.newChurnRawPod(ctx, fmt.Sprintf("raw-churn-%d", i))
		if err != nil {
			rec.wg.Wait()
			return live, err
		}
		if err := b.sleep(ctx, time.Until(start.Add(time.Duration(i)*interval))); err != nil {
			rec.wg.Wait()
			return live, err
		}
		oldest := live[0]
		live = append(live[1:], p)
		rec.start(ctx, rs, p, true)
		rec.remove(ctx, rs, oldest)
	}
	rec.wg.Wait()
	return live, nil
}

// churnRecord runs the floor's CRI calls, each on its own, and keeps their start times
// and errors.
type churnRecord struct {
	wg      sync.WaitGroup
	mu      sync.Mutex
	took    []time.Duration
	slowest rawStart // the slowest timed start, for the progress line
	errs    []error
}

// rawStart is one raw pod's start: its name, when it began and how long it took.
type rawStart struct {
	name string
	at   time.Time
	took time.Duration
}

// start starts p; timed says whether its start time counts.
func (c *churnRecord) start(ctx context.Context, rs internalapi.RuntimeService, p *churnRawPod, timed bool) {
	c.wg.Go(func() {
		defer close(p.started)
		t0 := time.Now()
		if err := p.start(ctx, rs); err != nil {
			c.fail(err)
		} else if timed {
			c.add(rawStart{name: p.sandbox.GetMetadata().GetName(), at: t0, took: time.Since(t0)})
		}
	})
}

// remove stops and removes p once its start has returned.
func (c *churnRecord) remove(ctx context.Context, rs internalapi.RuntimeService, p *churnRawPod) {
	c.wg.Go(func() {
		<-p.started
		if err := p.remove(ctx, rs); err != nil {
			c.fail(err)
		}
	})
}

// removeAll removes the pods and waits for the removals.
func (c *churnRecord) removeAll(ctx context.Context, rs internalapi.RuntimeService, pods []*churnRawPod) {
	for _, p := range pods {
		c.remove(ctx, rs, p)
	}
	c.wg.Wait()
}

// add keeps a timed start.
func (c *churnRecord) add(s rawStart) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.took = append(c.took, s.took)
	if s.took > c.slowest.took {
		c.slowest = s
	}
}

func (c *churnRecord) fail(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.errs = append(c.errs, err)
}

func (c *churnRecord) err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return errors.Join(c.errs...)
}

// printChurnFloor prints the floor's percentiles and each kubelet's above it.
func (b *bench) printChurnFloor(out io.Writer) {
	r := b.results.churn
	if r.floorErr != nil {
		fmt.Fprintf(out, "  no churn floor: the raw CRI churn failed: %v\n", r.floorErr)
		return
	}
	if len(r.floor) == 0 {
		return
	}
	pct := func(p float64) float64 { return churnPercentile(r.floor, 0, p) }
	fmt.Fprintf(out, "  containerd floor, the same churn by direct CRI calls on nodelet's rig (nodelet frozen) for %v, RunPodSandbox → StartContainer returned: p50 %.2f s, p90 %.2f s, p99 %.2f s, max %.2f s (%d pods)\n",
		b.o.churnFloorDuration, pct(0.5), pct(0.9), pct(0.99), pct(1), len(r.floor))
	for _, q := range []struct {
		name string
		p    float64
	}{{"p50", 0.5}, {"p99", 0.99}} {
		n := churnPercentile(r.ready["nodelet"], r.never["nodelet"], q.p) - pct(q.p)
		u := churnPercentile(r.ready["upstream"], r.never["upstream"], q.p) - pct(q.p)
		fmt.Fprintf(out, "  each kubelet's create → Ready %s above the floor's (counts the API's and the watch's part): nodelet %+.2f s, upstream %+.2f s%s\n",
			q.name, n, u, ratioNote(n, u))
	}
}

// ratioNote is ", ratio X" when both are above zero.
func ratioNote(n, u float64) string {
	if n <= 0 || u <= 0 {
		return ""
	}
	return fmt.Sprintf(", ratio %.2f", n/u)
}
