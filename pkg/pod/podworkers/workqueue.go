package podworkers

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
)

// WorkQueue holds pods that want a sync at a time in the future (upstream's
// queue.WorkQueue): the sync ticker takes the ones that are due.
type WorkQueue struct {
	mu    sync.Mutex
	clock clock.Clock
	queue map[types.UID]time.Time
}

// NewWorkQueue returns an empty queue.
func NewWorkQueue(c clock.Clock) *WorkQueue {
	return &WorkQueue{clock: c, queue: map[types.UID]time.Time{}}
}

// Enqueue asks for uid to be synced after delay; a later request replaces an earlier one.
func (q *WorkQueue) Enqueue(uid types.UID, delay time.Duration) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.queue[uid] = q.clock.Now().Add(delay)
}

// GetWork removes and returns the pods that are due.
func (q *WorkQueue) GetWork() []types.UID {
	q.mu.Lock()
	defer q.mu.Unlock()
	now := q.clock.Now()
	var due []types.UID
	for uid, at := range q.queue {
		if !at.After(now) {
			due = append(due, uid)
			delete(q.queue, uid)
		}
	}
	return due
}
