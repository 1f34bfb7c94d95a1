// Package criconfig turns a v1.Pod into the CRI configs nodelet hands the
// runtime: the PodSandboxConfig, and one ContainerConfig per container. It
// follows the kubelet's kuberuntime package (generatePodSandboxConfig,
// generateContainerConfig and their Linux halves), so containers made by
// nodelet carry the same labels, annotations, log paths, resources and
// security settings as containers made by the kubelet.
package criconfig

import (
	"encoding/json"
	"strconv"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	kubelettypes "k8s.io/kubelet/pkg/types"

	"github.com/nodelet/nodelet/pkg/runtime/container"
)

// Label and annotation keys. They are the kubelet's own, so that a
// container's owner can be found, and the container stopped, from what the
// runtime stores about it alone (for example after a restart, when the pod
// spec is gone).
const (
	PodNameLabel       = kubelettypes.KubernetesPodNameLabel       // "io.kubernetes.pod.name"
	PodNamespaceLabel  = kubelettypes.KubernetesPodNamespaceLabel  // "io.kubernetes.pod.namespace"
	PodUIDLabel        = kubelettypes.KubernetesPodUIDLabel        // "io.kubernetes.pod.uid"
	ContainerNameLabel = kubelettypes.KubernetesContainerNameLabel // "io.kubernetes.container.name"

	// The rest are container annotations (upstream still calls them labels).
	PodDeletionGracePeriodLabel            = "io.kubernetes.pod.deletionGracePeriod"
	PodTerminationGracePeriodLabel         = "io.kubernetes.pod.terminationGracePeriod"
	ContainerHashLabel                     = "io.kubernetes.container.hash"
	ContainerRestartCountLabel             = "io.kubernetes.container.restartCount"
	ContainerTerminationMessagePathLabel   = "io.kubernetes.container.terminationMessagePath"
	ContainerTerminationMessagePolicyLabel = "io.kubernetes.container.terminationMessagePolicy"
	ContainerPreStopHandlerLabel           = "io.kubernetes.container.preStopHandler"
	ContainerPortsLabel                    = "io.kubernetes.container.ports"
)

// LabeledPodSandboxInfo is what a sandbox's labels say about its pod.
type LabeledPodSandboxInfo struct {
	Labels       map[string]string // the pod's own labels, without the io.kubernetes.pod.* keys
	PodName      string
	PodNamespace string
	PodUID       types.UID
}

// LabeledContainerInfo is what a container's labels say about it.
type LabeledContainerInfo struct {
	ContainerName string
	PodName       string
	PodNamespace  string
	PodUID        types.UID
}

// AnnotatedContainerInfo is what a container's annotations say about it:
// enough to stop it properly without the pod spec.
type AnnotatedContainerInfo struct {
	Hash                      uint64
	RestartCount              int
	PodDeletionGracePeriod    *int64
	PodTerminationGracePeriod *int64
	TerminationMessagePath    string
	TerminationMessagePolicy  v1.TerminationMessagePolicy
	PreStopHandler            *v1.LifecycleHandler
	ContainerPorts            []v1.ContainerPort
}

// NewPodLabels returns the sandbox labels: the pod's labels plus its name,
// namespace and UID.
func NewPodLabels(pod *v1.Pod) map[string]string {
	labels := make(map[string]string, len(pod.Labels)+3)
	for k, v := range pod.Labels {
		labels[k] = v
	}
	labels[PodNameLabel] = pod.Name
	labels[PodNamespaceLabel] = pod.Namespace
	labels[PodUIDLabel] = string(pod.UID)
	return labels
}

// NewPodAnnotations returns the sandbox annotations: the pod's annotations.
func NewPodAnnotations(pod *v1.Pod) map[string]string {
	return pod.Annotations
}

// NewContainerLabels returns the container labels. Only identity goes into
// labels; the pod's own labels are left on the sandbox.
func NewContainerLabels(c *v1.Container, pod *v1.Pod) map[string]string {
	return map[string]string{
		PodNameLabel:       pod.Name,
		PodNamespaceLabel:  pod.Namespace,
		PodUIDLabel:        string(pod.UID),
		ContainerNameLabel: c.Name,
	}
}

