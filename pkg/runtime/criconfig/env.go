package criconfig

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/pkg/runtime/container"
)

// ErrNeedsClusterMode is wrapped by the errors for env vars taken from
// secrets or config maps when there are no EnvSources: standalone nodelet
// has no API server to read them from.
var ErrNeedsClusterMode = errors.New("secret/configmap env sources need cluster mode")

// EnvSources reads the API objects a container's environment refers to (implemented
// in cluster mode by apiobjects.Sources). The objects returned are shared: callers
// must not modify them.
type EnvSources interface {
	// GetSecret and GetConfigMap return the object or the API's error; a missing
	// object is an error for which apierrors.IsNotFound holds.
	GetSecret(ctx context.Context, namespace, name string) (*v1.Secret, error)
	GetConfigMap(ctx context.Context, namespace, name string) (*v1.ConfigMap, error)
	// ListServices returns the services of namespace known so far.
	ListServices(namespace string) ([]*v1.Service, error)
	// ServicesSynced reports whether the services have been read at least once.
	ServicesSynced() bool
}

// MakeEnvironmentVariables resolves the container's environment as upstream's
// kubelet does. Precedence, lowest first: service links, envFrom sources in
// order, then env in order; a later definition of a name replaces an earlier
// one. Literal values have $(VAR) references expanded against everything
// defined before them, service links included. The result lists envFrom and
// env names in the order they first appear, then the service links nothing
// overrode.
//
// Without opts.EnvSources (standalone) there are no service links, and
// secret and config map sources fail with ErrNeedsClusterMode unless marked
// optional, in which case they are skipped.
func MakeEnvironmentVariables(ctx context.Context, pod *v1.Pod, c *v1.Container, opts ContainerOptions) ([]*runtimeapi.KeyValue, error) {
	services, err := serviceEnv(pod, opts)
	if err != nil {
		return nil, err
	}
	objects := newEnvObjects(ctx, pod.Namespace, opts.EnvSources)
	declared := newOrderedEnv()
	for i := range c.EnvFrom {
		if err := addEnvFrom(declared, &c.EnvFrom[i], objects); err != nil {
			return nil, err
		}
	}
	mapping := MappingFuncFor(declared.values, services.values) // sees each variable once it is declared
	for i := range c.Env {
		e := &c.Env[i]
		value, skip, err := envVarValue(pod, c, e, opts, objects, mapping)
		if err != nil {
			return nil, err
		}
		if !skip {
			declared.set(e.Name, value)
		}
	}
	return declared.keyValues(services), nil
}

// addEnvFrom adds every key of an envFrom source, prefixed. A missing
// optional source adds nothing.
func addEnvFrom(env *orderedEnv, from *v1.EnvFromSource, objects *envObjects) error {
	var data map[string]string
	switch {
	case from.ConfigMapRef != nil:
		cm, err := objects.configMap(from.ConfigMapRef.Name, isTrue(from.ConfigMapRef.Optional), "")
		if err != nil || cm == nil {
			return err
		}
		data = cm.Data
	case from.SecretRef != nil:
		secret, err := objects.secret(from.SecretRef.Name, isTrue(from.SecretRef.Optional), "")
		if err != nil || secret == nil {
			return err
		}
		data = make(map[string]string, len(secret.Data))
		for k, v := range secret.Data {
			data[k] = string(v)
		}
	}
	// Keys need no checking: the API server validates them and the prefix
	// (upstream dropped its invalid-name filtering with relaxed env var validation).
	for _, k := range slices.Sorted(maps.Keys(data)) {
		env.set(from.Prefix+k, data[k])
	}
	return nil
}

// envVarValue resolves one variable; skip is true for an optional source
// that does not exist or lacks the key.
func envVarValue(pod *v1.Pod, c *v1.Container, e *v1.EnvVar, opts ContainerOptions, objects *envObjects, mapping func(string) string) (value string, skip bool, err error) {
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
		return configMapKeyValue(from.ConfigMapKeyRef, e.Name, objects)
	case from.SecretKeyRef != nil:
		return secretKeyValue(from.SecretKeyRef, e.Name, objects)
	case from.FileKeyRef != nil:
		return fileKeyValue(pod, from.FileKeyRef, opts.PodDir)
	}
	return "", false, nil
}

func configMapKeyValue(ref *v1.ConfigMapKeySelector, envName string, objects *envObjects) (string, bool, error) {
	optional := isTrue(ref.Optional)
	cm, err := objects.configMap(ref.Name, optional, envName)
	if err != nil || cm == nil {
		return "", true, err
	}
	value, ok := cm.Data[ref.Key]
	if !ok && !optional {
		return "", false, fmt.Errorf("couldn't find key %v in ConfigMap %v/%v", ref.Key, objects.namespace, ref.Name)
	}
	return value, !ok, nil
}

