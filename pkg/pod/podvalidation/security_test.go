package podvalidation

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
)

// Fields the runtime acts on, whose bad values nodelet's runtime manager would
// otherwise pass on or silently replace (an unknown seccomp type runs unconfined, an
// unknown procMount is the default, a volumeDevice is ignored, ...). Each case names the
// error upstream's API validation gives.
func TestRuntimeFieldRules(t *testing.T) {
	ctrSC := func(p *v1.Pod) *v1.SecurityContext {
		if p.Spec.Containers[0].SecurityContext == nil {
			p.Spec.Containers[0].SecurityContext = &v1.SecurityContext{}
		}
		return p.Spec.Containers[0].SecurityContext
	}
	cases := []struct {
		name   string
		mutate func(*v1.Pod)
		want   string
	}{
		// seccomp
		{"pod seccomp type", func(p *v1.Pod) {
			p.Spec.SecurityContext.SeccompProfile = &v1.SeccompProfile{Type: "RuntimeDefualt"}
		}, `spec.securityContext.seccompProfile.type: Unsupported value: "RuntimeDefualt": supported values: "Localhost", "RuntimeDefault", "Unconfined"`},
		{"container seccomp type required", func(p *v1.Pod) {
			ctrSC(p).SeccompProfile = &v1.SeccompProfile{}
		}, `spec.containers[0].securityContext.seccompProfile.type: Required value: type is required when seccompProfile is set`},
		{"seccomp Localhost needs a profile", func(p *v1.Pod) {
			ctrSC(p).SeccompProfile = &v1.SeccompProfile{Type: v1.SeccompProfileTypeLocalhost}
		}, `spec.containers[0].securityContext.seccompProfile.localhostProfile: Required value: must be set when seccomp type is Localhost`},
		{"seccomp Localhost profile stays under the root", func(p *v1.Pod) {
			ctrSC(p).SeccompProfile = &v1.SeccompProfile{Type: v1.SeccompProfileTypeLocalhost, LocalhostProfile: ptr.To("../etc/x.json")}
		}, `spec.containers[0].securityContext.seccompProfile.localhostProfile: Invalid value: "../etc/x.json": must not contain '..'`},
		{"seccomp profile only for Localhost", func(p *v1.Pod) {
			p.Spec.SecurityContext.SeccompProfile = &v1.SeccompProfile{Type: v1.SeccompProfileTypeRuntimeDefault, LocalhostProfile: ptr.To("x.json")}
		}, `spec.securityContext.seccompProfile.localhostProfile: Invalid value:`},

		// AppArmor
		{"apparmor type", func(p *v1.Pod) {
			ctrSC(p).AppArmorProfile = &v1.AppArmorProfile{Type: "Default"}
		}, `spec.containers[0].securityContext.appArmorProfile.type: Unsupported value: "Default"`},
		{"apparmor Localhost needs a profile", func(p *v1.Pod) {
			p.Spec.SecurityContext.AppArmorProfile = &v1.AppArmorProfile{Type: v1.AppArmorProfileTypeLocalhost}
		}, `spec.securityContext.appArmorProfile.localhostProfile: Required value: must be set when AppArmor type is Localhost`},

		// procMount
		{"procMount value", func(p *v1.Pod) { ctrSC(p).ProcMount = ptr.To(v1.ProcMountType("Masked")) },
			`spec.containers[0].securityContext.procMount: Unsupported value: "Masked": supported values: "Default", "Unmasked"`},
		{"Unmasked procMount needs a user namespace", func(p *v1.Pod) { ctrSC(p).ProcMount = ptr.To(v1.UnmaskedProcMount) },
			"spec.containers[0].securityContext.procMount: Invalid value: \"Unmasked\": `hostUsers` must be false to use `Unmasked`"},

		// pod security context policies and sysctls
		{"sysctl name", func(p *v1.Pod) {
			p.Spec.SecurityContext.Sysctls = []v1.Sysctl{{Name: "Net.Core.Somaxconn", Value: "1"}}
		},
			`spec.securityContext.sysctls[0].name: Invalid value: "Net.Core.Somaxconn": must have at most 253 characters and match regex`},
		{"sysctl duplicate", func(p *v1.Pod) {
			p.Spec.SecurityContext.Sysctls = []v1.Sysctl{{Name: "kernel.msgmax", Value: "1"}, {Name: "kernel.msgmax", Value: "2"}}
		}, `spec.securityContext.sysctls[1].name: Duplicate value: "kernel.msgmax"`},
		{"net sysctl with hostNetwork", func(p *v1.Pod) {
			p.Spec.HostNetwork = true
			p.Spec.Containers[0].Ports = nil
			p.Spec.SecurityContext.Sysctls = []v1.Sysctl{{Name: "net.ipv4.ip_local_port_range", Value: "1024 65535"}}
		}, `spec.securityContext.sysctls[0].name: Invalid value: "net.ipv4.ip_local_port_range": may not be specified when 'hostNetwork' is true`},
		{"ipc sysctl with hostIPC", func(p *v1.Pod) {
			p.Spec.HostIPC = true
			p.Spec.SecurityContext.Sysctls = []v1.Sysctl{{Name: "kernel/shm_rmid_forced", Value: "1"}}
		}, `spec.securityContext.sysctls[0].name: Invalid value: "kernel/shm_rmid_forced": may not be specified when 'hostIPC' is true`},
		{"supplementalGroupsPolicy value", func(p *v1.Pod) {
			p.Spec.SecurityContext.SupplementalGroupsPolicy = ptr.To(v1.SupplementalGroupsPolicy("Loose"))
		}, `spec.securityContext.supplementalGroupsPolicy: Unsupported value: "Loose": supported values: "Merge", "Strict"`},
		{"fsGroupChangePolicy value", func(p *v1.Pod) {
			p.Spec.SecurityContext.FSGroupChangePolicy = ptr.To(v1.PodFSGroupChangePolicy("Never"))
		}, `spec.securityContext.fsGroupChangePolicy: Unsupported value: "Never": supported values: "Always", "OnRootMismatch"`},
		{"hostUsers false with hostNetwork", func(p *v1.Pod) {
			p.Spec.HostUsers = ptr.To(false)
			p.Spec.HostNetwork = true
			p.Spec.Containers[0].Ports = nil
		}, "spec.hostNetwork: Forbidden: when `hostUsers` is false"},

		// mounts and devices
		{"mountPropagation value", func(p *v1.Pod) {
			p.Spec.Containers[0].VolumeMounts[0].MountPropagation = ptr.To(v1.MountPropagationMode("Shared"))
		}, `spec.containers[0].volumeMounts[0].mountPropagation: Unsupported value: "Shared": supported values: "Bidirectional", "HostToContainer", "None"`},
		{"Bidirectional propagation needs privileged", func(p *v1.Pod) {
			p.Spec.Containers[0].VolumeMounts[0].MountPropagation = ptr.To(v1.MountPropagationBidirectional)
		}, `spec.containers[0].volumeMounts[0].mountPropagation: Forbidden: Bidirectional mount propagation is available only to privileged containers`},
		{"recursiveReadOnly needs readOnly", func(p *v1.Pod) {
			p.Spec.Containers[0].VolumeMounts[0].RecursiveReadOnly = ptr.To(v1.RecursiveReadOnlyEnabled)
		}, `spec.containers[0].volumeMounts[0].recursiveReadOnly: Forbidden: may only be specified when readOnly is true`},
		{"recursiveReadOnly value", func(p *v1.Pod) {
			p.Spec.Containers[0].VolumeMounts[0].ReadOnly = true
			p.Spec.Containers[0].VolumeMounts[0].RecursiveReadOnly = ptr.To(v1.RecursiveReadOnlyMode("Yes"))
		}, `spec.containers[0].volumeMounts[0].recursiveReadOnly: Unsupported value: "Yes"`},
		{"volumeDevices need a claim", func(p *v1.Pod) {
			p.Spec.Containers[0].VolumeMounts = nil
			p.Spec.Containers[0].VolumeDevices = []v1.VolumeDevice{{Name: "data", DevicePath: "/dev/xvda"}}
		}, `spec.containers[0].volumeDevices[0].name: Invalid value: "data": can only use volume source type of PersistentVolumeClaim or Ephemeral for block mode`},

		// downward API resources
		{"resourceFieldRef resource", func(p *v1.Pod) {
			p.Spec.Containers[0].Env[0] = v1.EnvVar{Name: "MEM", ValueFrom: &v1.EnvVarSource{ResourceFieldRef: &v1.ResourceFieldSelector{Resource: "limits.gpu"}}}
		}, `spec.containers[0].env[0].valueFrom.resourceFieldRef.resource: Unsupported value: "limits.gpu"`},
		{"resourceFieldRef divisor", func(p *v1.Pod) {
			p.Spec.Containers[0].Env[0] = v1.EnvVar{Name: "CPU", ValueFrom: &v1.EnvVarSource{ResourceFieldRef: &v1.ResourceFieldSelector{Resource: "limits.cpu", Divisor: resource.MustParse("1Mi")}}}
		}, `spec.containers[0].env[0].valueFrom.resourceFieldRef.divisor: Invalid value: "limits.cpu": only divisor's values 1m and 1 are supported with the cpu resource`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pod := validPod()
			tc.mutate(pod)
			errs := ValidatePod(pod)
			for _, err := range errs {
				if strings.HasPrefix(err.Error(), tc.want) {
					return
				}
			}
			t.Fatalf("want an error starting with\n  %s\ngot %v", tc.want, errs)
		})
	}
}

