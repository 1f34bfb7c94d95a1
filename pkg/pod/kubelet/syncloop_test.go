package kubelet

import (
	"context"
	"testing"
	"time"

	critest "k8s.io/cri-api/pkg/apis/testing"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/pkg/outage"
)

func TestSyncLoopStopsWhenUpdatesChannelCloses(t *testing.T) {
	ready := true
	k := newTestKubelet(&fakeRuntime{}, &fakeVolumes{}, &ready)
	k.deps.RuntimeState = NewRuntimeState(critest.NewFakeRuntimeService(), outage.New(clock.RealClock{}), time.Hour, time.Second)
	k.deps.RuntimeState.Update(context.Background())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	updates := make(chan podUpdate)
	close(updates)
	done := make(chan struct{})
	go func() {
		k.syncLoop(ctx, updates)
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(time.Second):
		cancel()
		<-done
		t.Fatal("the loop kept spinning on a closed updates channel")
	}
}
