package criconfig

import (
	"fmt"
	"path/filepath"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	netutils "k8s.io/utils/net"
)

// DNSConfigurer gives a pod's resolver configuration.
type DNSConfigurer interface {
	GetPodDNS(pod *v1.Pod) (*runtimeapi.DNSConfig, error)
}

// SandboxOptions is what the sandbox config needs beyond the pod.
type SandboxOptions struct {
	DNS            DNSConfigurer // nil: no DNS config, the runtime's default resolv.conf
	ClusterDomain  string        // for the pod's domain when it has a subdomain
	PodLogsDir     string        // root of the pod log directories, e.g. /var/log/pods
	CgroupParent   string        // the pod's cgroup, computed by the caller; "" lets the runtime choose
	SeccompDefault bool          // kept for symmetry with containers: the sandbox is always RuntimeDefault, as upstream

	// Resources turns the pod's aggregate resources and overhead into the
	// sandbox's, as the containers' are made (CFS quota, OOM group); the
	// per-container settings (OOM score, huge pages, memory QoS) do not apply.
	Resources ResourceOptions

	// UserNamespace is the pod's user namespace (from pkg/runtime/userns), the same for the
	// sandbox and its containers; nil sends none. A pod with hostUsers: false needs a
	// POD-mode one.
	UserNamespace *runtimeapi.UserNamespace
}

// PodLogDir returns the pod's log directory, <podLogsDir>/<ns>_<name>_<uid>.
func PodLogDir(podLogsDir, namespace, name string, uid types.UID) string {
	return filepath.Join(podLogsDir, strings.Join([]string{namespace, name, string(uid)}, "_"))
}

// ContainerLogDir returns a container's log directory inside its pod's.
func ContainerLogDir(podLogsDir, namespace, name string, uid types.UID, containerName string) string {
	return filepath.Join(PodLogDir(podLogsDir, namespace, name, uid), containerName)
}

// GeneratePodSandboxConfig builds the pod's sandbox config for the given
// attempt. The runtime handler is the caller's to choose.
func GeneratePodSandboxConfig(pod *v1.Pod, attempt uint32, opts SandboxOptions) (*runtimeapi.PodSandboxConfig, error) {
	if err := checkUserNamespace(pod, opts.UserNamespace); err != nil {
		return nil, err
	}
	config := &runtimeapi.PodSandboxConfig{
		Metadata: &runtimeapi.PodSandboxMetadata{
			Name:      pod.Name,
			Namespace: pod.Namespace,
			Uid:       string(pod.UID),
			Attempt:   attempt,
		},
		Labels:       NewPodLabels(pod),
		Annotations:  NewPodAnnotations(pod),
		LogDirectory: PodLogDir(opts.PodLogsDir, pod.Namespace, pod.Name, pod.UID),
		PortMappings: sandboxPortMappings(pod),
	}
	if opts.DNS != nil {
		dns, err := opts.DNS.GetPodDNS(pod)
		if err != nil {
			return nil, err
		}
		config.DnsConfig = dns
	}
	if !pod.Spec.HostNetwork { // a host-network pod keeps the node's hostname
		hostname, err := sandboxHostname(pod, opts.ClusterDomain)
		if err != nil {
			return nil, err
		}
		config.Hostname = hostname
	}
	linux, err := sandboxLinuxConfig(pod, opts)
	if err != nil {
		return nil, err
	}
	config.Linux = linux
	return config, nil
}

func sandboxHostname(pod *v1.Pod, clusterDomain string) (string, error) {
	hostname, domain, err := GeneratePodHostNameAndDomain(pod, clusterDomain)
	if err != nil {
		return "", err
	}
	return PodKernelHostname(hostname, domain, pod.Spec.SetHostnameAsFQDN)
}

