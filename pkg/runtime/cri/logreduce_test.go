package cri

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	testingclock "k8s.io/utils/clock/testing"
)

func TestErrorLogThrottle(t *testing.T) {
	clock := testingclock.NewFakePassiveClock(time.Unix(1000, 0))
	th := newErrorLogThrottle(clock, identicalErrorDelay)
	step := func(d time.Duration) { clock.SetTime(clock.Now().Add(d)) }

	if !th.shouldLog("c1", "boom") {
		t.Fatal("first error not logged")
	}
	if th.shouldLog("c1", "boom") {
		t.Error("identical error logged again at once")
	}
	if !th.shouldLog("c2", "boom") {
		t.Error("the same error for another ID was not logged")
	}
	step(59 * time.Second)
	if th.shouldLog("c1", "boom") {
		t.Error("identical error logged again after 59s")
	}
	step(time.Second)
	if !th.shouldLog("c1", "boom") {
		t.Error("identical error not logged again after a minute")
	}
	if !th.shouldLog("c1", "other") {
		t.Error("a different error was not logged")
	}
	if !th.shouldLog("c1", "boom") {
		t.Error("the first error, after a different one, was not logged")
	}
	th.clear("c1")
	if !th.shouldLog("c1", "boom") {
		t.Error("error after clear was not logged")
	}
	step(2 * time.Minute)
	th.shouldLog("c3", "x")
	if _, ok := th.last["c2"]; ok {
		t.Error("expired entries are kept forever")
	}
}

// logCapture records the messages of the error lines a logger writes.
type logCapture struct {
	mu    sync.Mutex
	lines []string
}

func (c *logCapture) logger() logr.Logger {
	return funcr.New(func(_, args string) {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.lines = append(c.lines, args)
	}, funcr.Options{})
}

func (c *logCapture) count(msg string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, l := range c.lines {
		if strings.Contains(l, `"msg"="`+msg+`"`) {
			n++
		}
	}
	return n
}

func TestContainerStatusErrorsAreLoggedOncePerMinute(t *testing.T) {
	clock := testingclock.NewFakePassiveClock(time.Now())
	logs := &logCapture{}
	f := newFakeCRI()
	f.fail("ContainerStatus", status.Error(codes.Unavailable, "runtime is busy"))
	rs, _ := newTestClients(t, f, WithClock(clock), WithLogger(logs.logger()))
	ctx := context.Background()
	const msg = "ContainerStatus from runtime service failed"
	status3 := func() {
		for range 3 {
			if _, err := rs.ContainerStatus(ctx, "c1", false); err == nil {
				t.Fatal("want an error")
			}
		}
	}

	status3()
	if n := logs.count(msg); n != 1 {
		t.Fatalf("%d log lines for 3 identical errors, want 1", n)
	}
	clock.SetTime(clock.Now().Add(identicalErrorDelay))
	status3()
	if n := logs.count(msg); n != 2 {
		t.Fatalf("%d log lines after a minute, want 2", n)
	}

	// A success clears the record: the next failure is logged at once.
	f.fail("ContainerStatus", nil)
	f.set("ContainerStatus", &runtimeapi.ContainerStatusResponse{Status: goodContainerStatus("c1")})
	if _, err := rs.ContainerStatus(ctx, "c1", false); err != nil {
		t.Fatal(err)
	}
	f.fail("ContainerStatus", status.Error(codes.Unavailable, "runtime is busy"))
	status3()
	if n := logs.count(msg); n != 3 {
		t.Fatalf("%d log lines after a success and new failures, want 3", n)
	}
}

func TestContainerStatsAndSandboxStatsErrorsAreReduced(t *testing.T) {
	logs := &logCapture{}
	f := newFakeCRI() // ContainerStats and PodSandboxStats answer Unimplemented
	rs, _ := newTestClients(t, f, WithClock(testingclock.NewFakePassiveClock(time.Now())), WithLogger(logs.logger()))
	ctx := context.Background()
	for range 3 {
		_, _ = rs.ContainerStats(ctx, "c1")
		_, _ = rs.PodSandboxStats(ctx, "sb1")
	}
	if n := logs.count("ContainerStats from runtime service failed"); n != 1 {
		t.Errorf("ContainerStats: %d log lines, want 1", n)
	}
	if n := logs.count("PodSandboxStats from runtime service failed"); n != 1 {
		t.Errorf("PodSandboxStats: %d log lines, want 1", n)
	}
}

func TestStopContainerResetsErrorLogReduction(t *testing.T) {
	logs := &logCapture{}
	f := newFakeCRI()
	f.set("StopContainer", &runtimeapi.StopContainerResponse{})
	rs, _ := newTestClients(t, f, WithClock(testingclock.NewFakePassiveClock(time.Now())), WithLogger(logs.logger()))
	ctx := context.Background()
	_, _ = rs.ContainerStatus(ctx, "c1", false)
	if err := rs.StopContainer(ctx, "c1", 0); err != nil {
		t.Fatal(err)
	}
	_, _ = rs.ContainerStatus(ctx, "c1", false)
	if n := logs.count("ContainerStatus from runtime service failed"); n != 2 {
		t.Errorf("%d log lines, want 2: stopping the container should reset its record", n)
	}
}
