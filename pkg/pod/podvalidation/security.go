package podvalidation

import (
	"fmt"
	"regexp"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// The security settings below are passed to the runtime as they are, and nodelet's
// runtime manager does not second-guess them: an unknown seccomp type would run the
// container unconfined, an unknown procMount would be the default. So they are checked
// here, with upstream's rules and wording.

var supportedSeccompTypes = []v1.SeccompProfileType{v1.SeccompProfileTypeLocalhost, v1.SeccompProfileTypeRuntimeDefault, v1.SeccompProfileTypeUnconfined}

func validateSeccompProfile(sp *v1.SeccompProfile, fldPath *field.Path) field.ErrorList {
	if sp == nil {
		return nil
	}
	var allErrs field.ErrorList
	switch sp.Type {
	case v1.SeccompProfileTypeLocalhost, v1.SeccompProfileTypeRuntimeDefault, v1.SeccompProfileTypeUnconfined:
	case "":
		allErrs = append(allErrs, field.Required(fldPath.Child("type"), "type is required when seccompProfile is set"))
	default:
		allErrs = append(allErrs, field.NotSupported(fldPath.Child("type"), sp.Type, supportedSeccompTypes))
	}
	profilePath := fldPath.Child("localhostProfile")
	switch {
	case sp.Type == v1.SeccompProfileTypeLocalhost && sp.LocalhostProfile == nil:
		allErrs = append(allErrs, field.Required(profilePath, "must be set when seccomp type is Localhost"))
	case sp.Type == v1.SeccompProfileTypeLocalhost:
		// The profile is a file under the kubelet's seccomp root.
		allErrs = append(allErrs, validateLocalDescendingPath(*sp.LocalhostProfile, profilePath)...)
	case sp.LocalhostProfile != nil:
		allErrs = append(allErrs, field.Invalid(profilePath, sp, "can only be set when seccomp type is Localhost"))
	}
	return allErrs
}

var supportedAppArmorTypes = []v1.AppArmorProfileType{v1.AppArmorProfileTypeLocalhost, v1.AppArmorProfileTypeRuntimeDefault, v1.AppArmorProfileTypeUnconfined}

// maxAppArmorProfileLength is PATH_MAX - 1.
const maxAppArmorProfileLength = 4095

func validateAppArmorProfile(profile *v1.AppArmorProfile, fldPath *field.Path) field.ErrorList {
	if profile == nil {
		return nil
	}
	profilePath := fldPath.Child("localhostProfile")
	switch profile.Type {
	case v1.AppArmorProfileTypeLocalhost:
		return validateAppArmorLocalhostProfile(profile.LocalhostProfile, profilePath)
	case v1.AppArmorProfileTypeRuntimeDefault, v1.AppArmorProfileTypeUnconfined:
		if profile.LocalhostProfile != nil {
			return field.ErrorList{field.Invalid(profilePath, profile.LocalhostProfile, "can only be set when AppArmor type is Localhost")}
		}
		return nil
	case "":
		return field.ErrorList{field.Required(fldPath.Child("type"), "type is required when appArmorProfile is set")}
	default:
		return field.ErrorList{field.NotSupported(fldPath.Child("type"), profile.Type, supportedAppArmorTypes)}
	}
}

func validateAppArmorLocalhostProfile(name *string, fldPath *field.Path) field.ErrorList {
	const required = "must be set when AppArmor type is Localhost"
	if name == nil {
		return field.ErrorList{field.Required(fldPath, required)}
	}
	var allErrs field.ErrorList
	switch trimmed := strings.TrimSpace(*name); {
	case trimmed != *name:
		allErrs = append(allErrs, field.Invalid(fldPath, *name, "must not be padded with whitespace"))
	case trimmed == "":
		allErrs = append(allErrs, field.Required(fldPath, required))
	}
	if len(*name) > maxAppArmorProfileLength {
		allErrs = append(allErrs, field.TooLong(fldPath, "", maxAppArmorProfileLength))
	}
	return allErrs
}

// validateProcMount: an unmasked /proc is only safe inside a user namespace.
func validateProcMount(procMount *v1.ProcMountType, hostUsers bool, fldPath *field.Path) field.ErrorList {
	if procMount == nil {
		return nil
	}
	switch *procMount {
	case v1.DefaultProcMount:
		return nil
	case v1.UnmaskedProcMount:
		if hostUsers {
			return field.ErrorList{field.Invalid(fldPath, *procMount, "`hostUsers` must be false to use `Unmasked`")}
		}
		return nil
	default:
		return field.ErrorList{field.NotSupported(fldPath, *procMount, []v1.ProcMountType{v1.DefaultProcMount, v1.UnmaskedProcMount})}
	}
}

// validateHostUsers: a pod in its own user namespace may not share the node's other
// namespaces.
func validateHostUsers(spec *v1.PodSpec, fldPath *field.Path) field.ErrorList {
	if spec.HostUsers == nil || *spec.HostUsers {
		return nil
	}
	const msg = "when `hostUsers` is false"
	var allErrs field.ErrorList
	if spec.HostNetwork {
		allErrs = append(allErrs, field.Forbidden(fldPath.Child("hostNetwork"), msg))
	}
	if spec.HostPID {
		allErrs = append(allErrs, field.Forbidden(fldPath.Child("HostPID"), msg))
	}
	if spec.HostIPC {
		allErrs = append(allErrs, field.Forbidden(fldPath.Child("HostIPC"), msg))
	}
	return allErrs
}

// podUsesHostUsers reports whether the pod runs in the node's user namespace.
func podUsesHostUsers(spec *v1.PodSpec) bool {
	return spec.HostUsers == nil || *spec.HostUsers
}

var (
	supportedSupplementalGroupsPolicies = sets.New(v1.SupplementalGroupsPolicyMerge, v1.SupplementalGroupsPolicyStrict)
	supportedFSGroupChangePolicies      = sets.New(v1.FSGroupChangeOnRootMismatch, v1.FSGroupChangeAlways)
	supportedSELinuxChangePolicies      = sets.New(v1.SELinuxChangePolicyRecursive, v1.SELinuxChangePolicyMountOption)
)

// validatePodSecurityPolicies checks the pod security context's policy enums.
func validatePodSecurityPolicies(sc *v1.PodSecurityContext, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	if p := sc.SupplementalGroupsPolicy; p != nil && !supportedSupplementalGroupsPolicies.Has(*p) {
		allErrs = append(allErrs, field.NotSupported(fldPath.Child("supplementalGroupsPolicy"), *p, sets.List(supportedSupplementalGroupsPolicies)))
	}
	if p := sc.FSGroupChangePolicy; p != nil && !supportedFSGroupChangePolicies.Has(*p) {
		allErrs = append(allErrs, field.NotSupported(fldPath.Child("fsGroupChangePolicy"), *p, sets.List(supportedFSGroupChangePolicies)))
	}
	if p := sc.SELinuxChangePolicy; p != nil && !supportedSELinuxChangePolicies.Has(*p) {
		allErrs = append(allErrs, field.NotSupported(fldPath.Child("seLinuxChangePolicy"), *p, sets.List(supportedSELinuxChangePolicies)))
	}
	return allErrs
}

// A sysctl name: dot- or slash-separated segments, at most 253 characters.
const (
	sysctlSegmentFmt = "[a-z0-9]([-_a-z0-9]*[a-z0-9])?"
	sysctlMaxLength  = 253
)

var sysctlNameRegexp = regexp.MustCompile("^(" + sysctlSegmentFmt + "[\\./])*" + sysctlSegmentFmt + "$")

func isValidSysctlName(name string) bool {
	return len(name) <= sysctlMaxLength && sysctlNameRegexp.MatchString(name)
}

// validateSysctls checks names, duplicates, and that a pod sharing the node's network
// or IPC namespace does not set that namespace's sysctls (they would change the node).
func validateSysctls(spec *v1.PodSpec, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	names := sets.New[string]()
	for i, s := range spec.SecurityContext.Sysctls {
		namePath := fldPath.Index(i).Child("name")
		switch {
		case s.Name == "":
			allErrs = append(allErrs, field.Required(namePath, ""))
		case !isValidSysctlName(s.Name):
			msg := fmt.Sprintf("must have at most %d characters and match regex %s", sysctlMaxLength, sysctlNameRegexp)
			allErrs = append(allErrs, field.Invalid(namePath, s.Name, msg))
		case names.Has(s.Name):
			allErrs = append(allErrs, field.Duplicate(namePath, s.Name))
		}
		switch sysctlNamespace(s.Name) {
		case "net":
			if spec.HostNetwork {
				allErrs = append(allErrs, field.Invalid(namePath, s.Name, "may not be specified when 'hostNetwork' is true"))
			}
		case "ipc":
			if spec.HostIPC {
				allErrs = append(allErrs, field.Invalid(namePath, s.Name, "may not be specified when 'hostIPC' is true"))
			}
		}
		names.Insert(s.Name)
	}
	return allErrs
}

// sysctlNamespace is the kernel namespace a sysctl belongs to: "net", "ipc", or "" for
// those not known to be namespaced.
func sysctlNamespace(name string) string {
	name = normalizeSysctlName(name)
	switch {
	case strings.HasPrefix(name, "net."):
		return "net"
	case name == "kernel.sem", strings.HasPrefix(name, "kernel.shm"), strings.HasPrefix(name, "kernel.msg"), strings.HasPrefix(name, "fs.mqueue."):
		return "ipc"
	}
	return ""
}

// normalizeSysctlName turns the slash form ("net/ipv4/conf/eth0.100/rp_filter") into
// the dot form ("net.ipv4.conf.eth0/100.rp_filter").
func normalizeSysctlName(name string) string {
	i := strings.IndexAny(name, "./")
	if i < 0 || name[i] == '.' {
		return name
	}
	return strings.Map(func(r rune) rune {
		switch r {
		case '.':
			return '/'
		case '/':
			return '.'
		}
		return r
	}, name)
}
