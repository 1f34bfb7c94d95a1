package apiobjects

import (
	"context"
	"fmt"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
)

// DefaultWatchIdle is how long a watched object nobody has read stays watched. Pods read
// the objects their volumes project at every sync (a minute apart by default), so an
// object of a running pod is never idle that long.
const DefaultWatchIdle = 5 * time.Minute

// listWatchFuncs lists and watches the objects of one namespace that a field selector
// selects, through client (which says whether it can stream the initial list).
type listWatchFuncs struct {
	client any
	list   func(ctx context.Context, namespace string, opts metav1.ListOptions) (runtime.Object, error)
	watch  func(ctx context.Context, namespace string, opts metav1.ListOptions) (watch.Interface, error)
}

// watchCache is upstream's "Watch" change-detection strategy, its default, without pod
// registration. The first read of an object starts a watch of that one object (a list
// and watch with metadata.name as the field selector, which the node authorizer allows
// for the objects of the node's pods); once that has listed, reads are served from it
// and cost the API server nothing, where a TTL cache would read each object again every
// few seconds for as long as pods sync. Until then, reads go to the TTL cache.
//
// Upstream stops watching an object when no pod references it any more; here a watch
// nobody has read for idle is stopped. Like upstream, an immutable object is not watched
// once seen: it cannot change, and a deletion changes nothing for the pods that use it.
type watchCache[T object] struct {
	fallback *ttlCache[T]
	lw       listWatchFuncs
	example  runtime.Object // the type the watches decode
	resource schema.GroupResource
	clock    clock.Clock
	idle     time.Duration

	mu        sync.Mutex
	watches   map[types.NamespacedName]*objectWatch
	lastSweep time.Time
}

// objectWatch is the watch of one object.
type objectWatch struct {
	store  cache.Store
	synced func() bool
	stop   context.CancelFunc // nil once stopped (an immutable object's)
	usedAt time.Time          // guarded by watchCache.mu
}

// namespacedListWatch lists and watches through a typed client's namespaced interface
// (core.Secrets, core.ConfigMaps) and client, the clientset it belongs to.
func namespacedListWatch[L runtime.Object, C interface {
	List(ctx context.Context, opts metav1.ListOptions) (L, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
}](client any, in func(namespace string) C) listWatchFuncs {
	return listWatchFuncs{
		client: client,
		list: func(ctx context.Context, namespace string, opts metav1.ListOptions) (runtime.Object, error) {
			return in(namespace).List(ctx, opts)
		},
		watch: func(ctx context.Context, namespace string, opts metav1.ListOptions) (watch.Interface, error) {
			return in(namespace).Watch(ctx, opts)
		},
	}
}

func newWatchCache[T object](fallback *ttlCache[T], lw listWatchFuncs, example runtime.Object, resource schema.GroupResource, idle time.Duration, clk clock.Clock) *watchCache[T] {
	return &watchCache[T]{fallback: fallback, lw: lw, example: example, resource: resource,
		clock: clk, idle: idle, watches: map[types.NamespacedName]*objectWatch{}, lastSweep: clk.Now()}
}

// Get returns the object from its watch once that has listed, else from the TTL cache.
// An object the watch does not hold is a NotFound error worded as upstream's.
func (c *watchCache[T]) Get(ctx context.Context, namespace, name string) (T, error) {
	key := types.NamespacedName{Namespace: namespace, Name: name}
	w := c.watchOf(key)
	if !w.synced() {
		return c.fallback.Get(ctx, namespace, name)
	}
	var zero T
	item, exists, err := w.store.GetByKey(key.String())
	if err != nil {
		return zero, err
	}
	if !exists {
		return zero, apierrors.NewNotFound(c.resource, name)
	}
	obj, ok := item.(T)
	if !ok {
		return zero, apierrors.NewInternalError(fmt.Errorf("unexpected object %T in the %s watch", item, c.resource))
	}
	if isImmutable(item) {
		c.stopWatching(w)
	}
	return obj, nil
}

// watchOf returns key's watch, starting it if there is none, and now and then stops
// the watches nobody has read for idle.
func (c *watchCache[T]) watchOf(key types.NamespacedName) *objectWatch {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.clock.Now()
	if now.Sub(c.lastSweep) >= c.idle/2 {
		for k, w := range c.watches {
			if now.Sub(w.usedAt) >= c.idle {
				c.stopLocked(w)
				delete(c.watches, k)
			}
		}
		c.lastSweep = now
	}
	w, ok := c.watches[key]
	if !ok {
		w = c.start(key)
		c.watches[key] = w
	}
	w.usedAt = now
	return w
}

// start runs a watch of key's object alone.
func (c *watchCache[T]) start(key types.NamespacedName) *objectWatch {
	byName := func(opts *metav1.ListOptions) {
		opts.FieldSelector = fields.OneTermEqualSelector("metadata.name", key.Name).String()
	}
	lw := cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			byName(&opts)
			return c.lw.list(ctx, key.Namespace, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			byName(&opts)
			return c.lw.watch(ctx, key.Namespace, opts)
		},
	}, c.lw.client)
	store, controller := cache.NewInformerWithOptions(cache.InformerOptions{
		ListerWatcher: lw,
		ObjectType:    c.example,
		Handler:       cache.ResourceEventHandlerFuncs{},
		Transform:     dropManagedFields,
	})
	ctx, stop := context.WithCancel(context.Background())
	go controller.RunWithContext(ctx)
	return &objectWatch{store: store, synced: controller.HasSynced, stop: stop}
}

// stopWatching stops w's watch and keeps what it holds.
func (c *watchCache[T]) stopWatching(w *objectWatch) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stopLocked(w)
}

func (c *watchCache[T]) stopLocked(w *objectWatch) {
	if w.stop != nil {
		w.stop()
		w.stop = nil
	}
}

// Stop stops every watch.
func (c *watchCache[T]) Stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, w := range c.watches {
		c.stopLocked(w)
		delete(c.watches, k)
	}
}

// watching is the number of objects watched now (for tests).
func (c *watchCache[T]) watching() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, w := range c.watches {
		if w.stop != nil {
			n++
		}
	}
	return n
}

// isImmutable reports whether obj is a secret or config map marked immutable.
func isImmutable(obj any) bool {
	var im *bool
	switch o := obj.(type) {
	case *v1.Secret:
		im = o.Immutable
	case *v1.ConfigMap:
		im = o.Immutable
	}
	return im != nil && *im
}

// dropManagedFields is the watches' transform: managedFields are never read here.
func dropManagedFields(obj any) (any, error) {
	if o, ok := obj.(metav1.Object); ok {
		o.SetManagedFields(nil)
	}
	return obj, nil
}
