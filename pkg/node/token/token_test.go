package token

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

// fakeAPI plays the TokenRequest API: it issues numbered tokens that
// expire ExpirationSeconds after the fake clock's now, or fails with err.
type fakeAPI struct {
	clock *testingclock.FakeClock

	mu    sync.Mutex
	calls []call
	err   error
}

type call struct {
	namespace, serviceAccount string
	tr                        *authenticationv1.TokenRequest
}

func (f *fakeAPI) create(_ context.Context, namespace, serviceAccount string, tr *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, call{namespace, serviceAccount, tr})
	if f.err != nil {
		return nil, f.err
	}
	out := tr.DeepCopy()
	lifetime := time.Duration(*out.Spec.ExpirationSeconds) * time.Second
	out.Status.Token = fmt.Sprintf("token-%d", len(f.calls))
	out.Status.ExpirationTimestamp = metav1.NewTime(f.clock.Now().Add(lifetime))
	return out, nil
}

func (f *fakeAPI) setErr(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.err = err
}

func (f *fakeAPI) callCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.calls)
}

func newTestManager() (*Manager, *fakeAPI, *testingclock.FakeClock) {
	clk := testingclock.NewFakeClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	api := &fakeAPI{clock: clk}
	m := NewManager(api.create, clk)
	m.jitter = func() time.Duration { return 0 }
	return m, api, clk
}

func request(podUID types.UID, audience string, seconds int64) *authenticationv1.TokenRequest {
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "pod-" + string(podUID), UID: podUID}}
	return podTokenRequest(pod, &v1.ServiceAccountTokenProjection{Audience: audience, ExpirationSeconds: &seconds})
}

func mustToken(t *testing.T, m *Manager, tr *authenticationv1.TokenRequest) string {
	t.Helper()
	got, err := m.GetServiceAccountToken(context.Background(), "ns", "sa", tr)
	if err != nil {
		t.Fatalf("GetServiceAccountToken: %v", err)
	}
	return got.Status.Token
}

func TestCachesPerRequest(t *testing.T) {
	m, api, _ := newTestManager()

	first := mustToken(t, m, request("a", "", 3600))
	if again := mustToken(t, m, request("a", "", 3600)); again != first {
		t.Errorf("same request: got %q, want cached %q", again, first)
	}
	if api.callCount() != 1 {
		t.Fatalf("same request twice made %d API calls, want 1", api.callCount())
	}

	// Each field of the key asks for a token of its own.
	for _, tr := range []*authenticationv1.TokenRequest{
		request("a", "vault", 3600),
		request("a", "", 7200),
		request("b", "", 3600),
	} {
		if got := mustToken(t, m, tr); got == first {
			t.Errorf("request %v got the token of another request", tr.Spec)
		}
	}
	if api.callCount() != 4 {
		t.Errorf("4 distinct requests made %d API calls", api.callCount())
	}
	if _, err := m.GetServiceAccountToken(context.Background(), "other-ns", "sa", request("a", "", 3600)); err != nil {
		t.Fatal(err)
	}
	if api.callCount() != 5 {
		t.Errorf("another namespace was served from the cache")
	}
}

func TestRefreshesAfter80PercentOfLifetime(t *testing.T) {
	m, api, clk := newTestManager()
	tr := request("a", "", 1000)
	first := mustToken(t, m, tr)

	clk.Step(799 * time.Second)
	if got := mustToken(t, m, tr); got != first {
		t.Errorf("at 79.9%% of its lifetime the token was refreshed")
	}
	clk.Step(2 * time.Second)
	second := mustToken(t, m, tr)
	if second == first || api.callCount() != 2 {
		t.Errorf("at 80.1%% of its lifetime: got %q after %d calls, want a new token", second, api.callCount())
	}
	// The new token starts a new lifetime.
	clk.Step(700 * time.Second)
	if got := mustToken(t, m, tr); got != second {
		t.Errorf("refreshed token was refreshed again too early")
	}
}

