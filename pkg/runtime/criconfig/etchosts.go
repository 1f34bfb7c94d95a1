package criconfig

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The kubelet-managed /etc/hosts, as upstream's kubelet writes it: <pod dir>/etc-hosts,
// bind-mounted at /etc/hosts into every container of the pod.
const (
	etcHostsPath                      = "/etc/hosts"
	managedHostsHeader                = "# Kubernetes-managed hosts file.\n"
	managedHostsHeaderWithHostNetwork = "# Kubernetes-managed hosts file (host network).\n"
)

// HostsFile is what a pod's hosts file is made of.
type HostsFile struct {
	// PodDir is <root-dir>/pods/<uid>; the file is PodDir/etc-hosts.
	PodDir string
	// PodIPs are the sandbox's IPs: a pod on the pod network gets no hosts file before
	// it has one.
	PodIPs []string
	// ClusterDomain makes the pod's FQDN when it has a subdomain.
	ClusterDomain string
	// NodeHostsFile is the node's hosts file a host-network pod gets ("" means /etc/hosts).
	NodeHostsFile string
}

// HostsMount writes the pod's hosts file for container c and returns its mount, or nil
// when c gets none: a pod on the pod network without an IP yet, or a container that
// mounts a volume at /etc/hosts itself. The file is rewritten at every container start,
// as upstream's ensureHostsFile does.
func HostsMount(pod *v1.Pod, c *v1.Container, h HostsFile) (*runtimeapi.Mount, error) {
	if len(h.PodIPs) == 0 && !pod.Spec.HostNetwork {
		return nil, nil
	}
	for _, vm := range c.VolumeMounts {
		if vm.MountPath == etcHostsPath {
			return nil, nil
		}
	}
	content, err := hostsFileContent(pod, h)
	if err != nil {
		return nil, err
	}
	// The pod directory is the kubelet's (0750, as upstream's makePodDataDirs makes it).
	if err := os.MkdirAll(h.PodDir, 0o750); err != nil {
		return nil, err
	}
	path := filepath.Join(h.PodDir, "etc-hosts")
	if err := os.WriteFile(path, content, 0o644); err != nil {
		return nil, err
	}
	// WriteFile's mode is reduced by the umask; the file must be world-readable.
	if err := os.Chmod(path, 0o644); err != nil {
		return nil, err
	}
	return &runtimeapi.Mount{ContainerPath: etcHostsPath, HostPath: path, SelinuxRelabel: true}, nil
}

// hostsFileContent is the node's hosts file for a host-network pod, the managed one
// otherwise; the pod's hostAliases follow either.
func hostsFileContent(pod *v1.Pod, h HostsFile) ([]byte, error) {
	var b bytes.Buffer
	if pod.Spec.HostNetwork {
		node := h.NodeHostsFile
		if node == "" {
			node = etcHostsPath
		}
		content, err := os.ReadFile(node)
		if err != nil {
			return nil, err
		}
		b.WriteString(managedHostsHeaderWithHostNetwork)
		b.Write(content)
	} else {
		hostname, domain, err := GeneratePodHostNameAndDomain(pod, h.ClusterDomain)
		if err != nil {
			return nil, err
		}
		writeManagedHosts(&b, h.PodIPs, hostname, domain)
	}
	writeHostAliases(&b, pod.Spec.HostAliases)
	return b.Bytes(), nil
}

// writeManagedHosts writes the localhost entries and one line per pod IP naming the pod:
// "<ip>\t<hostname>.<domain>\t<hostname>" with a subdomain, "<ip>\t<hostname>" without.
func writeManagedHosts(b *bytes.Buffer, podIPs []string, hostname, domain string) {
	b.WriteString(managedHostsHeader)
	b.WriteString("127.0.0.1\tlocalhost\n")
	b.WriteString("::1\tlocalhost ip6-localhost ip6-loopback\n")
	b.WriteString("fe00::0\tip6-localnet\n")
	b.WriteString("fe00::0\tip6-mcastprefix\n")
	b.WriteString("fe00::1\tip6-allnodes\n")
	b.WriteString("fe00::2\tip6-allrouters\n")
	for _, ip := range podIPs {
		if domain != "" {
			fmt.Fprintf(b, "%s\t%s.%s\t%s\n", ip, hostname, domain, hostname)
		} else {
			fmt.Fprintf(b, "%s\t%s\n", ip, hostname)
		}
	}
}

// writeHostAliases appends the pod's hostAliases, one line per IP, after a blank line and
// upstream's comment.
func writeHostAliases(b *bytes.Buffer, aliases []v1.HostAlias) {
	if len(aliases) == 0 {
		return
	}
	b.WriteString("\n# Entries added by HostAliases.\n")
	for _, a := range aliases {
		fmt.Fprintf(b, "%s\t%s\n", a.IP, strings.Join(a.Hostnames, "\t"))
	}
}
