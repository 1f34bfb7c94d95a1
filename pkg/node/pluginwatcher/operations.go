package pluginwatcher

import (
	"fmt"
	"sync"
	"time"

	"k8s.io/klog/v2"
)

// Upstream's exponential backoff (pkg/util/goroutinemap/exponentialbackoff): a socket
// whose operation failed gets no new one for 500ms, twice as long after each further
// failure, at most 2m2s.
const (
	initialRetryDelay = 500 * time.Millisecond
	maxRetryDelay     = 2*time.Minute + 2*time.Second
)

// operations runs at most one register or unregister operation per socket path at a
// time, and holds a failing socket back for a growing delay: upstream's goroutinemap as
// its plugin operation executor uses it. Handlers rely on this: they never see two calls
// for one socket at once.
type operations struct {
	mu       sync.Mutex
	bySocket map[string]*operationState
	// running counts the operation goroutines, so that the manager can wait for them.
	running *sync.WaitGroup
}

// operationState is a socket's running operation, or its last failure.
type operationState struct {
	pending    bool
	failedAt   time.Time
	retryDelay time.Duration
}

func newOperations(running *sync.WaitGroup) *operations {
	return &operations{bySocket: map[string]*operationState{}, running: running}
}

// start runs op in its own goroutine unless an operation on socket is still running or
// failed too recently; it reports whether op was started.
func (o *operations) start(logger klog.Logger, socket string, op func() error) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	st, known := o.bySocket[socket]
	if known && (st.pending || time.Since(st.failedAt) <= st.retryDelay) {
		return false
	}
	if !known {
		st = &operationState{}
		o.bySocket[socket] = st
	}
	st.pending = true
	o.running.Go(func() { o.finish(logger, socket, runRecovered(op)) })
	return true
}

// finish forgets a socket whose operation succeeded, and backs off one whose failed.
func (o *operations) finish(logger klog.Logger, socket string, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if err == nil {
		delete(o.bySocket, socket)
		return
	}
	st := o.bySocket[socket]
	st.pending = false
	st.retryDelay = nextRetryDelay(st.retryDelay)
	st.failedAt = time.Now()
	logger.Error(err, "Operation failed, no retries permitted until the delay has passed",
		"socketPath", socket, "noRetriesUntil", st.failedAt.Add(st.retryDelay), "durationBeforeRetry", st.retryDelay)
}

func nextRetryDelay(last time.Duration) time.Duration {
	if last == 0 {
		return initialRetryDelay
	}
	return min(2*last, maxRetryDelay)
}

// runRecovered turns a panic in a plugin handler into the operation's error, as upstream
// does, so that one bad plugin cannot bring the node agent down.
func runRecovered(op func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	return op()
}
