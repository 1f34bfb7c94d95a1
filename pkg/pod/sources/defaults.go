package sources

import (
	v1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/pkg/runtime/images"
)

// Default values of the v1 API (k8s.io/kubernetes/pkg/apis/core/v1/defaults.go).
const (
	defaultTerminationGracePeriod int64 = 30
	defaultSchedulerName                = "default-scheduler"
	defaultVolumeMode             int32 = 0644
	defaultTokenExpiration        int64 = 3600
)

// setPodDefaults applies the v1 API defaults to a pod read from a manifest, as upstream's
// decoder does for static pods (SetObjectDefaults_Pod, with the default feature gates);
// pods from the API server arrive with them already, and the rest of the kubelet relies
// on them (pull policy, termination message path, probe periods, ...). The result must
// be upstream's to the last field, nil and empty apart: it is hashed into the static
// pod's UID. The steps run in upstream's order, which matters for quantities (requests
// are copied from limits before either is rounded).
func setPodDefaults(pod *v1.Pod) {
	setPodOnlyDefaults(pod)
	spec := &pod.Spec
	setPodSpecDefaults(spec)
	for i := range spec.Volumes {
		setVolumeDefaults(&spec.Volumes[i])
	}
	for i := range spec.InitContainers {
		setContainerDefaults(&spec.InitContainers[i])
	}
	for i := range spec.Containers {
		setContainerDefaults(&spec.Containers[i])
	}
	for i := range spec.EphemeralContainers {
		setContainerDefaults((*v1.Container)(&spec.EphemeralContainers[i].EphemeralContainerCommon))
	}
	roundUpResources(spec.Overhead)
	if spec.Resources != nil {
		roundUpRequirements(spec.Resources)
	}
	setPodStatusDefaults(&pod.Status)
}

// setPodOnlyDefaults is upstream's SetDefaults_Pod: the defaults a Pod gets and a pod
// template does not. With PodLevelResourcesFixDefaulting on (the default) pod-level
// requests are not defaulted here; with H2CContainerProbe off (the default) HTTP probes
// get no protocol.
func setPodOnlyDefaults(pod *v1.Pod) {
	spec := &pod.Spec
	if p := spec.TerminationGracePeriodSeconds; p != nil && *p < 0 {
		one := int64(1)
		spec.TerminationGracePeriodSeconds = &one
	}
	for i := range spec.Containers {
		defaultRequestsToLimits(&spec.Containers[i].Resources)
	}
	for i := range spec.InitContainers {
		defaultRequestsToLimits(&spec.InitContainers[i].Resources)
	}
	if spec.EnableServiceLinks == nil {
		enable := v1.DefaultEnableServiceLinks
		spec.EnableServiceLinks = &enable
	}
	if spec.HostNetwork {
		// With host networking a container port is a host port.
		defaultHostNetworkPorts(spec.Containers)
		defaultHostNetworkPorts(spec.InitContainers)
	}
}

func setPodSpecDefaults(spec *v1.PodSpec) {
	// serviceAccount is the deprecated name of serviceAccountName; the two are kept equal.
	if spec.ServiceAccountName == "" {
		spec.ServiceAccountName = spec.DeprecatedServiceAccount
	}
	spec.DeprecatedServiceAccount = spec.ServiceAccountName
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
}

func setContainerDefaults(c *v1.Container) {
	if c.ImagePullPolicy == "" {
		c.ImagePullPolicy = images.DefaultPullPolicy(c.Image)
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
		setEnvSourceDefaults(c.Env[i].ValueFrom)
	}
	roundUpRequirements(&c.Resources)
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
}

