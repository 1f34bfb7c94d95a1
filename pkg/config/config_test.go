package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	kc "k8s.io/kubelet/config/v1beta1"
)

const header = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// loadDefaulted loads one YAML body (after the type header) and applies defaults.
func loadDefaulted(t *testing.T, body string) (*kc.KubeletConfiguration, error) {
	t.Helper()
	p := writeFile(t, t.TempDir(), "config.yaml", header+body)
	cfg, err := LoadFiles(p, "")
	if err != nil {
		return nil, err
	}
	SetDefaults(cfg)
	return cfg, nil
}

func TestDefaultsMatchUpstream(t *testing.T) {
	cfg, err := loadDefaulted(t, "")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"syncFrequency":             time.Minute,
		"fileCheckFrequency":        20 * time.Second,
		"httpCheckFrequency":        20 * time.Second,
		"runtimeRequestTimeout":     2 * time.Minute,
		"nodeStatusUpdateFrequency": 10 * time.Second,
		"nodeStatusReportFrequency": 5 * time.Minute,
		"imageMinimumGCAge":         2 * time.Minute,
		"streamingConnectionIdle":   4 * time.Hour,
		"maxPods":                   int32(110),
		"containerLogMaxSize":       "10Mi",
		"containerLogMaxFiles":      int32(5),
		"imageGCHigh":               int32(85),
		"imageGCLow":                int32(80),
		"kubeAPIQPS":                int32(50),
		"kubeAPIBurst":              int32(100),
		"eventRecordQPS":            int32(50),
		"eventBurst":                int32(100),
		"registryPullQPS":           int32(5),
		"registryBurst":             int32(10),
		"serializeImagePulls":       true,
		"cgroupDriver":              "cgroupfs",
		"cgroupsPerQOS":             true,
		"healthzPort":               int32(10248),
		"healthzBindAddress":        "127.0.0.1",
		"port":                      int32(10250),
		"address":                   "0.0.0.0",
		"readOnlyPort":              int32(0),
		"podLogsDir":                "/var/log/pods",
		"containerRuntimeEndpoint":  "unix:///run/containerd/containerd.sock",
		"resolverConfig":            "/etc/resolv.conf",
		"podPidsLimit":              int64(-1),
		"oomScoreAdj":               int32(-999),
		"nodeLeaseDurationSeconds":  int32(40),
		"authorizationMode":         "Webhook",
		"anonymousAuth":             false,
		"webhookAuth":               true,
		"failSwapOn":                true,
		"hairpinMode":               "promiscuous-bridge",
		"cpuCFSQuotaPeriod":         100 * time.Millisecond,
		"enforceNodeAllocatable":    "pods",
		"loggingFormat":             "text",
	}
	got := map[string]any{
		"syncFrequency":             cfg.SyncFrequency.Duration,
		"fileCheckFrequency":        cfg.FileCheckFrequency.Duration,
		"httpCheckFrequency":        cfg.HTTPCheckFrequency.Duration,
		"runtimeRequestTimeout":     cfg.RuntimeRequestTimeout.Duration,
		"nodeStatusUpdateFrequency": cfg.NodeStatusUpdateFrequency.Duration,
		"nodeStatusReportFrequency": cfg.NodeStatusReportFrequency.Duration,
		"imageMinimumGCAge":         cfg.ImageMinimumGCAge.Duration,
		"streamingConnectionIdle":   cfg.StreamingConnectionIdleTimeout.Duration,
		"maxPods":                   cfg.MaxPods,
		"containerLogMaxSize":       cfg.ContainerLogMaxSize,
		"containerLogMaxFiles":      *cfg.ContainerLogMaxFiles,
		"imageGCHigh":               *cfg.ImageGCHighThresholdPercent,
		"imageGCLow":                *cfg.ImageGCLowThresholdPercent,
		"kubeAPIQPS":                *cfg.KubeAPIQPS,
		"kubeAPIBurst":              cfg.KubeAPIBurst,
		"eventRecordQPS":            *cfg.EventRecordQPS,
		"eventBurst":                cfg.EventBurst,
		"registryPullQPS":           *cfg.RegistryPullQPS,
		"registryBurst":             cfg.RegistryBurst,
		"serializeImagePulls":       *cfg.SerializeImagePulls,
		"cgroupDriver":              cfg.CgroupDriver,
		"cgroupsPerQOS":             *cfg.CgroupsPerQOS,
		"healthzPort":               *cfg.HealthzPort,
		"healthzBindAddress":        cfg.HealthzBindAddress,
		"port":                      cfg.Port,
		"address":                   cfg.Address,
		"readOnlyPort":              cfg.ReadOnlyPort,
		"podLogsDir":                cfg.PodLogsDir,
		"containerRuntimeEndpoint":  cfg.ContainerRuntimeEndpoint,
		"resolverConfig":            *cfg.ResolverConfig,
		"podPidsLimit":              *cfg.PodPidsLimit,
		"oomScoreAdj":               *cfg.OOMScoreAdj,
		"nodeLeaseDurationSeconds":  cfg.NodeLeaseDurationSeconds,
		"authorizationMode":         string(cfg.Authorization.Mode),
		"anonymousAuth":             *cfg.Authentication.Anonymous.Enabled,
		"webhookAuth":               *cfg.Authentication.Webhook.Enabled,
		"failSwapOn":                *cfg.FailSwapOn,
		"hairpinMode":               cfg.HairpinMode,
		"cpuCFSQuotaPeriod":         cfg.CPUCFSQuotaPeriod.Duration,
		"enforceNodeAllocatable":    strings.Join(cfg.EnforceNodeAllocatable, ","),
		"loggingFormat":             cfg.Logging.Format,
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("default %s = %v, want %v", k, got[k], w)
		}
	}
	wantEviction := map[string]string{"memory.available": "100Mi", "nodefs.available": "10%", "nodefs.inodesFree": "5%", "imagefs.available": "15%", "imagefs.inodesFree": "5%"}
	for k, v := range wantEviction {
		if cfg.EvictionHard[k] != v {
			t.Errorf("evictionHard[%s] = %q, want %q", k, cfg.EvictionHard[k], v)
		}
	}
	if err := Validate(cfg); err != nil {
		t.Errorf("defaults do not validate: %v", err)
	}
}

