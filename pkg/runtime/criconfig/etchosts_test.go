package criconfig

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func hostsPod(mutate func(*v1.Pod)) *v1.Pod {
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-0", Namespace: "shop"},
		Spec: v1.PodSpec{Containers: []v1.Container{{Name: "app"}}}}
	if mutate != nil {
		mutate(p)
	}
	return p
}

const localhostEntries = "# Kubernetes-managed hosts file.\n" +
	"127.0.0.1\tlocalhost\n" +
	"::1\tlocalhost ip6-localhost ip6-loopback\n" +
	"fe00::0\tip6-localnet\n" +
	"fe00::0\tip6-mcastprefix\n" +
	"fe00::1\tip6-allnodes\n" +
	"fe00::2\tip6-allrouters\n"

func TestHostsFileAsUpstreamWritesIt(t *testing.T) {
	aliases := []v1.HostAlias{{IP: "10.1.2.3", Hostnames: []string{"foo.local", "bar.local"}}, {IP: "10.1.2.4", Hostnames: []string{"baz"}}}
	nodeHosts := filepath.Join(t.TempDir(), "hosts")
	if err := os.WriteFile(nodeHosts, []byte("127.0.0.1 localhost\n192.168.9.9 the-node\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		pod  *v1.Pod
		ips  []string
		want string
	}{
		{"pod name", hostsPod(nil), []string{"10.88.0.7"}, localhostEntries + "10.88.0.7\tweb-0\n"},
		{"hostname, subdomain and both families", hostsPod(func(p *v1.Pod) { p.Spec.Hostname, p.Spec.Subdomain = "web", "db" }),
			[]string{"10.88.0.7", "fd00::7"},
			localhostEntries + "10.88.0.7\tweb.db.shop.svc.cluster.local\tweb\nfd00::7\tweb.db.shop.svc.cluster.local\tweb\n"},
		{"hostAliases", hostsPod(func(p *v1.Pod) { p.Spec.HostAliases = aliases }), []string{"10.88.0.7"},
			localhostEntries + "10.88.0.7\tweb-0\n\n# Entries added by HostAliases.\n10.1.2.3\tfoo.local\tbar.local\n10.1.2.4\tbaz\n"},
		{"hostnameOverride", hostsPod(func(p *v1.Pod) {
			p.Spec.HostnameOverride, p.Spec.Subdomain = ptr.To("custom.example.com"), "db"
		}), []string{"10.88.0.7"}, localhostEntries + "10.88.0.7\tcustom.example.com\n"},
		{"host network", hostsPod(func(p *v1.Pod) { p.Spec.HostNetwork, p.Spec.HostAliases = true, aliases[1:] }), nil,
			"# Kubernetes-managed hosts file (host network).\n127.0.0.1 localhost\n192.168.9.9 the-node\n\n# Entries added by HostAliases.\n10.1.2.4\tbaz\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "pods", "uid")
			m, err := HostsMount(tc.pod, &tc.pod.Spec.Containers[0], HostsFile{PodDir: dir, PodIPs: tc.ips, ClusterDomain: "cluster.local", NodeHostsFile: nodeHosts})
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, "etc-hosts")
			if m == nil || m.ContainerPath != "/etc/hosts" || m.HostPath != path || m.Readonly || !m.SelinuxRelabel {
				t.Fatalf("mount %v", m)
			}
			got, err := os.ReadFile(path)
			if err != nil || string(got) != tc.want {
				t.Errorf("hosts file:\n%s\nwant:\n%s (%v)", got, tc.want, err)
			}
			if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o644 {
				t.Errorf("mode %v (%v), want 0644", fi.Mode(), err)
			}
		})
	}
}

func TestNoHostsFileWhereUpstreamMountsNone(t *testing.T) {
	dir := t.TempDir()
	// No pod IP yet on the pod network.
	if m, err := HostsMount(hostsPod(nil), &v1.Container{Name: "app"}, HostsFile{PodDir: dir}); m != nil || err != nil {
		t.Errorf("without a pod IP: %v, %v", m, err)
	}
	// The container mounts a volume at /etc/hosts itself.
	c := &v1.Container{Name: "app", VolumeMounts: []v1.VolumeMount{{Name: "h", MountPath: "/etc/hosts"}}}
	if m, err := HostsMount(hostsPod(nil), c, HostsFile{PodDir: dir, PodIPs: []string{"10.88.0.7"}}); m != nil || err != nil {
		t.Errorf("with its own /etc/hosts: %v, %v", m, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "etc-hosts")); !os.IsNotExist(err) {
		t.Errorf("a hosts file was written: %v", err)
	}
}

func TestHostnameOverrideAndTheKernelName(t *testing.T) {
	p := hostsPod(func(p *v1.Pod) { p.Spec.HostnameOverride = ptr.To("Not_A_Name") })
	if _, _, err := GeneratePodHostNameAndDomain(p, "cluster.local"); err == nil ||
		!strings.HasPrefix(err.Error(), `pod HostnameOverride "Not_A_Name" is not a valid DNS subdomain`) {
		t.Errorf("invalid override: %v", err)
	}
	// setHostnameAsFQDN: the FQDN must fit the kernel's 64 characters.
	long := hostsPod(func(p *v1.Pod) {
		p.Spec.Hostname, p.Spec.Subdomain, p.Spec.SetHostnameAsFQDN = "a-rather-long-hostname", "and-a-long-subdomain", ptr.To(true)
	})
	_, err := sandboxHostname(long, "cluster.local")
	want := "failed to construct FQDN from pod hostname and cluster domain, FQDN a-rather-long-hostname.and-a-long-subdomain.shop.svc.cluster.local is too long (64 characters is the max, 66 characters requested)"
	if err == nil || err.Error() != want {
		t.Errorf("long FQDN: %v\nwant %s", err, want)
	}
	short := hostsPod(func(p *v1.Pod) {
		p.Spec.Hostname, p.Spec.Subdomain, p.Spec.SetHostnameAsFQDN = "web", "db", ptr.To(true)
	})
	if got, err := sandboxHostname(short, "cluster.local"); err != nil || got != "web.db.shop.svc.cluster.local" {
		t.Errorf("FQDN kernel hostname %q, %v", got, err)
	}
}
