package dns

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

const (
	testClusterDomain = "cluster.local"
	testHostResolv    = "nameserver 10.0.0.2\nnameserver 10.0.0.3\nsearch corp.example. lab.example\noptions timeout:2 ndots:1\n"
)

var (
	testClusterDNS = []net.IP{net.ParseIP("10.96.0.10")}
	testNodeRef    = &v1.ObjectReference{Kind: "Node", Name: "node-1", UID: "node-1"}
)

// writeResolvConf writes content to a temporary resolv.conf and returns its path.
func writeResolvConf(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "resolv.conf")
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func newTestPod(policy v1.DNSPolicy, hostNetwork bool) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns1", UID: "uid-1"},
		Spec:       v1.PodSpec{DNSPolicy: policy, HostNetwork: hostNetwork},
	}
}

// drainEvents returns every event the fake recorder holds.
func drainEvents(r *record.FakeRecorder) []string {
	var events []string
	for {
		select {
		case e := <-r.Events:
			events = append(events, e)
		default:
			return events
		}
	}
}

func assertDNSConfig(t *testing.T, got, want *runtimeapi.DNSConfig) {
	t.Helper()
	assertStrings(t, "servers", got.Servers, want.Servers)
	assertStrings(t, "searches", got.Searches, want.Searches)
	assertStrings(t, "options", got.Options, want.Options)
}

// TestGetPodDNSPolicies covers every DNS policy with and without host
// network, cluster DNS and a host resolv.conf.
func TestGetPodDNSPolicies(t *testing.T) {
	type outcome int
	const (
		cluster        outcome = iota // the cluster DNS configuration
		host                          // the host configuration
		none                          // nothing
		missingCluster                // the host configuration plus MissingClusterDNS events
	)
	policies := []struct {
		policy      v1.DNSPolicy
		hostNetwork bool
		clusterDNS  bool
		want        outcome
	}{
		{v1.DNSClusterFirst, false, true, cluster},
		{v1.DNSClusterFirst, false, false, missingCluster},
		{v1.DNSClusterFirst, true, true, host},
		{v1.DNSClusterFirst, true, false, host},
		{v1.DNSClusterFirstWithHostNet, false, true, cluster},
		{v1.DNSClusterFirstWithHostNet, false, false, missingCluster},
		{v1.DNSClusterFirstWithHostNet, true, true, cluster},
		{v1.DNSClusterFirstWithHostNet, true, false, missingCluster},
		{v1.DNSDefault, false, true, host},
		{v1.DNSDefault, false, false, host},
		{v1.DNSDefault, true, true, host},
		{v1.DNSDefault, true, false, host},
		{v1.DNSNone, false, true, none},
		{v1.DNSNone, false, false, none},
		{v1.DNSNone, true, true, none},
		{v1.DNSNone, true, false, none},
		{"Bogus", false, true, cluster}, // invalid policies fall back to ClusterFirst
	}
	clusterSearch := []string{"ns1.svc.cluster.local", "svc.cluster.local", "cluster.local"}
	expected := map[bool]map[outcome]*runtimeapi.DNSConfig{
		true: { // with a host resolv.conf
			cluster: {Servers: []string{"10.96.0.10"}, Searches: append(clusterSearch, "corp.example", "lab.example"), Options: []string{"ndots:5"}},
			host:    {Servers: []string{"10.0.0.2", "10.0.0.3"}, Searches: []string{"corp.example", "lab.example"}, Options: []string{"timeout:2", "ndots:1"}},
			none:    {},
		},
		false: { // resolverConfig ""
			cluster: {Servers: []string{"10.96.0.10"}, Searches: clusterSearch, Options: []string{"ndots:5"}},
			host:    {Servers: []string{"127.0.0.1"}, Searches: []string{"."}},
			none:    {},
		},
	}
	resolvPath := writeResolvConf(t, testHostResolv)
	for _, withResolv := range []bool{true, false} {
		for _, p := range policies {
			name := fmt.Sprintf("%s/hostNetwork=%v/clusterDNS=%v/resolvConf=%v", p.policy, p.hostNetwork, p.clusterDNS, withResolv)
			t.Run(name, func(t *testing.T) {
				recorder := record.NewFakeRecorder(10)
				var clusterDNS []net.IP
				if p.clusterDNS {
					clusterDNS = testClusterDNS
				}
				resolverConfig := ""
				if withResolv {
					resolverConfig = resolvPath
				}
				c := NewConfigurer(recorder, testNodeRef, nil, clusterDNS, testClusterDomain, resolverConfig)

				got, err := c.GetPodDNS(newTestPod(p.policy, p.hostNetwork))
				if err != nil {
					t.Fatal(err)
				}
				want := p.want
				if want == missingCluster {
					want = host
				}
				assertDNSConfig(t, got, expected[withResolv][want])
				events := drainEvents(recorder)
				if p.want == missingCluster {
					if len(events) != 2 || !strings.Contains(events[0], "MissingClusterDNS") || !strings.Contains(events[1], "MissingClusterDNS") {
						t.Errorf("events = %q, want two MissingClusterDNS events", events)
					}
				} else if len(events) != 0 {
					t.Errorf("unexpected events %q", events)
				}
			})
		}
	}
}

