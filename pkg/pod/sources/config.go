package sources

import (
	"context"
	"reflect"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/kubetypes"
)

// updatesBuffer is upstream's buffer between the merge and the kubelet loop.
const updatesBuffer = 50

// Config merges the pods of every source into one consistent state and delivers the
// changes, in order, on Updates as ADD, UPDATE, DELETE, REMOVE and RECONCILE (upstream's
// PodConfig in PodConfigNotificationIncremental mode). Each source gets its own channel;
// pods are kept per source, so two sources may hold pods of the same name (upstream
// leaves that to the kubelet's pod manager).
type Config struct {
	storage *podStorage
	updates chan PodUpdate

	mu       sync.Mutex
	sources  sets.Set[string]
	channels map[string]chan interface{}
}

// NewConfig creates an empty Config. recorder may be nil; it receives the warning events
// for pods dropped for having the same name as another pod of their source.
func NewConfig(recorder record.EventRecorder) *Config {
	updates := make(chan PodUpdate, updatesBuffer)
	return &Config{
		storage:  newPodStorage(updates, recorder),
		updates:  updates,
		sources:  sets.New[string](),
		channels: make(map[string]chan interface{}),
	}
}

// Channel registers source and returns the channel it writes PodUpdates to. Calls with
// the same source return the same channel. The channel is read until ctx ends.
func (c *Config) Channel(ctx context.Context, source string) chan<- interface{} {
	if source == "" {
		panic("sources: Channel given an empty source name")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sources.Insert(source)
	if ch, ok := c.channels[source]; ok {
		return ch
	}
	ch := make(chan interface{})
	c.channels[source] = ch
	go c.listen(ctx, source, ch)
	return ch
}

func (c *Config) listen(ctx context.Context, source string, ch <-chan interface{}) {
	for {
		select {
		case <-ctx.Done():
			return
		case change, ok := <-ch:
			if !ok {
				return
			}
			c.storage.Merge(source, change)
		}
	}
}

// Updates returns the stream of merged changes.
func (c *Config) Updates() <-chan PodUpdate {
	return c.updates
}

// SeenAllSources reports whether seenSources (the sources the caller has seen on
// Updates) covers every registered source, and every registered source has sent at
// least one SET.
func (c *Config) SeenAllSources(seenSources sets.Set[string]) bool {
	c.mu.Lock()
	registered := sets.List(c.sources)
	c.mu.Unlock()
	klog.V(5).InfoS("Looking for sources, have seen", "sources", registered, "seenSources", sets.List(seenSources))
	return seenSources.HasAll(registered...) && c.storage.seenSources(registered...)
}

// Sync delivers the whole merged state as one SET from AllSource (upstream's Sync).
func (c *Config) Sync() {
	c.storage.Sync()
}

// podStorage is the merged state: pods per source, keyed by UID.
type podStorage struct {
	// updateLock makes merges, and so their deliveries, happen one at a time.
	updateLock sync.Mutex
	updates    chan<- PodUpdate

	podLock sync.RWMutex
	pods    map[string]map[types.UID]*v1.Pod
	// folded is the resourceVersion of each API pod last folded into pods: the API
	// source sends all the node's pods at every change, and a pod whose version is the
	// same is the same object, not worth a copy and a deep comparison (with 110 pods
	// starting, those comparisons were a seventh of nodelet's CPU).
	folded map[types.UID]string

	seenLock    sync.RWMutex
	sourcesSeen sets.Set[string]

	recorder record.EventRecorder
	now      func() time.Time
}

func newPodStorage(updates chan<- PodUpdate, recorder record.EventRecorder) *podStorage {
	return &podStorage{
		updates:     updates,
		pods:        make(map[string]map[types.UID]*v1.Pod),
		folded:      make(map[types.UID]string),
		sourcesSeen: sets.New[string](),
		recorder:    recorder,
		now:         time.Now,
	}
}

// changes collects what one merge did, by kind.
type changes struct {
	adds, updates, deletes, removes, reconciles []*v1.Pod
}

// Merge applies one change from source and delivers the resulting updates in upstream's
// order: REMOVE, ADD, UPDATE, DELETE, then RECONCILE. The first SET of a source that adds,
// updates and deletes nothing is still announced with an empty ADD, so the kubelet learns
// the source is ready.
func (s *podStorage) Merge(source string, change interface{}) {
	update, ok := asPodUpdate(change)
	if !ok {
		klog.ErrorS(nil, "Received a change that is not a PodUpdate, ignoring", "source", source, "type", reflect.TypeOf(change))
		return
	}
	s.updateLock.Lock()
	defer s.updateLock.Unlock()

	seenBefore := s.seenSources(source)
	ch := s.merge(source, update)
	firstSet := !seenBefore && s.seenSources(source)

	s.deliver(REMOVE, source, ch.removes)
	s.deliver(ADD, source, ch.adds)
	s.deliver(UPDATE, source, ch.updates)
	s.deliver(DELETE, source, ch.deletes)
	if firstSet && len(ch.adds) == 0 && len(ch.updates) == 0 && len(ch.deletes) == 0 {
		s.updates <- PodUpdate{Pods: []*v1.Pod{}, Op: ADD, Source: source}
	}
	s.deliver(RECONCILE, source, ch.reconciles)
}

func asPodUpdate(change interface{}) (PodUpdate, bool) {
	switch u := change.(type) {
	case PodUpdate:
		return u, true
	case *PodUpdate:
		if u != nil {
			return *u, true
		}
	}
	return PodUpdate{}, false
}

// deliver sends copies, so that the receiver can never alter the stored pods.
func (s *podStorage) deliver(op PodOperation, source string, pods []*v1.Pod) {
	if len(pods) == 0 {
		return
	}
	s.updates <- PodUpdate{Pods: copyPods(pods), Op: op, Source: source}
}

func (s *podStorage) merge(source string, update PodUpdate) changes {
	s.podLock.Lock()
	defer s.podLock.Unlock()

	var ch changes
	pods := s.pods[source]
	if pods == nil {
		pods = make(map[types.UID]*v1.Pod)
	}
	switch update.Op {
	case ADD, UPDATE, DELETE:
		klog.V(4).InfoS("Applying pods from source", "op", update.Op, "source", source, "pods", klog.KObjSlice(update.Pods))
		s.applyPods(source, update.Pods, pods, pods, &ch)
	case REMOVE:
		klog.V(4).InfoS("Removing pods from source", "source", source, "pods", klog.KObjSlice(update.Pods))
		for _, p := range update.Pods {
			if existing, ok := pods[p.UID]; ok {
				delete(pods, p.UID)
				delete(s.folded, p.UID)
				ch.removes = append(ch.removes, existing)
			}
		}
	case SET:
		klog.V(4).InfoS("Setting pods for source", "source", source)
		s.markSourceSet(source)
		old := pods
		pods = make(map[types.UID]*v1.Pod)
		s.applyPods(source, update.Pods, old, pods, &ch)
		for uid, existing := range old {
			if _, kept := pods[uid]; !kept {
				delete(s.folded, uid)
				ch.removes = append(ch.removes, existing)
			}
		}
	default:
		klog.InfoS("Received invalid update type", "op", update.Op, "source", source)
	}
	s.pods[source] = pods
	return ch
}

// applyPods merges incoming pods (copied first: the sender keeps its own) into into,
// comparing against old; old and into may be the same map.
func (s *podStorage) applyPods(source string, incoming []*v1.Pod, old, into map[types.UID]*v1.Pod, ch *changes) {
	for _, ref := range s.dropDuplicateNames(source, incoming) {
		if existing, ok := old[ref.UID]; ok && ref.ResourceVersion != "" && s.folded[ref.UID] == ref.ResourceVersion {
			into[ref.UID] = existing
			continue
		}
		if ref.ResourceVersion != "" {
			s.folded[ref.UID] = ref.ResourceVersion
		}
		ref = ref.DeepCopy()
		if ref.Annotations == nil {
			ref.Annotations = make(map[string]string)
		}
		// Annotate with the source before comparing, as upstream does.
		ref.Annotations[kubetypes.ConfigSourceAnnotationKey] = source
		if existing, ok := old[ref.UID]; ok {
			into[ref.UID] = existing
			switch checkAndUpdatePod(existing, ref) {
			case needUpdate:
				ch.updates = append(ch.updates, existing)
			case needReconcile:
				ch.reconciles = append(ch.reconciles, existing)
			case needGracefulDelete:
				ch.deletes = append(ch.deletes, existing)
			}
			continue
		}
		klog.V(4).InfoS("Receiving a new pod", "pod", klog.KObj(ref))
		ref.Annotations[kubetypes.ConfigFirstSeenAnnotationKey] = s.now().Format(time.RFC3339Nano)
		into[ref.UID] = ref
		ch.adds = append(ch.adds, ref)
	}
}

// dropDuplicateNames keeps the first pod of each full name (upstream's
// filterInvalidPods); the others are logged and recorded as a warning event.
func (s *podStorage) dropDuplicateNames(source string, pods []*v1.Pod) []*v1.Pod {
	names := sets.New[string]()
	kept := make([]*v1.Pod, 0, len(pods))
	for i, pod := range pods {
		name := podFullName(pod)
		if names.Has(name) {
			klog.InfoS("Pod failed validation due to duplicate pod name, ignoring", "index", i, "pod", klog.KObj(pod), "source", source)
			if s.recorder != nil {
				s.recorder.Eventf(pod, v1.EventTypeWarning, "FailedValidation",
					"Error validating pod %s from %s due to duplicate pod name %q, ignoring", podDesc(pod), source, pod.Name)
			}
			continue
		}
		names.Insert(name)
		kept = append(kept, pod)
	}
	return kept
}

func (s *podStorage) markSourceSet(source string) {
	s.seenLock.Lock()
	defer s.seenLock.Unlock()
	s.sourcesSeen.Insert(source)
}

func (s *podStorage) seenSources(sources ...string) bool {
	s.seenLock.RLock()
	defer s.seenLock.RUnlock()
	return s.sourcesSeen.HasAll(sources...)
}

// Sync sends the whole merged state, ordered with the other deliveries.
func (s *podStorage) Sync() {
	s.updateLock.Lock()
	defer s.updateLock.Unlock()
	s.updates <- PodUpdate{Pods: s.mergedState(), Op: SET, Source: kubetypes.AllSource}
}

func (s *podStorage) mergedState() []*v1.Pod {
	s.podLock.RLock()
	defer s.podLock.RUnlock()
	pods := make([]*v1.Pod, 0)
	for _, sourcePods := range s.pods {
		for _, p := range sourcePods {
			pods = append(pods, p.DeepCopy())
		}
	}
	return pods
}

func copyPods(pods []*v1.Pod) []*v1.Pod {
	out := make([]*v1.Pod, 0, len(pods))
	for _, p := range pods {
		out = append(out, p.DeepCopy())
	}
	return out
}
