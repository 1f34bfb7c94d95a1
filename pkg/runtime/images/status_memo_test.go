package images

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	critest "k8s.io/cri-api/pkg/apis/testing"

	"github.com/nodelet/nodelet/pkg/runtime/container"
)

func countCalls(fake *critest.FakeImageService, name string) int {
	fake.Lock()
	defer fake.Unlock()
	n := 0
	for _, c := range fake.Called {
		if c == name {
			n++
		}
	}
	return n
}

func TestImageStatusMemoAsksOncePerImage(t *testing.T) {
	fake := critest.NewFakeImageService()
	fake.SetFakeImages([]string{"busybox:1.36", "pause:3.10"})
	r := NewRuntimeImages(fake)
	ctx := WithImageStatusMemo(context.Background())
	busybox := container.ImageSpec{Image: "busybox:1.36"}

	for range 3 {
		if ref, err := r.GetImageRef(ctx, busybox); err != nil || ref != "busybox:1.36" {
			t.Fatalf("GetImageRef = %q, %v", ref, err)
		}
	}
	if _, err := r.GetImageSize(ctx, busybox); err != nil {
		t.Fatal(err)
	}
	if _, err := r.GetImageRef(ctx, container.ImageSpec{Image: "pause:3.10"}); err != nil {
		t.Fatal(err)
	}
	if n := countCalls(fake, "ImageStatus"); n != 2 {
		t.Errorf("ImageStatus called %d times for two images under one memo, want 2", n)
	}

	// Without a memo every question goes to the runtime.
	_, _ = r.GetImageRef(context.Background(), busybox)
	_, _ = r.GetImageRef(context.Background(), busybox)
	if n := countCalls(fake, "ImageStatus"); n != 4 {
		t.Errorf("ImageStatus called %d times in all, want 4", n)
	}
}

func TestImageStatusMemoForgetsFailuresAndPulls(t *testing.T) {
	fake := critest.NewFakeImageService()
	r := NewRuntimeImages(fake)
	ctx := WithImageStatusMemo(context.Background())
	spec := container.ImageSpec{Image: "busybox:1.36"}

	fake.InjectError("ImageStatus", errors.New("boom"))
	if _, err := r.GetImageRef(ctx, spec); err == nil {
		t.Fatal("the runtime's error was hidden")
	}
	// The failure is not remembered: the next question asks again.
	if ref, err := r.GetImageRef(ctx, spec); err != nil || ref != "" {
		t.Fatalf("GetImageRef after a failure = %q, %v; want an absent image", ref, err)
	}
	// A pull changes the answer: the memo must not keep "absent".
	if _, err := r.PullImage(ctx, spec, nil, nil); err != nil {
		t.Fatal(err)
	}
	if ref, err := r.GetImageRef(ctx, spec); err != nil || ref != "busybox:1.36" {
		t.Fatalf("GetImageRef after the pull = %q, %v; want the pulled image", ref, err)
	}
	if n := countCalls(fake, "ImageStatus"); n != 3 {
		t.Errorf("ImageStatus called %d times, want 3 (failed, absent, after the pull)", n)
	}
}

// slowImageService answers ImageStatus only once released, counting the calls.
type slowImageService struct {
	*critest.FakeImageService
	release chan struct{}
	calls   atomic.Int32
}

func (s *slowImageService) ImageStatus(ctx context.Context, image *runtimeapi.ImageSpec, verbose bool) (*runtimeapi.ImageStatusResponse, error) {
	s.calls.Add(1)
	<-s.release
	return s.FakeImageService.ImageStatus(ctx, image, verbose)
}

func TestImageStatusMemoSharesACallInFlight(t *testing.T) {
	fake := &slowImageService{FakeImageService: critest.NewFakeImageService(), release: make(chan struct{})}
	fake.SetFakeImages([]string{"busybox:1.36"})
	r := NewRuntimeImages(fake)
	ctx := WithImageStatusMemo(context.Background())
	spec := container.ImageSpec{Image: "busybox:1.36"}

	var wg sync.WaitGroup
	refs := make([]string, 4)
	for i := range refs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			refs[i], _ = r.GetImageRef(ctx, spec)
		}()
	}
	time.Sleep(20 * time.Millisecond) // let them all ask
	close(fake.release)
	wg.Wait()
	if n := fake.calls.Load(); n != 1 {
		t.Errorf("%d ImageStatus calls for 4 concurrent questions, want 1", n)
	}
	for i, ref := range refs {
		if ref != "busybox:1.36" {
			t.Errorf("question %d got %q", i, ref)
		}
	}
}

func TestImageStatusMemoWaiterGivesUpWithItsContext(t *testing.T) {
	fake := &slowImageService{FakeImageService: critest.NewFakeImageService(), release: make(chan struct{})}
	defer close(fake.release)
	r := NewRuntimeImages(fake)
	ctx := WithImageStatusMemo(context.Background())
	spec := container.ImageSpec{Image: "busybox:1.36"}

	go func() { _, _ = r.GetImageRef(ctx, spec) }() // blocks in the runtime
	for fake.calls.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	waiter, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, err := r.GetImageRef(waiter, spec); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("waiter got %v, want its deadline", err)
	}
}
