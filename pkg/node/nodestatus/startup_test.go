package nodestatus

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodelet/nodelet/pkg/metrics"
)

func gauge(g prometheus.Gauge) float64 {
	var m dto.Metric
	_ = g.Write(&m)
	return m.GetGauge().GetValue()
}

// Creating the Node and then reporting it Ready set the node start-up durations, as
// upstream's tracker does from registerWithAPIServer and patchNodeStatus.
func TestNodeStartupDurations(t *testing.T) {
	boot := time.Now().Add(-10 * 365 * 24 * time.Hour)
	start := boot.Add(12345 * time.Second)
	cs := newFakeClient()
	runController(t, testOptions(), Deps{Client: cs, Startup: metrics.NewNodeStartupTracker(boot, start, nil)})
	eventually(t, "a Ready node", func() bool {
		n, err := getNode(cs)
		return err == nil && isReady(n)
	})
	// Other tests' controllers record with the process's tracker: wait for this one's.
	const tenYears = 10 * 365 * 24 * 3600
	eventually(t, "the start-up durations", func() bool {
		return gauge(metrics.NodeStartupPreKubeletDuration) == 12345 && gauge(metrics.NodeStartupDuration) >= tenYears
	})
	if got := gauge(metrics.NodeStartupPreRegistrationDuration); got < tenYears-12345 {
		t.Errorf("pre_registration = %v, want from the (long past) start to now", got)
	}
}

// A Node that already exists was not registered by this process: no durations.
func TestNodeStartupDurationsNotForAnExistingNode(t *testing.T) {
	boot := time.Now().Add(-time.Hour)
	cs := newFakeClient(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: testNode, UID: "old"}})
	env := newTestController(t, testOptions(), Deps{Client: cs, Startup: metrics.NewNodeStartupTracker(boot, boot.Add(777*time.Second), nil)})
	ctx := context.Background()
	initial, _ := env.c.InitialNode(ctx)
	env.c.startup.RecordAttemptRegisterNode()
	if err := env.c.tryRegister(ctx, initial); err != nil {
		t.Fatal(err)
	}
	if got := gauge(metrics.NodeStartupPreKubeletDuration); got == 777 {
		t.Error("durations recorded for a Node this process did not create")
	}
}
