package podcache

import (
	"errors"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/nodelet/nodelet/pkg/runtime/container"
)

var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

func status(uid types.UID, ip string) *container.PodStatus {
	return &container.PodStatus{ID: uid, IPs: []string{ip}}
}

func TestGetMissReturnsEmptyStatus(t *testing.T) {
	c := New()
	s, err := c.Get("a")
	if err != nil || s == nil || s.ID != "a" || len(s.ContainerStatuses) != 0 {
		t.Fatalf("Get of an unknown pod = %+v, %v; want an empty status with its ID", s, err)
	}
}

func TestSetGetDelete(t *testing.T) {
	c := New()
	boom := errors.New("boom")
	if !c.Set("a", status("a", "10.0.0.1"), boom, t0) {
		t.Fatal("Set into an empty cache reported not updated")
	}
	s, err := c.Get("a")
	if err != boom || s.IPs[0] != "10.0.0.1" {
		t.Fatalf("Get = %+v, %v", s, err)
	}
	c.Delete("a")
	if s, err := c.Get("a"); err != nil || len(s.IPs) != 0 {
		t.Fatalf("Get after Delete = %+v, %v; want the empty status", s, err)
	}
}

func TestSetKeepsNewerEntry(t *testing.T) {
	c := New()
	c.Set("a", status("a", "new"), nil, t0.Add(time.Second))
	if c.Set("a", status("a", "old"), nil, t0) {
		t.Fatal("an older Set reported updated")
	}
	if s, _ := c.Get("a"); s.IPs[0] != "new" {
		t.Fatalf("an older Set overwrote the entry: %v", s.IPs)
	}
	if !c.Set("a", status("a", "same"), nil, t0.Add(time.Second)) {
		t.Fatal("a Set with the same timestamp was refused")
	}
}

// getAsync runs GetNewerThan in the background.
func getAsync(c Cache, uid types.UID, minTime time.Time) <-chan *container.PodStatus {
	ch := make(chan *container.PodStatus, 1)
	go func() {
		s, _ := c.GetNewerThan(uid, minTime)
		ch <- s
	}()
	return ch
}

func mustBlock(t *testing.T, ch <-chan *container.PodStatus, what string) {
	t.Helper()
	select {
	case s := <-ch:
		t.Fatalf("GetNewerThan returned %+v %s", s, what)
	case <-time.After(50 * time.Millisecond):
	}
}

func mustReturn(t *testing.T, ch <-chan *container.PodStatus) *container.PodStatus {
	t.Helper()
	select {
	case s := <-ch:
		return s
	case <-time.After(5 * time.Second):
		t.Fatal("GetNewerThan still blocked")
		return nil
	}
}

func TestGetNewerThanReturnsAtOnceForNewerEntry(t *testing.T) {
	c := New()
	c.Set("a", status("a", "x"), nil, t0.Add(time.Second))
	s := mustReturn(t, getAsync(c, "a", t0))
	if s.IPs[0] != "x" {
		t.Fatalf("got %+v", s)
	}
}

func TestGetNewerThanWaitsForSet(t *testing.T) {
	c := New()
	c.Set("a", status("a", "stale"), nil, t0)
	ch := getAsync(c, "a", t0)
	mustBlock(t, ch, "for an entry not newer than minTime")
	c.Set("b", status("b", "other"), nil, t0.Add(time.Second))
	mustBlock(t, ch, "after another pod's Set")
	c.Set("a", status("a", "fresh"), nil, t0.Add(time.Second))
	if s := mustReturn(t, ch); s.IPs[0] != "fresh" {
		t.Fatalf("got %+v, want the fresh status", s)
	}
}

func TestGetNewerThanWaitsForUpdateTime(t *testing.T) {
	c := New()
	ch := getAsync(c, "a", t0)
	mustBlock(t, ch, "before the cache was ever refreshed")
	c.UpdateTime(t0.Add(-time.Second))
	mustBlock(t, ch, "after a refresh older than minTime")
	c.UpdateTime(t0.Add(time.Second))
	if s := mustReturn(t, ch); s.ID != "a" || len(s.IPs) != 0 {
		t.Fatalf("got %+v, want the empty status of a pod the runtime does not have", s)
	}
	// A fresh call is answered from the global timestamp without waiting.
	mustReturn(t, getAsync(c, "a", t0))
}

func TestGetNewerThanWakesOnlySatisfiedWaiters(t *testing.T) {
	c := New()
	early := getAsync(c, "a", t0)
	late := getAsync(c, "a", t0.Add(time.Minute))
	time.Sleep(20 * time.Millisecond) // let both subscribe
	c.Set("a", status("a", "x"), nil, t0.Add(time.Second))
	mustReturn(t, early)
	mustBlock(t, late, "for data older than its minTime")
	c.UpdateTime(t0.Add(2 * time.Minute))
	mustReturn(t, late)
}

func TestSetObservedTimeMakesAnUnchangedEntryFresh(t *testing.T) {
	c := New()
	t0 := time.Now()
	c.Set("a", &container.PodStatus{ID: "a"}, nil, t0)
	got := make(chan *container.PodStatus, 1)
	go func() { s, _ := c.GetNewerThan("a", t0.Add(time.Second)); got <- s }()
	select {
	case <-got:
		t.Fatal("GetNewerThan returned data older than asked for")
	case <-time.After(20 * time.Millisecond):
	}
	c.SetObservedTime("a", t0.Add(2*time.Second))
	select {
	case s := <-got:
		if s.ID != "a" {
			t.Errorf("got %+v", s)
		}
	case <-time.After(time.Second):
		t.Fatal("a confirmed entry did not wake the waiter")
	}
	// A pod with nothing in the runtime can be confirmed too.
	c.SetObservedTime("gone", t0.Add(2*time.Second))
	if s, _ := c.GetNewerThan("gone", t0.Add(time.Second)); s == nil || s.ID != "gone" {
		t.Errorf("confirmed empty pod: %+v", s)
	}
}