func TestJitterBringsRefreshForward(t *testing.T) {
	m, _, clk := newTestManager()
	m.jitter = func() time.Duration { return 10 * time.Second }
	tr := request("a", "", 1000)
	first := mustToken(t, m, tr)

	clk.Step(789 * time.Second)
	if got := mustToken(t, m, tr); got != first {
		t.Errorf("refreshed before 80%% minus jitter")
	}
	clk.Step(2 * time.Second)
	if got := mustToken(t, m, tr); got == first {
		t.Errorf("not refreshed after 80%% minus jitter")
	}
}

func TestRefreshesAfter24Hours(t *testing.T) {
	m, _, clk := newTestManager()
	tr := request("a", "", int64((72 * time.Hour).Seconds())) // 80 % would be 57.6 h
	first := mustToken(t, m, tr)

	clk.Step(24*time.Hour - time.Second)
	if got := mustToken(t, m, tr); got != first {
		t.Errorf("refreshed before 24 h")
	}
	clk.Step(2 * time.Second)
	if got := mustToken(t, m, tr); got == first {
		t.Errorf("a token older than 24 h was not refreshed")
	}
}

func TestRefreshFailure(t *testing.T) {
	m, api, clk := newTestManager()
	tr := request("a", "", 1000)
	first := mustToken(t, m, tr)
	apiDown := errors.New("connection refused")
	api.setErr(apiDown)

	// Due for refresh but still valid: the cached token is served.
	clk.Step(900 * time.Second)
	if got := mustToken(t, m, tr); got != first {
		t.Errorf("refresh failure: got %q, want the cached %q", got, first)
	}
	if api.callCount() != 2 {
		t.Errorf("refresh was not attempted")
	}

	// Expired: the failure is the caller's.
	clk.Step(101 * time.Second)
	_, err := m.GetServiceAccountToken(context.Background(), "ns", "sa", tr)
	if !errors.Is(err, apiDown) {
		t.Errorf("expired token with failing API: err %v, want %v", err, apiDown)
	}

	// Recovered API: a new token.
	api.setErr(nil)
	if got := mustToken(t, m, tr); got == first {
		t.Errorf("after recovery the expired token was served")
	}
}

func TestFirstFetchFailure(t *testing.T) {
	m, api, _ := newTestManager()
	api.setErr(errors.New("forbidden"))
	got, err := m.GetServiceAccountToken(context.Background(), "ns", "sa", request("a", "", 600))
	if err == nil || got != nil {
		t.Fatalf("got %v, %v; want an error", got, err)
	}
}

func TestDeleteServiceAccountTokenDropsOnlyThatPod(t *testing.T) {
	m, api, _ := newTestManager()
	a1 := mustToken(t, m, request("a", "", 3600))
	mustToken(t, m, request("a", "vault", 3600))
	b := mustToken(t, m, request("b", "", 3600))

	m.DeleteServiceAccountToken("a")

	if got := mustToken(t, m, request("b", "", 3600)); got != b {
		t.Errorf("pod b's token was dropped with pod a's")
	}
	if got := mustToken(t, m, request("a", "", 3600)); got == a1 {
		t.Errorf("pod a's token survived DeleteServiceAccountToken")
	}
	if api.callCount() != 4 {
		t.Errorf("API calls = %d, want 4", api.callCount())
	}
}

func TestRunCleanupDropsExpiredTokens(t *testing.T) {
	m, api, clk := newTestManager()
	mustToken(t, m, request("short", "", 600))
	long := mustToken(t, m, request("long", "", 3600))

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { m.RunCleanup(ctx); close(done) }()

	waitFor(t, clk.HasWaiters)
	clk.Step(601 * time.Second) // fires the cleanup timer after "short" expired
	waitFor(t, func() bool { return m.cacheLen() == 1 })

	if got := mustToken(t, m, request("long", "", 3600)); got != long {
		t.Errorf("cleanup dropped an unexpired token")
	}
	if api.callCount() != 2 {
		t.Errorf("API calls = %d, want 2", api.callCount())
	}

	// The loop re-arms: the next period drops "long" once expired.
	waitFor(t, clk.HasWaiters)
	clk.Step(3000 * time.Second)
	waitFor(t, func() bool { return m.cacheLen() == 0 })

	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("RunCleanup did not return after its context was cancelled")
	}
}