// The values that must keep passing.
func TestRuntimeFieldsAccepted(t *testing.T) {
	pod := validPod()
	pod.Spec.SecurityContext = &v1.PodSecurityContext{
		SeccompProfile:           &v1.SeccompProfile{Type: v1.SeccompProfileTypeRuntimeDefault},
		AppArmorProfile:          &v1.AppArmorProfile{Type: v1.AppArmorProfileTypeRuntimeDefault},
		Sysctls:                  []v1.Sysctl{{Name: "net.ipv4.ip_unprivileged_port_start", Value: "0"}, {Name: "kernel/shm_rmid_forced", Value: "1"}},
		SupplementalGroupsPolicy: ptr.To(v1.SupplementalGroupsPolicyStrict),
		FSGroupChangePolicy:      ptr.To(v1.FSGroupChangeOnRootMismatch),
	}
	c := &pod.Spec.Containers[0]
	c.SecurityContext = &v1.SecurityContext{
		Privileged:      ptr.To(true),
		SeccompProfile:  &v1.SeccompProfile{Type: v1.SeccompProfileTypeLocalhost, LocalhostProfile: ptr.To("profiles/audit.json")},
		AppArmorProfile: &v1.AppArmorProfile{Type: v1.AppArmorProfileTypeLocalhost, LocalhostProfile: ptr.To("k8s-apparmor-example")},
		ProcMount:       ptr.To(v1.DefaultProcMount),
	}
	c.VolumeMounts[0].MountPropagation = ptr.To(v1.MountPropagationBidirectional)
	c.VolumeMounts = append(c.VolumeMounts, v1.VolumeMount{Name: "data", MountPath: "/ro", ReadOnly: true, RecursiveReadOnly: ptr.To(v1.RecursiveReadOnlyIfPossible)})
	c.Env = append(c.Env, v1.EnvVar{Name: "MEM", ValueFrom: &v1.EnvVarSource{ResourceFieldRef: &v1.ResourceFieldSelector{Resource: "limits.memory", Divisor: resource.MustParse("1Mi")}}})
	if errs := ValidatePod(pod); len(errs) != 0 {
		t.Fatalf("valid runtime fields rejected: %v", errs)
	}
}
