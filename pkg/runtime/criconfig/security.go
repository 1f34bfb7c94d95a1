package criconfig

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// DetermineEffectiveSecurityContext merges the pod's security context into
// the container's: a field the container sets wins, the pod's applies
// otherwise. The result is never nil and shares no pointers with the pod.
func DetermineEffectiveSecurityContext(pod *v1.Pod, c *v1.Container) *v1.SecurityContext {
	sc := podLevelSecurityContext(pod.Spec.SecurityContext)
	cs := c.SecurityContext
	if cs == nil {
		return sc
	}
	if cs.SELinuxOptions != nil {
		sc.SELinuxOptions = ptrCopy(cs.SELinuxOptions)
	}
	if cs.WindowsOptions != nil {
		sc.WindowsOptions = ptrCopy(cs.WindowsOptions)
	}
	if cs.Capabilities != nil {
		sc.Capabilities = cs.Capabilities.DeepCopy()
	}
	overrideIfSet(&sc.Privileged, cs.Privileged)
	overrideIfSet(&sc.RunAsUser, cs.RunAsUser)
	overrideIfSet(&sc.RunAsGroup, cs.RunAsGroup)
	overrideIfSet(&sc.RunAsNonRoot, cs.RunAsNonRoot)
	overrideIfSet(&sc.ReadOnlyRootFilesystem, cs.ReadOnlyRootFilesystem)
	overrideIfSet(&sc.AllowPrivilegeEscalation, cs.AllowPrivilegeEscalation)
	overrideIfSet(&sc.ProcMount, cs.ProcMount)
	if cs.SeccompProfile != nil {
		sc.SeccompProfile = cs.SeccompProfile.DeepCopy()
	}
	if cs.AppArmorProfile != nil {
		sc.AppArmorProfile = cs.AppArmorProfile.DeepCopy()
	}
	return sc
}

// podLevelSecurityContext copies the pod security context fields that also
// exist for containers.
func podLevelSecurityContext(ps *v1.PodSecurityContext) *v1.SecurityContext {
	sc := &v1.SecurityContext{}
	if ps == nil {
		return sc
	}
	sc.SELinuxOptions = ptrCopy(ps.SELinuxOptions)
	sc.WindowsOptions = ptrCopy(ps.WindowsOptions)
	sc.RunAsUser = ptrCopy(ps.RunAsUser)
	sc.RunAsGroup = ptrCopy(ps.RunAsGroup)
	sc.RunAsNonRoot = ptrCopy(ps.RunAsNonRoot)
	sc.SeccompProfile = ps.SeccompProfile.DeepCopy()
	sc.AppArmorProfile = ps.AppArmorProfile.DeepCopy()
	return sc
}

func ptrCopy[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

func overrideIfSet[T any](dst **T, src *T) {
	if src != nil {
		*dst = ptrCopy(src)
	}
}

// VerifyRunAsNonRoot checks runAsNonRoot against the user the container will
// run as: its (or its pod's) runAsUser, else the image's user, uid when
// numeric, username otherwise. A non-numeric image user cannot be verified
// and is refused.
func VerifyRunAsNonRoot(pod *v1.Pod, c *v1.Container, uid *int64, username string) error {
	sc := DetermineEffectiveSecurityContext(pod, c)
	if sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
		return nil
	}
	if sc.RunAsUser != nil {
		if *sc.RunAsUser == 0 {
			return fmt.Errorf("container's runAsUser breaks non-root policy (pod: %q, container: %s)", FormatPod(pod), c.Name)
		}
		return nil
	}
	switch {
	case uid == nil && username != "":
		return fmt.Errorf("container has runAsNonRoot and image has non-numeric user (%s), cannot verify user is non-root (pod: %q, container: %s)", username, FormatPod(pod), c.Name)
	case uid == nil:
		return nil
	case *uid == 0:
		return fmt.Errorf("container has runAsNonRoot and image will run as root (pod: %q, container: %s)", FormatPod(pod), c.Name)
	}
	if errs := validation.IsValidUserID(*uid); len(errs) > 0 {
		return fmt.Errorf("container has runAsNonRoot and image has an invalid user id (%d). (Must be 1-(%d)): %s (pod: %q, container: %s)",
			*uid, math.MaxInt32, strings.Join(errs, "; "), FormatPod(pod), c.Name)
	}
	return nil
}