// NewContainerAnnotations returns the container annotations: the spec hash,
// restart count, grace periods, termination message settings, and the
// preStop hook and ports as JSON, which killing the container needs.
func NewContainerAnnotations(c *v1.Container, pod *v1.Pod, restartCount int) map[string]string {
	a := map[string]string{
		ContainerHashLabel:                     strconv.FormatUint(container.HashContainer(c), 16),
		ContainerRestartCountLabel:             strconv.Itoa(restartCount),
		ContainerTerminationMessagePathLabel:   c.TerminationMessagePath,
		ContainerTerminationMessagePolicyLabel: string(c.TerminationMessagePolicy),
	}
	if pod.DeletionGracePeriodSeconds != nil {
		a[PodDeletionGracePeriodLabel] = strconv.FormatInt(*pod.DeletionGracePeriodSeconds, 10)
	}
	if pod.Spec.TerminationGracePeriodSeconds != nil {
		a[PodTerminationGracePeriodLabel] = strconv.FormatInt(*pod.Spec.TerminationGracePeriodSeconds, 10)
	}
	if c.Lifecycle != nil && c.Lifecycle.PreStop != nil {
		putJSON(a, ContainerPreStopHandlerLabel, c.Lifecycle.PreStop, c, pod)
	}
	if len(c.Ports) > 0 {
		putJSON(a, ContainerPortsLabel, c.Ports, c, pod)
	}
	return a
}

func putJSON(a map[string]string, key string, value any, c *v1.Container, pod *v1.Pod) {
	raw, err := json.Marshal(value)
	if err != nil {
		klog.ErrorS(err, "Unable to marshal container annotation", "annotation", key, "containerName", c.Name, "pod", klog.KObj(pod))
		return
	}
	a[key] = string(raw)
}

// GetPodSandboxInfoFromLabels reads a sandbox's labels back.
func GetPodSandboxInfoFromLabels(labels map[string]string) *LabeledPodSandboxInfo {
	info := &LabeledPodSandboxInfo{
		Labels:       make(map[string]string),
		PodName:      labels[PodNameLabel],
		PodNamespace: labels[PodNamespaceLabel],
		PodUID:       types.UID(labels[PodUIDLabel]),
	}
	for k, v := range labels {
		if k != PodNameLabel && k != PodNamespaceLabel && k != PodUIDLabel {
			info.Labels[k] = v
		}
	}
	return info
}

// GetContainerInfoFromLabels reads a container's labels back. Missing keys
// give empty values: old or foreign containers may lack them.
func GetContainerInfoFromLabels(labels map[string]string) *LabeledContainerInfo {
	return &LabeledContainerInfo{
		ContainerName: labels[ContainerNameLabel],
		PodName:       labels[PodNameLabel],
		PodNamespace:  labels[PodNamespaceLabel],
		PodUID:        types.UID(labels[PodUIDLabel]),
	}
}

// GetContainerInfoFromAnnotations reads a container's annotations back.
// Unparsable values are logged and left zero, as upstream does: a damaged
// annotation must not stop the container from being managed.
func GetContainerInfoFromAnnotations(annotations map[string]string) *AnnotatedContainerInfo {
	info := &AnnotatedContainerInfo{
		TerminationMessagePath:   annotations[ContainerTerminationMessagePathLabel],
		TerminationMessagePolicy: v1.TerminationMessagePolicy(annotations[ContainerTerminationMessagePolicyLabel]),
	}
	var err error
	if v, ok := annotations[ContainerHashLabel]; ok {
		if info.Hash, err = strconv.ParseUint(v, 16, 64); err != nil {
			logBadAnnotation(err, ContainerHashLabel, annotations)
		}
	}
	if v, ok := annotations[ContainerRestartCountLabel]; ok {
		if info.RestartCount, err = strconv.Atoi(v); err != nil {
			logBadAnnotation(err, ContainerRestartCountLabel, annotations)
		}
	}
	info.PodDeletionGracePeriod = int64Annotation(annotations, PodDeletionGracePeriodLabel)
	info.PodTerminationGracePeriod = int64Annotation(annotations, PodTerminationGracePeriodLabel)

	preStop := &v1.LifecycleHandler{}
	if jsonAnnotation(annotations, ContainerPreStopHandlerLabel, preStop) {
		info.PreStopHandler = preStop
	}
	var ports []v1.ContainerPort
	if jsonAnnotation(annotations, ContainerPortsLabel, &ports) {
		info.ContainerPorts = ports
	}
	return info
}

func int64Annotation(annotations map[string]string, key string) *int64 {
	v, ok := annotations[key]
	if !ok {
		return nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		logBadAnnotation(err, key, annotations)
		return nil
	}
	return &n
}

// jsonAnnotation decodes the annotation into value and reports whether it
// was present and valid.
func jsonAnnotation(annotations map[string]string, key string, value any) bool {
	v, ok := annotations[key]
	if !ok {
		return false
	}
	if err := json.Unmarshal([]byte(v), value); err != nil {
		logBadAnnotation(err, key, annotations)
		return false
	}
	return true
}

func logBadAnnotation(err error, key string, annotations map[string]string) {
	klog.ErrorS(err, "Unable to get label value from annotations", "label", key, "annotations", annotations)
}
