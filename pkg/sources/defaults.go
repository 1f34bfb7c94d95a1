package sources

import (
	"strings"

	v1 "k8s.io/api/core/v1"
)

// Default values of the v1 API (k8s.io/kubernetes/pkg/apis/core/v1/defaults.go).
const (
	defaultTerminationGracePeriod int64 = 30
	defaultSchedulerName                = "default-scheduler"
	defaultVolumeMode             int32 = 0644
	defaultTokenExpiration        int64 = 3600
)

// setPodDefaults applies the v1 API defaults to a pod read from a manifest. Upstream's
// decoder does this for static pods; pods from the API server arrive with them already,
// and the rest of the kubelet relies on them (pull policy, termination message path,
// probe periods, ...).
func setPodDefaults(pod *v1.Pod) {
	spec := &pod.Spec
	setPodSpecDefaults(spec)
	for i := range spec.InitContainers {
		setContainerDefaults(&spec.InitContainers[i])
		defaultRequestsToLimits(&spec.InitContainers[i].Resources)
	}
	for i := range spec.Containers {
		setContainerDefaults(&spec.Containers[i])
		defaultRequestsToLimits(&spec.Containers[i].Resources)
	}
	for i := range spec.EphemeralContainers {
		c := (*v1.Container)(&spec.EphemeralContainers[i].EphemeralContainerCommon)
		setContainerDefaults(c)
	}
	for i := range spec.Volumes {
		setVolumeDefaults(&spec.Volumes[i])
	}
	roundUpResources(spec.Overhead)
	if spec.HostNetwork {
		// With host networking a container port is a host port.
		defaultHostNetworkPorts(spec.InitContainers)
		defaultHostNetworkPorts(spec.Containers)
	}
}

func setPodSpecDefaults(spec *v1.PodSpec) {
	if spec.DNSPolicy == "" {
		spec.DNSPolicy = v1.DNSClusterFirst
	}
	if spec.RestartPolicy == "" {
		spec.RestartPolicy = v1.RestartPolicyAlways
	}
	if spec.SecurityContext == nil {
		spec.SecurityContext = &v1.PodSecurityContext{}
	}
	if spec.TerminationGracePeriodSeconds == nil {
		period := defaultTerminationGracePeriod
		spec.TerminationGracePeriodSeconds = &period
	}
	if spec.SchedulerName == "" {
		spec.SchedulerName = defaultSchedulerName
	}
	if spec.EnableServiceLinks == nil {
		enable := v1.DefaultEnableServiceLinks
		spec.EnableServiceLinks = &enable
	}
}

func setContainerDefaults(c *v1.Container) {
	if c.ImagePullPolicy == "" {
		c.ImagePullPolicy = defaultPullPolicy(c.Image)
	}
	if c.TerminationMessagePath == "" {
		c.TerminationMessagePath = v1.TerminationMessagePathDefault
	}
	if c.TerminationMessagePolicy == "" {
		c.TerminationMessagePolicy = v1.TerminationMessageReadFile
	}
	for i := range c.Ports {
		if c.Ports[i].Protocol == "" {
			c.Ports[i].Protocol = v1.ProtocolTCP
		}
	}
	for i := range c.Env {
		if src := c.Env[i].ValueFrom; src != nil && src.FieldRef != nil && src.FieldRef.APIVersion == "" {
			src.FieldRef.APIVersion = "v1"
		}
	}
	for _, p := range []*v1.Probe{c.LivenessProbe, c.ReadinessProbe, c.StartupProbe} {
		setProbeDefaults(p)
	}
	if c.Lifecycle != nil {
		for _, h := range []*v1.LifecycleHandler{c.Lifecycle.PostStart, c.Lifecycle.PreStop} {
			if h != nil {
				setHTTPGetDefaults(h.HTTPGet)
			}
		}
	}
	roundUpResources(c.Resources.Limits)
	roundUpResources(c.Resources.Requests)
}

// defaultPullPolicy is Always for the "latest" tag (or no tag and no digest) and
// IfNotPresent otherwise.
func defaultPullPolicy(image string) v1.PullPolicy {
	if imageTag(image) == "latest" {
		return v1.PullAlways
	}
	return v1.PullIfNotPresent
}

