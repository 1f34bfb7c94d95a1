package config

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	kc "k8s.io/kubelet/config/v1beta1"
)

func parse(t *testing.T, args ...string) (*CommandLine, *Options, error) {
	t.Helper()
	cl := NewCommandLine("nodelet")
	if err := cl.Parse(args); err != nil {
		return cl, nil, err
	}
	opts, err := cl.Options()
	return cl, opts, err
}

func TestEveryTableFlagBindsToARealField(t *testing.T) {
	for _, spec := range upstreamFlags {
		if spec.Kind != configFlag {
			continue
		}
		if _, err := fieldByJSONPath(&kc.KubeletConfiguration{}, spec.Field); err != nil {
			t.Errorf("--%s: %v", spec.Name, err)
		}
	}
	if len(upstreamFlags) < 100 {
		t.Errorf("only %d upstream flags registered", len(upstreamFlags))
	}
}

func TestFlagsOverrideFileAndDropIns(t *testing.T) {
	dir := t.TempDir()
	cfgFile := writeFile(t, dir, "config.yaml", header+"maxPods: 10\nsyncFrequency: 30s\nfileCheckFrequency: 7s\nevictionHard:\n  memory.available: 1Gi\n")
	dropDir := filepath.Join(dir, "d")
	mustMkdir(t, dropDir)
	writeFile(t, dropDir, "10.conf", header+"maxPods: 20\nhealthzPort: 11111\n")
	_, opts, err := parse(t, "--config="+cfgFile, "--config-dir="+dropDir,
		"--max-pods=30", "--sync-frequency", "45s", "--eviction-hard=memory.available<500Mi,nodefs.available<5%")
	if err != nil {
		t.Fatal(err)
	}
	c := opts.Config
	if c.MaxPods != 30 {
		t.Errorf("maxPods = %d, want 30 from the flag over file (10) and drop-in (20)", c.MaxPods)
	}
	if c.SyncFrequency.Duration != 45*time.Second {
		t.Errorf("syncFrequency = %v, want 45s from the flag", c.SyncFrequency.Duration)
	}
	if c.FileCheckFrequency.Duration != 7*time.Second {
		t.Errorf("fileCheckFrequency = %v, want 7s from the file (no flag given)", c.FileCheckFrequency.Duration)
	}
	if *c.HealthzPort != 11111 {
		t.Errorf("healthzPort = %d, want 11111 from the drop-in", *c.HealthzPort)
	}
	want := map[string]string{"memory.available": "500Mi", "nodefs.available": "5%"}
	if len(c.EvictionHard) != 2 || c.EvictionHard["memory.available"] != want["memory.available"] || c.EvictionHard["nodefs.available"] != want["nodefs.available"] {
		t.Errorf("evictionHard = %v, want the flag's map %v", c.EvictionHard, want)
	}
	if c.RuntimeRequestTimeout.Duration != 2*time.Minute {
		t.Errorf("unset fields must still get defaults, runtimeRequestTimeout = %v", c.RuntimeRequestTimeout.Duration)
	}
}

func TestFlagWithoutConfigFile(t *testing.T) {
	_, opts, err := parse(t, "--container-runtime-endpoint=unix:///run/x.sock", "--pod-manifest-path=/etc/m",
		"--feature-gates=Foo=true,Bar=false", "--register-with-taints=a=b:NoSchedule,c:NoExecute",
		"--hostname-override=Node-1", "--node-labels=a=b,example.com/c=d", "--root-dir=/var/lib/nodelet",
		"--anonymous-auth=false", "--fail-swap-on=false")
	if err != nil {
		t.Fatal(err)
	}
	c := opts.Config
	if c.ContainerRuntimeEndpoint != "unix:///run/x.sock" || c.StaticPodPath != "/etc/m" {
		t.Errorf("endpoint %q staticPodPath %q", c.ContainerRuntimeEndpoint, c.StaticPodPath)
	}
	if !c.FeatureGates["Foo"] || c.FeatureGates["Bar"] || len(c.FeatureGates) != 2 {
		t.Errorf("featureGates = %v", c.FeatureGates)
	}
	if len(c.RegisterWithTaints) != 2 || c.RegisterWithTaints[0].Key != "a" || c.RegisterWithTaints[0].Value != "b" || c.RegisterWithTaints[1].Effect != "NoExecute" {
		t.Errorf("registerWithTaints = %v", c.RegisterWithTaints)
	}
	if opts.HostnameOverride != "Node-1" || opts.NodeLabels["example.com/c"] != "d" || opts.RootDirectory != "/var/lib/nodelet" {
		t.Errorf("kubelet flags = %+v", opts.KubeletFlags)
	}
	if *c.Authentication.Anonymous.Enabled || *c.FailSwapOn {
		t.Errorf("bool flags set to false did not stick")
	}
}

func TestBoolFlagWithoutValue(t *testing.T) {
	_, opts, err := parse(t, "--fail-swap-on=false", "--exit-on-lock-contention", "--lock-file=/run/l")
	if err != nil {
		t.Fatal(err)
	}
	if !opts.ExitOnLockContention {
		t.Error("--exit-on-lock-contention without a value should mean true")
	}
}

