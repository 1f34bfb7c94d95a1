package pleg

import (
	"context"
	"errors"
	"sync"

	"k8s.io/apimachinery/pkg/types"

	"github.com/nodelet/nodelet/pkg/runtime/container"
)

// fakeRuntime answers GetPods and GetPodStatus from canned data; every other Runtime
// method panics through the nil embedded interface.
type fakeRuntime struct {
	container.Runtime

	mu          sync.Mutex
	pods        []*container.Pod
	podsErr     error
	statuses    map[types.UID]*container.PodStatus
	statusErrs  map[types.UID]error
	listCalls   int
	podCalls    int
	ofListing   int // inspections by GetPodStatusOf
	statusCalls map[types.UID]int
}

func newFakeRuntime() *fakeRuntime {
	return &fakeRuntime{
		statuses:    map[types.UID]*container.PodStatus{},
		statusErrs:  map[types.UID]error{},
		statusCalls: map[types.UID]int{},
	}
}

func (f *fakeRuntime) setPods(pods ...*container.Pod) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pods = pods
}

// setPodsErr makes GetPods fail with err (nil: succeed again).
func (f *fakeRuntime) setPodsErr(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.podsErr = err
}

func (f *fakeRuntime) setStatusErr(uid types.UID, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.statusErrs[uid] = err
}

func (f *fakeRuntime) setStatus(s *container.PodStatus) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.statuses[s.ID] = s
}

func (f *fakeRuntime) GetPods(_ context.Context, all bool) ([]*container.Pod, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.listCalls++
	if !all {
		return nil, errors.New("the PLEG must list all pods, exited ones included")
	}
	if f.podsErr != nil {
		return nil, f.podsErr
	}
	return f.pods, nil
}

func (f *fakeRuntime) GetPod(_ context.Context, uid types.UID) (*container.Pod, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.podCalls++
	if f.podsErr != nil {
		return nil, f.podsErr
	}
	for _, p := range f.pods {
		if p.ID == uid {
			return p, nil
		}
	}
	return nil, nil
}

func (f *fakeRuntime) GetPodStatus(_ context.Context, uid types.UID, name, namespace string) (*container.PodStatus, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.statusCalls[uid]++
	if err := f.statusErrs[uid]; err != nil {
		return nil, err
	}
	if s, ok := f.statuses[uid]; ok {
		copied := *s
		return &copied, nil
	}
	return &container.PodStatus{ID: uid, Name: name, Namespace: namespace}, nil
}

// GetPodStatusOf answers as GetPodStatus, and counts as an inspection of the pod the
// same way, but no fresh listing: relistsFromListing counts those.
func (f *fakeRuntime) GetPodStatusOf(ctx context.Context, pod *container.Pod) (*container.PodStatus, error) {
	f.mu.Lock()
	f.ofListing++
	f.mu.Unlock()
	return f.GetPodStatus(ctx, pod.ID, pod.Name, pod.Namespace)
}

// inspections returns how many times each pod was inspected and resets the counts.
func (f *fakeRuntime) inspections() map[types.UID]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	calls := f.statusCalls
	f.statusCalls = map[types.UID]int{}
	return calls
}

// lists counts the runtime listings of any kind: of all pods (GetPods) or of one (GetPod).
func (f *fakeRuntime) lists() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.listCalls + f.podCalls
}

// allLists counts the listings of all pods only.
func (f *fakeRuntime) allLists() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.listCalls
}
