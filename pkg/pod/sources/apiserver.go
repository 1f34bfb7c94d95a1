package sources

import (
	"context"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/kubetypes"
)

// nodeSyncPollPeriod is how often the API source checks whether the node is known before
// it starts watching pods (upstream's WaitForAPIServerSyncPeriod).
const nodeSyncPollPeriod = 100 * time.Millisecond

// StartSourceAPI watches the pods bound to nodeName (upstream's apiserver source): once
// nodeSynced reports that the node's own object has been read, a reflector lists and
// watches pods with spec.nodeName=<node>, and every change sends the whole set as the
// source's SET. Mirror pods are among them; the kubelet tells them apart. A failed watch is
// retried by the reflector with its own back-off, and a re-list after a long outage is one
// SET, not one update per pod.
func StartSourceAPI(ctx context.Context, client kubernetes.Interface, nodeName types.NodeName, nodeSynced func() bool, updates chan<- interface{}) {
	lw := cache.NewListWatchFromClient(client.CoreV1().RESTClient(), "pods", metav1.NamespaceAll,
		fields.OneTermEqualSelector("spec.nodeName", string(nodeName)))
	go func() {
		klog.InfoS("Waiting for node sync before watching apiserver pods")
		for !nodeSynced() {
			select {
			case <-ctx.Done():
				return
			case <-time.After(nodeSyncPollPeriod):
			}
		}
		klog.InfoS("Watching apiserver")
		send := func(objs []interface{}) {
			pods := make([]*v1.Pod, 0, len(objs))
			for _, o := range objs {
				pods = append(pods, o.(*v1.Pod))
			}
			select {
			case updates <- PodUpdate{Pods: pods, Op: SET, Source: kubetypes.APIServerSource}:
			case <-ctx.Done():
			}
		}
		store := &transformingStore{
			UndeltaStore: cache.NewUndeltaStore(send, cache.MetaNamespaceKeyFunc),
			transform:    dropPodManagedFields,
		}
		cache.NewReflector(lw, &v1.Pod{}, store, 0).Run(ctx.Done())
	}()
}

// dropPodManagedFields is the API source's transform: a pod is handed on whole to the
// pod manager, workers and status manager, but its managedFields (often the largest part
// of its metadata) are read by none of them; the status manager patches a copy it reads
// afresh from the API server. Anything that is not a pod is passed through.
func dropPodManagedFields(obj any) (any, error) {
	if pod, ok := obj.(*v1.Pod); ok {
		pod.ManagedFields = nil
	}
	return obj, nil
}

// transformingStore is an UndeltaStore whose objects go through transform before they are
// stored, as an informer's SetTransform does for its own store: what is dropped is never
// kept, and never sent. It is a cache.TransformingStore, so the reflector's watch-list
// initial store transforms too.
type transformingStore struct {
	*cache.UndeltaStore
	transform cache.TransformFunc
}

var _ cache.TransformingStore = (*transformingStore)(nil)

// Transformer returns the store's transform.
func (s *transformingStore) Transformer() cache.TransformFunc { return s.transform }

// Add stores the transformed obj.
func (s *transformingStore) Add(obj any) error {
	obj, err := s.transform(obj)
	if err != nil {
		return err
	}
	return s.UndeltaStore.Add(obj)
}

// Update stores the transformed obj.
func (s *transformingStore) Update(obj any) error {
	obj, err := s.transform(obj)
	if err != nil {
		return err
	}
	return s.UndeltaStore.Update(obj)
}

// Replace stores the transformed list.
func (s *transformingStore) Replace(list []any, resourceVersion string) error {
	out := make([]any, len(list))
	for i, obj := range list {
		t, err := s.transform(obj)
		if err != nil {
			return err
		}
		out[i] = t
	}
	return s.UndeltaStore.Replace(out, resourceVersion)
}
