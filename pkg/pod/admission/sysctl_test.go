package admission

import (
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/utils/ptr"
)

func TestSafeSysctlsByKernel(t *testing.T) {
	unversioned := []string{"kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.tcp_syncookies",
		"net.ipv4.ping_group_range", "net.ipv4.ip_unprivileged_port_start"}
	for _, tc := range []struct {
		kernel string
		want   []string
	}{
		{"", unversioned},
		{"3.10.0", unversioned},
		{"4.5.0", append(slices.Clone(unversioned), "net.ipv4.ip_local_reserved_ports", "net.ipv4.tcp_keepalive_time",
			"net.ipv4.tcp_keepalive_intvl", "net.ipv4.tcp_keepalive_probes")},
		{"6.1.0-28-amd64", append(slices.Clone(unversioned), "net.ipv4.ip_local_reserved_ports", "net.ipv4.tcp_keepalive_time",
			"net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl", "net.ipv4.tcp_keepalive_probes", "net.ipv4.tcp_rmem",
			"net.ipv4.tcp_wmem", "net.ipv4.tcp_slow_start_after_idle", "net.ipv4.tcp_notsent_lowat")},
	} {
		var kernel *version.Version
		if tc.kernel != "" {
			kernel = version.MustParseGeneric(tc.kernel)
		}
		if got := safeSysctls(kernel); !slices.Equal(got, tc.want) {
			t.Errorf("kernel %q: got %v\nwant %v", tc.kernel, got, tc.want)
		}
	}
}

func TestSysctls(t *testing.T) {
	unsafe := []string{"kernel.msg*", "net.core.somaxconn", "fs.mqueue.*", "user.max_user_namespaces"}
	sysctls := func(names ...string) func(*v1.Pod) {
		return func(p *v1.Pod) {
			p.Spec.SecurityContext = &v1.PodSecurityContext{}
			for _, n := range names {
				p.Spec.SecurityContext.Sysctls = append(p.Spec.SecurityContext.Sysctls, v1.Sysctl{Name: n, Value: "1"})
			}
		}
	}
	hostNetwork := func(p *v1.Pod) { p.Spec.HostNetwork = true }
	hostIPC := func(p *v1.Pod) { p.Spec.HostIPC = true }
	ownUsers := func(p *v1.Pod) { p.Spec.HostUsers = ptr.To(false) }
	for _, tc := range []struct {
		name        string
		unsafe      []string
		pod         *v1.Pod
		wantMessage string
	}{
		{"none", nil, apiPod("p"), ""},
		{"security context without sysctls", nil, apiPod("p", sysctls()), ""},
		{"safe sysctl", nil, apiPod("p", sysctls("kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range")), ""},
		{"unsafe sysctl not allowed", nil, apiPod("p", sysctls("net.core.somaxconn")),
			`forbidden sysctl: "net.core.somaxconn" not allowlisted`},
		{"unsafe sysctl allowed", unsafe, apiPod("p", sysctls("net.core.somaxconn")), ""},
		{"slash-separated name", unsafe, apiPod("p", sysctls("net/core/somaxconn")), ""},
		{"wildcard kernel.msg*", unsafe, apiPod("p", sysctls("kernel.msgmax", "kernel.msgmnb")), ""},
		{"wildcard does not reach other names", unsafe, apiPod("p", sysctls("kernel.sem")),
			`forbidden sysctl: "kernel.sem" not allowlisted`},
		{"wildcard fs.mqueue.*", unsafe, apiPod("p", sysctls("fs.mqueue.msg_max")), ""},
		{"first forbidden sysctl is reported", unsafe, apiPod("p", sysctls("net.core.somaxconn", "net.core.rmem_max", "kernel.sem")),
			`forbidden sysctl: "net.core.rmem_max" not allowlisted`},
		{"net sysctl with host network", nil, apiPod("p", hostNetwork, sysctls("net.ipv4.ip_local_port_range")),
			`forbidden sysctl: "net.ipv4.ip_local_port_range" not allowed with host Net enabled`},
		{"net sysctl with host IPC", nil, apiPod("p", hostIPC, sysctls("net.ipv4.ip_local_port_range")), ""},
		{"IPC sysctl with host IPC", nil, apiPod("p", hostIPC, sysctls("kernel.shm_rmid_forced")),
			`forbidden sysctl: "kernel.shm_rmid_forced" not allowed with host IPC enabled`},
		{"IPC wildcard with host IPC", unsafe, apiPod("p", hostIPC, sysctls("kernel.msgmni")),
			`forbidden sysctl: "kernel.msgmni" not allowed with host IPC enabled`},
		{"IPC sysctl with host network", unsafe, apiPod("p", hostNetwork, sysctls("kernel.msgmni")), ""},
		{"user sysctl in the host user namespace", unsafe, apiPod("p", sysctls("user.max_user_namespaces")),
			`forbidden sysctl: "user.max_user_namespaces" not allowed with host User enabled`},
		{"user sysctl in the pod's user namespace", unsafe, apiPod("p", ownUsers, sysctls("user.max_user_namespaces")), ""},
		{"net.* allows every net sysctl", []string{"net.*"}, apiPod("p", sysctls("net.ipv6.conf.all.forwarding")), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newTestAdmitter(t, testNode(), Options{AllowedUnsafeSysctls: tc.unsafe})
			// Pin the safe set: every safe sysctl, whatever this host's kernel.
			var err error
			if a.sysctls, err = newSysctlAllowlist(append(safeSysctls(version.MustParseGeneric("6.1")), tc.unsafe...)); err != nil {
				t.Fatal(err)
			}
			got := a.Admit(tc.pod, nil)
			if tc.wantMessage == "" {
				checkResult(t, got, "", "")
			} else {
				checkResult(t, got, "SysctlForbidden", tc.wantMessage)
			}
		})
	}
}