func TestCommandLineErrors(t *testing.T) {
	cases := map[string]struct {
		args []string
		want string
	}{
		"unknown flag":        {[]string{"--bogus"}, "unknown flag: --bogus"},
		"bad duration":        {[]string{"--sync-frequency=fast"}, `invalid argument "fast" for "--sync-frequency"`},
		"bad int":             {[]string{"--max-pods=lots"}, `invalid argument "lots" for "--max-pods"`},
		"bad bool":            {[]string{"--fail-swap-on=maybe"}, `invalid argument "maybe"`},
		"bad taint":           {[]string{"--register-with-taints=a=b:Sometimes"}, `invalid taint effect "Sometimes"`},
		"positional":          {[]string{"run"}, `unknown command "run"`},
		"validated flag":      {[]string{"--max-pods=-1"}, `invalid configuration: maxPods: must not be a negative number (got -1)`},
		"relative root":       {[]string{"--root-dir=var/lib"}, `--root-dir: must be an absolute path (got "var/lib")`},
		"contention w/o lock": {[]string{"--exit-on-lock-contention"}, `--exit-on-lock-contention: requires --lock-file`},
		"bad node ip":         {[]string{"--node-ip=10.0.0.300"}, `--node-ip: must be a valid IP address`},
		"bad hostname":        {[]string{"--hostname-override=bad_name"}, `--hostname-override`},
		"restricted label": {[]string{"--node-labels=kubernetes.io/role=x,node.kubernetes.io/ok=y,example.k8s.io/z="},
			"unknown 'kubernetes.io' or 'k8s.io' labels specified with --node-labels: [example.k8s.io/z kubernetes.io/role]"},
		"missing config": {[]string{"--config=/nonexistent/kubelet.yaml"}, `failed to load kubelet config file "/nonexistent/kubelet.yaml"`},
	}
	for name, c := range cases {
		_, _, err := parse(t, c.args...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want error containing %q", name, err, c.want)
		}
	}
}

func TestUnimplementedFlagsWarnOnce(t *testing.T) {
	cl, _, err := parse(t, "--cpu-manager-policy=static", "--max-pods=50", "--max-pods=60", "--container-runtime-endpoint=unix:///x")
	if err != nil {
		t.Fatal(err)
	}
	w := cl.Warnings()
	joined := strings.Join(w, "\n")
	if !strings.Contains(joined, "--cpu-manager-policy has been deprecated, set cpuManagerPolicy in the --config file instead; it is accepted for compatibility but not implemented") {
		t.Errorf("no warning for an unimplemented flag: %q", w)
	}
	if strings.Count(joined, "--max-pods") != 1 {
		t.Errorf("want exactly one warning for --max-pods given twice: %q", w)
	}
	if strings.Contains(joined, "container-runtime-endpoint") && strings.Contains(joined, "endpoint is accepted") {
		t.Errorf("implemented flag called unimplemented: %q", w)
	}
}

func TestVersionHelpAndVerbosity(t *testing.T) {
	for args, want := range map[string]string{"--version": "true", "--version=raw": "raw", "--version=false": ""} {
		cl := NewCommandLine("nodelet")
		if err := cl.Parse([]string{args}); err != nil {
			t.Fatal(err)
		}
		if got := cl.VersionRequested(); got != want {
			t.Errorf("%s: VersionRequested() = %q, want %q", args, got, want)
		}
	}
	cl := NewCommandLine("nodelet")
	if err := cl.Parse([]string{"-h"}); err != nil || !cl.HelpRequested() {
		t.Errorf("-h: %v", err)
	}
	if u := cl.Usage(); !strings.Contains(u, "--container-runtime-endpoint") || !strings.Contains(u, "--config-dir") {
		t.Errorf("usage lacks flags")
	}
	for _, args := range [][]string{{"-v=4"}, {"--v", "4"}, {"-v", "4"}} {
		cl := NewCommandLine("nodelet")
		if err := cl.Parse(args); err != nil {
			t.Errorf("%v: %v", args, err)
			continue
		}
		if got := cl.klogFS.Lookup("v").Value.String(); got != "4" {
			t.Errorf("%v: klog v = %s", args, got)
		}
	}
}

func mustMkdir(t *testing.T, dir string) {
	t.Helper()
	if err := osMkdir(dir); err != nil {
		t.Fatal(err)
	}
}

func TestGarbageCollectionFlags(t *testing.T) {
	_, opts, err := parse(t)
	if err != nil {
		t.Fatal(err)
	}
	if opts.MaxPerPodContainerCount != 1 || opts.MaxContainerCount != -1 || opts.MinimumGCAge.Duration != 0 {
		t.Errorf("GC defaults: %+v", opts.KubeletFlags)
	}
	_, opts, err = parse(t, "--minimum-container-ttl-duration=1m", "--maximum-dead-containers-per-container=3", "--maximum-dead-containers=50")
	if err != nil {
		t.Fatal(err)
	}
	if opts.MinimumGCAge.Duration != time.Minute || opts.MaxPerPodContainerCount != 3 || opts.MaxContainerCount != 50 {
		t.Errorf("GC flags not applied: %+v", opts.KubeletFlags)
	}
}

func TestUnimplementedFileFieldsWarnOnceUnlessDefault(t *testing.T) {
	dir := t.TempDir()
	cfgFile := writeFile(t, dir, "c.yaml", header+"cgroupDriver: cgroupfs\nmaxPods: 20\ncpuManagerPolicy: static\nmemorySwap:\n  swapBehavior: LimitedSwap\nauthentication:\n  anonymous:\n    enabled: true\n")
	cl, _, err := parse(t, "--config="+cfgFile)
	if err != nil {
		t.Fatal(err)
	}
	joined := strings.Join(cl.Warnings(), "\n")
	if !strings.Contains(joined, "not implemented by nodelet yet; they have no effect: cpuManagerPolicy, memorySwap") {
		t.Errorf("warnings %q", joined)
	}
	if strings.Contains(joined, "cgroupDriver") || strings.Contains(joined, "maxPods") || strings.Contains(joined, "authentication") {
		t.Errorf("a default value or an implemented field was warned about: %q", joined)
	}
}