func TestDefaultsDependOnOtherFields(t *testing.T) {
	cfg, err := loadDefaulted(t, "maxParallelImagePulls: 3\nnodeStatusUpdateFrequency: 4s\n")
	if err != nil {
		t.Fatal(err)
	}
	if *cfg.SerializeImagePulls {
		t.Error("serializeImagePulls should default to false when maxParallelImagePulls >= 2")
	}
	if cfg.NodeStatusReportFrequency.Duration != 4*time.Second {
		t.Errorf("nodeStatusReportFrequency = %v, want the explicit update frequency 4s", cfg.NodeStatusReportFrequency.Duration)
	}
}

func TestValidationNamesFieldAndValue(t *testing.T) {
	cases := []struct {
		body    string
		wantErr string // "" means accepted
	}{
		{"", ""},
		{"syncFrequency: 30s\nmaxPods: 250\n", ""},
		{"syncFrequency: -1s\n", `invalid configuration: syncFrequency: must be greater than 0s (got "-1s")`},
		{"fileCheckFrequency: -5s\n", `fileCheckFrequency: must be greater than 0s (got "-5s")`},
		{"runtimeRequestTimeout: -1m\n", `runtimeRequestTimeout: must be greater than 0s (got "-1m0s")`},
		{"maxPods: -1\n", `maxPods: must not be a negative number (got -1)`},
		{"port: 70000\n", `port: must be between 1 and 65535, inclusive (got 70000)`},
		{"healthzPort: -2\n", `healthzPort: must be between 0 and 65535, inclusive (got -2)`},
		{"healthzBindAddress: nowhere\n", `healthzBindAddress: must be a valid IP address (got "nowhere")`},
		{"address: 1.2.3\n", `address: must be a valid IP address (got "1.2.3")`},
		{"imageGCHighThresholdPercent: 101\n", `imageGCHighThresholdPercent: must be between 0 and 100, inclusive (got 101)`},
		{"imageGCHighThresholdPercent: 50\nimageGCLowThresholdPercent: 60\n", `imageGCLowThresholdPercent: must be less than imageGCHighThresholdPercent 50 (got 60)`},
		{"oomScoreAdj: -1001\n", `oomScoreAdj: must be between -1000 and 1000, inclusive (got -1001)`},
		{"cgroupDriver: lxc\n", `cgroupDriver: must be "cgroupfs" or "systemd" (got "lxc")`},
		{"containerLogMaxSize: lots\n", `containerLogMaxSize: must be a positive quantity such as 10Mi (got "lots")`},
		{"containerLogMaxFiles: 1\n", `containerLogMaxFiles: must be greater than or equal to 2 (got 1)`},
		{"evictionHard:\n  memory.free: 1Gi\n", `evictionHard: unknown eviction signal (got "memory.free")`},
		{"evictionHard:\n  memory.available: 120%\n", `evictionHard[memory.available]: must be a percentage between 0% and 100% or a non-negative quantity (got "120%")`},
		{"evictionSoft:\n  memory.available: 1Gi\n", `a grace period must be specified for the soft eviction threshold "memory.available"`},
		{"maxParallelImagePulls: 0\n", `maxParallelImagePulls: must be a positive number (got 0)`},
		{"serializeImagePulls: true\nmaxParallelImagePulls: 4\n", `maxParallelImagePulls: cannot be larger than 1 unless serializeImagePulls is false (got 4)`},
		{"topologyManagerPolicy: fastest\n", `topologyManagerPolicy: must be one of`},
		{"systemCgroups: /system\n", `systemCgroups: requires cgroupRoot to be set (got "/system")`},
		{"authorization:\n  mode: Open\n", `authorization.mode: must be one of ["AlwaysAllow" "Webhook"] (got "Open")`},
		{"podLogsDir: logs\n", `podLogsDir: must be an absolute path (got "logs")`},
		{"staticPodURL: ftp://x\n", `staticPodURL: must be an http:// or https:// URL (got "ftp://x")`},
		{"enforceNodeAllocatable: [pods, system-reserved]\n", `systemReservedCgroup: must be set when enforceNodeAllocatable contains system-reserved`},
		{"runOnce: true\n", `runOnce: run-once mode has been removed`},
		{"kubeReserved:\n  gpu: \"1\"\n", `kubeReserved: keys must be one of`},
		{"memoryThrottlingFactor: 1.5\n", `memoryThrottlingFactor: must be greater than 0 and less than or equal to 1.0 (got 1.5)`},
		// tracing: component-base's rules and words, whatever the KubeletTracing gate says
		// (upstream's validation reads no gate).
		{"tracing: {}\n", ""},
		{"tracing:\n  endpoint: localhost:4317\n  samplingRatePerMillion: 1000000\n", ""},
		{"tracing:\n  endpoint: unix:///run/otel.sock\n", ""},
		{"tracing:\n  samplingRatePerMillion: -1\n",
			"invalid configuration: tracing.samplingRatePerMillion: Invalid value: -1: sampling rate must be positive"},
		{"tracing:\n  samplingRatePerMillion: 1000001\n",
			"tracing.samplingRatePerMillion: Invalid value: 1000001: sampling rate per million must be less than or equal to one million"},
		{"tracing:\n  endpoint: http://collector:4317\n", "tracing.endpoint: Invalid value: \"http://collector:4317\": unsupported scheme: http."},
		{"featureGates:\n  KubeletTracing: false\ntracing:\n  samplingRatePerMillion: -1\n", "sampling rate must be positive"},
	}
	for _, c := range cases {
		cfg, err := loadDefaulted(t, c.body)
		if err == nil {
			err = Validate(cfg)
		}
		switch {
		case c.wantErr == "" && err != nil:
			t.Errorf("%q: rejected: %v", c.body, err)
		case c.wantErr != "" && err == nil:
			t.Errorf("%q: accepted, want error %q", c.body, c.wantErr)
		case c.wantErr != "" && !strings.Contains(err.Error(), c.wantErr):
			t.Errorf("%q: error %q does not contain %q", c.body, err, c.wantErr)
		}
	}
}

