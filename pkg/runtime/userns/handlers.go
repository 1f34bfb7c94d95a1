package userns

import (
	"context"
	"fmt"
	"sync"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
)

// statusTTL is how long a runtime status answer is reused: upstream's kubelet reads
// the handlers from its runtime state, refreshed every 5 s.
const statusTTL = 5 * time.Second

// StatusReader is the part of the CRI runtime service RuntimeHandlers needs.
type StatusReader interface {
	Status(ctx context.Context, verbose bool) (*runtimeapi.StatusResponse, error)
}

// RuntimeHandlers implements HandlerSupport from the runtime's CRI Status: its
// runtime_handlers and their features (user_namespaces, recursive_read_only_mounts). A runtime that lists no handlers
// (containerd 1.6, and any runtime older than the field) supports none.
type RuntimeHandlers struct {
	runtime StatusReader
	now     func() time.Time

	mu       sync.Mutex
	handlers []*runtimeapi.RuntimeHandler
	at       time.Time
	valid    bool
}

// NewRuntimeHandlers asks runtime for its handlers at most every 5 s.
func NewRuntimeHandlers(runtime StatusReader) *RuntimeHandlers {
	return &RuntimeHandlers{runtime: runtime, now: time.Now}
}

// SupportsUserNamespaces reports the handler's user_namespaces feature; a handler the
// runtime does not list is an error, as upstream.
func (r *RuntimeHandlers) SupportsUserNamespaces(ctx context.Context, runtimeHandler string) (bool, error) {
	handlers, err := r.list(ctx)
	if err != nil {
		return false, err
	}
	if len(handlers) == 0 {
		return false, nil
	}
	for _, h := range handlers {
		if h.GetName() == runtimeHandler {
			return h.GetFeatures().GetUserNamespaces(), nil
		}
	}
	return false, fmt.Errorf("the handler %q is not known", runtimeHandler)
}

// SupportsRecursiveReadOnlyMounts reports the handler's recursive_read_only_mounts
// feature; a runtime that lists no handlers, or not this one, supports none (upstream's
// runtimeHandlerSupportsRecursiveReadOnlyMounts).
func (r *RuntimeHandlers) SupportsRecursiveReadOnlyMounts(ctx context.Context, runtimeHandler string) bool {
	handlers, err := r.list(ctx)
	if err != nil {
		return false
	}
	for _, h := range handlers {
		if h.GetName() == runtimeHandler {
			return h.GetFeatures().GetRecursiveReadOnlyMounts()
		}
	}
	if len(handlers) > 0 {
		klog.ErrorS(nil, "Unknown runtime handler", "runtimeHandlerName", runtimeHandler)
	}
	return false
}

// list returns the runtime's handlers, from the cache while it is fresh.
func (r *RuntimeHandlers) list(ctx context.Context) ([]*runtimeapi.RuntimeHandler, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.valid && r.now().Sub(r.at) < statusTTL {
		return r.handlers, nil
	}
	resp, err := r.runtime.Status(ctx, false)
	if err != nil {
		return nil, fmt.Errorf("runtime status: %w", err)
	}
	r.handlers, r.at, r.valid = resp.GetRuntimeHandlers(), r.now(), true
	return r.handlers, nil
}