func TestGetPodDNSMissingClusterDNSEvents(t *testing.T) {
	recorder := record.NewFakeRecorder(10)
	c := NewConfigurer(recorder, testNodeRef, nil, nil, testClusterDomain, "")
	if _, err := c.GetPodDNS(newTestPod(v1.DNSClusterFirst, false)); err != nil {
		t.Fatal(err)
	}
	msg := `kubelet does not have ClusterDNS IP configured and cannot create Pod using "ClusterFirst" policy. Falling back to "Default" policy.`
	want := []string{
		"Warning MissingClusterDNS " + msg,
		`Warning MissingClusterDNS pod: "web_ns1(uid-1)". ` + msg,
	}
	assertStrings(t, "events", drainEvents(recorder), want)
}

func TestGetPodDNSWithoutClusterDomain(t *testing.T) {
	c := NewConfigurer(nil, testNodeRef, nil, testClusterDNS, "", writeResolvConf(t, testHostResolv))
	got, err := c.GetPodDNS(newTestPod(v1.DNSClusterFirst, false))
	if err != nil {
		t.Fatal(err)
	}
	want := &runtimeapi.DNSConfig{Servers: []string{"10.96.0.10"}, Searches: []string{"corp.example", "lab.example"}, Options: []string{"ndots:5"}}
	assertDNSConfig(t, got, want)
}

func TestGetPodDNSHostSearchDuplicatesClusterDomains(t *testing.T) {
	resolv := writeResolvConf(t, "nameserver 10.0.0.2\nsearch svc.cluster.local. cluster.local corp.example\n")
	c := NewConfigurer(nil, testNodeRef, nil, testClusterDNS, testClusterDomain, resolv)
	got, err := c.GetPodDNS(newTestPod(v1.DNSClusterFirst, false))
	if err != nil {
		t.Fatal(err)
	}
	assertStrings(t, "searches", got.Searches, []string{"ns1.svc.cluster.local", "svc.cluster.local", "cluster.local", "corp.example"})
}

