package admission

import (
	"fmt"
	"os"
	"regexp"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/version"
	utilsysctl "k8s.io/component-helpers/node/util/sysctl"
	"k8s.io/klog/v2"
)

// ReasonSysctlForbidden rejects a pod that sets a sysctl outside the allowlist.
const ReasonSysctlForbidden = "SysctlForbidden"

// safeSysctl is a sysctl upstream calls safe: namespaced, and without effect on other
// pods. Some became namespaced in a given kernel; older kernels drop them.
type safeSysctl struct {
	name      string
	minKernel string
}

var safeSysctlList = []safeSysctl{
	{name: "kernel.shm_rmid_forced"},
	{name: "net.ipv4.ip_local_port_range"},
	{name: "net.ipv4.tcp_syncookies"},
	{name: "net.ipv4.ping_group_range"},
	{name: "net.ipv4.ip_unprivileged_port_start"},
	{name: "net.ipv4.ip_local_reserved_ports", minKernel: "3.16"},
	{name: "net.ipv4.tcp_keepalive_time", minKernel: "4.5"},
	{name: "net.ipv4.tcp_fin_timeout", minKernel: "4.6"},
	{name: "net.ipv4.tcp_keepalive_intvl", minKernel: "4.5"},
	{name: "net.ipv4.tcp_keepalive_probes", minKernel: "4.5"},
	{name: "net.ipv4.tcp_rmem", minKernel: "4.15"},
	{name: "net.ipv4.tcp_wmem", minKernel: "4.15"},
	{name: "net.ipv4.tcp_slow_start_after_idle", minKernel: "4.15"},
	{name: "net.ipv4.tcp_notsent_lowat", minKernel: "4.6"},
}

// safeSysctls returns the safe sysctls the kernel namespaces; with an unknown kernel
// version only those without a minimum.
func safeSysctls(kernel *version.Version) []string {
	var names []string
	for _, s := range safeSysctlList {
		if s.minKernel == "" || kernel != nil && kernel.AtLeast(version.MustParseGeneric(s.minKernel)) {
			names = append(names, s.name)
			continue
		}
		klog.InfoS("kernel version is too old, dropping the sysctl from safe sysctl list", "kernelVersion", kernel, "sysctl", s.name)
	}
	return names
}

func hostKernelVersion() *version.Version {
	release, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		klog.ErrorS(err, "failed to get kernel version, unable to determine which sysctls are available")
		return nil
	}
	v, err := version.ParseGeneric(strings.TrimSpace(string(release)))
	if err != nil {
		klog.ErrorS(err, "failed to get kernel version, unable to determine which sysctls are available")
		return nil
	}
	return v
}

// sysctlPatternFmt is upstream's SysctlContainSlashPatternFmt: dot- or slash-separated
// segments, the last of which may end in '*'.
const sysctlPatternFmt = `([a-z0-9]([-_a-z0-9]*[a-z0-9])?[\./])*([a-z0-9][-_a-z0-9]*)?[a-z0-9*]`

const sysctlMaxLength = 253

var sysctlPattern = regexp.MustCompile("^" + sysctlPatternFmt + "$")

// sysctlAllowlist holds allowed sysctls and prefixes (patterns without their '*'), each
// with the kernel namespace it lives in.
type sysctlAllowlist struct {
	names    map[string]utilsysctl.Namespace
	prefixes []sysctlPrefix
}

type sysctlPrefix struct {
	prefix string
	ns     utilsysctl.Namespace
}

// newSysctlAllowlist accepts only sysctls the kernel namespaces: a node-level sysctl set
// by one pod would change the whole node.
func newSysctlAllowlist(patterns []string) (*sysctlAllowlist, error) {
	w := &sysctlAllowlist{names: map[string]utilsysctl.Namespace{}}
	for _, p := range patterns {
		if len(p) > sysctlMaxLength || !sysctlPattern.MatchString(p) {
			return nil, fmt.Errorf("sysctl %q must have at most %d characters and match regex %s",
				p, sysctlMaxLength, sysctlPatternFmt)
		}
		ns, nameOrPrefix, prefixed := utilsysctl.GetNamespace(p)
		if ns == utilsysctl.UnknownNamespace {
			return nil, fmt.Errorf("the sysctls %q are not known to be namespaced", nameOrPrefix)
		}
		if prefixed {
			w.prefixes = append(w.prefixes, sysctlPrefix{nameOrPrefix, ns})
		} else {
			w.names[nameOrPrefix] = ns
		}
	}
	return w, nil
}

// namespace returns the namespace of an allowed sysctl, false if it is not allowed.
func (w *sysctlAllowlist) namespace(name string) (utilsysctl.Namespace, bool) {
	if ns, ok := w.names[name]; ok {
		return ns, true
	}
	for _, p := range w.prefixes {
		if strings.HasPrefix(name, p.prefix) {
			return p.ns, true
		}
	}
	return utilsysctl.UnknownNamespace, false
}

// check allows a sysctl if it is listed and the pod does not share that sysctl's
// namespace with the host (setting it there would change the node).
func (w *sysctlAllowlist) check(name string, hostNet, hostIPC, hostUsers bool) error {
	name = utilsysctl.NormalizeName(name)
	ns, ok := w.namespace(name)
	if !ok {
		return fmt.Errorf("%q not allowlisted", name)
	}
	if ns == utilsysctl.IPCNamespace && hostIPC || ns == utilsysctl.NetNamespace && hostNet ||
		ns == utilsysctl.UserNamespace && hostUsers {
		return fmt.Errorf("%q not allowed with host %s enabled", name, ns)
	}
	return nil
}

// admitSysctls is upstream's sysctl allowlist handler.
func (a *Admitter) admitSysctls(pod *v1.Pod, _ []*v1.Pod) Result {
	sc := pod.Spec.SecurityContext
	if sc == nil {
		return admitted()
	}
	// hostUsers defaults to true: the pod shares the host's user namespace.
	hostUsers := pod.Spec.HostUsers == nil || *pod.Spec.HostUsers
	for _, s := range sc.Sysctls {
		if err := a.sysctls.check(s.Name, pod.Spec.HostNetwork, pod.Spec.HostIPC, hostUsers); err != nil {
			return reject(ReasonSysctlForbidden, fmt.Sprintf("forbidden sysctl: %v", err))
		}
	}
	return admitted()
}
