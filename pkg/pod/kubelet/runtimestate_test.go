package kubelet

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
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

// A runtime that is fine is checked every five seconds, as upstream; one that is down or
// not ready every period, so its return is seen at once.
func TestRuntimeStateChecksOftenOnlyWhileNotFine(t *testing.T) {
	fake := critest.NewFakeRuntimeService()
	gate := outage.New(clock.RealClock{})
	state := NewRuntimeState(fake, gate, time.Second, time.Second)
	now := time.Now()
	if !state.checkDue(time.Time{}, now) {
		t.Fatal("first check not due")
	}
	state.Update(context.Background())
	last := now
	for _, c := range []struct {
		after time.Duration
		want  bool
	}{{time.Second, false}, {4 * time.Second, false}, {healthyCheckPeriod, true}} {
		if got := state.checkDue(last, now.Add(c.after)); got != c.want {
			t.Errorf("runtime fine, %v after the last check: due %t, want %t", c.after, got, c.want)
		}
	}

	// A call elsewhere finds the runtime unreachable: the gate declares the outage.
	gate.ErrorS(status.Error(codes.Unavailable, "connection refused"), "relist failed")
	if !gate.Down() {
		t.Fatal("the gate did not declare the outage")
	}
	if !state.checkDue(last, now.Add(time.Second)) {
		t.Error("check not due a period after the last while the gate says the runtime is down")
	}

	fake.FakeStatus = &runtimeapi.RuntimeStatus{Conditions: []*runtimeapi.RuntimeCondition{
		{Type: runtimeapi.RuntimeReady, Status: true},
		{Type: runtimeapi.NetworkReady, Status: false, Reason: "NetworkPluginNotReady"},
	}}
	state.Update(context.Background())
	if gate.Down() || !state.checkDue(last, now.Add(time.Second)) {
		t.Error("check not due a period after the last while the network is not ready")
	}
}
