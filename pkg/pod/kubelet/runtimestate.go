// Package kubelet holds the kubelet loop. For now: the runtime health monitor that the
// loop and /healthz share (upstream's runtimeState and updateRuntimeUp).
package kubelet

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/outage"
)

// errNotChecked is the state before the first check; the first result is always logged.
var errNotChecked = errors.New("container runtime status check may not have completed yet")

// RuntimeState tracks whether the container runtime answers and says it is ready, and
// feeds every check to the outage gate, which logs an outage's start and end.
type RuntimeState struct {
	runtime internalapi.RuntimeService
	gate    *outage.Gate
	period  time.Duration
	timeout time.Duration

	mu         sync.RWMutex
	runtimeErr error
	networkErr error
}

// healthyCheckPeriod is how often a runtime that is up and ready is checked: upstream's
// updateRuntimeUp period.
const healthyCheckPeriod = 5 * time.Second

// NewRuntimeState polls runtime every period while it is down, not ready or not yet
// checked (and every healthyCheckPeriod, if longer, while it is fine); each Status call
// gets timeout. Every result goes to gate (outage.Default in nodelet).
func NewRuntimeState(runtime internalapi.RuntimeService, gate *outage.Gate, period, timeout time.Duration) *RuntimeState {
	return &RuntimeState{runtime: runtime, gate: gate, period: period, timeout: timeout,
		runtimeErr: errNotChecked, networkErr: errNotChecked}
}

// RuntimeErr is nil while the runtime answers and reports RuntimeReady.
func (s *RuntimeState) RuntimeErr() error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.runtimeErr
}

// NetworkErr is nil while the runtime reports NetworkReady.
func (s *RuntimeState) NetworkErr() error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.networkErr
}

// Run checks once at once, then until ctx ends: every period while the runtime is down
// or not ready, so that its return is seen within a period (an outage holds the PLEG and
// the probes back until then), and every healthyCheckPeriod while it is fine, as
// upstream. An outage still starts at once: the gate declares it from the first call
// that finds the runtime unreachable (a relist, a sync), and from then on the checks
// come every period. With period 1 s this spares four Status calls in five on a quiet
// node.
func (s *RuntimeState) Run(ctx context.Context) {
	t := time.NewTicker(s.period)
	defer t.Stop()
	var last time.Time
	for {
		if s.checkDue(last, time.Now()) {
			last = time.Now()
			s.Update(ctx)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// checkDue reports whether the runtime should be checked now, the last check having
// been at last (zero: never).
func (s *RuntimeState) checkDue(last, now time.Time) bool {
	if last.IsZero() || now.Sub(last) >= max(healthyCheckPeriod, s.period) || s.gate.Down() {
		return true
	}
	return s.RuntimeErr() != nil || s.NetworkErr() != nil
}

// Update asks the runtime for its status and records the result. The gate logs an
// outage once when it starts and once when it ends, not once per poll; a change of
// network readiness is logged here.
func (s *RuntimeState) Update(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	runtimeErr, networkErr := s.probe(ctx)
	if ctx.Err() != nil && errors.Is(ctx.Err(), context.Canceled) {
		return
	}
	s.mu.Lock()
	prevRuntime, prevNetwork := s.runtimeErr, s.networkErr
	s.runtimeErr, s.networkErr = runtimeErr, networkErr
	s.mu.Unlock()
	s.gate.Observe(runtimeErr)
	if runtimeErr == nil && prevRuntime == errNotChecked {
		klog.InfoS("Container runtime is ready")
	}
	logTransition("Container runtime network", prevNetwork, networkErr)
}

func (s *RuntimeState) probe(ctx context.Context) (runtimeErr, networkErr error) {
	resp, err := s.runtime.Status(ctx, false)
	if err != nil {
		return fmt.Errorf("container runtime is down: %w", err), nil
	}
	for _, c := range resp.GetStatus().GetConditions() {
		if c.Status {
			continue
		}
		notReady := fmt.Errorf("%s=false reason:%s message:%s", c.Type, c.Reason, c.Message)
		switch c.Type {
		case runtimeapi.RuntimeReady:
			runtimeErr = fmt.Errorf("container runtime not ready: %w", notReady)
		case runtimeapi.NetworkReady:
			networkErr = fmt.Errorf("container runtime network not ready: %w", notReady)
		}
	}
	return runtimeErr, networkErr
}

// logTransition logs when readiness flips, not when the error text changes, so a long
// outage with varying dial errors is one line.
func logTransition(what string, prev, now error) {
	switch {
	case now != nil && (prev == nil || prev == errNotChecked):
		klog.ErrorS(now, what+" is not ready")
	case now == nil && prev != nil:
		klog.InfoS(what + " is ready")
	}
}
