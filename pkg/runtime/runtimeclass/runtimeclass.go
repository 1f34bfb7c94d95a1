// Package runtimeclass resolves a pod's runtimeClassName to the runtime handler its sandbox
// is run with (RuntimeClass.handler), as upstream's runtimeclass manager does: RuntimeClasses
// are watched from the API server and looked up by name when a sandbox is created. A class
// that does not exist fails the sandbox with the API's NotFound error, so the pod waits
// and retries rather than running under the runtime's default handler.
package runtimeclass

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/util/wait"
	nodeinformers "k8s.io/client-go/informers/node/v1"
	"k8s.io/client-go/kubernetes"
	nodelisters "k8s.io/client-go/listers/node/v1"
	"k8s.io/client-go/tools/cache"
)

// syncWait bounds how long the first lookups wait for the RuntimeClasses to be listed, so
// that pods created at start-up are not failed for a class that exists.
const syncWait = 10 * time.Second

// Manager looks RuntimeClasses up in a watched cache.
type Manager struct {
	informer cache.SharedIndexInformer
	lister   nodelisters.RuntimeClassLister
}

// NewManager watches the RuntimeClasses of client; Start runs the watch.
func NewManager(client kubernetes.Interface) *Manager {
	informer := nodeinformers.NewRuntimeClassInformer(client, 0, cache.Indexers{})
	// Only the handler is ever read: keep managedFields out of memory.
	_ = informer.SetTransform(func(obj any) (any, error) {
		if m, err := meta.Accessor(obj); err == nil {
			m.SetManagedFields(nil)
		}
		return obj, nil
	})
	return &Manager{informer: informer, lister: nodelisters.NewRuntimeClassLister(informer.GetIndexer())}
}

// Start watches RuntimeClasses until stop is closed.
func (m *Manager) Start(stop <-chan struct{}) { go m.informer.Run(stop) }

// LookupRuntimeHandler returns the handler of the RuntimeClass name; no name (or "") is
// the runtime's default handler, "". A missing class returns the API's NotFound error
// (runtimeclass.node.k8s.io "name" not found), as upstream's does.
func (m *Manager) LookupRuntimeHandler(name *string) (string, error) {
	if name == nil || *name == "" {
		return "", nil
	}
	if !m.waitForSync() {
		return "", fmt.Errorf("failed to lookup RuntimeClass %s: the RuntimeClasses are not listed from the API server yet", *name)
	}
	rc, err := m.lister.Get(*name)
	if err != nil {
		if apierrors.IsNotFound(err) {
			return "", err
		}
		return "", fmt.Errorf("failed to lookup RuntimeClass %s: %v", *name, err)
	}
	return rc.Handler, nil
}

func (m *Manager) waitForSync() bool {
	if m.informer.HasSynced() {
		return true
	}
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, syncWait, true,
		func(context.Context) (bool, error) { return m.informer.HasSynced(), nil })
	return err == nil
}

// Standalone resolves runtime classes on a node without an API server: only the default
// class. Upstream's kubelet ignores runtimeClassName there and runs the pod under the
// default handler; nodelet refuses the sandbox instead, since a pod that asked for an
// isolating runtime (gVisor, Kata) must not silently run under runc.
type Standalone struct{}

// LookupRuntimeHandler is "" for no class and an error naming the class otherwise.
func (Standalone) LookupRuntimeHandler(name *string) (string, error) {
	if name == nil || *name == "" {
		return "", nil
	}
	return "", fmt.Errorf("RuntimeClass %q cannot be resolved: nodelet runs standalone, with no API server to read RuntimeClasses from", *name)
}
