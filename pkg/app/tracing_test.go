package app

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	kubeletconfig "k8s.io/kubelet/config/v1beta1"

	"github.com/nodelet/nodelet/pkg/config"
	"github.com/nodelet/nodelet/pkg/tracing/tracingtest"
)

// tracedCRICalls are the calls that start the static pod; each must be a span under the
// pod's syncPod span.
var tracedCRICalls = []string{
	"runtime.v1.RuntimeService/RunPodSandbox",
	"runtime.v1.RuntimeService/CreateContainer",
	"runtime.v1.RuntimeService/StartContainer",
	"runtime.v1.ImageService/PullImage",
}

// TestStaticPodSyncIsTraced runs nodelet, as the smoke test does, with tracing pointing at
// an in-process collector and every trace sampled: the static pod's sync is a syncPod span
// and the CRI calls that start the pod are spans under it. Stopping nodelet flushes them.
func TestStaticPodSyncIsTraced(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("nodelet creates host directories such as /var/log/containers: needs root")
	}
	smokeCleanupLegacyLogs(t)
	cri := startFakeCRI(t)
	rcv := tracingtest.Start(t)
	opts := tracedOptions(t, cri.Endpoint, rcv.Endpoint)

	ctx, cancel := context.WithCancel(context.Background())
	var runErr error
	done := make(chan struct{})
	go func() { runErr = Run(ctx, opts); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	smokeWaitFor(t, done, &runErr, 30*time.Second, "the static pod's container started", func() string {
		for _, c := range cri.Runtime.GetCalls() {
			if c == "StartContainer" {
				return ""
			}
		}
		return "no StartContainer yet; calls: " + smokeCalls(cri.Runtime.GetCalls())
	})
	cancel()
	<-done
	if runErr != nil {
		t.Fatalf("Run: %v", runErr)
	}

	spans := rcv.Spans()
	t.Logf("the collector received %d spans, %d of them syncPod", len(spans), len(tracingtest.Named(spans, "syncPod")))
	for _, name := range tracedCRICalls {
		if why := underPodSync(spans, name, smokePod+"-"+smokeNode); why != "" {
			t.Error(why)
		}
	}
}

// underPodSync explains why no span called name has the pod's syncPod span as an
// ancestor; "" when one has.
func underPodSync(spans []tracingtest.Span, name, pod string) string {
	calls := tracingtest.Named(spans, name)
	for _, c := range calls {
		podSync, ok := tracingtest.AncestorNamed(spans, c, "syncPod")
		if ok && podSync.Attributes["k8s.pod.name"] == pod && podSync.Attributes["k8s.namespace.name"] == smokeNamespace {
			return ""
		}
	}
	names := make([]string, len(spans))
	for i, s := range spans {
		names[i] = s.Name
	}
	return fmt.Sprintf("none of the %d %s spans is under the syncPod span of %s; spans: %s", len(calls), name, pod, strings.Join(names, ", "))
}

// tracedOptions are the smoke test's options with tracing to collector.
func tracedOptions(t *testing.T, criEndpoint, collector string) *config.Options {
	t.Helper()
	dir := t.TempDir()
	manifests := filepath.Join(dir, "manifests")
	smokeWriteManifest(t, manifests)
	configFile := filepath.Join(dir, "kubelet.yaml")
	smokeWrite(t, configFile, fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
containerRuntimeEndpoint: %s
staticPodPath: %s
podLogsDir: %s
failSwapOn: false
cgroupsPerQOS: false
enforceNodeAllocatable: []
healthzPort: 0
enableServer: false
tracing:
  endpoint: %s
  samplingRatePerMillion: 1000000
`, criEndpoint, manifests, filepath.Join(dir, "logs"), collector))
	cl := config.NewCommandLine("nodelet")
	if err := cl.Parse([]string{"--config=" + configFile, "--root-dir=" + filepath.Join(dir, "root"), "--hostname-override=" + smokeNode}); err != nil {
		t.Fatalf("Parse: %v", err)
	}
	opts, err := cl.Options()
	if err != nil {
		t.Fatalf("Options: %v", err)
	}
	return opts
}

// Without tracing the CRI clients get no tracing option, so calls carry no trace context
// and no stats handler runs; the provider is a no-op one.
func TestNoTracingLeavesTheCRIClientsAlone(t *testing.T) {
	opts := &config.Options{Config: &kubeletconfig.KubeletConfiguration{}}
	tp, stop, err := startTracing(context.Background(), opts, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if tp.Enabled() || len(criTracing(tp)) != 0 {
		t.Errorf("enabled %v, %d CRI options; want a no-op provider and none", tp.Enabled(), len(criTracing(tp)))
	}
}