func TestGetPodDNSLocalhostFamilyFollowsNodeIPs(t *testing.T) {
	tests := []struct {
		name    string
		nodeIPs []string
		want    []string
	}{
		{"no node IPs", nil, []string{"127.0.0.1"}},
		{"IPv4", []string{"192.168.1.5"}, []string{"127.0.0.1"}},
		{"IPv6", []string{"fd00::5"}, []string{"::1"}},
		{"dual-stack", []string{"192.168.1.5", "fd00::5"}, []string{"127.0.0.1", "::1"}},
		{"IPv6 first", []string{"fd00::5", "192.168.1.5"}, []string{"::1", "127.0.0.1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var ips []net.IP
			for _, s := range tt.nodeIPs {
				ips = append(ips, net.ParseIP(s))
			}
			c := NewConfigurer(nil, testNodeRef, ips, nil, testClusterDomain, "")
			got, err := c.GetPodDNS(newTestPod(v1.DNSDefault, false))
			if err != nil {
				t.Fatal(err)
			}
			assertStrings(t, "servers", got.Servers, tt.want)
			assertStrings(t, "searches", got.Searches, []string{"."})
		})
	}
}

func TestGetPodDNSUnreadableResolvConf(t *testing.T) {
	c := NewConfigurer(nil, testNodeRef, nil, testClusterDNS, testClusterDomain, filepath.Join(t.TempDir(), "missing"))
	if _, err := c.GetPodDNS(newTestPod(v1.DNSClusterFirst, false)); err == nil {
		t.Fatal("GetPodDNS succeeded with a missing resolv.conf")
	}
	bad := NewConfigurer(nil, testNodeRef, nil, testClusterDNS, testClusterDomain, writeResolvConf(t, "nameserver\n"))
	if _, err := bad.GetPodDNS(newTestPod(v1.DNSNone, false)); err == nil {
		t.Fatal("GetPodDNS succeeded with a malformed resolv.conf")
	}
}

func TestGetPodDNSMergesPodDNSConfig(t *testing.T) {
	two, empty := "2", ""
	tests := []struct {
		name      string
		policy    v1.DNSPolicy
		dnsConfig *v1.PodDNSConfig
		want      *runtimeapi.DNSConfig
	}{
		{
			name:   "None takes only the pod's config",
			policy: v1.DNSNone,
			dnsConfig: &v1.PodDNSConfig{
				Nameservers: []string{"1.1.1.1", "1.1.1.1"},
				Searches:    []string{"a.example", "b.example", "a.example"},
				Options:     []v1.PodDNSConfigOption{{Name: "ndots", Value: &two}, {Name: "edns0"}},
			},
			want: &runtimeapi.DNSConfig{Servers: []string{"1.1.1.1"}, Searches: []string{"a.example", "b.example"}, Options: []string{"ndots:2", "edns0"}},
		},
		{
			name:      "None without a pod config is empty",
			policy:    v1.DNSNone,
			dnsConfig: nil,
			want:      &runtimeapi.DNSConfig{},
		},
		{
			name:   "ClusterFirst appends and overrides options by name",
			policy: v1.DNSClusterFirst,
			dnsConfig: &v1.PodDNSConfig{
				Nameservers: []string{"10.96.0.10", "1.1.1.1"},
				Searches:    []string{"svc.cluster.local", "extra.example"},
				Options:     []v1.PodDNSConfigOption{{Name: "ndots", Value: &two}, {Name: "single-request"}, {Name: "timeout", Value: &empty}},
			},
			want: &runtimeapi.DNSConfig{
				Servers:  []string{"10.96.0.10", "1.1.1.1"},
				Searches: []string{"ns1.svc.cluster.local", "svc.cluster.local", "cluster.local", "corp.example", "lab.example", "extra.example"},
				Options:  []string{"ndots:2", "single-request", "timeout"},
			},
		},
		{
			name:   "Default merges into the host options",
			policy: v1.DNSDefault,
			dnsConfig: &v1.PodDNSConfig{
				Nameservers: []string{"10.0.0.3", "10.0.0.4"},
				Options:     []v1.PodDNSConfigOption{{Name: "ndots", Value: &two}, {Name: "attempts", Value: &two}},
			},
			want: &runtimeapi.DNSConfig{
				Servers:  []string{"10.0.0.2", "10.0.0.3", "10.0.0.4"},
				Searches: []string{"corp.example", "lab.example"},
				Options:  []string{"timeout:2", "ndots:2", "attempts:2"},
			},
		},
	}
	resolv := writeResolvConf(t, testHostResolv)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			recorder := record.NewFakeRecorder(10)
			c := NewConfigurer(recorder, testNodeRef, nil, testClusterDNS, testClusterDomain, resolv)
			pod := newTestPod(tt.policy, false)
			pod.Spec.DNSConfig = tt.dnsConfig
			got, err := c.GetPodDNS(pod)
			if err != nil {
				t.Fatal(err)
			}
			assertDNSConfig(t, got, tt.want)
			if events := drainEvents(recorder); len(events) != 0 {
				t.Errorf("unexpected events %q", events)
			}
		})
	}
}

