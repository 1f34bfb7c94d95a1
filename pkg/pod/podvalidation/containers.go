package podvalidation

import (
	"fmt"
	"path"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/api/validate/content"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// podContext is what the checks of a container need to know about its pod.
type podContext struct {
	// volumes are the pod's valid volumes, by name.
	volumes       map[string]v1.VolumeSource
	gracePeriod   *int64
	restartPolicy v1.RestartPolicy
	// hostUsers: the pod runs in the node's user namespace.
	hostUsers bool
}

// validateContainers checks the regular containers. Name collisions with init and
// ephemeral containers are reported on those, as upstream does, so each clash is
// reported once.
func validateContainers(containers []v1.Container, pc podContext, fldPath *field.Path) field.ErrorList {
	if len(containers) == 0 {
		return field.ErrorList{field.Required(fldPath, "")}
	}
	var allErrs field.ErrorList
	names := sets.New[string]()
	for i := range containers {
		ctr := &containers[i]
		idxPath := fldPath.Index(i)
		allErrs = append(allErrs, validateContainerCommon(ctr, pc, idxPath)...)
		if names.Has(ctr.Name) {
			allErrs = append(allErrs, field.Duplicate(idxPath.Child("name"), ctr.Name))
		} else {
			names.Insert(ctr.Name)
		}
		allErrs = append(allErrs, validateLifecycleAndProbes(ctr, pc.gracePeriod, idxPath)...)
		allErrs = append(allErrs, validateContainerRestartPolicy(ctr, idxPath)...)
	}
	// All regular containers run at once, so their host ports must not collide.
	return append(allErrs, checkHostPortConflicts(containers, fldPath)...)
}

// validateInitContainers checks init containers; only restartPolicy=Always (sidecars)
// may carry probes and lifecycle hooks. The others may have their own restart policy.
func validateInitContainers(containers, regular []v1.Container, pc podContext, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	names := sets.New[string]()
	for _, ctr := range regular {
		names.Insert(ctr.Name)
	}
	for i := range containers {
		ctr := &containers[i]
		idxPath := fldPath.Index(i)
		allErrs = append(allErrs, validateContainerCommon(ctr, pc, idxPath)...)

		allErrs = append(allErrs, validateContainerRestartPolicy(ctr, idxPath)...)
		sidecar := ctr.RestartPolicy != nil && *ctr.RestartPolicy == v1.ContainerRestartPolicyAlways
		if names.Has(ctr.Name) {
			allErrs = append(allErrs, field.Duplicate(idxPath.Child("name"), ctr.Name))
		} else if ctr.Name != "" {
			names.Insert(ctr.Name)
		}
		// Init containers run one by one, so each is checked on its own.
		allErrs = append(allErrs, checkHostPortConflicts([]v1.Container{*ctr}, fldPath)...)
		if sidecar {
			allErrs = append(allErrs, validateLifecycleAndProbes(ctr, pc.gracePeriod, idxPath)...)
		} else {
			allErrs = append(allErrs, forbidInitOnlyFields(ctr, idxPath)...)
		}
	}
	return allErrs
}

var supportedContainerRestartPolicies = sets.New(v1.ContainerRestartPolicyAlways, v1.ContainerRestartPolicyOnFailure, v1.ContainerRestartPolicyNever)

// Limits on restart rules (from the API's documentation), and why rules need a policy.
const (
	maxRestartRules          = 20
	maxRestartRuleExitCodes  = 255
	restartPolicyRulesNeeded = "must be set when restartPolicyRules are set"
)

// validateContainerRestartPolicy checks a container's own restart policy and rules
// (upstream's ContainerRestartRules, beta and on by default, which nodelet's runtime
// manager implements). Rules only count with a policy, so they require one. Upstream's
// wording for these checks could not be compared; the field paths and error types are
// the API's.
func validateContainerRestartPolicy(ctr *v1.Container, fldPath *field.Path) field.ErrorList {
	policyPath := fldPath.Child("restartPolicy")
	if ctr.RestartPolicy == nil {
		if len(ctr.RestartPolicyRules) > 0 {
			return field.ErrorList{field.Required(policyPath, restartPolicyRulesNeeded)}
		}
		return nil
	}
	var allErrs field.ErrorList
	if !supportedContainerRestartPolicies.Has(*ctr.RestartPolicy) {
		allErrs = append(allErrs, field.NotSupported(policyPath, *ctr.RestartPolicy, sets.List(supportedContainerRestartPolicies)))
	}
	return append(allErrs, validateRestartRules(ctr.RestartPolicyRules, fldPath.Child("restartPolicyRules"))...)
}

var supportedExitCodeOperators = []v1.ContainerRestartRuleOnExitCodesOperator{v1.ContainerRestartRuleOnExitCodesOpIn, v1.ContainerRestartRuleOnExitCodesOpNotIn}

// validateRestartRules: only "Restart" on exit codes exists (RestartAllContainers is an
// alpha feature nodelet does not run).
func validateRestartRules(rules []v1.ContainerRestartRule, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	if len(rules) > maxRestartRules {
		allErrs = append(allErrs, field.TooMany(fldPath, len(rules), maxRestartRules))
	}
	for i, rule := range rules {
		idxPath := fldPath.Index(i)
		if rule.Action != v1.ContainerRestartRuleActionRestart {
			valid := []v1.ContainerRestartRuleAction{v1.ContainerRestartRuleActionRestart}
			allErrs = append(allErrs, field.NotSupported(idxPath.Child("action"), rule.Action, valid))
		}
		codes := rule.ExitCodes
		if codes == nil {
			allErrs = append(allErrs, field.Required(idxPath.Child("exitCodes"), "must be specified"))
			continue
		}
		codesPath := idxPath.Child("exitCodes")
		if codes.Operator != v1.ContainerRestartRuleOnExitCodesOpIn && codes.Operator != v1.ContainerRestartRuleOnExitCodesOpNotIn {
			allErrs = append(allErrs, field.NotSupported(codesPath.Child("operator"), codes.Operator, supportedExitCodeOperators))
		}
		if len(codes.Values) > maxRestartRuleExitCodes {
			allErrs = append(allErrs, field.TooMany(codesPath.Child("values"), len(codes.Values), maxRestartRuleExitCodes))
		}
	}
	return allErrs
}

func forbidInitOnlyFields(ctr *v1.Container, idxPath *field.Path) field.ErrorList {
	const msg = "may not be set for init containers without restartPolicy=Always"
	var allErrs field.ErrorList
	if ctr.Lifecycle != nil {
		allErrs = append(allErrs, field.Forbidden(idxPath.Child("lifecycle"), msg))
	}
	if ctr.LivenessProbe != nil {
		allErrs = append(allErrs, field.Forbidden(idxPath.Child("livenessProbe"), msg))
	}
	if ctr.ReadinessProbe != nil {
		allErrs = append(allErrs, field.Forbidden(idxPath.Child("readinessProbe"), msg))
	}
	if ctr.StartupProbe != nil {
		allErrs = append(allErrs, field.Forbidden(idxPath.Child("startupProbe"), msg))
	}
	return allErrs
}

// validateEphemeralContainers checks names against all other containers. Any ephemeral
// container is rejected on create anyway (see ValidatePod); this keeps the name rule
// complete for callers that validate specs.
func validateEphemeralContainers(ephemeral []v1.EphemeralContainer, regular, init []v1.Container, pc podContext, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	others, names := sets.New[string](), sets.New[string]()
	for _, c := range append(append([]v1.Container{}, regular...), init...) {
		others.Insert(c.Name)
		names.Insert(c.Name)
	}
	for i := range ephemeral {
		ec := &ephemeral[i]
		idxPath := fldPath.Index(i)
		ctr := v1.Container(ec.EphemeralContainerCommon)
		allErrs = append(allErrs, validateContainerCommon(&ctr, pc, idxPath)...)
		if names.Has(ec.Name) {
			allErrs = append(allErrs, field.Duplicate(idxPath.Child("name"), ec.Name))
		} else {
			names.Insert(ec.Name)
		}
		if ec.TargetContainerName != "" && !others.Has(ec.TargetContainerName) {
			allErrs = append(allErrs, field.NotFound(idxPath.Child("targetContainerName"), ec.TargetContainerName))
		}
	}
	return allErrs
}

// validateContainerCommon holds the rules shared by every kind of container.
func validateContainerCommon(ctr *v1.Container, pc podContext, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	namePath := fldPath.Child("name")
	if ctr.Name == "" {
		allErrs = append(allErrs, field.Required(namePath, ""))
	} else {
		allErrs = append(allErrs, validateDNS1123Label(ctr.Name, namePath)...)
	}
	if ctr.Image == "" {
		allErrs = append(allErrs, field.Required(fldPath.Child("image"), ""))
	}
	allErrs = append(allErrs, validateTerminationMessagePolicy(ctr.TerminationMessagePolicy, fldPath.Child("terminationMessagePolicy"))...)
	allErrs = append(allErrs, validateContainerPorts(ctr.Ports, fldPath.Child("ports"))...)
	allErrs = append(allErrs, validateEnv(ctr.Env, fldPath.Child("env"))...)
	allErrs = append(allErrs, validateEnvFrom(ctr.EnvFrom, fldPath.Child("envFrom"))...)
	allErrs = append(allErrs, validateVolumeMounts(ctr, pc.volumes, fldPath.Child("volumeMounts"))...)
	allErrs = append(allErrs, validateVolumeDevices(ctr, pc.volumes, fldPath.Child("volumeDevices"))...)
	allErrs = append(allErrs, validatePullPolicy(ctr.ImagePullPolicy, fldPath.Child("imagePullPolicy"))...)
	allErrs = append(allErrs, validateResources(&ctr.Resources, fldPath.Child("resources"))...)
	allErrs = append(allErrs, validateResizePolicy(ctr.ResizePolicy, pc.restartPolicy, fldPath.Child("resizePolicy"))...)
	allErrs = append(allErrs, validateSecurityContext(ctr.SecurityContext, pc.hostUsers, fldPath.Child("securityContext"))...)
	return allErrs
}

func validateTerminationMessagePolicy(policy v1.TerminationMessagePolicy, fldPath *field.Path) field.ErrorList {
	switch policy {
	case v1.TerminationMessageReadFile, v1.TerminationMessageFallbackToLogsOnError:
		return nil
	case "":
		return field.ErrorList{field.Required(fldPath, "")}
	default:
		valid := []v1.TerminationMessagePolicy{v1.TerminationMessageReadFile, v1.TerminationMessageFallbackToLogsOnError}
		return field.ErrorList{field.NotSupported(fldPath, policy, valid)}
	}
}

var supportedPortProtocols = sets.New(v1.ProtocolTCP, v1.ProtocolUDP, v1.ProtocolSCTP)

func validateContainerPorts(ports []v1.ContainerPort, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	names := sets.New[string]()
	for i, port := range ports {
		idxPath := fldPath.Index(i)
		if port.Name != "" {
			if msgs := validation.IsValidPortName(port.Name); len(msgs) != 0 {
				allErrs = append(allErrs, invalidEach(idxPath.Child("name"), port.Name, msgs)...)
			} else if names.Has(port.Name) {
				allErrs = append(allErrs, field.Duplicate(idxPath.Child("name"), port.Name))
			} else {
				names.Insert(port.Name)
			}
		}
		if port.ContainerPort == 0 {
			allErrs = append(allErrs, field.Required(idxPath.Child("containerPort"), ""))
		} else {
			allErrs = append(allErrs, invalidEach(idxPath.Child("containerPort"), port.ContainerPort, validation.IsValidPortNum(int(port.ContainerPort)))...)
		}
		if port.HostPort != 0 {
			allErrs = append(allErrs, invalidEach(idxPath.Child("hostPort"), port.HostPort, validation.IsValidPortNum(int(port.HostPort)))...)
		}
		if port.Protocol == "" {
			allErrs = append(allErrs, field.Required(idxPath.Child("protocol"), ""))
		} else if !supportedPortProtocols.Has(port.Protocol) {
			allErrs = append(allErrs, field.NotSupported(idxPath.Child("protocol"), port.Protocol, sets.List(supportedPortProtocols)))
		}
	}
	return allErrs
}

// checkHostPortConflicts rejects two ports that would bind the same protocol, host IP
// and host port.
func checkHostPortConflicts(containers []v1.Container, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	seen := sets.New[string]()
	for ci, ctr := range containers {
		portsPath := fldPath.Index(ci).Child("ports")
		for pi, port := range ctr.Ports {
			if port.HostPort == 0 {
				continue
			}
			key := fmt.Sprintf("%s/%s/%d", port.Protocol, port.HostIP, port.HostPort)
			if seen.Has(key) {
				allErrs = append(allErrs, field.Duplicate(portsPath.Index(pi).Child("hostPort"), key))
			} else {
				seen.Insert(key)
			}
		}
	}
	return allErrs
}

// validateEnv uses upstream's relaxed name rule (RelaxedEnvironmentVariableValidation,
// on by default): any printable ASCII except '='.
func validateEnv(vars []v1.EnvVar, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	for i, ev := range vars {
		idxPath := fldPath.Index(i)
		if ev.Name == "" {
			allErrs = append(allErrs, field.Required(idxPath.Child("name"), ""))
		} else {
			allErrs = append(allErrs, invalidEach(idxPath.Child("name"), ev.Name, validation.IsRelaxedEnvVarName(ev.Name))...)
		}
		allErrs = append(allErrs, validateEnvVarValueFrom(ev, idxPath.Child("valueFrom"))...)
	}
	return allErrs
}

func validateEnvVarValueFrom(ev v1.EnvVar, fldPath *field.Path) field.ErrorList {
	if ev.ValueFrom == nil {
		return nil
	}
	var allErrs field.ErrorList
	sources := 0
	if ref := ev.ValueFrom.FieldRef; ref != nil {
		sources++
		allErrs = append(allErrs, validateFieldRef(ref, fldPath.Child("fieldRef"))...)
	}
	if ref := ev.ValueFrom.ResourceFieldRef; ref != nil {
		sources++
		allErrs = append(allErrs, validateResourceFieldRef(ref, fldPath.Child("resourceFieldRef"))...)
	}
	if ref := ev.ValueFrom.ConfigMapKeyRef; ref != nil {
		sources++
		allErrs = append(allErrs, validateKeySelector(ref.Name, ref.Key, fldPath.Child("configMapKeyRef"))...)
	}
	if ref := ev.ValueFrom.SecretKeyRef; ref != nil {
		sources++
		allErrs = append(allErrs, validateKeySelector(ref.Name, ref.Key, fldPath.Child("secretKeyRef"))...)
	}
	if ref := ev.ValueFrom.FileKeyRef; ref != nil {
		sources++
		allErrs = append(allErrs, validateFileKeySelector(ref, fldPath.Child("fileKeyRef"))...)
	}
	switch {
	case sources == 0:
		allErrs = append(allErrs, field.Invalid(fldPath, "", "must specify one of: `fieldRef`, `resourceFieldRef`, `configMapKeyRef`, `secretKeyRef` or `fileKeyRef`"))
	case ev.Value != "":
		allErrs = append(allErrs, field.Invalid(fldPath, "", "may not be specified when `value` is not empty"))
	case sources > 1:
		allErrs = append(allErrs, field.Invalid(fldPath, "", "may not have more than one field specified at a time"))
	}
	return allErrs
}

// validateFileKeySelector checks an env file reference (EnvFiles, beta and on by default
// since v1.35): a key that is a valid variable name, a volume name, a path without "..".
func validateFileKeySelector(ref *v1.FileKeySelector, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	if ref.Key == "" {
		allErrs = append(allErrs, field.Required(fldPath.Child("key"), ""))
	} else {
		allErrs = append(allErrs, invalidEach(fldPath.Child("key"), ref.Key, validation.IsRelaxedEnvVarName(ref.Key))...)
	}
	if ref.VolumeName == "" {
		allErrs = append(allErrs, field.Required(fldPath.Child("volumeName"), ""))
	} else {
		allErrs = append(allErrs, invalidEach(fldPath.Child("volumeName"), ref.VolumeName, validation.IsDNS1123Label(ref.VolumeName))...)
	}
	if ref.Path == "" {
		allErrs = append(allErrs, field.Required(fldPath.Child("path"), ""))
	} else {
		allErrs = append(allErrs, validatePathNoBacksteps(ref.Path, fldPath.Child("path"))...)
	}
	return allErrs
}

// validateFileKeyRefVolumes: an env file is read from one of the pod's emptyDir volumes.
func validateFileKeyRefVolumes(spec *v1.PodSpec, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	sources := map[string]*v1.VolumeSource{}
	for i := range spec.Volumes {
		sources[spec.Volumes[i].Name] = &spec.Volumes[i].VolumeSource
	}
	check := func(c *v1.Container, cPath *field.Path) {
		for j, e := range c.Env {
			if e.ValueFrom == nil || e.ValueFrom.FileKeyRef == nil {
				continue
			}
			name := e.ValueFrom.FileKeyRef.VolumeName
			p := cPath.Child("env").Index(j).Child("valueFrom", "fileKeyRef", "volumeName")
			if src, ok := sources[name]; !ok {
				allErrs = append(allErrs, field.NotFound(p, name))
			} else if src.EmptyDir == nil {
				allErrs = append(allErrs, field.Invalid(p, name, "referenced volume must be of type emptyDir"))
			}
		}
	}
	for i := range spec.InitContainers {
		check(&spec.InitContainers[i], fldPath.Child("initContainers").Index(i))
	}
	for i := range spec.Containers {
		check(&spec.Containers[i], fldPath.Child("containers").Index(i))
	}
	for i := range spec.EphemeralContainers {
		check((*v1.Container)(&spec.EphemeralContainers[i].EphemeralContainerCommon), fldPath.Child("ephemeralContainers").Index(i))
	}
	return allErrs
}

// validEnvFieldPaths are the downward API fields an env var may read (besides
// subscripted labels and annotations).
var validEnvFieldPaths = sets.New(
	"metadata.name", "metadata.namespace", "metadata.uid",
	"spec.nodeName", "spec.serviceAccountName",
	"status.hostIP", "status.hostIPs", "status.podIP", "status.podIPs",
)

func validateFieldRef(ref *v1.ObjectFieldSelector, fldPath *field.Path) field.ErrorList {
	if ref.APIVersion == "" {
		return field.ErrorList{field.Required(fldPath.Child("apiVersion"), "")}
	}
	if ref.FieldPath == "" {
		return field.ErrorList{field.Required(fldPath.Child("fieldPath"), "")}
	}
	if strings.HasPrefix(ref.FieldPath, "metadata.labels[") || strings.HasPrefix(ref.FieldPath, "metadata.annotations[") {
		return nil
	}
	if !validEnvFieldPaths.Has(ref.FieldPath) {
		return field.ErrorList{field.NotSupported(fldPath.Child("fieldPath"), ref.FieldPath, sets.List(validEnvFieldPaths))}
	}
	return nil
}

// validEnvResources are the container resources an env var may read, besides hugepages.
var validEnvResources = sets.New(
	"limits.cpu", "limits.memory", "limits.ephemeral-storage",
	"requests.cpu", "requests.memory", "requests.ephemeral-storage",
)

func validateResourceFieldRef(ref *v1.ResourceFieldSelector, fldPath *field.Path) field.ErrorList {
	hugePages := strings.HasPrefix(ref.Resource, "requests.hugepages-") || strings.HasPrefix(ref.Resource, "limits.hugepages-")
	switch {
	case ref.Resource == "":
		return field.ErrorList{field.Required(fldPath.Child("resource"), "")}
	case !validEnvResources.Has(ref.Resource) && !hugePages:
		return field.ErrorList{field.NotSupported(fldPath.Child("resource"), ref.Resource, sets.List(validEnvResources))}
	}
	return validateResourceDivisor(ref.Resource, ref.Divisor, hugePages, fldPath.Child("divisor"))
}

var (
	cpuDivisors  = sets.New("1m", "1")
	sizeDivisors = sets.New("1", "1k", "1M", "1G", "1T", "1P", "1E", "1Ki", "1Mi", "1Gi", "1Ti", "1Pi", "1Ei")
)

// validateResourceDivisor: the divisor must be a unit of the resource.
func validateResourceDivisor(name string, divisor resource.Quantity, hugePages bool, fldPath *field.Path) field.ErrorList {
	if divisor.IsZero() {
		return nil
	}
	const sizes = "1, 1k, 1M, 1G, 1T, 1P, 1E, 1Ki, 1Mi, 1Gi, 1Ti, 1Pi, 1Ei"
	var valid sets.Set[string]
	var msg string
	switch _, res, _ := strings.Cut(name, "."); {
	case res == "cpu":
		valid, msg = cpuDivisors, "only divisor's values 1m and 1 are supported with the cpu resource"
	case res == "memory":
		valid, msg = sizeDivisors, "only divisor's values "+sizes+" are supported with the memory resource"
	case res == "ephemeral-storage":
		valid, msg = sizeDivisors, "only divisor's values "+sizes+" are supported with the local ephemeral storage resource"
	case hugePages:
		valid, msg = sizeDivisors, "only divisor's values "+sizes+" are supported with the hugepages resource"
	default:
		return nil
	}
	if !valid.Has(divisor.String()) {
		return field.ErrorList{field.Invalid(fldPath, name, msg)}
	}
	return nil
}

func validateKeySelector(name, key string, fldPath *field.Path) field.ErrorList {
	allErrs := invalidEach(fldPath.Child("name"), name, apivalidation.NameIsDNSSubdomain(name, false))
	if key == "" {
		return append(allErrs, field.Required(fldPath.Child("key"), ""))
	}
	return append(allErrs, invalidEach(fldPath.Child("key"), key, validation.IsConfigMapKey(key))...)
}

func validateEnvFrom(sources []v1.EnvFromSource, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	for i, src := range sources {
		idxPath := fldPath.Index(i)
		if src.Prefix != "" {
			allErrs = append(allErrs, invalidEach(idxPath.Child("prefix"), src.Prefix, validation.IsRelaxedEnvVarName(src.Prefix))...)
		}
		refs := 0
		if src.ConfigMapRef != nil {
			refs++
			allErrs = append(allErrs, validateRefName(src.ConfigMapRef.Name, idxPath.Child("configMapRef", "name"))...)
		}
		if src.SecretRef != nil {
			refs++
			allErrs = append(allErrs, validateRefName(src.SecretRef.Name, idxPath.Child("secretRef", "name"))...)
		}
		if refs == 0 {
			allErrs = append(allErrs, field.Invalid(fldPath, "", "must specify one of: `configMapRef` or `secretRef`"))
		} else if refs > 1 {
			allErrs = append(allErrs, field.Invalid(fldPath, "", "may not have more than one field specified at a time"))
		}
	}
	return allErrs
}

func validateRefName(name string, fldPath *field.Path) field.ErrorList {
	if name == "" {
		return field.ErrorList{field.Required(fldPath, "")}
	}
	return invalidEach(fldPath, name, apivalidation.NameIsDNSSubdomain(name, true))
}

// validateLocalDescendingPath keeps a sub path inside its volume.
func validateLocalDescendingPath(target string, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	if path.IsAbs(target) {
		allErrs = append(allErrs, field.Invalid(fldPath, target, "must be a relative path"))
	}
	allErrs = append(allErrs, validatePathNoBacksteps(target, fldPath)...)
	return allErrs
}

func validatePathNoBacksteps(target string, fldPath *field.Path) field.ErrorList {
	for _, part := range strings.Split(strings.ReplaceAll(target, `\`, "/"), "/") {
		if part == ".." {
			return field.ErrorList{field.Invalid(fldPath, target, "must not contain '..'")}
		}
	}
	return nil
}

var supportedPullPolicies = sets.New(v1.PullAlways, v1.PullIfNotPresent, v1.PullNever)

func validatePullPolicy(policy v1.PullPolicy, fldPath *field.Path) field.ErrorList {
	switch {
	case policy == "":
		return field.ErrorList{field.Required(fldPath, "")}
	case !supportedPullPolicies.Has(policy):
		return field.ErrorList{field.NotSupported(fldPath, policy, sets.List(supportedPullPolicies))}
	}
	return nil
}

var supportedResizeResources = sets.New(v1.ResourceCPU, v1.ResourceMemory)
var supportedResizePolicies = sets.New(v1.NotRequired, v1.RestartContainer)

func validateResizePolicy(policies []v1.ContainerResizePolicy, podRestart v1.RestartPolicy, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	seen := sets.New[v1.ResourceName]()
	for i, p := range policies {
		if seen.Has(p.ResourceName) {
			allErrs = append(allErrs, field.Duplicate(fldPath.Index(i), p.ResourceName))
		}
		seen.Insert(p.ResourceName)
		if !supportedResizeResources.Has(p.ResourceName) {
			allErrs = append(allErrs, field.NotSupported(fldPath, p.ResourceName, sets.List(supportedResizeResources)))
		}
		if !supportedResizePolicies.Has(p.RestartPolicy) {
			allErrs = append(allErrs, field.NotSupported(fldPath, p.RestartPolicy, sets.List(supportedResizePolicies)))
		}
		if podRestart == v1.RestartPolicyNever && p.RestartPolicy != v1.NotRequired {
			allErrs = append(allErrs, field.Invalid(fldPath, p.RestartPolicy, "must be 'NotRequired' when `restartPolicy` is 'Never'"))
		}
	}
	return allErrs
}

func validateSecurityContext(sc *v1.SecurityContext, hostUsers bool, fldPath *field.Path) field.ErrorList {
	if sc == nil {
		return nil
	}
	var allErrs field.ErrorList
	allErrs = append(allErrs, validateProcMount(sc.ProcMount, hostUsers, fldPath.Child("procMount"))...)
	allErrs = append(allErrs, validateSeccompProfile(sc.SeccompProfile, fldPath.Child("seccompProfile"))...)
	allErrs = append(allErrs, validateAppArmorProfile(sc.AppArmorProfile, fldPath.Child("appArmorProfile"))...)
	if sc.RunAsUser != nil {
		allErrs = append(allErrs, invalidEach(fldPath.Child("runAsUser"), *sc.RunAsUser, validation.IsValidUserID(*sc.RunAsUser))...)
	}
	if sc.RunAsGroup != nil {
		allErrs = append(allErrs, invalidEach(fldPath.Child("runAsGroup"), *sc.RunAsGroup, validation.IsValidGroupID(*sc.RunAsGroup))...)
	}
	if sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation {
		if sc.Privileged != nil && *sc.Privileged {
			allErrs = append(allErrs, field.Invalid(fldPath, sc, "cannot set `allowPrivilegeEscalation` to false and `privileged` to true"))
		}
		if sc.Capabilities != nil {
			for _, c := range sc.Capabilities.Add {
				if c == "CAP_SYS_ADMIN" {
					allErrs = append(allErrs, field.Invalid(fldPath, sc, "cannot set `allowPrivilegeEscalation` to false and `capabilities.Add` CAP_SYS_ADMIN"))
				}
			}
		}
	}
	return allErrs
}

// validateQualifiedName reports IsQualifiedName failures on a field.
func validateQualifiedName(value string, fldPath *field.Path) field.ErrorList {
	return invalidEach(fldPath, value, content.IsLabelKey(value))
}
