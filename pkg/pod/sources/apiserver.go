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
		store := cache.NewUndeltaStore(send, cache.MetaNamespaceKeyFunc)
		cache.NewReflector(lw, &v1.Pod{}, store, 0).Run(ctx.Done())
	}()
}
