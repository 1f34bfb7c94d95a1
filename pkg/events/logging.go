// Package events records Kubernetes events. In standalone mode there is no API server to
// send them to, so they are written to the log, one line each, like `kubectl get events`.
package events

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
)

// LoggingRecorder is a record.EventRecorder that logs.
type LoggingRecorder struct{}

var _ record.EventRecorder = LoggingRecorder{}

func (LoggingRecorder) Event(obj runtime.Object, eventType, reason, message string) {
	logEvent(obj, eventType, reason, message)
}

func (LoggingRecorder) Eventf(obj runtime.Object, eventType, reason, format string, args ...any) {
	logEvent(obj, eventType, reason, fmt.Sprintf(format, args...))
}

func (LoggingRecorder) AnnotatedEventf(obj runtime.Object, _ map[string]string, eventType, reason, format string, args ...any) {
	logEvent(obj, eventType, reason, fmt.Sprintf(format, args...))
}

func logEvent(obj runtime.Object, eventType, reason, message string) {
	kind, ref := describe(obj)
	klog.InfoS("Event", "type", eventType, "reason", reason, "object", ref, "kind", kind, "message", message)
}

// describe names the object an event is about: a pod, or a container reference.
func describe(obj runtime.Object) (string, klog.ObjectRef) {
	if obj == nil {
		return "", klog.ObjectRef{}
	}
	kind := obj.GetObjectKind().GroupVersionKind().Kind
	if m, err := meta.Accessor(obj); err == nil {
		if kind == "" {
			kind = "Pod"
		}
		return kind, klog.KRef(m.GetNamespace(), m.GetName())
	}
	return kind, klog.ObjectRef{}
}
