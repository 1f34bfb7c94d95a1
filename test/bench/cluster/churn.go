package main

// The churn scenario: a node in steady turnover, as under a busy batch or autoscaled
// workload. Per kubelet, one at a time (the other idle without pods): -churn-live pods are
// brought up and settle, then every 1/-churn-rate seconds for -churn-duration one pod is
// created and the oldest deleted (gracefully: the container exits at once on SIGTERM), so
// about -churn-live stay live. Each created pod's create → Ready (from the create call to
// the watch event) is recorded; a pod never seen Ready — deleted at its turn first, or not
// Ready within a live pod's lifetime (-churn-live / -churn-rate) after its create — counts
// as infinitely slow in the percentiles, and is reported. Also the CPU the kubelet and its
// containerd use over the churn window.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"sort"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// churnResults are the churn scenario's figures, per kubelet name.
type churnResults struct {
	// ready are the create → Ready times of the pods created in the churn window that
	// became Ready; never counts those that did not.
	ready map[string][]time.Duration
	never map[string]int
	// cpu is what the kubelet and its containerd used over the window; window its length.
	cpu    map[string][2]time.Duration
	window map[string]time.Duration
	// floor are the start times of the raw CRI churn's pods (see churnfloor.go), floorErr
	// why there are none.
	floor    []time.Duration
	floorErr error
}

func newChurnResults() churnResults {
	return churnResults{ready: map[string][]time.Duration{}, never: map[string]int{},
		cpu: map[string][2]time.Duration{}, window: map[string]time.Duration{}}
}

// churn runs the churn's containerd floor, then the churn scenario on each kubelet in turn.
func (b *bench) churn(ctx context.Context) error {
	if b.o.churnFloorDuration > 0 {
		if err := b.churnFloor(ctx); err != nil {
			return err
		}
	}
	for _, k := range b.kubelets() {
		if err := b.churnOn(ctx, k); err != nil {
			return err
		}
	}
	return nil
}

// churnOn brings -churn-live pods up on k, churns them, waits for the last created, counts,
// and deletes what is left.
func (b *bench) churnOn(ctx context.Context, k *kubelet) error {
	base := podNames("churn-base", b.o.churnLive)
	if _, err := b.createAllReady(ctx, k, benchPod, base); err != nil {
		return err
	}
	// The pods' start-up work (status updates, first stats) must be over.
	if err := b.sleep(ctx, b.o.idleSettle); err != nil {
		return err
	}
	live, created, started, err := b.churnWindow(ctx, k, slices.Clone(base))
	if err != nil {
		return fmt.Errorf("%s: churn: %w; see %s", k.name, err, k.logFile())
	}
	if err := b.churnTail(ctx, k, live, created, started); err != nil {
		return err
	}
	r := &b.results.churn
	r.ready[k.name], r.never[k.name] = createToReady(k, created, started, b.tracker.readyAt)
	fmt.Fprintf(os.Stderr, "bench: %-8s churn: %d created, %d never Ready, p50 %.2f s, p99 %.2f s\n", k.name, len(created),
		r.never[k.name], churnPercentile(r.ready[k.name], r.never[k.name], 0.5), churnPercentile(r.ready[k.name], r.never[k.name], 0.99))
	if _, err := b.deleteAllGone(ctx, k, live); err != nil {
		return err
	}
	// Those deleted in the window are gone too before the next step.
	if _, err := b.tracker.waitAll(ctx, goneTimes, keys(k, append(base, created...)), stepTimeout, b.alive); err != nil {
		return fmt.Errorf("%s: churned pods gone: %w; see %s", k.name, err, k.logFile())
	}
	return b.pause(ctx)
}