// containerSecurityContext builds the CRI security context of a container.
// uid and username are the image's user, used when no runAsUser is set.
func containerSecurityContext(pod *v1.Pod, c *v1.Container, uid *int64, username string, opts ContainerOptions) (*runtimeapi.LinuxContainerSecurityContext, error) {
	sc := DetermineEffectiveSecurityContext(pod, c)
	out := &runtimeapi.LinuxContainerSecurityContext{
		Capabilities:     runtimeCapabilities(sc.Capabilities),
		SelinuxOptions:   runtimeSELinuxOptions(sc.SELinuxOptions),
		Privileged:       isTrue(sc.Privileged),
		ReadonlyRootfs:   isTrue(sc.ReadOnlyRootFilesystem),
		NamespaceOptions: NamespacesForPod(pod),
		// no_new_privs only when asked for: allowPrivilegeEscalation=false.
		NoNewPrivs:    sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation,
		MaskedPaths:   maskedPaths(sc.ProcMount),
		ReadonlyPaths: readonlyPaths(sc.ProcMount),
	}
	if sc.RunAsUser != nil {
		out.RunAsUser = &runtimeapi.Int64Value{Value: *sc.RunAsUser}
	} else {
		if uid != nil {
			out.RunAsUser = &runtimeapi.Int64Value{Value: *uid}
		}
		out.RunAsUsername = username
	}
	if sc.RunAsGroup != nil {
		out.RunAsGroup = &runtimeapi.Int64Value{Value: *sc.RunAsGroup}
	}
	var err error
	if out.SupplementalGroups, out.SupplementalGroupsPolicy, err = supplementalGroups(pod.Spec.SecurityContext); err != nil {
		return nil, err
	}
	if out.Seccomp, err = seccompProfile(sc.SeccompProfile, opts.seccompProfileRoot(), opts.SeccompDefault); err != nil {
		return nil, err
	}
	out.NamespaceOptions.UsernsOptions = opts.UserNamespace
	if opts.TargetContainerID != "" && out.NamespaceOptions.Pid == runtimeapi.NamespaceMode_CONTAINER {
		out.NamespaceOptions.Pid = runtimeapi.NamespaceMode_TARGET
		out.NamespaceOptions.TargetId = opts.TargetContainerID
	}
	return out, nil
}

// NamespacesForPod returns the namespace modes of the pod's sandbox and
// containers: the node's network, PID and IPC namespaces when asked for;
// a PID namespace shared by the pod with shareProcessNamespace; the pod's
// own network and IPC, and one PID namespace per container, otherwise.
func NamespacesForPod(pod *v1.Pod) *runtimeapi.NamespaceOption {
	ns := &runtimeapi.NamespaceOption{
		Network: runtimeapi.NamespaceMode_POD,
		Pid:     runtimeapi.NamespaceMode_CONTAINER,
		Ipc:     runtimeapi.NamespaceMode_POD,
	}
	if pod.Spec.HostNetwork {
		ns.Network = runtimeapi.NamespaceMode_NODE
	}
	if pod.Spec.HostIPC {
		ns.Ipc = runtimeapi.NamespaceMode_NODE
	}
	switch {
	case pod.Spec.HostPID:
		ns.Pid = runtimeapi.NamespaceMode_NODE
	case isTrue(pod.Spec.ShareProcessNamespace):
		ns.Pid = runtimeapi.NamespaceMode_POD
	}
	return ns
}

