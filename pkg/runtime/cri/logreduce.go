package cri

import (
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// identicalErrorDelay is how often the same error for the same container (or
// sandbox) is logged again. Callers such as the PLEG and stats loops retry a
// failing container every second or so; without this the log fills with one
// line per retry.
const identicalErrorDelay = time.Minute

// errorLogThrottle decides whether an error for an ID should be logged: yes
// when it is new for that ID, differs from the last one, or was last logged
// at least delay ago. It mirrors upstream's logreduction.LogReduction.
type errorLogThrottle struct {
	clock clock.PassiveClock
	delay time.Duration

	mu   sync.Mutex
	last map[string]loggedError
}

type loggedError struct {
	message string
	at      time.Time
}

func newErrorLogThrottle(c clock.PassiveClock, delay time.Duration) *errorLogThrottle {
	return &errorLogThrottle{clock: c, delay: delay, last: map[string]loggedError{}}
}

// shouldLog reports whether message for id should be logged now, and if so
// remembers it as the last logged error for id.
func (t *errorLogThrottle) shouldLog(id, message string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.clock.Now()
	t.forgetExpired(now)
	if prev, ok := t.last[id]; ok && prev.message == message {
		return false // forgetExpired removed it if it was old enough
	}
	t.last[id] = loggedError{message: message, at: now}
	return true
}

// clear forgets id, so its next error is logged at once: used after a
// success, or when the container is stopped or removed.
func (t *errorLogThrottle) clear(id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.last, id)
}

// forgetExpired drops entries older than the delay; it also keeps the map
// from growing with IDs of containers that are long gone.
func (t *errorLogThrottle) forgetExpired(now time.Time) {
	for id, e := range t.last {
		if now.Sub(e.at) >= t.delay {
			delete(t.last, id)
		}
	}
}
