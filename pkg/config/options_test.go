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
	cl, _, err := parse(t, "--streaming-connection-idle-timeout=1h", "--max-pods=50", "--max-pods=60", "--container-runtime-endpoint=unix:///x")
	if err != nil {
		t.Fatal(err)
	}
	w := cl.Warnings()
	joined := strings.Join(w, "\n")
	if !strings.Contains(joined, "--streaming-connection-idle-timeout has been deprecated, set streamingConnectionIdleTimeout in the --config file instead") ||
		!strings.Contains(joined, "streamingConnectionIdleTimeout → exec, attach and port-forward streams idle out after 4h") {
		t.Errorf("no warning for a flag whose value nodelet does not honour: %q", w)
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

// A field nodelet does not read warns by its effective value, set or defaulted: a
// streaming idle timeout other than 4h and LimitedSwap ask for something nodelet does not
// do; NoSwap, the implemented fields and the defaults nodelet honours do not warn.
func TestUnhonouredFieldsWarnByEffectiveValue(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ name, body, want string }{
		{"set away from nodelet's behaviour", "cgroupDriver: cgroupfs\nmaxPods: 20\nstreamingConnectionIdleTimeout: 1h\nmemorySwap:\n  swapBehavior: LimitedSwap\nauthentication:\n  anonymous:\n    enabled: true\n",
			"makeIPTablesUtilChains,memorySwap,protectKernelDefaults,streamingConnectionIdleTimeout"},
		{"set to nodelet's behaviour", "cpuManagerPolicy: none\nmemorySwap:\n  swapBehavior: NoSwap\nhairpinMode: hairpin-veth\n",
			strings.Join(defaultsNotHonoured, ",")},
		{"defaults turned off", "makeIPTablesUtilChains: false\n", "protectKernelDefaults"},
		// nodelet verifies the credentials of pulled images by every policy, and with the
		// gate off does not: neither warns.
		{"image credential verification", "imagePullCredentialsVerificationPolicy: AlwaysVerify\nmakeIPTablesUtilChains: false\n", "protectKernelDefaults"},
		{"allowlisted images", "imagePullCredentialsVerificationPolicy: NeverVerifyAllowlistedImages\npreloadedImagesVerificationAllowlist: [\"registry.example/team/*\"]\nmakeIPTablesUtilChains: false\n", "protectKernelDefaults"},
		{"the gate off", "featureGates:\n  KubeletEnsureSecretPulledImages: false\nmakeIPTablesUtilChains: false\n", "protectKernelDefaults"},
		{"an unknown gate", "featureGates:\n  SomeAlphaGate: true\n", "featureGates," + strings.Join(defaultsNotHonoured, ",")},
	} {
		cl, _, err := parse(t, "--config="+writeFile(t, dir, tc.name+".yaml", header+tc.body))
		if err != nil {
			t.Fatal(err)
		}
		w := cl.Warnings()
		if len(w) != 1 || warnedFields(w[0]) != tc.want {
			t.Errorf("%s: warnings %q, want one line naming %s", tc.name, w, tc.want)
		}
	}
}

// Without a config file nodelet keeps the secure defaults and says where upstream's
// kubelet differs; --help shows nodelet's defaults.
func TestNoConfigFileNamesTheSecureDefaults(t *testing.T) {
	cl, opts, err := parse(t, "--read-only-port=10255")
	if err != nil {
		t.Fatal(err)
	}
	a := opts.Config.Authentication
	if opts.Config.ReadOnlyPort != 10255 || *a.Anonymous.Enabled || !*a.Webhook.Enabled || opts.Config.Authorization.Mode != "Webhook" {
		t.Errorf("defaults without a config file: readOnlyPort %d, anonymous %v, webhook %v, mode %s",
			opts.Config.ReadOnlyPort, *a.Anonymous.Enabled, *a.Webhook.Enabled, opts.Config.Authorization.Mode)
	}
	want := "No --config file: nodelet keeps the KubeletConfiguration's secure defaults where upstream's kubelet applies its legacy flag defaults: " +
		"authentication.anonymous.enabled false (upstream: true), authentication.webhook.enabled true (upstream: false), authorization.mode Webhook (upstream: AlwaysAllow)"
	if joined := strings.Join(cl.Warnings(), "\n"); !strings.Contains(joined, want) {
		t.Errorf("warnings %q, want %q (the read-only port was given)", joined, want)
	}
	cl, _, err = parse(t, "--config="+writeFile(t, t.TempDir(), "c.yaml", header))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(strings.Join(cl.Warnings(), "\n"), "No --config file") {
		t.Error("warned about the legacy defaults with a config file")
	}
	usage := NewCommandLine("nodelet").Usage()
	for _, want := range []string{`--read-only-port int32`, `--authorization-mode string`} {
		if !strings.Contains(usage, want) {
			t.Errorf("usage lacks %q", want)
		}
	}
	for _, want := range []string{`(default "Webhook")`, `(default true)`} {
		if !strings.Contains(usage, want) {
			t.Errorf("usage lacks nodelet's default %s", want)
		}
	}
	if strings.Contains(usage, "(default 10255)") || strings.Contains(usage, `(default "AlwaysAllow")`) {
		t.Error("--help shows upstream's legacy defaults, not nodelet's")
	}
}

// --cloud-provider=external is honoured; an in-tree provider is refused with upstream's words.
func TestCloudProviderFlag(t *testing.T) {
	cl, opts, err := parse(t, "--cloud-provider=external")
	if err != nil || opts.CloudProvider != ExternalCloudProvider {
		t.Fatalf("external: %v, %+v", err, opts)
	}
	if joined := strings.Join(cl.Warnings(), "\n"); strings.Contains(joined, "cloud-provider") {
		t.Errorf("an implemented flag warned: %q", joined)
	}
	_, _, err = parse(t, "--cloud-provider=aws")
	want := `cloud provider "aws" was specified, but built-in cloud providers are disabled. Please set --cloud-provider=external and migrate to an external cloud provider`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("aws: %v, want %q", err, want)
	}
}
