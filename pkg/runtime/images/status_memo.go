package images

import (
	"context"
	"sync"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/pkg/runtime/container"
)

// statusMemo remembers, for one pod sync, what the runtime answered to ImageStatus for each
// image. Upstream asks for every container it starts twice (GetImageRef in
// EnsureImageExists, then getImageUser while generating the config) and once more after a
// pull (the image size for the Pulled event); with the memo one answer serves all of them.
// Asks for the same image at the same time share one call. A failed call is not kept, so
// the next ask tries again, and a pull forgets the image, whose status it changed.
type statusMemo struct {
	mu      sync.Mutex
	entries map[memoKey]*memoEntry
}

// memoKey names an image as a sync asks for it. The spec's annotations are the pod's, the
// same for every image of one sync, so they are left out.
type memoKey struct{ image, runtimeHandler string }

type memoEntry struct {
	done chan struct{} // closed once img and err are set
	img  *runtimeapi.Image
	err  error
}

type statusMemoKey struct{}

// WithImageStatusMemo returns a context under which RuntimeImages asks the runtime for the
// status of each image at most once (until it pulls that image). Use one per pod sync: the
// answers are only as fresh as the sync.
func WithImageStatusMemo(ctx context.Context) context.Context {
	return context.WithValue(ctx, statusMemoKey{}, &statusMemo{entries: map[memoKey]*memoEntry{}})
}

func memoFrom(ctx context.Context) *statusMemo {
	m, _ := ctx.Value(statusMemoKey{}).(*statusMemo)
	return m
}

func keyOf(spec container.ImageSpec) memoKey {
	return memoKey{image: spec.Image, runtimeHandler: spec.RuntimeHandler}
}

// status returns the remembered answer for spec, or asks (once, however many wait for it).
func (m *statusMemo) status(ctx context.Context, spec container.ImageSpec, ask func() (*runtimeapi.Image, error)) (*runtimeapi.Image, error) {
	key := keyOf(spec)
	m.mu.Lock()
	if e, ok := m.entries[key]; ok {
		m.mu.Unlock()
		select {
		case <-e.done:
			return e.img, e.err
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	e := &memoEntry{done: make(chan struct{})}
	m.entries[key] = e
	m.mu.Unlock()

	e.img, e.err = ask()
	if e.err != nil {
		m.forgetEntry(key, e)
	}
	close(e.done)
	return e.img, e.err
}

// forget drops what is remembered of spec: it was pulled, its status has changed.
func (m *statusMemo) forget(spec container.ImageSpec) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.entries, keyOf(spec))
}

// forgetEntry drops e unless another ask has replaced it already.
func (m *statusMemo) forgetEntry(key memoKey, e *memoEntry) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.entries[key] == e {
		delete(m.entries, key)
	}
}
