package criconfig

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestSandboxHostname(t *testing.T) {
	long := strings.Repeat("a", 62) + "-b" // 64 characters, cut after the '-'
	tests := []struct {
		name              string
		podName           string
		hostname          string
		subdomain         string
		fqdn              *bool
		clusterDomain     string
		wantHost, wantDom string // from GeneratePodHostNameAndDomain
		wantSandbox       string // the sandbox's hostname
		wantErr           string
	}{
		{name: "pod name", podName: "web-0", wantHost: "web-0", wantSandbox: "web-0"},
		{name: "spec hostname", podName: "web-0", hostname: "db", wantHost: "db", wantSandbox: "db"},
		{name: "subdomain", podName: "web-0", hostname: "db", subdomain: "svc1",
			wantHost: "db", wantDom: "svc1.ns.svc.cluster.local", wantSandbox: "db"},
		{name: "subdomain, FQDN false", podName: "web-0", subdomain: "svc1", fqdn: ptrTo(false),
			wantHost: "web-0", wantDom: "svc1.ns.svc.cluster.local", wantSandbox: "web-0"},
		{name: "FQDN", podName: "web-0", hostname: "db", subdomain: "svc1", fqdn: ptrTo(true),
			wantHost: "db", wantDom: "svc1.ns.svc.cluster.local", wantSandbox: "db.svc1.ns.svc.cluster.local"},
		{name: "FQDN without subdomain", podName: "web-0", fqdn: ptrTo(true), wantHost: "web-0", wantSandbox: "web-0"},
		{name: "other cluster domain", podName: "p", subdomain: "s", fqdn: ptrTo(true), clusterDomain: "corp.example",
			wantHost: "p", wantDom: "s.ns.svc.corp.example", wantSandbox: "p.s.ns.svc.corp.example"},
		{name: "long pod name truncated", podName: long, wantHost: strings.Repeat("a", 62), wantSandbox: strings.Repeat("a", 62)},
		{name: "63 characters kept", podName: strings.Repeat("x", 63), wantHost: strings.Repeat("x", 63), wantSandbox: strings.Repeat("x", 63)},
		{name: "trailing dots and dashes trimmed", podName: strings.Repeat("c", 60) + "-.-.x", wantHost: strings.Repeat("c", 60), wantSandbox: strings.Repeat("c", 60)},
		{name: "FQDN too long", podName: strings.Repeat("d", 40), subdomain: "sub", fqdn: ptrTo(true),
			wantHost: strings.Repeat("d", 40), wantDom: "sub.ns.svc.cluster.local",
			wantErr: "failed to construct FQDN from pod hostname and cluster domain, FQDN " + strings.Repeat("d", 40) + ".sub.ns.svc.cluster.local is too long (64 characters is the max, 65 characters requested)"},
		{name: "invalid hostname", podName: "p", hostname: "Bad_Name", wantErr: `pod Hostname "Bad_Name" is not a valid DNS label: `},
		{name: "invalid subdomain", podName: "p", subdomain: "a.b", wantErr: `pod Subdomain "a.b" is not a valid DNS label: `},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := &v1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: tt.podName, Namespace: "ns", UID: "u"},
				Spec:       v1.PodSpec{Hostname: tt.hostname, Subdomain: tt.subdomain, SetHostnameAsFQDN: tt.fqdn},
			}
			domain := tt.clusterDomain
			if domain == "" {
				domain = "cluster.local"
			}
			host, dom, err := GeneratePodHostNameAndDomain(pod, domain)
			if err == nil && (host != tt.wantHost || dom != tt.wantDom) {
				t.Errorf("GeneratePodHostNameAndDomain = %q, %q; want %q, %q", host, dom, tt.wantHost, tt.wantDom)
			}
			config, err := GeneratePodSandboxConfig(pod, 0, SandboxOptions{ClusterDomain: domain, PodLogsDir: "/l"})
			if tt.wantErr != "" {
				if err == nil || !strings.HasPrefix(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if config.Hostname != tt.wantSandbox {
				t.Errorf("sandbox hostname %q, want %q", config.Hostname, tt.wantSandbox)
			}
		})
	}
}
