package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/nodelet/nodelet/test/internal/testpods"
)

const (
	image = testpods.Image
	// benchLabel marks every pod of a run (value: the run's id); the watch selects on it.
	benchLabel = "nodelet-bench"
	// containerScript exits at once on SIGTERM, so deletion measures the kubelet rather
	// than the grace period.
	containerScript = testpods.SleepScript
)

// podKind makes one of a scenario's pods: name, in namespace, pinned to node.
type podKind func(runID, namespace, name, node string) *v1.Pod

// benchPod is the pod both kubelets run: one busybox container, no probes, pinned to the
// node with spec.nodeName (no scheduler in the path), no service account token (the
// volumes scenario measures volumes apart, see volumes.go), DNS from the node (no cluster
// DNS on this control plane).
func benchPod(runID, namespace, name, node string) *v1.Pod {
	return testpods.Sleeper(namespace, name, node, map[string]string{benchLabel: runID})
}

// tracker watches the run's pods (one informer on the bench label) and records when each
// was first seen, first seen Ready=True and seen deleted. The times are taken in the
// event handlers, so how often a waiter looks at them does not change them.
type tracker struct {
	mu    sync.Mutex
	added map[string]time.Time // namespace/name
	ready map[string]time.Time
	gone  map[string]time.Time
	// store is the informer's: the pods not yet deleted, for the pods a controller names.
	store cache.Store
}

func startTracker(ctx context.Context, client kubernetes.Interface, runID string) (*tracker, error) {
	t := &tracker{added: map[string]time.Time{}, ready: map[string]time.Time{}, gone: map[string]time.Time{}}
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTweakListOptions(
		func(o *metav1.ListOptions) { o.LabelSelector = benchLabel + "=" + runID }))
	inf := factory.Core().V1().Pods().Informer()
	t.store = inf.GetStore()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    t.add,
		UpdateFunc: func(_, obj any) { t.seen(obj) },
		DeleteFunc: t.deleted,
	}); err != nil {
		return nil, err
	}
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return nil, errors.New("pod watch did not sync")
	}
	return t, nil
}

func (t *tracker) add(obj any) {
	if pod, ok := obj.(*v1.Pod); ok {
		now := time.Now()
		key := pod.Namespace + "/" + pod.Name
		t.mu.Lock()
		if _, done := t.added[key]; !done {
			t.added[key] = now
		}
		t.mu.Unlock()
	}
	t.seen(obj)
}

func (t *tracker) seen(obj any) {
	pod, ok := obj.(*v1.Pod)
	if !ok || !podReady(pod) {
		return
	}
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	key := pod.Namespace + "/" + pod.Name
	if _, done := t.ready[key]; !done {
		t.ready[key] = now
	}
}

func (t *tracker) deleted(obj any) {
	now := time.Now()
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	pod, ok := obj.(*v1.Pod)
	if !ok {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.gone[pod.Namespace+"/"+pod.Name] = now
}

func podReady(pod *v1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == v1.PodReady {
			return c.Status == v1.ConditionTrue
		}
	}
	return false
}

// waitAll waits until every key has a time in the map which selects, and returns the
// latest of them. It gives up when alive fails.
func (t *tracker) waitAll(ctx context.Context, which func(*tracker) map[string]time.Time, keys []string, timeout time.Duration, alive func() error) (time.Time, error) {
	deadline := time.Now().Add(timeout)
	for {
		last, missing := t.latest(which, keys)
		if missing == 0 {
			return last, nil
		}
		if err := alive(); err != nil {
			return time.Time{}, err
		}
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("%d of %d pods (%s, ...) not there within %v", missing, len(keys), keys[0], timeout)
		}
		select {
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func (t *tracker) latest(which func(*tracker) map[string]time.Time, keys []string) (time.Time, int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var last time.Time
	missing := 0
	m := which(t)
	for _, k := range keys {
		at, ok := m[k]
		if !ok {
			missing++
		} else if at.After(last) {
			last = at
		}
	}
	return last, missing
}

// offsets returns, sorted, how long after start each key's time in the map which selects
// came; keys without one are left out.
func (t *tracker) offsets(which func(*tracker) map[string]time.Time, keys []string, start time.Time) []time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	m := which(t)
	var out []time.Duration
	for _, k := range keys {
		if at, ok := m[k]; ok {
			out = append(out, max(0, at.Sub(start)))
		}
	}
	slices.Sort(out)
	return out
}

func addedTimes(t *tracker) map[string]time.Time { return t.added }
func readyTimes(t *tracker) map[string]time.Time { return t.ready }
func goneTimes(t *tracker) map[string]time.Time  { return t.gone }

// readyAt is when the pod of key was first seen Ready, if it was.
func (t *tracker) readyAt(key string) (time.Time, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	at, ok := t.ready[key]
	return at, ok
}

// keysWith are the keys of the tracked pods not yet deleted whose label has value, sorted.
func (t *tracker) keysWith(label, value string) []string {
	var keys []string
	for _, obj := range t.store.List() {
		if pod, ok := obj.(*v1.Pod); ok && pod.Labels[label] == value {
			keys = append(keys, pod.Namespace+"/"+pod.Name)
		}
	}
	sort.Strings(keys)
	return keys
}

// forEach runs f for every name at once and returns their errors joined.
func forEach(names []string, f func(name string) error) error {
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Go(func() { errs[i] = f(name) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// createPods creates the pods (of kind) on k's node, all at once, and returns when it began.
func (b *bench) createPods(ctx context.Context, k *kubelet, kind podKind, names []string) (time.Time, error) {
	pods := make(map[string]*v1.Pod, len(names))
	for _, n := range names {
		pods[n] = kind(b.runID, k.namespace, n, k.node)
	}
	start := time.Now()
	return start, forEach(names, func(name string) error {
		_, err := b.client.CoreV1().Pods(k.namespace).Create(ctx, pods[name], metav1.CreateOptions{})
		return err
	})
}

// deletePods deletes the pods (with their grace period), all at once, and returns when it
// began.
func (b *bench) deletePods(ctx context.Context, k *kubelet, names []string) (time.Time, error) {
	start := time.Now()
	return start, forEach(names, func(name string) error {
		return b.client.CoreV1().Pods(k.namespace).Delete(ctx, name, metav1.DeleteOptions{})
	})
}

// keys are the tracker's keys of k's pods.
func keys(k *kubelet, names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = k.namespace + "/" + n
	}
	return out
}