func TestGetPodDNSDoesNotShareDefaultOptions(t *testing.T) {
	c := NewConfigurer(nil, testNodeRef, nil, testClusterDNS, testClusterDomain, "")
	got, err := c.GetPodDNS(newTestPod(v1.DNSClusterFirst, false))
	if err != nil {
		t.Fatal(err)
	}
	got.Options[0] = "mutated"
	again, err := c.GetPodDNS(newTestPod(v1.DNSClusterFirst, false))
	if err != nil {
		t.Fatal(err)
	}
	assertStrings(t, "options", again.Options, []string{"ndots:5"})
}

func TestMergeDNSOptions(t *testing.T) {
	three := "3"
	tests := []struct {
		name string
		base []string
		pod  []v1.PodDNSConfigOption
		want []string
	}{
		{"no pod options", []string{"ndots:5", "debug"}, nil, []string{"ndots:5", "debug"}},
		{"no duplicates", []string{"ndots:5", "debug"}, []v1.PodDNSConfigOption{{Name: "single-request"}, {Name: "attempts", Value: &three}},
			[]string{"ndots:5", "debug", "single-request", "attempts:3"}},
		{"pod overrides", []string{"ndots:5", "debug"}, []v1.PodDNSConfigOption{{Name: "ndots", Value: &three}, {Name: "debug"}, {Name: "attempts", Value: &three}},
			[]string{"ndots:3", "debug", "attempts:3"}},
		{"value removed by a bare name", []string{"ndots:5"}, []v1.PodDNSConfigOption{{Name: "ndots"}}, []string{"ndots"}},
		{"duplicate base options collapse, last wins", []string{"ndots:1", "ndots:2", "rotate", "rotate"}, nil, []string{"ndots:2", "rotate"}},
		{"empty", nil, nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assertStrings(t, "options", mergeDNSOptions(tt.base, tt.pod), tt.want)
		})
	}
}

func TestNameserverLimit(t *testing.T) {
	tests := []struct {
		name    string
		servers []string
		want    []string
		event   string
	}{
		{"one", []string{"127.0.0.1"}, []string{"127.0.0.1"}, ""},
		{"three", []string{"127.0.0.1", "10.0.0.10", "8.8.8.8"}, []string{"127.0.0.1", "10.0.0.10", "8.8.8.8"}, ""},
		{"four trimmed to three", []string{"127.0.0.1", "10.0.0.10", "8.8.8.8", "1.2.3.4"}, []string{"127.0.0.1", "10.0.0.10", "8.8.8.8"},
			"Warning DNSConfigForming Nameserver limits were exceeded, some nameservers have been omitted, the applied nameserver line is: 127.0.0.1 10.0.0.10 8.8.8.8"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			recorder := record.NewFakeRecorder(10)
			c := NewConfigurer(recorder, testNodeRef, nil, nil, testClusterDomain, "")
			pod := newTestPod(v1.DNSNone, false)
			pod.Spec.DNSConfig = &v1.PodDNSConfig{Nameservers: tt.servers}
			got, err := c.GetPodDNS(pod)
			if err != nil {
				t.Fatal(err)
			}
			assertStrings(t, "servers", got.Servers, tt.want)
			var wantEvents []string
			if tt.event != "" {
				wantEvents = []string{tt.event}
			}
			assertStrings(t, "events", drainEvents(recorder), wantEvents)
		})
	}
}