func secretKeyValue(ref *v1.SecretKeySelector, envName string, objects *envObjects) (string, bool, error) {
	optional := isTrue(ref.Optional)
	secret, err := objects.secret(ref.Name, optional, envName)
	if err != nil || secret == nil {
		return "", true, err
	}
	value, ok := secret.Data[ref.Key]
	if !ok && !optional {
		return "", false, fmt.Errorf("couldn't find key %v in Secret %v/%v", ref.Key, objects.namespace, ref.Name)
	}
	return string(value), !ok, nil
}

// envObjects reads the secrets and config maps of one container's
// environment, each at most once, so that all its variables see one version.
type envObjects struct {
	ctx        context.Context
	namespace  string
	sources    EnvSources // nil: standalone
	secrets    map[string]*v1.Secret
	configMaps map[string]*v1.ConfigMap
}

func newEnvObjects(ctx context.Context, namespace string, sources EnvSources) *envObjects {
	return &envObjects{ctx: ctx, namespace: namespace, sources: sources,
		secrets: map[string]*v1.Secret{}, configMaps: map[string]*v1.ConfigMap{}}
}

// secret returns the named secret, or nil and no error when it is optional
// and missing. envName, when set, names the variable that asked, for the
// standalone error.
func (o *envObjects) secret(name string, optional bool, envName string) (*v1.Secret, error) {
	if s, ok := o.secrets[name]; ok {
		return s, nil
	}
	if o.sources == nil {
		return nil, o.standaloneError("secret", name, optional, envName)
	}
	s, err := o.sources.GetSecret(o.ctx, o.namespace, name)
	if err != nil {
		return nil, missingIsOK(err, optional)
	}
	o.secrets[name] = s
	return s, nil
}

// configMap is secret's twin for config maps.
func (o *envObjects) configMap(name string, optional bool, envName string) (*v1.ConfigMap, error) {
	if cm, ok := o.configMaps[name]; ok {
		return cm, nil
	}
	if o.sources == nil {
		return nil, o.standaloneError("configMap", name, optional, envName)
	}
	cm, err := o.sources.GetConfigMap(o.ctx, o.namespace, name)
	if err != nil {
		return nil, missingIsOK(err, optional)
	}
	o.configMaps[name] = cm
	return cm, nil
}

// missingIsOK drops a NotFound error for an optional source; any other
// error fails even an optional source, as upstream.
func missingIsOK(err error, optional bool) error {
	if optional && apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

func (o *envObjects) standaloneError(kind, name string, optional bool, envName string) error {
	if optional {
		return nil
	}
	if envName != "" {
		return fmt.Errorf("couldn't get %s %s/%s for env var %q: %w", kind, o.namespace, name, envName, ErrNeedsClusterMode)
	}
	return fmt.Errorf("couldn't get %s %s/%s: %w", kind, o.namespace, name, ErrNeedsClusterMode)
}

// orderedEnv is a set of variables that remembers the order names were
// first set in.
type orderedEnv struct {
	order  []string
	values map[string]string
}

func newOrderedEnv() *orderedEnv { return &orderedEnv{values: map[string]string{}} }

func (e *orderedEnv) set(name, value string) {
	if _, seen := e.values[name]; !seen {
		e.order = append(e.order, name)
	}
	e.values[name] = value
}

// keyValues lists e's variables, then those of below that e does not
// define.
func (e *orderedEnv) keyValues(below *orderedEnv) []*runtimeapi.KeyValue {
	out := make([]*runtimeapi.KeyValue, 0, len(e.order)+len(below.order))
	for _, name := range e.order {
		out = append(out, &runtimeapi.KeyValue{Key: name, Value: []byte(e.values[name])})
	}
	for _, name := range below.order {
		if _, overridden := e.values[name]; !overridden {
			out = append(out, &runtimeapi.KeyValue{Key: name, Value: []byte(below.values[name])})
		}
	}
	return out
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
	return PodMetadataField(pod, fs.FieldPath)
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
	res := withDefaultLimits(pod, target.Resources, opts.MachineMemory)
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

// withDefaultLimits fills unset or zero CPU and memory limits with the pod's
// (pod-level resources), else the node's capacity, as upstream does with
// allocatable for the downward API.
func withDefaultLimits(pod *v1.Pod, r v1.ResourceRequirements, machineMemory int64) v1.ResourceRequirements {
	defaults := v1.ResourceList{v1.ResourceCPU: *resource.NewQuantity(int64(goruntime.NumCPU()), resource.DecimalSI)}
	if machineMemory > 0 {
		defaults[v1.ResourceMemory] = *resource.NewQuantity(machineMemory, resource.BinarySI)
	}
	if resourcehelper.IsPodLevelLimitsSet(pod) {
		for _, name := range []v1.ResourceName{v1.ResourceCPU, v1.ResourceMemory} {
			if q := pod.Spec.Resources.Limits[name]; !q.IsZero() {
				defaults[name] = q.DeepCopy()
			}
		}
	}
	out := *r.DeepCopy()
	if out.Limits == nil {
		out.Limits = v1.ResourceList{}
	}
	for name, q := range defaults {
		if limit, ok := out.Limits[name]; !ok || limit.IsZero() {
			out.Limits[name] = q
		}
	}
	return out
}
