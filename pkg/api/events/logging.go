// Package events records Kubernetes events. In standalone mode there is no API server to
// send them to, so they are written to the log, one line each, like `kubectl get events`.
package events

import (
	"fmt"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// repeatWindow is how long an identical event is not logged again, as the API server's
// event correlator folds repeats into a count instead of new events.
const repeatWindow = 10 * time.Minute

// LoggingRecorder is a record.EventRecorder that logs, once per repeatWindow for
// identical events (same object, type, reason and message).
type LoggingRecorder struct {
	clock clock.PassiveClock
	mu    sync.Mutex
	seen  map[string]time.Time
}

var _ record.EventRecorder = (*LoggingRecorder)(nil)

// NewLoggingRecorder returns a recorder that logs events.
func NewLoggingRecorder(c clock.PassiveClock) *LoggingRecorder {
	return &LoggingRecorder{clock: c, seen: map[string]time.Time{}}
}

func (r *LoggingRecorder) Event(obj runtime.Object, eventType, reason, message string) {
	r.log(obj, eventType, reason, message)
}

func (r *LoggingRecorder) Eventf(obj runtime.Object, eventType, reason, format string, args ...any) {
	r.log(obj, eventType, reason, fmt.Sprintf(format, args...))
}

func (r *LoggingRecorder) AnnotatedEventf(obj runtime.Object, _ map[string]string, eventType, reason, format string, args ...any) {
	r.log(obj, eventType, reason, fmt.Sprintf(format, args...))
}

func (r *LoggingRecorder) log(obj runtime.Object, eventType, reason, message string) {
	kind, ref := describe(obj)
	if !r.firstInWindow(fmt.Sprintf("%s|%s|%s|%s|%s", kind, ref, eventType, reason, message)) {
		return
	}
	klog.InfoS("Event", "type", eventType, "reason", reason, "object", ref, "kind", kind, "message", message)
}

// firstInWindow reports whether key was not seen within the window, and forgets old keys.
func (r *LoggingRecorder) firstInWindow(key string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.clock.Now()
	if last, ok := r.seen[key]; ok && now.Sub(last) < repeatWindow {
		return false
	}
	r.seen[key] = now
	if len(r.seen) > 4096 {
		for k, t := range r.seen {
			if now.Sub(t) >= repeatWindow {
				delete(r.seen, k)
			}
		}
	}
	return true
}

// describe names the object an event is about: a pod, a node, or a reference to one of
// them, where a container's field path (spec.containers{name}) follows the name.
func describe(obj runtime.Object) (string, klog.ObjectRef) {
	if obj == nil {
		return "", klog.ObjectRef{}
	}
	if ref, ok := obj.(*v1.ObjectReference); ok {
		name := ref.Name
		if ref.FieldPath != "" {
			name += " " + ref.FieldPath
		}
		return ref.Kind, klog.KRef(ref.Namespace, name)
	}
	kind := obj.GetObjectKind().GroupVersionKind().Kind
	m, err := meta.Accessor(obj)
	if err != nil {
		return kind, klog.ObjectRef{}
	}
	if kind == "" {
		if _, ok := obj.(*v1.Node); ok {
			kind = "Node"
		} else {
			kind = "Pod"
		}
	}
	return kind, klog.KRef(m.GetNamespace(), m.GetName())
}