func TestSearchLimits(t *testing.T) {
	domains := func(n int) []string {
		var out []string
		for i := range n {
			out = append(out, fmt.Sprintf("d%d.example", i))
		}
		return out
	}
	long := func(c string, n int) string { return strings.Repeat(c, n) }
	// Eight 253-character domains make a 2031-character line; a ninth
	// domain of n characters makes it 2032+n characters long.
	var base []string
	for i := range 8 {
		base = append(base, long(string(rune('a'+i)), 253))
	}
	withNinth := func(n int, more ...string) []string {
		return append(append(append([]string(nil), base...), long("z", n)), more...)
	}
	tests := []struct {
		name     string
		searches []string
		want     []string
		exceeded bool
	}{
		{"few", domains(5), domains(5), false},
		{"exactly 32", domains(32), domains(32), false},
		{"33 trimmed to 32", domains(33), domains(32), true},
		{"253-character domain kept", []string{"a.example", long("b", 253)}, []string{"a.example", long("b", 253)}, false},
		{"254-character domain dropped", []string{"a.example", long("b", 254), "c.example"}, []string{"a.example", "c.example"}, true},
		{"2047-character line kept", withNinth(15), withNinth(15), false},
		{"2048-character line kept", withNinth(16), withNinth(16), false},
		{"2049-character line loses its last domain", withNinth(17), base, true},
		{"trims several domains from the end", withNinth(15, long("y", 250), long("x", 250)), withNinth(15), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			recorder := record.NewFakeRecorder(10)
			c := NewConfigurer(recorder, testNodeRef, nil, nil, testClusterDomain, "")
			pod := newTestPod(v1.DNSNone, false)
			pod.Spec.DNSConfig = &v1.PodDNSConfig{Searches: tt.searches}
			got, err := c.GetPodDNS(pod)
			if err != nil {
				t.Fatal(err)
			}
			assertStrings(t, "searches", got.Searches, tt.want)
			if n := len(strings.Join(got.Searches, " ")); n > maxSearchListChars {
				t.Errorf("search line is %d characters", n)
			}
			var wantEvents []string
			if tt.exceeded {
				wantEvents = []string{"Warning DNSConfigForming Search Line limits were exceeded, some search paths have been omitted, the applied search line is: " + strings.Join(tt.want, " ")}
			}
			assertStrings(t, "events", drainEvents(recorder), wantEvents)
		})
	}
}

func TestClusterFirstSearchLimitFromHostResolvConf(t *testing.T) {
	// 30 host domains plus the 3 cluster ones exceed the 32-domain limit:
	// the last host domain is dropped and the pod is warned.
	var host []string
	for i := range 30 {
		host = append(host, fmt.Sprintf("h%d.example", i))
	}
	resolv := writeResolvConf(t, "nameserver 10.0.0.2\nsearch "+strings.Join(host, " ")+"\n")
	recorder := record.NewFakeRecorder(10)
	c := NewConfigurer(recorder, testNodeRef, nil, testClusterDNS, testClusterDomain, resolv)
	got, err := c.GetPodDNS(newTestPod(v1.DNSClusterFirst, false))
	if err != nil {
		t.Fatal(err)
	}
	want := append([]string{"ns1.svc.cluster.local", "svc.cluster.local", "cluster.local"}, host[:29]...)
	assertStrings(t, "searches", got.Searches, want)
	events := drainEvents(recorder)
	if len(events) != 1 || !strings.HasPrefix(events[0], "Warning DNSConfigForming Search Line limits were exceeded") {
		t.Errorf("events = %q, want one DNSConfigForming warning", events)
	}
}

