package kubelet

import (
	"context"
	"errors"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	critest "k8s.io/cri-api/pkg/apis/testing"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/pkg/outage"
)

func TestRuntimeStateFollowsStatus(t *testing.T) {
	fake := critest.NewFakeRuntimeService()
	state := NewRuntimeState(fake, outage.New(clock.RealClock{}), time.Hour, time.Second)
	if state.RuntimeErr() == nil {
		t.Fatal("before the first check the runtime must not count as healthy")
	}
	ctx := context.Background()
	state.Update(ctx)
	if err := state.RuntimeErr(); err != nil {
		t.Fatalf("ready runtime reported %v", err)
	}

	fake.InjectError("Status", errors.New("connection refused"))
	state.Update(ctx)
	if err := state.RuntimeErr(); err == nil {
		t.Fatal("a failing Status call must make the runtime unhealthy")
	}

	fake.FakeStatus = &runtimeapi.RuntimeStatus{Conditions: []*runtimeapi.RuntimeCondition{
		{Type: runtimeapi.RuntimeReady, Status: true},
		{Type: runtimeapi.NetworkReady, Status: false, Reason: "NetworkPluginNotReady"},
	}}
	state.Update(ctx)
	if err := state.RuntimeErr(); err != nil {
		t.Fatalf("runtime ready but reported %v", err)
	}
	if err := state.NetworkErr(); err == nil {
		t.Fatal("network not ready was not reported")
	}

	fake.FakeStatus.Conditions[0].Status = false
	state.Update(ctx)
	if err := state.RuntimeErr(); err == nil {
		t.Fatal("RuntimeReady=false must make the runtime unhealthy")
	}
}
