package imagegc

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	kc "k8s.io/kubelet/config/v1beta1"

	"github.com/nodelet/nodelet/pkg/runtime/images"
)

type hookCall struct {
	remaining []string
	gcStart   time.Time
}

func recordingHook(calls *[]hookCall) PostGCHook {
	return func(_ context.Context, remaining []string, gcStart time.Time) {
		*calls = append(*calls, hookCall{slices.Clone(remaining), gcStart})
	}
}

// After a collection the hooks learn every image still on the node (in use, pinned and
// sandbox images included, removed ones not) and when the collection started.
func TestPostGCHooksGetTheImagesLeft(t *testing.T) {
	e := newEnv(t, Policy{HighThresholdPercent: 90, LowThresholdPercent: 80})
	var calls []hookCall
	e.m.postGCHooks = []PostGCHook{recordingHook(&calls)}
	e.addImage("sha256:unused", 10)
	e.addImage("sha256:inuse", 10)
	e.addImage("sha256:pinned", 10).Pinned = true
	e.addImage("sha256:pause", 10, pauseTag)
	e.setContainers(runtimeapi.ContainerState_CONTAINER_RUNNING, "sha256:inuse")
	e.clock.Step(time.Minute)
	start := e.clock.Now()

	if err := e.m.DeleteUnusedImages(context.Background()); err != nil {
		t.Fatal(err)
	}
	wantIDs(t, e, "sha256:inuse", "sha256:pause", "sha256:pinned")
	want := []string{"sha256:inuse", "sha256:pause", "sha256:pinned"}
	if len(calls) != 1 || !slices.Equal(calls[0].remaining, want) || !calls[0].gcStart.Equal(start) {
		t.Fatalf("hook calls %+v, want one with %v at %v", calls, want, start)
	}

	// A periodic collection that removes nothing still reports: an image removed by
	// someone else is gone from the list.
	e.images.Lock()
	delete(e.images.Images, "sha256:pinned")
	e.images.Unlock()
	if err := e.m.GarbageCollect(context.Background(), t0); err != nil {
		t.Fatal(err)
	}
	if len(calls) != 2 || !slices.Equal(calls[1].remaining, []string{"sha256:inuse", "sha256:pause"}) {
		t.Errorf("hook calls %+v", calls)
	}

	// A collection that cannot list the images tells nothing.
	e.images.InjectError("ListImages", fmt.Errorf("boom"))
	if err := e.m.GarbageCollect(context.Background(), t0); err == nil {
		t.Fatal("no error")
	}
	if len(calls) != 2 {
		t.Errorf("the hook ran without a listing: %+v", calls)
	}
}

// The image manager's pulled records follow the images: GC removing an image removes its
// record, so that nothing of it is left for the image's next pull; images still on the
// node keep theirs, in use or not.
func TestRemovedImagesLoseTheirPulledRecords(t *testing.T) {
	e := newEnv(t, Policy{HighThresholdPercent: 90, LowThresholdPercent: 80})
	root := t.TempDir()
	policy, err := images.NewCredentialVerificationPolicy("", nil)
	if err != nil {
		t.Fatal(err)
	}
	pulls, err := images.NewPullManager(context.Background(), images.PullManagerOptions{RootDir: root, Policy: policy, Clock: e.clock})
	if err != nil {
		t.Fatal(err)
	}
	e.m.postGCHooks = []PostGCHook{pulls.PruneUnknownRecords}
	for _, id := range []string{"sha256:unused", "sha256:inuse"} {
		e.addImage(id, 10)
		if err := pulls.RecordPullIntent("reg.io/" + id[7:] + ":1"); err != nil {
			t.Fatal(err)
		}
		pulls.RecordImagePulled(context.Background(), "reg.io/"+id[7:]+":1", id, &kc.ImagePullCredentials{NodePodsAccessible: true})
	}
	e.setContainers(runtimeapi.ContainerState_CONTAINER_RUNNING, "sha256:inuse")
	e.clock.Step(time.Minute)

	if err := e.m.DeleteUnusedImages(context.Background()); err != nil {
		t.Fatal(err)
	}
	wantIDs(t, e, "sha256:inuse")
	for id, want := range map[string]bool{"sha256:unused": false, "sha256:inuse": true} {
		path := filepath.Join(root, "image_manager", "pulled", fmt.Sprintf("sha256-%x", sha256.Sum256([]byte(id))))
		if _, err := os.Stat(path); (err == nil) != want {
			t.Errorf("pulled record of %s exists: %v, want %v", id, err == nil, want)
		}
	}
}