// sandboxPortMappings lists the ports of the pod's regular containers, as
// upstream does: all of them, the runtime's network plugin acting only on
// those with a host port. A port repeated in a container (same name, or
// same family, protocol, host IP and ports) is listed once.
func sandboxPortMappings(pod *v1.Pod) []*runtimeapi.PortMapping {
	var mappings []*runtimeapi.PortMapping
	for i := range pod.Spec.Containers {
		seen := map[string]bool{}
		for _, p := range pod.Spec.Containers[i].Ports {
			key := portKey(p)
			if seen[key] {
				klog.InfoS("Port name conflicted, it is defined more than once", "portName", key)
				continue
			}
			seen[key] = true
			mappings = append(mappings, &runtimeapi.PortMapping{
				Protocol:      runtimeProtocol(p.Protocol),
				ContainerPort: p.ContainerPort,
				HostPort:      p.HostPort,
				HostIp:        p.HostIP,
			})
		}
	}
	return mappings
}

func portKey(p v1.ContainerPort) string {
	if p.Name != "" {
		return p.Name
	}
	family := "any"
	if p.HostIP != "" {
		family = "v4"
		if netutils.IsIPv6String(p.HostIP) {
			family = "v6"
		}
	}
	return fmt.Sprintf("%s-%s-%s:%d:%d", family, p.Protocol, p.HostIP, p.ContainerPort, p.HostPort)
}

func runtimeProtocol(p v1.Protocol) runtimeapi.Protocol {
	switch p {
	case v1.ProtocolTCP:
		return runtimeapi.Protocol_TCP
	case v1.ProtocolUDP:
		return runtimeapi.Protocol_UDP
	case v1.ProtocolSCTP:
		return runtimeapi.Protocol_SCTP
	}
	klog.InfoS("Unknown protocol, defaulting to TCP", "protocol", p)
	return runtimeapi.Protocol_TCP
}

// sandboxLinuxConfig builds the sandbox's cgroup, sysctls, security context
// and resources.
func sandboxLinuxConfig(pod *v1.Pod, opts SandboxOptions) (*runtimeapi.LinuxPodSandboxConfig, error) {
	sc, err := sandboxSecurityContext(pod)
	if err != nil {
		return nil, err
	}
	sc.NamespaceOptions.UsernsOptions = opts.UserNamespace
	resources := opts.Resources
	lc := &runtimeapi.LinuxPodSandboxConfig{
		CgroupParent:    opts.CgroupParent,
		SecurityContext: sc,
		Sysctls:         map[string]string{},
		Resources:       sandboxResources(pod, resources),
		Overhead:        overheadResources(pod, resources),
	}
	if ps := pod.Spec.SecurityContext; ps != nil {
		for _, s := range ps.Sysctls {
			lc.Sysctls[s.Name] = s.Value
		}
	}
	return lc, nil
}

// sandboxSecurityContext builds the pod-level security context. The sandbox
// (pause) process is always under the runtime's default seccomp profile, so
// that pods may use the least privileged profiles (kubernetes#84623), and is
// privileged when any container is, which some runtimes require.
func sandboxSecurityContext(pod *v1.Pod) (*runtimeapi.LinuxSandboxSecurityContext, error) {
	sc := &runtimeapi.LinuxSandboxSecurityContext{
		NamespaceOptions: NamespacesForPod(pod),
		Privileged:       hasPrivilegedContainer(pod),
		Seccomp:          &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault},
	}
	ps := pod.Spec.SecurityContext
	if ps == nil {
		return sc, nil
	}
	if ps.RunAsUser != nil {
		sc.RunAsUser = &runtimeapi.Int64Value{Value: *ps.RunAsUser}
	}
	if ps.RunAsGroup != nil {
		sc.RunAsGroup = &runtimeapi.Int64Value{Value: *ps.RunAsGroup}
	}
	sc.SelinuxOptions = runtimeSELinuxOptions(ps.SELinuxOptions)
	var err error
	sc.SupplementalGroups, sc.SupplementalGroupsPolicy, err = supplementalGroups(ps)
	return sc, err
}

func hasPrivilegedContainer(pod *v1.Pod) bool {
	privileged := func(sc *v1.SecurityContext) bool { return sc != nil && isTrue(sc.Privileged) }
	for _, c := range pod.Spec.Containers {
		if privileged(c.SecurityContext) {
			return true
		}
	}
	for _, c := range pod.Spec.InitContainers {
		if privileged(c.SecurityContext) {
			return true
		}
	}
	for _, c := range pod.Spec.EphemeralContainers {
		if privileged(c.SecurityContext) {
			return true
		}
	}
	return false
}