// imageTag returns the tag of an image reference, "latest" when it has neither tag nor
// digest, and "" when it has only a digest.
func imageTag(image string) string {
	name, hasDigest := image, false
	if i := strings.Index(name, "@"); i >= 0 {
		name, hasDigest = name[:i], true
	}
	lastPart := name[strings.LastIndex(name, "/")+1:]
	if i := strings.LastIndex(lastPart, ":"); i >= 0 {
		return lastPart[i+1:]
	}
	if hasDigest {
		return ""
	}
	return "latest"
}

func setProbeDefaults(p *v1.Probe) {
	if p == nil {
		return
	}
	if p.TimeoutSeconds == 0 {
		p.TimeoutSeconds = 1
	}
	if p.PeriodSeconds == 0 {
		p.PeriodSeconds = 10
	}
	if p.SuccessThreshold == 0 {
		p.SuccessThreshold = 1
	}
	if p.FailureThreshold == 0 {
		p.FailureThreshold = 3
	}
	setHTTPGetDefaults(p.HTTPGet)
	if p.GRPC != nil && p.GRPC.Service == nil {
		service := ""
		p.GRPC.Service = &service
	}
}

func setHTTPGetDefaults(get *v1.HTTPGetAction) {
	if get == nil {
		return
	}
	if get.Path == "" {
		get.Path = "/"
	}
	if get.Scheme == "" {
		get.Scheme = v1.URISchemeHTTP
	}
}

// defaultRequestsToLimits: a limit without a request means request == limit.
func defaultRequestsToLimits(r *v1.ResourceRequirements) {
	if r.Limits == nil {
		return
	}
	if r.Requests == nil {
		r.Requests = make(v1.ResourceList)
	}
	for name, limit := range r.Limits {
		if _, ok := r.Requests[name]; !ok {
			r.Requests[name] = limit.DeepCopy()
		}
	}
}

// roundUpResources rounds quantities up to milli units, as the API does.
func roundUpResources(list v1.ResourceList) {
	for name, q := range list {
		q.RoundUp(-3)
		list[name] = q
	}
}

func defaultHostNetworkPorts(containers []v1.Container) {
	for i := range containers {
		for j := range containers[i].Ports {
			if containers[i].Ports[j].HostPort == 0 {
				containers[i].Ports[j].HostPort = containers[i].Ports[j].ContainerPort
			}
		}
	}
}

func setVolumeDefaults(vol *v1.Volume) {
	src := &vol.VolumeSource
	if (*src == v1.VolumeSource{}) {
		src.EmptyDir = &v1.EmptyDirVolumeSource{}
	}
	switch {
	case src.HostPath != nil && src.HostPath.Type == nil:
		unset := v1.HostPathUnset
		src.HostPath.Type = &unset
	case src.Secret != nil:
		defaultMode(&src.Secret.DefaultMode)
	case src.ConfigMap != nil:
		defaultMode(&src.ConfigMap.DefaultMode)
	case src.DownwardAPI != nil:
		defaultMode(&src.DownwardAPI.DefaultMode)
		defaultFieldRefs(src.DownwardAPI.Items)
	case src.Projected != nil:
		defaultMode(&src.Projected.DefaultMode)
		setProjectionDefaults(src.Projected.Sources)
	case src.Image != nil && src.Image.PullPolicy == "":
		src.Image.PullPolicy = defaultPullPolicy(src.Image.Reference)
	}
}

func setProjectionDefaults(sources []v1.VolumeProjection) {
	for i := range sources {
		if t := sources[i].ServiceAccountToken; t != nil && t.ExpirationSeconds == nil {
			expiration := defaultTokenExpiration
			t.ExpirationSeconds = &expiration
		}
		if d := sources[i].DownwardAPI; d != nil {
			defaultFieldRefs(d.Items)
		}
	}
}

func defaultFieldRefs(items []v1.DownwardAPIVolumeFile) {
	for i := range items {
		if ref := items[i].FieldRef; ref != nil && ref.APIVersion == "" {
			ref.APIVersion = "v1"
		}
	}
}

func defaultMode(mode **int32) {
	if *mode == nil {
		m := defaultVolumeMode
		*mode = &m
	}
}
