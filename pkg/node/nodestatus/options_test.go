package nodestatus

import (
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/pkg/config"
)

func parseConfig(t *testing.T, args ...string) *config.Options {
	t.Helper()
	cl := config.NewCommandLine("nodelet")
	if err := cl.Parse(args); err != nil {
		t.Fatal(err)
	}
	opts, err := cl.Options()
	if err != nil {
		t.Fatal(err)
	}
	return opts
}

func TestOptionsFromConfig(t *testing.T) {
	cfg := parseConfig(t, "--node-ip=10.0.0.5,fd00::5", "--node-labels=example.com/rack=r1",
		"--register-with-taints=dedicated=db:NoSchedule", "--kube-reserved=cpu=100m,memory=256Mi",
		"--system-reserved=memory=1Gi", "--max-pods=50", "--root-dir=/var/lib/nodelet")
	opts, err := OptionsFromConfig(cfg, "node-a", "host-a")
	if err != nil {
		t.Fatal(err)
	}
	if opts.NodeName != "node-a" || opts.Hostname != "host-a" || len(opts.NodeIPs) != 2 || !opts.NodeIPs[1].Equal(net.ParseIP("fd00::5")) {
		t.Errorf("names and IPs: %q %q %v", opts.NodeName, opts.Hostname, opts.NodeIPs)
	}
	if opts.NodeLabels["example.com/rack"] != "r1" || len(opts.RegisterWithTaints) != 1 || opts.RegisterWithTaints[0].Effect != v1.TaintEffectNoSchedule {
		t.Errorf("labels %v taints %v", opts.NodeLabels, opts.RegisterWithTaints)
	}
	if c := opts.KubeReserved[v1.ResourceCPU]; c.String() != "100m" {
		t.Errorf("kubeReserved = %v", opts.KubeReserved)
	}
	if m := opts.SystemReserved[v1.ResourceMemory]; m.String() != "1Gi" {
		t.Errorf("systemReserved = %v", opts.SystemReserved)
	}
	// Upstream's defaults for everything not given.
	if !opts.RegisterNode || opts.MaxPods != 50 || opts.KubeletPort != 10250 || opts.NodeStatusMaxImages != 50 ||
		opts.NodeLeaseDurationSeconds != 40 || opts.NodeStatusUpdateFrequency != 10*time.Second ||
		opts.NodeStatusReportFrequency != 5*time.Minute || !opts.LocalStorageCapacityIsolation ||
		!opts.ControllerAttachDetach || opts.RootDir != "/var/lib/nodelet" || opts.KubeletVersion != "v1.37.2" ||
		opts.EvictionHard["memory.available"] != "100Mi" || opts.ExternalCloudProvider {
		t.Errorf("defaults: %+v", opts)
	}
	external, err := OptionsFromConfig(parseConfig(t, "--cloud-provider=external"), "node-a", "host-a")
	if err != nil || !external.ExternalCloudProvider {
		t.Errorf("--cloud-provider=external did not reach node status: %v", err)
	}
}

func TestParseNodeIPs(t *testing.T) {
	good := map[string][]string{"": nil, "10.0.0.1": {"10.0.0.1"}, "fd00::1,10.0.0.1": {"fd00::1", "10.0.0.1"}, "::": {"::"}}
	for in, want := range good {
		ips, err := ParseNodeIPs(in)
		if err != nil {
			t.Errorf("%q: %v", in, err)
			continue
		}
		var got []string
		for _, ip := range ips {
			got = append(got, ip.String())
		}
		if !slices.Equal(got, want) {
			t.Errorf("%q: got %v, want %v", in, got, want)
		}
	}
	for _, bad := range []string{"bogus", "10.0.0.1,10.0.0.2", "10.0.0.1,fd00::1,10.0.0.3"} {
		if _, err := ParseNodeIPs(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestValidateNodeIP(t *testing.T) {
	cases := map[string]string{
		"127.0.0.1":    "nodeIP can't be loopback address",
		"224.0.0.1":    "nodeIP can't be a multicast address",
		"fe80::1":      "nodeIP can't be a link-local unicast address",
		"0.0.0.0":      "nodeIP can't be an all zeros address",
		"203.0.113.77": `node IP: "203.0.113.77" not found in the host's network interfaces`,
	}
	for ip, want := range cases {
		if err := ValidateNodeIP(net.ParseIP(ip)); err == nil || err.Error() != want {
			t.Errorf("%s: err = %v, want %q", ip, err, want)
		}
	}
}

func TestHostIPs(t *testing.T) {
	if got := HostIPs("n", "10.9.9.9", nil); len(got) != 1 || got[0].String() != "10.9.9.9" {
		t.Errorf("hostname IP: %v", got)
	}
	// A --node-ip that is not on this host is still what pods are told.
	if got := HostIPs("n", "n", []net.IP{net.ParseIP("203.0.113.77")}); len(got) != 1 || got[0].String() != "203.0.113.77" {
		t.Errorf("configured: %v", got)
	}
	got := HostIPs("localhost", "localhost", nil) // resolves to loopback only: detection decides
	if len(got) != 1 {
		t.Fatalf("detected: %v", got)
	}
	if got[0].IsLoopback() && hostHasGlobalAddress() {
		t.Errorf("detected %v although the host has a non-loopback address", got)
	}
}

func hostHasGlobalAddress() bool {
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.IsGlobalUnicast() && !strings.HasPrefix(n.IP.String(), "fe80") {
			return true
		}
	}
	return false
}

// reservedSystemCPUs replaces the cpu of kubeReserved and systemReserved by its size.
func TestReservedSystemCPUsReplaceReservedCPU(t *testing.T) {
	o := parseConfig(t, "--reserved-cpus=0-1", "--kube-reserved=cpu=500m,memory=1Gi")
	got, err := OptionsFromConfig(o, "n", "n")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := got.KubeReserved[v1.ResourceCPU]; ok {
		t.Errorf("kubeReserved keeps cpu: %v", got.KubeReserved)
	}
	if q := got.SystemReserved[v1.ResourceCPU]; q.Value() != 2 {
		t.Errorf("systemReserved cpu %s, want 2", q.String())
	}
	if q := got.KubeReserved[v1.ResourceMemory]; q.String() != "1Gi" {
		t.Errorf("kubeReserved memory %s", q.String())
	}
	o.Config.ReservedSystemCPUs = "x"
	if _, err := OptionsFromConfig(o, "n", "n"); err == nil {
		t.Error("a bad reservedSystemCPUs accepted")
	}
}