func TestValidationReportsEveryError(t *testing.T) {
	cfg, err := loadDefaulted(t, "maxPods: -1\nport: 70000\n")
	if err != nil {
		t.Fatal(err)
	}
	err = Validate(cfg)
	if err == nil || !strings.Contains(err.Error(), "maxPods") || !strings.Contains(err.Error(), "port:") {
		t.Fatalf("want both maxPods and port named, got %v", err)
	}
}

func TestLoadRejectsBadFiles(t *testing.T) {
	cases := []struct {
		name, content, wantErr string
	}{
		{"unknown field", header + "syncFrequncy: 1m\n", `strict decoding error: unknown field "syncFrequncy"`},
		{"nested unknown field", header + "authentication:\n  anonymus: {}\n", `unknown field "authentication.anonymus"`},
		{"duplicate key", header + "maxPods: 1\nmaxPods: 2\n", `key "maxPods" already set`},
		{"wrong kind", "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: Pod\n", `kind: must be "KubeletConfiguration" (got "Pod")`},
		{"wrong version", "apiVersion: kubelet.config.k8s.io/v1\nkind: KubeletConfiguration\n", `apiVersion: must be "kubelet.config.k8s.io/v1beta1" (got "kubelet.config.k8s.io/v1")`},
		{"bad duration", header + "syncFrequency: soon\n", `syncFrequency: time: invalid duration "soon"`},
		{"bad type", header + "maxPods: many\n", `maxPods`},
		{"empty", "", "the file is empty"},
		{"not an object", "- a\n- b\n", "not an object"},
	}
	for _, c := range cases {
		p := writeFile(t, t.TempDir(), "c.yaml", c.content)
		_, err := LoadFiles(p, "")
		if err == nil || !strings.Contains(err.Error(), c.wantErr) {
			t.Errorf("%s: got %v, want error containing %q", c.name, err, c.wantErr)
			continue
		}
		if !strings.Contains(err.Error(), p) {
			t.Errorf("%s: error %q does not name the file", c.name, err)
		}
	}
	if _, err := LoadFiles("/does/not/exist.yaml", ""); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("missing file: got %v", err)
	}
}

