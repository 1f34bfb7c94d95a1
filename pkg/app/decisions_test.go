package app

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nodelet/nodelet/pkg/config"
	"github.com/nodelet/nodelet/pkg/metrics"
	"github.com/nodelet/nodelet/pkg/node/nodestatus"
	"github.com/nodelet/nodelet/pkg/runtime/container"
	"github.com/nodelet/nodelet/pkg/runtime/criconfig"
	"github.com/nodelet/nodelet/pkg/runtime/imagegc"
)

// defaultOptions are the options of a node started with a config file that sets nothing,
// so that every field has its v1beta1 default.
func defaultOptions(t *testing.T, args ...string) *config.Options {
	t.Helper()
	dir := t.TempDir()
	file := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(file, []byte("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cl := config.NewCommandLine("nodelet")
	if err := cl.Parse(append([]string{"--config=" + file, "--root-dir=" + filepath.Join(dir, "root")}, args...)); err != nil {
		t.Fatal(err)
	}
	opts, err := cl.Options()
	if err != nil {
		t.Fatal(err)
	}
	return opts
}

// The runtime manager gets upstream's defaults: image pulls serialized at 5 QPS (burst
// 10), CFS quota on with a 100 ms period, no default seccomp profile, /var/log/pods.
func TestRuntimeSettingsCarryTheDefaults(t *testing.T) {
	opts := defaultOptions(t)
	ips := []net.IP{net.ParseIP("10.0.0.5")}
	ro := runtimeSettings(opts, "node-a", ips, criconfig.Host{CgroupV2: true}, nodestatus.Options{})
	im := ro.ImageOptions
	if !im.SerializeImagePulls || im.MaxParallelImagePulls != nil || im.RegistryPullQPS != 5 || im.RegistryBurst != 10 {
		t.Errorf("image pulls %+v, want serialized, no parallel cap, 5 QPS, burst 10", im)
	}
	if !ro.CPUCFSQuota || ro.CPUCFSQuotaPeriod != 100*time.Millisecond || ro.SeccompDefault || ro.SingleProcessOOMKill {
		t.Errorf("cpuCFSQuota %v period %v seccompDefault %v singleProcessOOMKill %v, want true 100ms false false",
			ro.CPUCFSQuota, ro.CPUCFSQuotaPeriod, ro.SeccompDefault, ro.SingleProcessOOMKill)
	}
	if ro.PodLogsDir != "/var/log/pods" || ro.RootDir != opts.RootDirectory || ro.NodeName != "node-a" ||
		!reflect.DeepEqual(ro.NodeIPs, []string{"10.0.0.5"}) {
		t.Errorf("podLogsDir %q rootDir %q node %q IPs %v", ro.PodLogsDir, ro.RootDir, ro.NodeName, ro.NodeIPs)
	}
	// MemoryQoS is on by default: on cgroup v2 containers get memory.high at 0.9.
	if ro.MemoryQoS == nil || ro.MemoryQoS.ThrottlingFactor != 0.9 {
		t.Errorf("memory QoS %+v on cgroup v2, want throttling factor 0.9", ro.MemoryQoS)
	}
	if ro := runtimeSettings(opts, "node-a", ips, criconfig.Host{}, nodestatus.Options{}); ro.MemoryQoS != nil {
		t.Errorf("memory QoS %+v on cgroup v1, want none", ro.MemoryQoS)
	}
}

// The loop syncs every minute, admits 110 pods and keeps one dead container per container.
func TestLoopConfigCarriesTheDefaults(t *testing.T) {
	c := loopConfig(defaultOptions(t), "node-a", nil)
	want := container.GCPolicy{MinAge: 0, MaxPerPodContainer: 1, MaxContainers: -1}
	if c.SyncFrequency != time.Minute || c.MaxPods != 110 || c.GCPolicy != want || c.HousekeepingPeriod != 2*time.Second ||
		c.GCPeriod != time.Minute || !c.PodLevelResourcesResize {
		t.Errorf("loop config %+v", c)
	}
	c = loopConfig(defaultOptions(t, "--max-pods=7", "--maximum-dead-containers-per-container=3",
		"--feature-gates=InPlacePodLevelResourcesVerticalScaling=false"), "node-a", nil)
	if c.MaxPods != 7 || c.GCPolicy.MaxPerPodContainer != 3 || c.PodLevelResourcesResize {
		t.Errorf("flags did not reach the loop: %+v", c)
	}
}

func TestImageGCPolicyCarriesTheDefaults(t *testing.T) {
	got := imageGCPolicy(defaultOptions(t).Config)
	want := imagegc.Policy{HighThresholdPercent: 85, LowThresholdPercent: 80, MinAge: 2 * time.Minute}
	if got != want {
		t.Errorf("image GC policy %+v, want %+v", got, want)
	}
}

// nodelet's own process gets oomScoreAdj -999 and 1000000 open files by default, and a
// kernel that refuses does not stop the start.
func TestProcessLimitsApplyTheDefaults(t *testing.T) {
	path := filepath.Join(t.TempDir(), "oom_score_adj")
	var files uint64
	p := processLimits{oomScoreAdjPath: path, setMaxOpenFiles: func(n uint64) error { files = n; return nil }}
	p.apply(defaultOptions(t).Config)
	if b, err := os.ReadFile(path); err != nil || string(b) != "-999" {
		t.Errorf("oom_score_adj %q (%v), want -999", b, err)
	}
	if files != 1000000 {
		t.Errorf("max open files %d, want 1000000", files)
	}
	p.apply(defaultOptions(t, "--oom-score-adj=-500", "--max-open-files=4096").Config)
	if b, _ := os.ReadFile(path); string(b) != "-500" || files != 4096 {
		t.Errorf("flags: oom_score_adj %q, open files %d; want -500 and 4096", b, files)
	}
	refused := processLimits{oomScoreAdjPath: filepath.Join(t.TempDir(), "missing", "oom_score_adj"),
		setMaxOpenFiles: func(uint64) error { return os.ErrPermission }}
	refused.apply(defaultOptions(t).Config) // logs, does not panic or exit
	if ownProcess.oomScoreAdjPath != "/proc/self/oom_score_adj" {
		t.Errorf("nodelet writes its OOM score to %q", ownProcess.oomScoreAdjPath)
	}
}

// Every endpoint the kubelet API mounts gets a handler: an unset one answers 404, which is
// how /metrics/slis went missing.
func TestKubeletAPIFillsEveryEndpoint(t *testing.T) {
	opts := defaultOptions(t)
	regs, err := metrics.NewRegistries("node-a")
	if err != nil {
		t.Fatal(err)
	}
	deps := kubeletAPI{opts: opts, nodeName: "node-a", registries: regs}.deps(context.Background())
	v := reflect.ValueOf(deps)
	handlerType := reflect.TypeFor[http.Handler]()
	for i := 0; i < v.NumField(); i++ {
		f := v.Type().Field(i)
		if f.Type == handlerType && v.Field(i).IsNil() {
			t.Errorf("kubeletserver.Deps.%s is not set: its endpoint would answer 404", f.Name)
		}
	}
}

// /metrics/slis carries the health checks' results once /healthz has run them, and a
// DELETE resets them, as upstream's.
func TestSLIsFollowHealthz(t *testing.T) {
	regs, err := metrics.NewRegistries("node-a")
	if err != nil {
		t.Fatal(err)
	}
	metrics.ObserveHealthcheck("syncloop", "healthz", nil)
	metrics.ObserveHealthcheck("runtime", "healthz", os.ErrDeadlineExceeded)
	body := get(t, regs.SLIsHandler(), http.MethodGet)
	for _, want := range []string{
		"# HELP kubernetes_healthcheck [STABLE] This metric records the result of a single healthcheck.",
		`kubernetes_healthcheck{name="syncloop",type="healthz"} 1`,
		`kubernetes_healthcheck{name="runtime",type="healthz"} 0`,
		`kubernetes_healthchecks_total{name="runtime",status="error",type="healthz"} 1`,
		"process_start_time_seconds",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics/slis lacks %q:\n%s", want, body)
		}
	}
	if got := get(t, regs.SLIsHandler(), http.MethodDelete); got != "metrics reset\n" {
		t.Errorf("DELETE answered %q", got)
	}
	if body := get(t, regs.SLIsHandler(), http.MethodGet); strings.Contains(body, `name="syncloop"`) {
		t.Errorf("after a reset /metrics/slis still has:\n%s", body)
	}
}

func get(t *testing.T, h http.Handler, method string) string {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, "/metrics/slis", nil))
	return rec.Body.String()
}

// The systemd cgroup driver needs systemd running, unless the runtime itself uses it.
func TestSystemdDriverNeedsSystemd(t *testing.T) {
	for _, tc := range []struct {
		driver              string
		fromRuntime, system bool
		refused             bool
	}{
		{"cgroupfs", false, false, false},
		{"systemd", false, false, true},
		{"systemd", true, false, false},
		{"systemd", false, true, false},
	} {
		err := checkSystemdDriver(tc.driver, tc.fromRuntime, tc.system)
		if (err != nil) != tc.refused {
			t.Errorf("%+v: %v", tc, err)
		}
		if err != nil && !strings.Contains(err.Error(), `cgroupDriver "systemd" needs systemd`) {
			t.Errorf("%+v: unclear error %v", tc, err)
		}
	}
}
