// Package podvalidation checks a v1.Pod the way the API server's pod validation
// (pkg/apis/core/validation ValidatePodCreate) would, for the rules that matter to a pod
// the node runs without an API server in front of it: static pods from a manifest
// directory or URL.
//
// It is a focused re-implementation, not a port: it works on the versioned v1 types,
// expects the pod to be defaulted already (as the API server's decoder would have done),
// and reports errors with the same field paths and wording as upstream, e.g.
// `spec.containers[1].name: Duplicate value: "web"`. Rules for features nodelet does not
// run (Windows options, dynamic resource claims, topology spread, affinity, ...) are left
// out; such fields are accepted as they are.
package podvalidation

import (
	"fmt"
	"math"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/validate/content"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// ValidatePod validates a pod as upstream does on create: metadata, spec, and the checks
// that only apply to a Pod (not a pod template). The pod must already carry defaults.
func ValidatePod(pod *v1.Pod) field.ErrorList {
	metaPath := field.NewPath("metadata")
	specPath := field.NewPath("spec")

	allErrs := apivalidation.ValidateObjectMeta(&pod.ObjectMeta, true, apivalidation.NameIsDNSSubdomain, metaPath)
	allErrs = append(allErrs, validatePodSpec(&pod.Spec, specPath)...)
	allErrs = append(allErrs, validateImageWhitespace(pod.Spec.Containers, specPath.Child("containers"))...)
	allErrs = append(allErrs, validateImageWhitespace(pod.Spec.InitContainers, specPath.Child("initContainers"))...)

	// Ephemeral containers are only ever added later through the ephemeralcontainers
	// subresource; a pod that is created with them is rejected.
	if len(pod.Spec.EphemeralContainers) > 0 {
		allErrs = append(allErrs, field.Forbidden(specPath.Child("ephemeralContainers"), "cannot be set on create"))
	}
	if pod.Spec.NodeName != "" && len(pod.Spec.SchedulingGates) != 0 {
		allErrs = append(allErrs, field.Forbidden(specPath.Child("nodeName"), "cannot be set until all schedulingGates have been cleared"))
	}
	return allErrs
}

func validatePodSpec(spec *v1.PodSpec, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	allErrs = append(allErrs, validateTerminationGracePeriod(spec.TerminationGracePeriodSeconds, fldPath.Child("terminationGracePeriodSeconds"))...)
	gracePeriod := spec.TerminationGracePeriodSeconds

	vols, volErrs := validateVolumes(spec.Volumes, fldPath.Child("volumes"))
	allErrs = append(allErrs, volErrs...)
	pc := podContext{volumes: vols, gracePeriod: gracePeriod, restartPolicy: spec.RestartPolicy, hostUsers: podUsesHostUsers(spec)}
	allErrs = append(allErrs, validateContainers(spec.Containers, pc, fldPath.Child("containers"))...)
	allErrs = append(allErrs, validateInitContainers(spec.InitContainers, spec.Containers, pc, fldPath.Child("initContainers"))...)
	allErrs = append(allErrs, validateEphemeralContainers(spec.EphemeralContainers, spec.Containers, spec.InitContainers, pc, fldPath.Child("ephemeralContainers"))...)

	allErrs = append(allErrs, validateHostNetworkPorts(spec, fldPath)...)
	allErrs = append(allErrs, validateRestartPolicy(spec.RestartPolicy, fldPath.Child("restartPolicy"))...)
	allErrs = append(allErrs, validateDNSPolicy(spec.DNSPolicy, fldPath.Child("dnsPolicy"))...)
	allErrs = append(allErrs, metav1validation.ValidateLabels(spec.NodeSelector, fldPath.Child("nodeSelector"))...)
	allErrs = append(allErrs, validatePodSecurityContext(spec, fldPath.Child("securityContext"))...)
	allErrs = append(allErrs, validateHostUsers(spec, fldPath)...)
	if spec.ShareProcessNamespace != nil && *spec.ShareProcessNamespace && spec.HostPID {
		allErrs = append(allErrs, field.Invalid(fldPath.Child("shareProcessNamespace"), *spec.ShareProcessNamespace, "ShareProcessNamespace and HostPID cannot both be enabled"))
	}
	allErrs = append(allErrs, validatePodDNSConfig(spec.DNSConfig, spec.DNSPolicy, fldPath.Child("dnsConfig"))...)
	allErrs = append(allErrs, validateObjectNames(spec, fldPath)...)
	allErrs = append(allErrs, validateFileKeyRefVolumes(spec, fldPath)...)

	if spec.ActiveDeadlineSeconds != nil {
		value := *spec.ActiveDeadlineSeconds
		if value < 1 || value > math.MaxInt32 {
			allErrs = append(allErrs, field.Invalid(fldPath.Child("activeDeadlineSeconds"), value, validation.InclusiveRangeError(1, math.MaxInt32)))
		}
	}
	if spec.Hostname != "" {
		allErrs = append(allErrs, validateDNS1123Label(spec.Hostname, fldPath.Child("hostname"))...)
	}
	if spec.Subdomain != "" {
		allErrs = append(allErrs, validateDNS1123Label(spec.Subdomain, fldPath.Child("subdomain"))...)
	}
	allErrs = append(allErrs, validateTolerations(spec.Tolerations, fldPath.Child("tolerations"))...)
	allErrs = append(allErrs, validateHostAliases(spec.HostAliases, fldPath.Child("hostAliases"))...)
	return allErrs
}

// validateTerminationGracePeriod requires the (defaulted) field and rejects negative
// values. Upstream's validation only requires it to be set and lets the API server's
// create strategy turn a negative value into 1; a static pod never passes through that
// strategy, so a negative value is an error here rather than silently changed.
func validateTerminationGracePeriod(value *int64, fldPath *field.Path) field.ErrorList {
	if value == nil {
		return field.ErrorList{field.Required(fldPath, "")}
	}
	return apivalidation.ValidateNonnegativeField(*value, fldPath)
}

// validateObjectNames checks the names a spec uses to refer to other objects.
func validateObjectNames(spec *v1.PodSpec, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	subdomains := []struct {
		name  string
		value string
	}{
		{"serviceAccountName", spec.ServiceAccountName},
		{"nodeName", spec.NodeName},
		{"priorityClassName", spec.PriorityClassName},
	}
	for _, s := range subdomains {
		if s.value == "" {
			continue
		}
		for _, msg := range apivalidation.NameIsDNSSubdomain(s.value, false) {
			allErrs = append(allErrs, field.Invalid(fldPath.Child(s.name), s.value, msg))
		}
	}
	if spec.RuntimeClassName != nil {
		for _, msg := range apivalidation.NameIsDNSSubdomain(*spec.RuntimeClassName, false) {
			allErrs = append(allErrs, field.Invalid(fldPath.Child("runtimeClassName"), *spec.RuntimeClassName, msg))
		}
	}
	return allErrs
}

func validateRestartPolicy(policy v1.RestartPolicy, fldPath *field.Path) field.ErrorList {
	switch policy {
	case v1.RestartPolicyAlways, v1.RestartPolicyOnFailure, v1.RestartPolicyNever:
		return nil
	case "":
		return field.ErrorList{field.Required(fldPath, "")}
	default:
		valid := []v1.RestartPolicy{v1.RestartPolicyAlways, v1.RestartPolicyOnFailure, v1.RestartPolicyNever}
		return field.ErrorList{field.NotSupported(fldPath, policy, valid)}
	}
}

func validateDNSPolicy(policy v1.DNSPolicy, fldPath *field.Path) field.ErrorList {
	switch policy {
	case v1.DNSClusterFirstWithHostNet, v1.DNSClusterFirst, v1.DNSDefault, v1.DNSNone:
		return nil
	case "":
		return field.ErrorList{field.Required(fldPath, "")}
	default:
		valid := []v1.DNSPolicy{v1.DNSClusterFirstWithHostNet, v1.DNSClusterFirst, v1.DNSDefault, v1.DNSNone}
		return field.ErrorList{field.NotSupported(fldPath, policy, valid)}
	}
}

// Limits that come from libc's resolver.
const (
	maxDNSNameservers     = 3
	maxDNSSearchPaths     = 32
	maxDNSSearchListChars = 2048
)

func validatePodDNSConfig(cfg *v1.PodDNSConfig, policy v1.DNSPolicy, fldPath *field.Path) field.ErrorList {
	if policy == v1.DNSNone {
		if cfg == nil {
			return field.ErrorList{field.Required(fldPath, fmt.Sprintf("must provide `dnsConfig` when `dnsPolicy` is %s", v1.DNSNone))}
		}
		if len(cfg.Nameservers) == 0 {
			return field.ErrorList{field.Required(fldPath.Child("nameservers"), fmt.Sprintf("must provide at least one DNS nameserver when `dnsPolicy` is %s", v1.DNSNone))}
		}
	}
	if cfg == nil {
		return nil
	}
	var allErrs field.ErrorList
	if len(cfg.Nameservers) > maxDNSNameservers {
		allErrs = append(allErrs, field.Invalid(fldPath.Child("nameservers"), cfg.Nameservers, fmt.Sprintf("must not have more than %v nameservers", maxDNSNameservers)))
	}
	for i, ns := range cfg.Nameservers {
		allErrs = append(allErrs, validation.IsValidIP(fldPath.Child("nameservers").Index(i), ns)...)
	}
	if len(cfg.Searches) > maxDNSSearchPaths {
		allErrs = append(allErrs, field.Invalid(fldPath.Child("searches"), cfg.Searches, fmt.Sprintf("must not have more than %v search paths", maxDNSSearchPaths)))
	}
	if len(strings.Join(cfg.Searches, " ")) > maxDNSSearchListChars {
		allErrs = append(allErrs, field.Invalid(fldPath.Child("searches"), cfg.Searches, fmt.Sprintf("must not have more than %v characters (including spaces) in the search list", maxDNSSearchListChars)))
	}
	for i, search := range cfg.Searches {
		// Upstream's relaxed search validation (on by default): "." alone is allowed,
		// underscores are allowed, a trailing dot is ignored.
		if search == "." {
			continue
		}
		search = strings.TrimSuffix(search, ".")
		for _, msg := range validation.IsDNS1123SubdomainWithUnderscore(search) {
			allErrs = append(allErrs, field.Invalid(fldPath.Child("searches").Index(i), search, msg))
		}
	}
	for i, opt := range cfg.Options {
		if opt.Name == "" {
			allErrs = append(allErrs, field.Required(fldPath.Child("options").Index(i), "must not be empty"))
		}
	}
	return allErrs
}

// validateHostNetworkPorts: with hostNetwork the container port is the host port, so a
// pod (unlike a pod template) must have them equal; defaulting already copied
// containerPort into an unset hostPort.
func validateHostNetworkPorts(spec *v1.PodSpec, fldPath *field.Path) field.ErrorList {
	if !spec.HostNetwork {
		return nil
	}
	var allErrs field.ErrorList
	for i, ctr := range spec.Containers {
		portsPath := fldPath.Child("containers").Index(i).Child("ports")
		for j, port := range ctr.Ports {
			if port.HostPort != port.ContainerPort {
				allErrs = append(allErrs, field.Invalid(portsPath.Index(j).Child("hostPort"), port.HostPort, "must match `containerPort` when `hostNetwork` is true"))
			}
		}
	}
	return allErrs
}

func validatePodSecurityContext(spec *v1.PodSpec, fldPath *field.Path) field.ErrorList {
	sc := spec.SecurityContext
	if sc == nil {
		return nil
	}
	var allErrs field.ErrorList
	if sc.FSGroup != nil {
		allErrs = append(allErrs, invalidEach(fldPath.Child("fsGroup"), *sc.FSGroup, validation.IsValidGroupID(*sc.FSGroup))...)
	}
	if sc.RunAsUser != nil {
		allErrs = append(allErrs, invalidEach(fldPath.Child("runAsUser"), *sc.RunAsUser, validation.IsValidUserID(*sc.RunAsUser))...)
	}
	if sc.RunAsGroup != nil {
		allErrs = append(allErrs, invalidEach(fldPath.Child("runAsGroup"), *sc.RunAsGroup, validation.IsValidGroupID(*sc.RunAsGroup))...)
	}
	for i, gid := range sc.SupplementalGroups {
		allErrs = append(allErrs, invalidEach(fldPath.Child("supplementalGroups").Index(i), gid, validation.IsValidGroupID(gid))...)
	}
	allErrs = append(allErrs, validateSysctls(spec, fldPath.Child("sysctls"))...)
	allErrs = append(allErrs, validatePodSecurityPolicies(sc, fldPath)...)
	allErrs = append(allErrs, validateSeccompProfile(sc.SeccompProfile, fldPath.Child("seccompProfile"))...)
	allErrs = append(allErrs, validateAppArmorProfile(sc.AppArmorProfile, fldPath.Child("appArmorProfile"))...)
	return allErrs
}

func validateTolerations(tolerations []v1.Toleration, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	for i, t := range tolerations {
		idxPath := fldPath.Index(i)
		if t.Key != "" {
			allErrs = append(allErrs, metav1validation.ValidateLabelName(t.Key, idxPath.Child("key"))...)
		}
		if t.Key == "" && t.Operator != v1.TolerationOpExists {
			allErrs = append(allErrs, field.Invalid(idxPath.Child("operator"), t.Operator,
				"operator must be Exists when `key` is empty, which means \"match all values and all keys\""))
		}
		if t.TolerationSeconds != nil && t.Effect != v1.TaintEffectNoExecute {
			allErrs = append(allErrs, field.Invalid(idxPath.Child("effect"), t.Effect,
				"effect must be 'NoExecute' when `tolerationSeconds` is set"))
		}
		switch t.Operator {
		case v1.TolerationOpEqual, "":
			if errs := content.IsLabelValue(t.Value); len(errs) != 0 {
				allErrs = append(allErrs, field.Invalid(idxPath.Child("operator"), t.Value, strings.Join(errs, ";")))
			}
		case v1.TolerationOpExists:
			if t.Value != "" {
				allErrs = append(allErrs, field.Invalid(idxPath.Child("operator"), t.Value, "value must be empty when `operator` is 'Exists'"))
			}
		default:
			valid := []v1.TolerationOperator{v1.TolerationOpEqual, v1.TolerationOpExists}
			allErrs = append(allErrs, field.NotSupported(idxPath.Child("operator"), t.Operator, valid))
		}
		if t.Effect != "" {
			allErrs = append(allErrs, validateTaintEffect(t.Effect, idxPath.Child("effect"))...)
		}
	}
	return allErrs
}

func validateTaintEffect(effect v1.TaintEffect, fldPath *field.Path) field.ErrorList {
	switch effect {
	case v1.TaintEffectNoSchedule, v1.TaintEffectPreferNoSchedule, v1.TaintEffectNoExecute:
		return nil
	default:
		valid := []v1.TaintEffect{v1.TaintEffectNoSchedule, v1.TaintEffectPreferNoSchedule, v1.TaintEffectNoExecute}
		return field.ErrorList{field.NotSupported(fldPath, effect, valid)}
	}
}

func validateHostAliases(aliases []v1.HostAlias, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	for i, alias := range aliases {
		allErrs = append(allErrs, validation.IsValidIP(fldPath.Index(i).Child("ip"), alias.IP)...)
		for j, hostname := range alias.Hostnames {
			allErrs = append(allErrs, validateDNS1123Subdomain(hostname, fldPath.Index(i).Child("hostnames").Index(j))...)
		}
	}
	return allErrs
}

// validateImageWhitespace is a pod-only rule: templates may carry " " as a placeholder.
func validateImageWhitespace(containers []v1.Container, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	for i, ctr := range containers {
		if len(ctr.Image) != len(strings.TrimSpace(ctr.Image)) {
			allErrs = append(allErrs, field.Invalid(fldPath.Index(i).Child("image"), ctr.Image, "must not have leading or trailing whitespace"))
		}
	}
	return allErrs
}

func validateDNS1123Label(value string, fldPath *field.Path) field.ErrorList {
	return invalidEach(fldPath, value, content.IsDNS1123Label(value))
}

func validateDNS1123Subdomain(value string, fldPath *field.Path) field.ErrorList {
	return invalidEach(fldPath, value, content.IsDNS1123Subdomain(value))
}

// invalidEach turns the messages of an Is* check into Invalid errors on one field.
func invalidEach(fldPath *field.Path, value interface{}, msgs []string) field.ErrorList {
	var allErrs field.ErrorList
	for _, msg := range msgs {
		allErrs = append(allErrs, field.Invalid(fldPath, value, msg))
	}
	return allErrs
}
