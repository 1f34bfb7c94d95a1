package nodestatus

import (
	"context"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	coreinformers "k8s.io/client-go/informers/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// startWatch watches this Node alone (field selector metadata.name) and keeps it in a
// lister; a deletion makes the status loop register the node again at once. The
// informer is built directly rather than through a SharedInformerFactory: the factory
// links every API group's informers and listers into the binary for this one Node.
func (c *Controller) startWatch(ctx context.Context) {
	informer := coreinformers.NewFilteredNodeInformer(c.client, 0,
		cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc},
		func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector(metav1.ObjectNameField, c.opts.NodeName).String()
		})
	_ = informer.SetTransform(dropManagedFields)
	_, _ = informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		DeleteFunc: func(any) { c.nodeDeleted(ctx) },
		UpdateFunc: func(_, obj any) { c.nodeUpdated(obj) },
	})
	lister := corelisters.NewNodeLister(informer.GetIndexer())
	c.nodeLister.Store(&lister)
	go informer.RunWithContext(ctx)
}

// dropManagedFields is the node informer's transform: the watched Node is read whole
// (status, spec, labels, UID) and handed to the status patch as its original, but its
// managedFields, often larger than the rest of the object, are read by nothing, and the
// status patch is computed between two copies of the same metadata, so dropping them
// changes no patch. Objects that are not Nodes (the informer's DeletedFinalStateUnknown)
// are passed through.
func dropManagedFields(obj any) (any, error) {
	if node, ok := obj.(*v1.Node); ok {
		node.ManagedFields = nil
	}
	return obj, nil
}

// nodeUpdated syncs the status at once when someone else changed the node's Ready
// condition, as the node controller does (Unknown) when a long API outage outlasted its
// grace period: the node is reported Ready again without waiting for the next period.
func (c *Controller) nodeUpdated(obj any) {
	node, ok := obj.(*v1.Node)
	if !ok {
		return
	}
	posted, _ := c.postedReady.Load().(string)
	if posted != "" && string(readyStatus(node)) != posted {
		c.requestResync()
	}
}

func (c *Controller) nodeDeleted(ctx context.Context) {
	klog.FromContext(ctx).Info("Node was deleted from the API server", "node", klog.KRef("", c.opts.NodeName))
	if c.opts.RegisterNode && c.registered.Swap(false) {
		c.requestResync()
	}
}

// NodeSynced reports whether the watch holds this Node (upstream's nodeHasSynced, which
// the API pod source waits for).
func (c *Controller) NodeSynced() bool {
	_, err := c.watchedNode()
	return err == nil
}

// setLeaseOwner makes the Node the Lease's owner, so deleting the Node deletes its
// Lease. A Lease still owned by an earlier Node of the same name (deleted and
// registered again) is given the current one.
func (c *Controller) setLeaseOwner(ctx context.Context) func(*coordinationv1.Lease) error {
	return func(l *coordinationv1.Lease) error {
		node, err := c.watchedNode()
		if err != nil {
			if len(l.OwnerReferences) > 0 {
				return nil
			}
			node, err = c.heartbeat.CoreV1().Nodes().Get(ctx, c.opts.NodeName, metav1.GetOptions{})
			if err != nil {
				klog.FromContext(ctx).Error(err, "Failed to get node when trying to set owner ref to the node lease", "node", klog.KRef("", c.opts.NodeName))
				return err
			}
		}
		for _, ref := range l.OwnerReferences {
			if ref.Kind == "Node" && ref.Name == node.Name && ref.UID == node.UID {
				return nil
			}
		}
		l.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID}}
		return nil
	}
}
