package criconfig

import (
	"errors"
	"fmt"
	"math"
	goruntime "runtime"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/pkg/container"
)

// ErrNeedsClusterMode is wrapped by the errors for env vars taken from
// secrets or config maps: standalone nodelet has no API server to read
// them from.
var ErrNeedsClusterMode = errors.New("secret/configmap env sources need cluster mode")

// ErrUserNamespacesNotSupported refuses pods with hostUsers: false, which nodelet cannot
// honour yet.
var ErrUserNamespacesNotSupported = errors.New("user namespaces (hostUsers: false) are not supported by nodelet yet")

// MakeEnvironmentVariables resolves the container's environment in
// declaration order: literal values with $(VAR) references expanded against
// the variables declared before them, and downward API values (fieldRef,
// resourceFieldRef). A name declared twice keeps its first position and its
// last value. Secret and config map sources fail with ErrNeedsClusterMode
// unless marked optional, in which case they are skipped like a missing
// optional source upstream. Service links are not added: standalone nodelet
// has no services.
func MakeEnvironmentVariables(pod *v1.Pod, c *v1.Container, opts ContainerOptions) ([]*runtimeapi.KeyValue, error) {
	if err := checkEnvFrom(pod, c); err != nil {
		return nil, err
	}
	values := map[string]string{}
	var order []string
	mapping := MappingFuncFor(values) // sees each variable once it is declared
	for i := range c.Env {
		e := &c.Env[i]
		value, skip, err := envVarValue(pod, c, e, opts, mapping)
		if err != nil {
			return nil, err
		}
		if skip {
			continue
		}
		if _, seen := values[e.Name]; !seen {
			order = append(order, e.Name)
		}
		values[e.Name] = value
	}
	envs := make([]*runtimeapi.KeyValue, len(order))
	for i, name := range order {
		envs[i] = &runtimeapi.KeyValue{Key: name, Value: []byte(values[name])}
	}
	return envs, nil
}

func checkEnvFrom(pod *v1.Pod, c *v1.Container) error {
	for _, from := range c.EnvFrom {
		switch {
		case from.ConfigMapRef != nil && !isTrue(from.ConfigMapRef.Optional):
			return fmt.Errorf("couldn't get configMap %s/%s: %w", pod.Namespace, from.ConfigMapRef.Name, ErrNeedsClusterMode)
		case from.SecretRef != nil && !isTrue(from.SecretRef.Optional):
			return fmt.Errorf("couldn't get secret %s/%s: %w", pod.Namespace, from.SecretRef.Name, ErrNeedsClusterMode)
		}
	}
	return nil
}

// envVarValue resolves one variable; skip is true for an optional source
// that cannot be read.
func envVarValue(pod *v1.Pod, c *v1.Container, e *v1.EnvVar, opts ContainerOptions, mapping func(string) string) (value string, skip bool, err error) {
	if e.Value != "" {
		return Expand(e.Value, mapping), false, nil
	}
	from := e.ValueFrom
	switch {
	case from == nil:
		return "", false, nil
	case from.FieldRef != nil:
		value, err = podFieldValue(pod, from.FieldRef, opts)
		return value, false, err
	case from.ResourceFieldRef != nil:
		value, err = containerResourceValue(pod, c, from.ResourceFieldRef, opts)
		return value, false, err
	case from.ConfigMapKeyRef != nil:
		if isTrue(from.ConfigMapKeyRef.Optional) {
			return "", true, nil
		}
		return "", false, fmt.Errorf("couldn't get configMap %s/%s for env var %q: %w", pod.Namespace, from.ConfigMapKeyRef.Name, e.Name, ErrNeedsClusterMode)
	case from.SecretKeyRef != nil:
		if isTrue(from.SecretKeyRef.Optional) {
			return "", true, nil
		}
		return "", false, fmt.Errorf("couldn't get secret %s/%s for env var %q: %w", pod.Namespace, from.SecretKeyRef.Name, e.Name, ErrNeedsClusterMode)
	}
	return "", false, nil
}

func isTrue(b *bool) bool { return b != nil && *b }

