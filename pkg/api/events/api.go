package events

import (
	"context"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
)

// component is the event source's component, as upstream's kubelet names itself.
const component = "kubelet"

// NewAPIRecorder returns a recorder that sends events to the API server (cluster mode), as
// upstream's kubelet does: through client-go's broadcaster, whose correlator folds repeats
// into counts and throttles each object's event stream, with the event client's own QPS
// and burst (eventRecordQPS, eventBurst) on top. Events are logged at V(3) as well. The
// broadcaster stops when ctx ends.
func NewAPIRecorder(ctx context.Context, client kubernetes.Interface, nodeName string) record.EventRecorder {
	b := record.NewBroadcaster(record.WithContext(ctx))
	b.StartStructuredLogging(3)
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	go func() {
		<-ctx.Done()
		b.Shutdown()
	}()
	return b.NewRecorder(scheme.Scheme, v1.EventSource{Component: component, Host: nodeName})
}
