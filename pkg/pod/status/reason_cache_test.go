package status

import (
	"testing"

	"github.com/nodelet/nodelet/pkg/runtime/container"
)

func TestReasonCache(t *testing.T) {
	c := NewReasonCache()
	failed := container.NewSyncResult(container.StartContainer, "a")
	failed.Fail(container.ErrCrashLoopBackOff, "back-off 10s restarting failed container=a")
	other := container.NewSyncResult(container.KillContainer, "b")
	other.Fail(container.ErrKillContainer, "kill failed")
	c.Update("uid", container.PodSyncResult{SyncResults: []*container.SyncResult{failed, other}})

	reason, msg, ok := c.Get("uid", "a")
	if !ok || reason != "CrashLoopBackOff" || msg != "back-off 10s restarting failed container=a" {
		t.Errorf("Get(a) = %q %q %v", reason, msg, ok)
	}
	if _, _, ok := c.Get("uid", "b"); ok {
		t.Errorf("only StartContainer results are recorded")
	}
	if _, _, ok := c.Get("other-uid", "a"); ok {
		t.Errorf("entries are per pod")
	}

	c.Update("uid", container.PodSyncResult{SyncResults: []*container.SyncResult{container.NewSyncResult(container.StartContainer, "a")}})
	if _, _, ok := c.Get("uid", "a"); ok {
		t.Errorf("a successful start clears the entry")
	}

	c.Update("uid", container.PodSyncResult{SyncResults: []*container.SyncResult{failed}})
	c.Remove("uid", "a")
	if _, _, ok := c.Get("uid", "a"); ok {
		t.Errorf("Remove left the entry")
	}
}

func TestReasonCacheIsBounded(t *testing.T) {
	c := NewReasonCache()
	for i := range maxReasonCacheEntries + 1 {
		r := container.NewSyncResult(container.StartContainer, string(rune('a'+i%26))+string(rune(i)))
		r.Fail(container.ErrRunContainer, "x")
		c.Update("uid", container.PodSyncResult{SyncResults: []*container.SyncResult{r}})
	}
	if n := c.cache.Len(); n != maxReasonCacheEntries {
		t.Errorf("cache holds %d entries, want %d", n, maxReasonCacheEntries)
	}
}
