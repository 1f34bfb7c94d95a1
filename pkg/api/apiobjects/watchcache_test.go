package apiobjects

import (
	"context"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

const watchIdle = time.Minute

func newWatchingSources(t *testing.T, objects ...runtime.Object) (*Sources, *fake.Clientset, *testingclock.FakeClock) {
	t.Helper()
	client := fake.NewClientset(objects...)
	clk := testingclock.NewFakeClock(time.Now())
	s := New(client, Options{TTL: ttl, Clock: clk, Watch: true, WatchIdle: watchIdle})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	s.Start(ctx)
	return s, client, clk
}

func secretWatches(s *Sources) *watchCache[*v1.Secret] { return s.secrets.(*watchCache[*v1.Secret]) }

// waitWatched reads the secret until its watch has listed (reads are served from it).
func waitWatched(t *testing.T, s *Sources, ns, name string) {
	t.Helper()
	wc := secretWatches(s)
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		_, _ = s.GetSecret(context.Background(), ns, name)
		wc.mu.Lock()
		w := wc.watches[types.NamespacedName{Namespace: ns, Name: name}]
		wc.mu.Unlock()
		if w != nil && w.synced() {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("the watch of secret %s/%s never listed", ns, name)
}

// eventually polls cond for a few seconds: a watch delivers changes asynchronously.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

// Once an object is watched, its changes and its deletion are read from the watch, with
// no GET however often it is read (upstream's Watch strategy).
func TestWatchedSecretFollowsChangesWithoutGets(t *testing.T) {
	s, client, clk := newWatchingSources(t, secret("ns", "creds", "1", "old"))
	waitWatched(t, s, "ns", "creds")
	before := len(gets(client, "secrets"))
	if got := password(t, s, "ns", "creds"); got != "old" {
		t.Fatalf("password %q, want old", got)
	}

	_, err := client.CoreV1().Secrets("ns").Update(context.Background(), secret("ns", "creds", "2", "new"), metav1.UpdateOptions{})
	must(t, err)
	eventually(t, "the update", func() bool { return password(t, s, "ns", "creds") == "new" })
	for range 10 {
		clk.Step(ttl) // the TTL would have read it again each time
		password(t, s, "ns", "creds")
	}
	if n := len(gets(client, "secrets")) - before; n != 0 {
		t.Errorf("%d GETs of a watched secret, want 0", n)
	}

	must(t, client.CoreV1().Secrets("ns").Delete(context.Background(), "creds", metav1.DeleteOptions{}))
	eventually(t, "the deletion", func() bool {
		_, err := s.GetSecret(context.Background(), "ns", "creds")
		return apierrors.IsNotFound(err) && err.Error() == `secret "creds" not found`
	})
}

// A watch nobody reads for the idle time is stopped; an immutable object is not watched
// once seen, and is still served.
func TestWatchesStopWhenIdleOrImmutable(t *testing.T) {
	frozen := secret("ns", "frozen", "1", "ice")
	frozen.Immutable = ptr.To(true)
	s, _, clk := newWatchingSources(t, secret("ns", "a", "1", "x"), secret("ns", "b", "1", "y"), frozen)
	wc := secretWatches(s)
	waitWatched(t, s, "ns", "a")
	waitWatched(t, s, "ns", "b")
	if n := wc.watching(); n != 2 {
		t.Fatalf("%d watches, want 2", n)
	}

	clk.Step(watchIdle / 2)
	password(t, s, "ns", "b") // b is in use, a is not
	clk.Step(watchIdle / 2)
	password(t, s, "ns", "b")
	if n := wc.watching(); n != 1 {
		t.Errorf("%d watches after a was idle for %v, want 1 (b's)", n, watchIdle)
	}

	waitWatched(t, s, "ns", "frozen")
	eventually(t, "the immutable secret's watch to stop", func() bool {
		password(t, s, "ns", "frozen")
		return wc.watching() == 1
	})
	if got := password(t, s, "ns", "frozen"); got != "ice" {
		t.Errorf("immutable secret served %q after its watch stopped, want ice", got)
	}
}

// A watched secret that does not exist is NotFound, from the watch, with no GET per read.
func TestWatchedMissingSecretIsNotFound(t *testing.T) {
	s, client, clk := newWatchingSources(t)
	waitWatched(t, s, "ns", "missing")
	before := len(gets(client, "secrets"))
	for range 5 {
		clk.Step(ttl)
		if _, err := s.GetSecret(context.Background(), "ns", "missing"); !apierrors.IsNotFound(err) {
			t.Fatalf("GetSecret of a missing secret: %v, want NotFound", err)
		}
	}
	if n := len(gets(client, "secrets")) - before; n != 0 {
		t.Errorf("%d GETs of a watched missing secret, want 0", n)
	}
	_, err := client.CoreV1().Secrets("ns").Create(context.Background(), secret("ns", "missing", "1", "here"), metav1.CreateOptions{})
	must(t, err)
	eventually(t, "the created secret", func() bool {
		got, err := s.GetSecret(context.Background(), "ns", "missing")
		return err == nil && string(got.Data["password"]) == "here"
	})
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
