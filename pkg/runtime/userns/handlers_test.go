package userns

import (
	"context"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

type statusReader struct{ handlers []*runtimeapi.RuntimeHandler }

func (s statusReader) Status(context.Context, bool) (*runtimeapi.StatusResponse, error) {
	return &runtimeapi.StatusResponse{RuntimeHandlers: s.handlers}, nil
}

// The handlers' features as the runtime lists them (containerd 2.x); a runtime that lists
// none (containerd 1.6) supports neither.
func TestRuntimeHandlerFeatures(t *testing.T) {
	h := NewRuntimeHandlers(statusReader{handlers: []*runtimeapi.RuntimeHandler{
		{Name: "", Features: &runtimeapi.RuntimeHandlerFeatures{RecursiveReadOnlyMounts: true, UserNamespaces: true}},
		{Name: "test-handler", Features: &runtimeapi.RuntimeHandlerFeatures{}},
	}})
	ctx := context.Background()
	if !h.SupportsRecursiveReadOnlyMounts(ctx, "") || h.SupportsRecursiveReadOnlyMounts(ctx, "test-handler") || h.SupportsRecursiveReadOnlyMounts(ctx, "gone") {
		t.Error("recursive read-only support does not follow the listed features")
	}
	if ok, err := h.SupportsUserNamespaces(ctx, ""); !ok || err != nil {
		t.Errorf("user namespaces on the default handler: %v, %v", ok, err)
	}
	old := NewRuntimeHandlers(statusReader{})
	if old.SupportsRecursiveReadOnlyMounts(ctx, "") {
		t.Error("a runtime listing no handlers supports recursive read-only mounts")
	}
}