// podFieldValue resolves a downward API fieldRef.
func podFieldValue(pod *v1.Pod, fs *v1.ObjectFieldSelector, opts ContainerOptions) (string, error) {
	if fs.APIVersion != "" && fs.APIVersion != "v1" {
		return "", fmt.Errorf("unsupported pod version: %s", fs.APIVersion)
	}
	podIP, podIPs := opts.PodIP, opts.PodIPs
	if len(podIPs) > 0 {
		podIP = podIPs[0]
	} else if podIP != "" {
		podIPs = []string{podIP}
	}
	switch fs.FieldPath {
	case "spec.nodeName", "spec.host": // spec.host is the old name
		if pod.Spec.NodeName == "" { // a static pod not yet bound by its source
			return opts.NodeName, nil
		}
		return pod.Spec.NodeName, nil
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, nil
	case "status.hostIP":
		if len(opts.HostIPs) == 0 {
			return "", errors.New("status.hostIP: the node's IP is not known")
		}
		return opts.HostIPs[0], nil
	case "status.hostIPs":
		if len(opts.HostIPs) == 0 {
			return "", errors.New("status.hostIPs: the node's IPs are not known")
		}
		return strings.Join(opts.HostIPs, ","), nil
	case "status.podIP":
		return podIP, nil
	case "status.podIPs":
		return strings.Join(podIPs, ","), nil
	}
	return podMetadataField(pod, fs.FieldPath)
}

// containerResourceValue resolves a downward API resourceFieldRef. Limits
// that are not set read as the node's allocatable, taken here to be its
// memory and CPU count.
func containerResourceValue(pod *v1.Pod, c *v1.Container, fs *v1.ResourceFieldSelector, opts ContainerOptions) (string, error) {
	target := c
	if fs.ContainerName != "" {
		if target = container.GetContainerSpec(pod, fs.ContainerName); target == nil {
			return "", fmt.Errorf("container %s not found", fs.ContainerName)
		}
	}
	res := withDefaultLimits(target.Resources, opts.MachineMemory)
	divisor := resource.MustParse("1")
	if !fs.Divisor.IsZero() {
		divisor = fs.Divisor
	}
	kind, name, _ := strings.Cut(fs.Resource, ".")
	list, ok := map[string]v1.ResourceList{"limits": res.Limits, "requests": res.Requests}[kind]
	if !ok {
		return "", fmt.Errorf("unsupported container resource : %v", fs.Resource)
	}
	switch v1.ResourceName(name) {
	case v1.ResourceCPU:
		q := list[v1.ResourceCPU]
		return ceilDiv(float64(q.MilliValue()), float64(divisor.MilliValue())), nil
	case v1.ResourceMemory, v1.ResourceEphemeralStorage:
		q := list[v1.ResourceName(name)]
		return ceilDiv(float64(q.Value()), float64(divisor.Value())), nil
	}
	if strings.HasPrefix(name, v1.ResourceHugePagesPrefix) {
		q := list[v1.ResourceName(name)]
		return ceilDiv(float64(q.Value()), float64(divisor.Value())), nil
	}
	return "", fmt.Errorf("unsupported container resource : %v", fs.Resource)
}

func ceilDiv(value, divisor float64) string {
	return strconv.FormatInt(int64(math.Ceil(value/divisor)), 10)
}

// withDefaultLimits fills unset or zero CPU and memory limits with the
// node's capacity, as upstream does with allocatable for the downward API.
func withDefaultLimits(r v1.ResourceRequirements, machineMemory int64) v1.ResourceRequirements {
	out := *r.DeepCopy()
	if out.Limits == nil {
		out.Limits = v1.ResourceList{}
	}
	if q, ok := out.Limits[v1.ResourceCPU]; !ok || q.IsZero() {
		out.Limits[v1.ResourceCPU] = *resource.NewQuantity(int64(goruntime.NumCPU()), resource.DecimalSI)
	}
	if q, ok := out.Limits[v1.ResourceMemory]; (!ok || q.IsZero()) && machineMemory > 0 {
		out.Limits[v1.ResourceMemory] = *resource.NewQuantity(machineMemory, resource.BinarySI)
	}
	return out
}
