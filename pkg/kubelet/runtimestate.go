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

// NewRuntimeState polls runtime every period; each Status call gets timeout. Every result
// goes to gate (outage.Default in nodelet).
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

// Run checks once at once, then every period until ctx ends.
func (s *RuntimeState) Run(ctx context.Context) {
	t := time.NewTicker(s.period)
	defer t.Stop()
	for {
		s.Update(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
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