func TestLoadJSON(t *testing.T) {
	p := writeFile(t, t.TempDir(), "c.json", `{"apiVersion":"kubelet.config.k8s.io/v1beta1","kind":"KubeletConfiguration","maxPods":42,"staticPodPath":"/etc/kubernetes/manifests"}`)
	cfg, err := LoadFiles(p, "")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.MaxPods != 42 || cfg.StaticPodPath != "/etc/kubernetes/manifests" {
		t.Errorf("got maxPods=%d staticPodPath=%q", cfg.MaxPods, cfg.StaticPodPath)
	}
}

func TestDropInsMergeInLexicalOrder(t *testing.T) {
	dir := t.TempDir()
	main := writeFile(t, dir, "config.yaml", header+"maxPods: 10\nsyncFrequency: 30s\nevictionHard:\n  memory.available: 200Mi\nclusterDNS: [10.0.0.10, 10.0.0.11]\n")
	dropDir := filepath.Join(dir, "conf.d")
	if err := os.Mkdir(dropDir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, dropDir, "20-second.conf", header+"maxPods: 30\n")
	writeFile(t, dropDir, "10-first.conf", header+"maxPods: 20\nevictionHard:\n  nodefs.available: 5%\nclusterDNS: [10.0.0.99]\n")
	writeFile(t, dropDir, "99-ignored.yaml", header+"maxPods: 99\n")
	cfg, err := LoadFiles(main, dropDir)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.MaxPods != 30 {
		t.Errorf("maxPods = %d, want 30 from the lexically last drop-in", cfg.MaxPods)
	}
	if cfg.SyncFrequency.Duration != 30*time.Second {
		t.Errorf("syncFrequency = %v, want 30s kept from the main file", cfg.SyncFrequency.Duration)
	}
	if cfg.EvictionHard["memory.available"] != "200Mi" || cfg.EvictionHard["nodefs.available"] != "5%" {
		t.Errorf("evictionHard = %v, want maps merged", cfg.EvictionHard)
	}
	if strings.Join(cfg.ClusterDNS, ",") != "10.0.0.99" {
		t.Errorf("clusterDNS = %v, want the list replaced", cfg.ClusterDNS)
	}
}

func TestBadDropInNamed(t *testing.T) {
	dir := t.TempDir()
	bad := writeFile(t, dir, "50-bad.conf", header+"maxPodz: 3\n")
	_, err := LoadFiles("", dir)
	if err == nil || !strings.Contains(err.Error(), bad) || !strings.Contains(err.Error(), "maxPodz") {
		t.Fatalf("got %v, want the drop-in and the field named", err)
	}
}

func osMkdir(dir string) error { return os.MkdirAll(dir, 0o755) }