// supplementalGroups lists fsGroup, then the pod's supplementalGroups.
func supplementalGroups(ps *v1.PodSecurityContext) ([]int64, runtimeapi.SupplementalGroupsPolicy, error) {
	if ps == nil {
		return nil, runtimeapi.SupplementalGroupsPolicy_Merge, nil
	}
	var groups []int64
	if ps.FSGroup != nil {
		groups = append(groups, *ps.FSGroup)
	}
	groups = append(groups, ps.SupplementalGroups...)
	policy := runtimeapi.SupplementalGroupsPolicy_Merge
	if ps.SupplementalGroupsPolicy != nil {
		v, ok := runtimeapi.SupplementalGroupsPolicy_value[string(*ps.SupplementalGroupsPolicy)]
		if !ok {
			return nil, 0, fmt.Errorf("unsupported supplementalGroupsPolicy: %s", *ps.SupplementalGroupsPolicy)
		}
		policy = runtimeapi.SupplementalGroupsPolicy(v)
	}
	return groups, policy, nil
}

// seccompProfile converts the effective seccomp profile. Without one the
// container is Unconfined, or RuntimeDefault when the kubelet's
// seccompDefault is on. Localhost profiles are files under profileRoot.
func seccompProfile(p *v1.SeccompProfile, profileRoot string, seccompDefault bool) (*runtimeapi.SecurityProfile, error) {
	switch {
	case p == nil && seccompDefault:
		return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}, nil
	case p == nil:
		return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Unconfined}, nil
	case p.Type == v1.SeccompProfileTypeRuntimeDefault:
		return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}, nil
	case p.Type == v1.SeccompProfileTypeLocalhost:
		if p.LocalhostProfile == nil || *p.LocalhostProfile == "" {
			//lint:ignore ST1005 upstream's message, kept verbatim
			return nil, errors.New("localhostProfile must be set if seccompProfile type is Localhost.")
		}
		return &runtimeapi.SecurityProfile{
			ProfileType:  runtimeapi.SecurityProfile_Localhost,
			LocalhostRef: filepath.Join(profileRoot, *p.LocalhostProfile),
		}, nil
	}
	return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Unconfined}, nil
}

func runtimeCapabilities(c *v1.Capabilities) *runtimeapi.Capability {
	if c == nil {
		return nil
	}
	out := &runtimeapi.Capability{
		AddCapabilities:  make([]string, len(c.Add)),
		DropCapabilities: make([]string, len(c.Drop)),
	}
	for i, name := range c.Add {
		out.AddCapabilities[i] = string(name)
	}
	for i, name := range c.Drop {
		out.DropCapabilities[i] = string(name)
	}
	return out
}

func runtimeSELinuxOptions(o *v1.SELinuxOptions) *runtimeapi.SELinuxOption {
	if o == nil {
		return nil
	}
	return &runtimeapi.SELinuxOption{User: o.User, Role: o.Role, Type: o.Type, Level: o.Level}
}

// The /proc and /sys paths hidden or made read-only in containers unless
// procMount is Unmasked. They must match what moby and containerd use.
var (
	defaultMaskedPaths = []string{
		"/proc/asound",
		"/proc/acpi",
		"/proc/kcore",
		"/proc/keys",
		"/proc/latency_stats",
		"/proc/timer_list",
		"/proc/timer_stats",
		"/proc/sched_debug",
		"/proc/scsi",
		"/sys/firmware",
		"/sys/devices/virtual/powercap",
	}
	defaultReadonlyPaths = []string{
		"/proc/bus",
		"/proc/fs",
		"/proc/irq",
		"/proc/sys",
		"/proc/sysrq-trigger",
	}
)

func maskedPaths(procMount *v1.ProcMountType) []string {
	if procMount != nil && *procMount == v1.UnmaskedProcMount {
		return []string{}
	}
	return append([]string(nil), defaultMaskedPaths...)
}

func readonlyPaths(procMount *v1.ProcMountType) []string {
	if procMount != nil && *procMount == v1.UnmaskedProcMount {
		return []string{}
	}
	return append([]string(nil), defaultReadonlyPaths...)
}