func (m *Manager) cacheLen() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.cache)
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5s")
		}
		time.Sleep(time.Millisecond)
	}
}

func TestServiceAccountTokenRequest(t *testing.T) {
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "web", UID: "uid-1"},
	}
	wantRef := &authenticationv1.BoundObjectReference{APIVersion: "v1", Kind: "Pod", Name: "web", UID: "uid-1"}
	for _, tc := range []struct {
		name           string
		serviceAccount string
		src            v1.ServiceAccountTokenProjection
		wantSA         string
		wantAudiences  []string
		wantSeconds    int64
	}{
		{"defaults", "", v1.ServiceAccountTokenProjection{Path: "token"}, "default", nil, 3600},
		{"audience and lifetime", "builder",
			v1.ServiceAccountTokenProjection{Path: "token", Audience: "vault", ExpirationSeconds: ptr.To[int64](7200)},
			"builder", []string{"vault"}, 7200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, api, _ := newTestManager()
			pod := pod.DeepCopy()
			pod.Spec.ServiceAccountName = tc.serviceAccount

			got, err := m.ServiceAccountToken(context.Background(), pod, &tc.src)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != "token-1" {
				t.Errorf("token = %q, want token-1", got)
			}
			c := api.calls[0]
			if c.namespace != "team" || c.serviceAccount != tc.wantSA {
				t.Errorf("requested %s/%s, want team/%s", c.namespace, c.serviceAccount, tc.wantSA)
			}
			spec := c.tr.Spec
			if !reflect.DeepEqual(spec.Audiences, tc.wantAudiences) {
				t.Errorf("audiences = %q, want %q", spec.Audiences, tc.wantAudiences)
			}
			if spec.ExpirationSeconds == nil || *spec.ExpirationSeconds != tc.wantSeconds {
				t.Errorf("expirationSeconds = %v, want %d", spec.ExpirationSeconds, tc.wantSeconds)
			}
			if !reflect.DeepEqual(spec.BoundObjectRef, wantRef) {
				t.Errorf("boundObjectRef = %+v, want %+v", spec.BoundObjectRef, wantRef)
			}
		})
	}
}

func TestNewManagerForClient(t *testing.T) {
	client := fake.NewClientset()
	var got k8stesting.CreateAction
	client.PrependReactor("create", "serviceaccounts", func(action k8stesting.Action) (bool, runtime.Object, error) {
		got = action.(k8stesting.CreateAction)
		tr := got.GetObject().(*authenticationv1.TokenRequest).DeepCopy()
		tr.Status = authenticationv1.TokenRequestStatus{
			Token:               "from-api",
			ExpirationTimestamp: metav1.NewTime(time.Now().Add(time.Hour)),
		}
		return true, tr, nil
	})
	m := NewManagerForClient(client, testingclock.NewFakeClock(time.Now()))

	tr, err := m.GetServiceAccountToken(context.Background(), "ns", "sa", request("a", "", 3600))
	if err != nil {
		t.Fatal(err)
	}
	if tr.Status.Token != "from-api" {
		t.Errorf("token = %q", tr.Status.Token)
	}
	if got.GetNamespace() != "ns" || got.GetSubresource() != "token" {
		t.Errorf("API call went to %s %s/%s", got.GetResource(), got.GetNamespace(), got.GetSubresource())
	}
	if name := got.(k8stesting.CreateActionImpl).Name; name != "sa" {
		t.Errorf("service account = %q, want sa", name)
	}

	standalone := NewManagerForClient(nil, testingclock.NewFakeClock(time.Now()))
	if _, err := standalone.GetServiceAccountToken(context.Background(), "ns", "sa", request("a", "", 3600)); err == nil {
		t.Error("standalone manager returned a token")
	}
}