func TestCheckLimitsForResolvConf(t *testing.T) {
	domains := func(n int) string {
		var out []string
		for i := range n {
			out = append(out, fmt.Sprintf("d%d.example", i))
		}
		return "search " + strings.Join(out, " ") + "\n"
	}
	longLine := "search"
	for i := range 10 {
		longLine += " " + strings.Repeat(string(rune('a'+i)), 250)
	}
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing")
	tests := []struct {
		name          string
		content       string // "" with path missing means the file does not exist
		path          string
		clusterDomain string
		wantEvent     string // a substring; "" means no event
	}{
		{name: "valid", content: "nameserver 10.0.0.2\n" + domains(5), clusterDomain: testClusterDomain},
		{name: "29 domains with a cluster domain", content: domains(29), clusterDomain: testClusterDomain},
		{name: "30 domains with a cluster domain", content: domains(30), clusterDomain: testClusterDomain,
			wantEvent: "contains search line consisting of more than 29 domains!"},
		{name: "32 domains without a cluster domain", content: domains(32)},
		{name: "33 domains without a cluster domain", content: domains(33), wantEvent: "contains search line consisting of more than 32 domains!"},
		{name: "search path too long", content: "search ok.example " + strings.Repeat("x", 254) + "\n",
			wantEvent: "contains a search path which length is more than allowed 253 chars!"},
		{name: "search line too long", content: longLine + "\n", wantEvent: "contains search line which length is more than allowed 2048 chars!"},
		{name: "malformed", content: "nameserver\n", wantEvent: "nameserver list is empty"},
		{name: "missing file", path: missing, wantEvent: "no such file or directory"},
		{name: "no resolver file configured", path: "-"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := tt.path
			switch path {
			case "":
				path = writeResolvConf(t, tt.content)
			case "-":
				path = ""
			}
			recorder := record.NewFakeRecorder(10)
			NewConfigurer(recorder, testNodeRef, nil, testClusterDNS, tt.clusterDomain, path).CheckLimitsForResolvConf()
			events := drainEvents(recorder)
			if tt.wantEvent == "" {
				if len(events) != 0 {
					t.Errorf("unexpected events %q", events)
				}
				return
			}
			if len(events) != 1 || !strings.HasPrefix(events[0], "Warning CheckLimitsForResolvConf ") || !strings.Contains(events[0], tt.wantEvent) {
				t.Errorf("events = %q, want one CheckLimitsForResolvConf warning containing %q", events, tt.wantEvent)
			}
		})
	}
}

func TestCheckLimitsForResolvConfNamesTheFile(t *testing.T) {
	var out []string
	for i := range 40 {
		out = append(out, fmt.Sprintf("d%d.example", i))
	}
	path := writeResolvConf(t, "search "+strings.Join(out, " ")+"\n")
	recorder := record.NewFakeRecorder(10)
	NewConfigurer(recorder, testNodeRef, nil, nil, testClusterDomain, path).CheckLimitsForResolvConf()
	want := fmt.Sprintf("Warning CheckLimitsForResolvConf Resolv.conf file '%s' contains search line consisting of more than 29 domains!", path)
	assertStrings(t, "events", drainEvents(recorder), []string{want})
}

func TestNilRecorderIsSafe(t *testing.T) {
	c := NewConfigurer(nil, nil, nil, nil, testClusterDomain, filepath.Join(t.TempDir(), "missing"))
	c.CheckLimitsForResolvConf()
	c.ResolverConfig = ""
	pod := newTestPod(v1.DNSClusterFirst, false)
	pod.Spec.DNSConfig = &v1.PodDNSConfig{Nameservers: []string{"1.1.1.1", "2.2.2.2", "3.3.3.3", "4.4.4.4"}}
	got, err := c.GetPodDNS(pod)
	if err != nil {
		t.Fatal(err)
	}
	assertStrings(t, "servers", got.Servers, []string{"127.0.0.1", "1.1.1.1", "2.2.2.2"})
}