// churnWindow creates a pod and deletes the oldest live one every 1/-churn-rate seconds
// for -churn-duration. Each call runs on its own, so a slow answer does not hold back the
// schedule. It notes the CPU used over the window and returns the pods live at its end,
// the pods it created, in order, and when each create call began.
func (b *bench) churnWindow(ctx context.Context, k *kubelet, live []string) ([]string, []string, map[string]time.Time, error) {
	interval := time.Duration(float64(time.Second) / b.o.churnRate)
	var (
		created []string
		started = map[string]time.Time{}
		mu      sync.Mutex
		errs    []error
		wg      sync.WaitGroup
	)
	call := func(f func() error) {
		wg.Go(func() {
			if err := f(); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	failed := func() bool { mu.Lock(); defer mu.Unlock(); return len(errs) > 0 }
	before, err := cpuOf(k)
	if err != nil {
		return nil, nil, nil, err
	}
	start := time.Now()
	for i := 0; time.Duration(i)*interval < b.o.churnDuration && !failed(); i++ {
		if err := b.sleep(ctx, time.Until(start.Add(time.Duration(i)*interval))); err != nil {
			wg.Wait()
			return nil, nil, nil, err
		}
		name, oldest := fmt.Sprintf("churn-%d", i), live[0]
		live = append(live[1:], name)
		created = append(created, name)
		pod := benchPod(b.runID, k.namespace, name, k.node)
		started[name] = time.Now()
		call(func() error {
			_, err := b.client.CoreV1().Pods(k.namespace).Create(ctx, pod, metav1.CreateOptions{})
			return err
		})
		call(func() error { return b.client.CoreV1().Pods(k.namespace).Delete(ctx, oldest, metav1.DeleteOptions{}) })
	}
	wg.Wait()
	after, err := cpuOf(k)
	r := &b.results.churn
	r.window[k.name] = time.Since(start)
	r.cpu[k.name] = [2]time.Duration{after[0] - before[0], after[1] - before[1]}
	return live, created, started, errors.Join(append(errs, err)...)
}

// churnTail gives the pods still live a live pod's lifetime (-churn-live / -churn-rate)
// from their create to become Ready, as long as the others had before their turn to go.
func (b *bench) churnTail(ctx context.Context, k *kubelet, live, created []string, started map[string]time.Time) error {
	if len(created) == 0 {
		return nil
	}
	lifetime := time.Duration(float64(b.o.churnLive) / b.o.churnRate * float64(time.Second))
	deadline := started[created[len(created)-1]].Add(lifetime)
	for time.Now().Before(deadline) {
		if _, missing := b.tracker.latest(readyTimes, keys(k, live)); missing == 0 {
			return nil
		}
		if err := b.sleep(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
	return nil
}

// createToReady is each created pod's create → Ready, for those seen Ready, and how many
// were not.
func createToReady(k *kubelet, created []string, started map[string]time.Time, readyAt func(key string) (time.Time, bool)) ([]time.Duration, int) {
	var ready []time.Duration
	never := 0
	for _, name := range created {
		at, ok := readyAt(k.namespace + "/" + name)
		if !ok {
			never++
			continue
		}
		ready = append(ready, at.Sub(started[name]))
	}
	return ready, never
}

// churnPercentile is the nearest-rank p-quantile (0 < p ≤ 1), in seconds, of the create →
// Ready times of all the pods created, those never Ready ranked after the slowest: +Inf
// when the rank falls among them.
func churnPercentile(ready []time.Duration, never int, p float64) float64 {
	total := len(ready) + never
	if total == 0 {
		return 0
	}
	rank := max(int(math.Ceil(p*float64(total))), 1)
	if rank > len(ready) {
		return math.Inf(1)
	}
	s := append([]time.Duration(nil), ready...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[rank-1].Seconds()
}

// churnRows are the table's rows of the churn scenario.
func (b *bench) churnRows() []row {
	r := b.results.churn
	what := fmt.Sprintf("churn: %g pods/s created and deleted, %d live, %v: create → Ready", b.o.churnRate, b.o.churnLive, b.o.churnDuration)
	pct := func(name string, p float64) float64 { return churnPercentile(r.ready[name], r.never[name], p) }
	rows := []row{}
	for _, q := range []struct {
		name string
		p    float64
		aim  float64
	}{{"p50", 0.5, 0}, {"p90", 0.9, 0}, {"p99", 0.99, 0.7}, {"max", 1, 0}} {
		rows = append(rows, row{what: what + " " + q.name, n: pct("nodelet", q.p), u: pct("upstream", q.p), aim: q.aim, duration: true})
	}
	return append(rows, row{what: "churn: kubelet CPU-seconds over the churn window",
		n: r.cpu["nodelet"][0].Seconds(), u: r.cpu["upstream"][0].Seconds(), duration: true})
}

// printChurnContext prints how many pods each kubelet got Ready and the CPU it and its
// containerd used.
func (b *bench) printChurnContext(out io.Writer) {
	r := b.results.churn
	lifetime := float64(b.o.churnLive) / b.o.churnRate
	fmt.Fprintf(out, "\nchurn: %d pods live, one created and the oldest deleted (gracefully) every %.2f s for %v, one kubelet at a time; a pod never seen Ready (deleted at its turn first, or not Ready %.0f s after its create) ranks as infinitely slow\n",
		b.o.churnLive, 1/b.o.churnRate, b.o.churnDuration, lifetime)
	for _, name := range []string{"nodelet", "upstream"} {
		cpu, window := r.cpu[name], r.window[name].Seconds()
		fmt.Fprintf(out, "  %-8s %d created, %d Ready, %d never Ready; CPU over the %.0f s window: kubelet %.1f s (%.0f ms/s), its containerd %.1f s (%.0f ms/s)\n",
			name, len(r.ready[name])+r.never[name], len(r.ready[name]), r.never[name], window,
			cpu[0].Seconds(), 1000*cpu[0].Seconds()/window, cpu[1].Seconds(), 1000*cpu[1].Seconds()/window)
	}
	b.printChurnFloor(out)
}
