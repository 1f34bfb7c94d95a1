//go:build e2e

package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/uuid"

	"github.com/nodelet/nodelet/pkg/tracing/tracingtest"
)

// TestPodSyncIsTraced: with tracing pointing at a collector and every trace sampled, the
// start of a static pod reaches the collector as a syncPod span with the CRI calls that
// started it (otelgrpc's spans, named after the gRPC method) under it.
func TestPodSyncIsTraced(t *testing.T) {
	rcv := tracingtest.Start(t)
	extra := fmt.Sprintf("tracing:\n  endpoint: %s\n  samplingRatePerMillion: 1000000\n", rcv.Endpoint)
	s := startStandaloneOn(t, "e2e-"+string(uuid.NewUUID())[:8], t.TempDir(), extra)
	s.writeManifest(t, "traced.yaml", busyboxPod("traced", "Always", "sleep 3600"))
	waitFor(t, 30*time.Second, "the traced pod running", func() bool { return len(s.containers(t, "traced", false)) == 1 })

	pod := "traced-" + s.node
	// The batch span processor exports every 5 s.
	rcv.WaitFor(t, 30*time.Second, func(spans []tracingtest.Span) string {
		for _, call := range []string{"RunPodSandbox", "CreateContainer", "StartContainer"} {
			if why := callUnderPodSync(spans, "runtime.v1.RuntimeService/"+call, pod); why != "" {
				return why
			}
		}
		return ""
	})
	for _, sync := range tracingtest.Named(rcv.Spans(), "syncPod") {
		if sync.Attributes["k8s.pod.name"] != pod {
			continue
		}
		if sync.Resource["service.name"] != "kubelet" || sync.Resource["host.name"] != s.node {
			t.Errorf("syncPod resource %v, want service.name kubelet and host.name %s", sync.Resource, s.node)
		}
		if sync.Attributes["k8s.namespace.name"] != "default" || sync.Attributes["k8s.pod"] != "default/"+pod {
			t.Errorf("syncPod attributes %v, want the pod's namespace and name", sync.Attributes)
		}
		return
	}
}

// callUnderPodSync explains why no span called name descends from the pod's syncPod span;
// "" when one does.
func callUnderPodSync(spans []tracingtest.Span, name, pod string) string {
	calls := tracingtest.Named(spans, name)
	for _, c := range calls {
		if sync, ok := tracingtest.AncestorNamed(spans, c, "syncPod"); ok && sync.Attributes["k8s.pod.name"] == pod {
			return ""
		}
	}
	names := make([]string, 0, len(spans))
	for _, s := range spans {
		names = append(names, s.Name)
	}
	return fmt.Sprintf("none of the %d %s spans is under the syncPod span of %s; spans so far: %s", len(calls), name, pod, strings.Join(names, ", "))
}