func setEnvSourceDefaults(src *v1.EnvVarSource) {
	if src == nil {
		return
	}
	setFieldRefDefaults(src.FieldRef)
	if ref := src.FileKeyRef; ref != nil && ref.Optional == nil {
		optional := false
		ref.Optional = &optional
	}
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

func roundUpRequirements(r *v1.ResourceRequirements) {
	roundUpResources(r.Limits)
	roundUpResources(r.Requests)
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
	if src.Image != nil && src.Image.PullPolicy == "" {
		src.Image.PullPolicy = images.DefaultPullPolicy(src.Image.Reference)
	}
	if src.HostPath != nil && src.HostPath.Type == nil {
		unset := v1.HostPathUnset
		src.HostPath.Type = &unset
	}
	if src.Secret != nil {
		defaultMode(&src.Secret.DefaultMode)
	}
	if src.ConfigMap != nil {
		defaultMode(&src.ConfigMap.DefaultMode)
	}
	if src.DownwardAPI != nil {
		defaultMode(&src.DownwardAPI.DefaultMode)
		setDownwardAPIDefaults(src.DownwardAPI.Items)
	}
	if src.Projected != nil {
		defaultMode(&src.Projected.DefaultMode)
		setProjectionDefaults(src.Projected.Sources)
	}
	if src.Ephemeral != nil && src.Ephemeral.VolumeClaimTemplate != nil {
		claim := &src.Ephemeral.VolumeClaimTemplate.Spec
		if claim.VolumeMode == nil {
			mode := v1.PersistentVolumeFilesystem
			claim.VolumeMode = &mode
		}
		roundUpResources(claim.Resources.Limits)
		roundUpResources(claim.Resources.Requests)
	}
	setNetworkVolumeDefaults(src)
}

// setNetworkVolumeDefaults fills in the in-tree network volumes' defaults. The kubelet
// mounts none of these, but they enter a static pod's UID.
func setNetworkVolumeDefaults(src *v1.VolumeSource) {
	if src.ISCSI != nil && src.ISCSI.ISCSIInterface == "" {
		src.ISCSI.ISCSIInterface = "default"
	}
	if rbd := src.RBD; rbd != nil {
		defaultString(&rbd.RBDPool, "rbd")
		defaultString(&rbd.RadosUser, "admin")
		defaultString(&rbd.Keyring, "/etc/ceph/keyring")
	}
	if disk := src.AzureDisk; disk != nil {
		if disk.CachingMode == nil {
			mode := v1.AzureDataDiskCachingReadWrite
			disk.CachingMode = &mode
		}
		if disk.FSType == nil {
			fsType := "ext4"
			disk.FSType = &fsType
		}
		if disk.ReadOnly == nil {
			readOnly := false
			disk.ReadOnly = &readOnly
		}
		if disk.Kind == nil {
			kind := v1.AzureSharedBlobDisk
			disk.Kind = &kind
		}
	}
	if sio := src.ScaleIO; sio != nil {
		defaultString(&sio.StorageMode, "ThinProvisioned")
		defaultString(&sio.FSType, "xfs")
	}
}

func defaultString(s *string, value string) {
	if *s == "" {
		*s = value
	}
}

func setProjectionDefaults(sources []v1.VolumeProjection) {
	for i := range sources {
		if d := sources[i].DownwardAPI; d != nil {
			setDownwardAPIDefaults(d.Items)
		}
		if t := sources[i].ServiceAccountToken; t != nil && t.ExpirationSeconds == nil {
			expiration := defaultTokenExpiration
			t.ExpirationSeconds = &expiration
		}
	}
}

func setDownwardAPIDefaults(items []v1.DownwardAPIVolumeFile) {
	for i := range items {
		setFieldRefDefaults(items[i].FieldRef)
	}
}

func setFieldRefDefaults(ref *v1.ObjectFieldSelector) {
	if ref != nil && ref.APIVersion == "" {
		ref.APIVersion = "v1"
	}
}

func defaultMode(mode **int32) {
	if *mode == nil {
		m := defaultVolumeMode
		*mode = &m
	}
}

// setPodStatusDefaults keeps status.podIP and status.podIPs in agreement, podIP winning.
// It also rounds the status' quantities, as upstream does for whatever a manifest puts
// there.
func setPodStatusDefaults(status *v1.PodStatus) {
	hasIP, hasIPs := status.PodIP != "", len(status.PodIPs) > 0
	switch {
	case hasIP && (!hasIPs || status.PodIPs[0].IP != status.PodIP):
		status.PodIPs = []v1.PodIP{{IP: status.PodIP}}
	case !hasIP && hasIPs:
		status.PodIP = status.PodIPs[0].IP
	}
	for _, statuses := range [][]v1.ContainerStatus{status.InitContainerStatuses, status.ContainerStatuses, status.EphemeralContainerStatuses} {
		for i := range statuses {
			roundUpResources(statuses[i].AllocatedResources)
			if statuses[i].Resources != nil {
				roundUpRequirements(statuses[i].Resources)
			}
		}
	}
	roundUpResources(status.AllocatedResources)
	if status.Resources != nil {
		roundUpRequirements(status.Resources)
	}
}
