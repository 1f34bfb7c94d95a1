//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// podLog is the first log file of container c of the static pod named pod, as written.
func (s *standalone) podLog(t *testing.T, pod, c string) string {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(s.logsDir, "default_"+pod+"-"+s.node+"_*", c, "0.log"))
	if len(files) != 1 {
		return ""
	}
	b, _ := os.ReadFile(files[0])
	return string(b)
}

// podIP is the IP of the static pod's sandbox.
func (s *standalone) podIP(t *testing.T, pod string) string {
	t.Helper()
	sbs := s.sandboxes(t, pod)
	if len(sbs) == 0 {
		t.Fatalf("no sandbox for %s", pod)
	}
	st, err := s.rs.PodSandboxStatus(context.Background(), sbs[0].Id, false)
	if err != nil {
		t.Fatal(err)
	}
	return st.GetStatus().GetNetwork().GetIp()
}

// The kubelet-managed /etc/hosts: a pod on the pod network gets localhost entries, its IP
// with its FQDN (hostname.subdomain.namespace.svc.clusterDomain) and its hostAliases, so
// `hostname -f` resolves; setHostnameAsFQDN makes the FQDN the kernel hostname; a
// host-network pod gets the node's hosts file plus its aliases.
func TestStandaloneManagedEtcHosts(t *testing.T) {
	s := startStandaloneOn(t, "e2e-hosts-"+fmt.Sprint(time.Now().UnixNano()%100000), t.TempDir(), "clusterDomain: cluster.local\n")
	show := `cat /etc/hosts; echo "HOSTNAME=$(hostname)"; echo "FQDN=$(hostname -f)"; sleep 3600`
	aliases := "  hostAliases:\n  - ip: 10.1.2.3\n    hostnames: [foo.local, bar.local]\n"
	pod := func(name, spec string) string {
		return strings.Replace(busyboxPod(name, "Always", show), "spec:\n", "spec:\n"+spec, 1)
	}
	s.writeManifest(t, "fqdn.yaml", pod("fqdn", "  hostname: web\n  subdomain: db\n"+aliases))
	s.writeManifest(t, "asfqdn.yaml", pod("asfqdn", "  hostname: web2\n  subdomain: db\n  setHostnameAsFQDN: true\n"))
	s.writeManifest(t, "hostnet.yaml", pod("hostnet", "  hostNetwork: true\n"+aliases))
	for _, p := range []string{"fqdn", "asfqdn", "hostnet"} {
		waitFor(t, 30*time.Second, p+" printed its names", func() bool { return strings.Contains(s.podLog(t, p, "c0"), "FQDN=") })
	}

	fqdn := s.podLog(t, "fqdn", "c0")
	ip := s.podIP(t, "fqdn")
	for _, want := range []string{
		"# Kubernetes-managed hosts file.\n", "127.0.0.1\tlocalhost\n", "::1\tlocalhost ip6-localhost ip6-loopback\n",
		ip + "\tweb.db.default.svc.cluster.local\tweb\n",
		"# Entries added by HostAliases.\n", "10.1.2.3\tfoo.local\tbar.local\n",
		"HOSTNAME=web\n", "FQDN=web.db.default.svc.cluster.local\n",
	} {
		if !strings.Contains(fqdn, want) {
			t.Errorf("the fqdn pod's output lacks %q:\n%s", want, fqdn)
		}
	}
	if asfqdn := s.podLog(t, "asfqdn", "c0"); !strings.Contains(asfqdn, "HOSTNAME=web2.db.default.svc.cluster.local\n") {
		t.Errorf("setHostnameAsFQDN: the kernel hostname is not the FQDN:\n%s", asfqdn)
	}

	nodeHosts, err := os.ReadFile("/etc/hosts")
	if err != nil {
		t.Fatal(err)
	}
	first, _, _ := strings.Cut(string(nodeHosts), "\n")
	hostnet := s.podLog(t, "hostnet", "c0")
	for _, want := range []string{"# Kubernetes-managed hosts file (host network).\n", first, "10.1.2.3\tfoo.local\tbar.local\n"} {
		if !strings.Contains(hostnet, want) {
			t.Errorf("the host-network pod's output lacks %q:\n%s", want, hostnet)
		}
	}
}

// A host-network pod whose environment reads its IPs through the downward API starts with
// the node's addresses as its pod IPs, as upstream's kubelet gives them.
func TestStandaloneHostNetworkPodIPsAreTheNodes(t *testing.T) {
	s := startStandalone(t)
	env := "    env:\n"
	for name, path := range map[string]string{"POD_IP": "status.podIP", "POD_IPS": "status.podIPs", "HOST_IP": "status.hostIP", "HOST_IPS": "status.hostIPs"} {
		env += fmt.Sprintf("    - name: %s\n      valueFrom:\n        fieldRef:\n          fieldPath: %s\n", name, path)
	}
	manifest := busyboxPod("hostips", "Always", `echo "POD_IP=$POD_IP POD_IPS=$POD_IPS HOST_IP=$HOST_IP HOST_IPS=$HOST_IPS"; sleep 3600`)
	manifest = strings.Replace(manifest, "spec:\n", "spec:\n  hostNetwork: true\n", 1) + env
	s.writeManifest(t, "hostips.yaml", manifest)
	var line string
	waitFor(t, 30*time.Second, "the host-network pod printed its IPs", func() bool {
		for _, l := range strings.Split(s.podLog(t, "hostips", "c0"), "\n") {
			if i := strings.Index(l, "POD_IP="); i >= 0 {
				line = l[i:]
				return true
			}
		}
		return false
	})
	m := regexp.MustCompile(`POD_IP=(\S*) POD_IPS=(\S*) HOST_IP=(\S*) HOST_IPS=(\S*)`).FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("output %q", line)
	}
	podIP, podIPs, hostIP, hostIPs := m[1], m[2], m[3], m[4]
	if podIP == "" || podIP != hostIP || podIPs != hostIPs || !strings.HasPrefix(podIPs, podIP) {
		t.Errorf("a host-network pod's env %q: want its pod IPs to be the node's", line)
	}
}
