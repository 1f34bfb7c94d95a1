package kuberuntime

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus/testutil"
	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/metrics"
	"github.com/nodelet/nodelet/pkg/metrics/podstartup"
)

// tickingClock moves on by a millisecond each time it is read, so every phase a trace
// marks lasts at least that long.
type tickingClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *tickingClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(time.Millisecond)
	return c.now
}

func (c *tickingClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

// SyncPod counts the pods and containers it starts, and marks the sandbox, image pull,
// container create and start phases and the init containers' run on the pod's trace.
func TestSyncPodCountsStartsAndMarksTheTrace(t *testing.T) {
	var mu sync.Mutex
	var lines []string
	klog.SetLogger(funcr.New(func(_, args string) {
		mu.Lock()
		defer mu.Unlock()
		lines = append(lines, args)
	}, funcr.Options{}))
	defer klog.ClearLogger()

	env := newTestEnv(t)
	pod := newPod("traced", ctr("app"))
	pod.Spec.Containers[0].Image = "docker.io/library/nginx:1.27" // not present: pulled
	pod.Spec.InitContainers = []v1.Container{ctr("init")}
	backOff := flowcontrol.NewFakeBackOff(10*time.Second, 300*time.Second, env.clock)
	tracker := podstartup.NewTracker(&tickingClock{now: time.Now()})
	tracker.Start(pod)
	ctx := tracker.WithTrace(context.Background(), pod.UID)

	pods := testutil.ToFloat64(metrics.StartedPodsTotal)
	inits := testutil.ToFloat64(metrics.StartedContainersTotal.WithLabelValues(metrics.InitContainer))
	apps := testutil.ToFloat64(metrics.StartedContainersTotal.WithLabelValues(metrics.Container))

	if r := env.m.SyncPod(ctx, pod, env.podStatus(t, pod), nil, backOff); r.Error() != nil {
		t.Fatalf("first SyncPod: %v", r.Error())
	}
	env.exitContainer(t, pod, "init", 0, time.Now().Add(2*time.Second))
	if r := env.m.SyncPod(ctx, pod, env.podStatus(t, pod), nil, backOff); r.Error() != nil {
		t.Fatalf("second SyncPod: %v", r.Error())
	}
	for name, d := range map[string]float64{
		"started_pods_total":                       testutil.ToFloat64(metrics.StartedPodsTotal) - pods,
		`started_containers_total{init_container}`: testutil.ToFloat64(metrics.StartedContainersTotal.WithLabelValues(metrics.InitContainer)) - inits,
		`started_containers_total{container}`:      testutil.ToFloat64(metrics.StartedContainersTotal.WithLabelValues(metrics.Container)) - apps,
	} {
		if d != 1 {
			t.Errorf("%s grew by %v, want 1", name, d)
		}
	}

	tracker.StatusChanged(pod.UID, &v1.PodStatus{Phase: v1.PodRunning,
		Conditions: []v1.PodCondition{{Type: v1.PodReady, Status: v1.ConditionTrue}}})
	mu.Lock()
	defer mu.Unlock()
	var line string
	for _, l := range lines {
		if strings.Contains(l, `"msg"="Pod started"`) {
			line = l
		}
	}
	if line == "" {
		t.Fatal("no \"Pod started\" line: the sandbox phase was not marked")
	}
	for _, phase := range []string{"sandbox", "imagePull", "containerCreate", "containerStart", "initContainers"} {
		if strings.Contains(line, `"`+phase+`"="0s"`) {
			t.Errorf("phase %s not marked: %s", phase, line)
		}
	}
}
