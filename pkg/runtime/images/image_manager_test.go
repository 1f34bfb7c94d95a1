package images

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/flowcontrol"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	critest "k8s.io/cri-api/pkg/apis/testing"
	testclock "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/pkg/runtime/container"
)

var containerRef = &v1.ObjectReference{Kind: "Pod", Namespace: "ns", Name: "p", FieldPath: "spec.containers{c}"}

func testPod(uid string) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: types.UID(uid), Annotations: map[string]string{"k": "v"}}}
}

// drain returns the events recorded so far.
func drain(r *record.FakeRecorder) []string {
	var out []string
	for {
		select {
		case e := <-r.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

type managerFixture struct {
	fake     *critest.FakeImageService
	recorder *record.FakeRecorder
	clock    *testclock.FakeClock
	manager  ImageManager
}

func newFixture(present ...string) *managerFixture {
	f := &managerFixture{fake: critest.NewFakeImageService(), recorder: record.NewFakeRecorder(100), clock: testclock.NewFakeClock(time.Now())}
	f.fake.SetFakeImageSize(1234)
	f.fake.SetFakeImages(present)
	f.manager = NewImageManager(f.recorder, NewRuntimeImages(f.fake), Options{Backoff: flowcontrol.NewFakeBackOff(ImageBackOffPeriod, MaxImageBackOff, f.clock)})
	return f
}

func (f *managerFixture) ensure(uid, image string, policy v1.PullPolicy) (string, string, error) {
	return f.manager.EnsureImageExists(context.Background(), containerRef, testPod(uid), image, nil, nil, "", policy)
}

func (f *managerFixture) pulls() int {
	f.fake.Lock()
	defer f.fake.Unlock()
	n := 0
	for _, c := range f.fake.Called {
		if c == "PullImage" {
			n++
		}
	}
	return n
}

func TestEnsureImageExistsPolicies(t *testing.T) {
	const image = "busybox:1.36"
	alreadyPresent := `Normal Pulled Container image "busybox:1.36" already present on machine`
	pulling := `Normal Pulling Pulling image "busybox:1.36"`
	pulled := `Normal Pulled Successfully pulled image "busybox:1.36" in `
	tests := []struct {
		name       string
		policy     v1.PullPolicy
		present    bool
		inspectErr error
		pullErr    error
		wantPull   bool
		wantErr    error
		wantMsg    string
		wantEvents []string // prefixes, in order
	}{
		{name: "Always present", policy: v1.PullAlways, present: true, wantPull: true, wantEvents: []string{pulling, pulled}},
		{name: "Always absent", policy: v1.PullAlways, wantPull: true, wantEvents: []string{pulling, pulled}},
		{name: "Always ignores inspect errors", policy: v1.PullAlways, inspectErr: errors.New("boom"), wantPull: true, wantEvents: []string{pulling, pulled}},
		{name: "IfNotPresent present", policy: v1.PullIfNotPresent, present: true, wantMsg: `Container image "busybox:1.36" already present on machine`, wantEvents: []string{alreadyPresent}},
		{name: "IfNotPresent absent", policy: v1.PullIfNotPresent, wantPull: true, wantEvents: []string{pulling, pulled}},
		{name: "Never present", policy: v1.PullNever, present: true, wantMsg: `Container image "busybox:1.36" already present on machine`, wantEvents: []string{alreadyPresent}},
		{name: "Never absent", policy: v1.PullNever, wantErr: ErrImageNeverPull,
			wantMsg:    `Container image "busybox:1.36" is not present with pull policy of Never`,
			wantEvents: []string{`Warning ErrImageNeverPull Container image "busybox:1.36" is not present with pull policy of Never`}},
		{name: "inspect error", policy: v1.PullIfNotPresent, inspectErr: errors.New("boom"), wantErr: ErrImageInspect,
			wantMsg:    `Failed to inspect image "busybox:1.36": boom`,
			wantEvents: []string{`Warning InspectFailed Failed to inspect image "busybox:1.36": boom`}},
		{name: "pull error", policy: v1.PullIfNotPresent, pullErr: errors.New("not found"), wantPull: true, wantErr: ErrImagePull, wantMsg: "not found",
			wantEvents: []string{pulling, `Warning Failed Failed to pull image "busybox:1.36": not found`}},
		{name: "registry unavailable", policy: v1.PullAlways, pullErr: errors.New("RegistryUnavailable: dial tcp: refused"), wantPull: true, wantErr: ErrRegistryUnavailable,
			wantMsg:    "image pull failed for busybox:1.36 because the registry is unavailable: dial tcp: refused",
			wantEvents: []string{pulling, `Warning Failed Failed to pull image "busybox:1.36": RegistryUnavailable: dial tcp: refused`}},
		{name: "signature", policy: v1.PullAlways, pullErr: errors.New("SignatureValidationFailed: untrusted"), wantPull: true, wantErr: ErrSignatureValidationFailed,
			wantMsg:    "image pull failed for busybox:1.36 because the signature validation failed: untrusted",
			wantEvents: []string{pulling, `Warning Failed`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var f *managerFixture
			if tc.present {
				f = newFixture(image)
			} else {
				f = newFixture()
			}
			if tc.inspectErr != nil {
				f.fake.InjectError("ImageStatus", tc.inspectErr)
			}
			if tc.pullErr != nil {
				f.fake.InjectError("PullImage", tc.pullErr)
			}
			ref, msg, err := f.ensure("uid", image, tc.policy)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if tc.wantErr == nil && ref != image {
				t.Errorf("imageRef = %q, want %q", ref, image)
			}
			if tc.wantErr != nil && ref != "" {
				t.Errorf("imageRef = %q on failure", ref)
			}
			if msg != tc.wantMsg {
				t.Errorf("message = %q, want %q", msg, tc.wantMsg)
			}
			if got := f.pulls() > 0; got != tc.wantPull {
				t.Errorf("pulled = %v, want %v", got, tc.wantPull)
			}
			events := drain(f.recorder)
			if len(events) != len(tc.wantEvents) {
				t.Fatalf("events %q, want %d", events, len(tc.wantEvents))
			}
			for i, prefix := range tc.wantEvents {
				if !strings.HasPrefix(events[i], prefix) {
					t.Errorf("event %d = %q, want prefix %q", i, events[i], prefix)
				}
			}
		})
	}
}

func TestEnsureImageExistsPullDetails(t *testing.T) {
	f := newFixture()
	ref, _, err := f.ensure("uid", "busybox", v1.PullIfNotPresent)
	if err != nil || ref != "busybox:latest" {
		t.Fatalf("got %q, %v; want the image pulled as busybox:latest", ref, err)
	}
	events := drain(f.recorder)
	if len(events) != 2 || events[0] != `Normal Pulling Pulling image "busybox"` ||
		!strings.HasPrefix(events[1], `Normal Pulled Successfully pulled image "busybox" in `) ||
		!strings.Contains(events[1], " including waiting). Image size: 1234 bytes.") {
		t.Errorf("events %q", events)
	}
	// The pod's annotations travel with the image spec, as upstream.
	f.fake.AssertImagePulledWithAuth(t, &runtimeapi.ImageSpec{Image: "busybox:latest", Annotations: map[string]string{"k": "v"}}, nil, "spec")
}

func TestEnsureImageExistsInvalidName(t *testing.T) {
	f := newFixture()
	_, msg, err := f.ensure("uid", "Busybox", v1.PullAlways)
	if !errors.Is(err, ErrInvalidImageName) {
		t.Fatalf("err = %v", err)
	}
	want := `Failed to apply default image tag "Busybox": couldn't parse image name "Busybox": invalid reference format: repository name (library/Busybox) must be lowercase`
	if msg != want {
		t.Errorf("message %q\nwant    %q", msg, want)
	}
	if events := drain(f.recorder); !reflect.DeepEqual(events, []string{"Warning InspectFailed " + want}) {
		t.Errorf("events %q", events)
	}
	if f.pulls() != 0 {
		t.Error("pulled an invalid image")
	}
}

func TestEnsureImageExistsWithoutObjectRefRecordsNoEvent(t *testing.T) {
	f := newFixture()
	if _, _, err := f.manager.EnsureImageExists(context.Background(), nil, testPod("u"), "busybox:1", nil, nil, "", v1.PullNever); !errors.Is(err, ErrImageNeverPull) {
		t.Fatalf("err = %v", err)
	}
	if events := drain(f.recorder); len(events) != 0 {
		t.Errorf("events %q with a nil objRef", events)
	}
}

func TestPullBackOff(t *testing.T) {
	const image = "absent:1"
	f := newFixture()
	fail := func() { f.fake.InjectError("PullImage", errors.New("pull access denied")) }
	expect := func(step string, wantErr error, wantPulls int) string {
		t.Helper()
		_, msg, err := f.ensure("uid", image, v1.PullIfNotPresent)
		if !errors.Is(err, wantErr) {
			t.Fatalf("%s: err = %v, want %v", step, err, wantErr)
		}
		if got := f.pulls(); got != wantPulls {
			t.Fatalf("%s: %d pulls, want %d", step, got, wantPulls)
		}
		return msg
	}

	fail()
	expect("first failure", ErrImagePull, 1)
	msg := expect("right after", ErrImagePullBackOff, 1)
	if want := `Back-off pulling image "absent:1": ErrImagePull: pull access denied`; msg != want {
		t.Errorf("back-off message %q, want %q", msg, want)
	}
	events := drain(f.recorder)
	if last := events[len(events)-1]; last != `Normal BackOff Back-off pulling image "absent:1"` {
		t.Errorf("last event %q", last)
	}
	// Another pod is not held back by this pod's failures.
	if _, _, err := f.manager.EnsureImageExists(context.Background(), containerRef, testPod("other"), image, nil, nil, "", v1.PullIfNotPresent); err != nil {
		t.Fatalf("other pod: %v", err)
	}
	f.fake.RemoveImage(context.Background(), &runtimeapi.ImageSpec{Image: image})

	f.clock.Step(9 * time.Second)
	expect("9s later", ErrImagePullBackOff, 2)
	f.clock.Step(2 * time.Second)
	fail()
	expect("11s later", ErrImagePull, 3)
	// The back-off doubled to 20s.
	f.clock.Step(19 * time.Second)
	expect("19s after second failure", ErrImagePullBackOff, 3)
	f.clock.Step(2 * time.Second)
	if ref, msg, err := f.ensure("uid", image, v1.PullIfNotPresent); err != nil || ref != image || msg != "" {
		t.Fatalf("after back-off: %q, %q, %v", ref, msg, err)
	}
}

func TestPullQPSLimit(t *testing.T) {
	fake := critest.NewFakeImageService()
	m := NewImageManager(record.NewFakeRecorder(10), NewRuntimeImages(fake), Options{RegistryPullQPS: 0.001, RegistryBurst: 2})
	ctx := context.Background()
	for i := range 2 {
		if _, _, err := m.EnsureImageExists(ctx, containerRef, testPod("u"), fmt.Sprintf("img%d:1", i), nil, nil, "", v1.PullAlways); err != nil {
			t.Fatalf("pull %d within burst: %v", i, err)
		}
	}
	_, msg, err := m.EnsureImageExists(ctx, containerRef, testPod("u"), "img3:1", nil, nil, "", v1.PullAlways)
	if !errors.Is(err, ErrImagePull) || msg != "pull QPS exceeded" {
		t.Fatalf("third pull: %q, %v; want ErrImagePull, pull QPS exceeded", msg, err)
	}
}

// blockingImages is an image service whose pulls wait until released, counting how
// many run at once.
type blockingImages struct {
	container.ImageService
	release chan struct{}

	mu               sync.Mutex
	inFlight, maxRun int
	started          []string
}

func newBlockingImages() *blockingImages { return &blockingImages{release: make(chan struct{})} }

func (b *blockingImages) GetImageRef(context.Context, container.ImageSpec) (string, error) {
	return "", nil
}

func (b *blockingImages) PullImage(ctx context.Context, image container.ImageSpec, _ []v1.Secret, _ *runtimeapi.PodSandboxConfig) (string, error) {
	b.mu.Lock()
	b.inFlight++
	b.maxRun = max(b.maxRun, b.inFlight)
	b.started = append(b.started, image.Image)
	b.mu.Unlock()
	defer func() {
		b.mu.Lock()
		b.inFlight--
		b.mu.Unlock()
	}()
	select {
	case <-b.release:
		return "ref-" + image.Image, nil
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

func (b *blockingImages) running() (now, most int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.inFlight, b.maxRun
}

// waitRunning waits until n pulls run at once.
func (b *blockingImages) waitRunning(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if now, _ := b.running(); now == n {
			return
		}
		if time.Now().After(deadline) {
			now, _ := b.running()
			t.Fatalf("%d pulls running, want %d", now, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// startPulls starts n EnsureImageExists calls for distinct images; the returned channel
// gets each call's error.
func startPulls(m ImageManager, n int) chan error {
	errs := make(chan error, n)
	for i := range n {
		go func() {
			_, _, err := m.EnsureImageExists(context.Background(), nil, testPod("u"), fmt.Sprintf("img%d:1", i), nil, nil, "", v1.PullAlways)
			errs <- err
		}()
	}
	return errs
}

func checkConcurrency(t *testing.T, opts Options, calls, wantMax int) {
	t.Helper()
	b := newBlockingImages()
	m := NewImageManager(record.NewFakeRecorder(100), b, opts)
	errs := startPulls(m, calls)
	b.waitRunning(t, wantMax)
	// Give the waiting calls a moment to (wrongly) start.
	time.Sleep(50 * time.Millisecond)
	if now, _ := b.running(); now != wantMax {
		t.Fatalf("%d pulls running, want %d", now, wantMax)
	}
	for range calls {
		b.release <- struct{}{}
	}
	for range calls {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if _, most := b.running(); most != wantMax {
		t.Errorf("at most %d pulls ran at once, want %d", most, wantMax)
	}
}

func TestSerializedPullsRunOneAtATime(t *testing.T) {
	limit := int32(5) // ignored when serialized, as upstream
	checkConcurrency(t, Options{SerializeImagePulls: true, MaxParallelImagePulls: &limit}, 3, 1)
}

func TestParallelPullsRespectTheLimit(t *testing.T) {
	limit := int32(2)
	checkConcurrency(t, Options{MaxParallelImagePulls: &limit}, 5, 2)
}

func TestParallelPullsUnlimited(t *testing.T) {
	zero := int32(0)
	checkConcurrency(t, Options{}, 4, 4)
	checkConcurrency(t, Options{MaxParallelImagePulls: &zero}, 4, 4)
}

func TestWaitingPullGivesUpWhenContextEnds(t *testing.T) {
	b := newBlockingImages()
	m := NewImageManager(record.NewFakeRecorder(100), b, Options{SerializeImagePulls: true})
	errs := startPulls(m, 1)
	b.waitRunning(t, 1)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, msg, err := m.EnsureImageExists(ctx, nil, testPod("u"), "queued:1", nil, nil, "", v1.PullAlways)
	if !errors.Is(err, ErrImagePull) || msg != context.Canceled.Error() {
		t.Errorf("queued pull with a cancelled context: %q, %v", msg, err)
	}
	b.release <- struct{}{}
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !reflect.DeepEqual(b.started, []string{"img0:1"}) {
		t.Errorf("started %v: the cancelled pull reached the runtime", b.started)
	}
}
