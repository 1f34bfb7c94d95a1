// Package status turns the runtime's view of a pod into its API status (upstream's
// generateAPIPodStatus and pkg/kubelet/status) and keeps the latest status of every pod
// (upstream's status manager).
package status

import (
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	utilnet "k8s.io/utils/net"

	"github.com/nodelet/nodelet/pkg/pod/prober/results"
	"github.com/nodelet/nodelet/pkg/qos"
	"github.com/nodelet/nodelet/pkg/runtime/container"
)

// GenerateOptions carries what GenerateAPIPodStatus needs beyond the pod and the runtime.
type GenerateOptions struct {
	// PodIsTerminal says the pod worker decided the pod is terminal: its containers will
	// not be restarted whatever the restart policy, so all-stopped means Succeeded/Failed.
	PodIsTerminal bool
	// HostIPs are the node's IPs, primary first. They become hostIP(s), the podIP(s) of
	// host-network pods, and pick the preferred IP family of podIPs.
	HostIPs []string
	// Readiness and Startup are the probe results; either may be nil (no results yet).
	Readiness, Startup results.Manager
	// KubeletStart is when this kubelet process started. A container already running
	// then keeps the readiness the pod showed until its first readiness probe. Optional.
	KubeletStart time.Time
	// BackOffReasons returns the last sync's failure for a container to restart
	// (CrashLoopBackOff, ErrImagePull, ImagePullBackOff, CreateContainerConfigError, ...);
	// typically ReasonCache.Get bound to the pod's UID. Optional.
	BackOffReasons func(containerName string) (reason, message string, ok bool)
	// ShouldEvict lets a kubelet module fail the pod with its own reason and message, as
	// upstream's PodSyncHandlers do (e.g. activeDeadlineSeconds). Optional.
	ShouldEvict func(pod *v1.Pod) (evict bool, reason, message string)
	// RuntimeSupportsRecursiveReadOnlyMounts says the pod's runtime handler supports
	// recursive read-only mounts; it resolves recursiveReadOnly: IfPossible.
	RuntimeSupportsRecursiveReadOnlyMounts bool
	// Now stamps startTime when the pod has none yet; time.Now when nil.
	Now func() time.Time
	// ResizeConditions are the pod's PodResizePending and PodResizeInProgress conditions
	// (ResizeConditions.List; none once the pod is terminal). Optional.
	ResizeConditions []v1.PodCondition
	// ActuatedResources returns the resources last applied to a container (the runtime
	// manager's record): a container status's resources take from it what the runtime
	// does not report, as upstream. Optional.
	ActuatedResources func(containerName string) (v1.ResourceRequirements, bool)
	// PodCgroup reads back the pod's cgroup for the pod-level status.resources of a pod
	// the API shows Running. Optional: without it they are the allocated resources.
	PodCgroup PodCgroupReader
}

// GenerateAPIPodStatus computes the pod's API status from the runtime's podStatus, as
// upstream's generateAPIPodStatus does. oldStatus is the status manager's cached status for
// the pod, or pod.Status when it has none. podStatus may be nil before the runtime was read.
func GenerateAPIPodStatus(pod *v1.Pod, podStatus *container.PodStatus, oldStatus v1.PodStatus, opts GenerateOptions) v1.PodStatus {
	if podStatus == nil {
		podStatus = &container.PodStatus{ID: pod.UID, Name: pod.Name, Namespace: pod.Namespace}
	}
	s := convertStatus(pod, podStatus, oldStatus, &opts)

	all := append(append([]v1.ContainerStatus{}, s.ContainerStatuses...), s.InitContainerStatuses...)
	s.Phase = getPhase(pod, all, opts.PodIsTerminal, hasAnyActiveRegularContainerStarted(&pod.Spec, podStatus))
	mergeTerminalPhase(pod, &s, oldStatus)
	if s.Phase == oldStatus.Phase {
		// Keep the reason and message that came with the phase.
		s.Reason, s.Message = oldStatus.Reason, oldStatus.Message
		if s.Reason == "" {
			s.Reason = pod.Status.Reason
		}
		if s.Message == "" {
			s.Message = pod.Status.Message
		}
	}
	if opts.ShouldEvict != nil {
		if evict, reason, message := opts.ShouldEvict(pod); evict {
			s.Phase, s.Reason, s.Message = v1.PodFailed, reason, message
		}
	}
	if isTerminal(pod.Status.Phase) && s.Phase != pod.Status.Phase {
		// The API already shows a terminal phase; pods never leave one.
		klog.ErrorS(nil, "Pod attempted illegal phase transition", "pod", klog.KObj(pod), "originalStatusPhase", pod.Status.Phase, "apiStatusPhase", s.Phase)
		s.Phase = pod.Status.Phase
	}

	probeResults{readiness: opts.Readiness, startup: opts.Startup, kubeletStart: opts.KubeletStart}.apply(pod, &s)
	s.Conditions = generateConditions(pod, podStatus, oldStatus, &s, opts.ResizeConditions)
	setHostIPs(pod, &s, opts.HostIPs)
	s.StartTime = startTime(oldStatus, opts.Now)
	return s
}

// convertStatus is the conversion: IPs, QoS class, all container statuses and the
// pod-level resources (read back from the pod's cgroup).
func convertStatus(pod *v1.Pod, podStatus *container.PodStatus, oldStatus v1.PodStatus, opts *GenerateOptions) v1.PodStatus {
	var s v1.PodStatus
	for _, ip := range sortPodIPs(podStatus.IPs, opts.HostIPs) {
		s.PodIPs = append(s.PodIPs, v1.PodIP{IP: ip})
	}
	if len(s.PodIPs) > 0 {
		s.PodIP = s.PodIPs[0].IP
	}
	s.QOSClass = qos.GetPodQOS(pod)

	cv := &converter{pod: pod, podStatus: podStatus, opts: opts, hasInitContainers: len(pod.Spec.InitContainers) > 0}
	s.ContainerStatuses = cv.convert(pod.Spec.Containers, oldStatus.ContainerStatuses, false)
	s.InitContainerStatuses = cv.convert(pod.Spec.InitContainers, oldStatus.InitContainerStatuses, true)
	var ephemeral []v1.Container
	for i := range pod.Spec.EphemeralContainers {
		ephemeral = append(ephemeral, v1.Container(pod.Spec.EphemeralContainers[i].EphemeralContainerCommon))
	}
	s.EphemeralContainerStatuses = cv.convert(ephemeral, oldStatus.EphemeralContainerStatuses, false)
	s.Resources = podLevelResources(pod, oldStatus, opts.PodCgroup)
	s.AllocatedResources = podAllocatedResources(pod)
	return s
}

// mergeTerminalPhase keeps a terminal phase already recorded by the status manager or the
// API: the runtime view alone may look non-terminal again (e.g. containers removed).
func mergeTerminalPhase(pod *v1.Pod, s *v1.PodStatus, oldStatus v1.PodStatus) {
	if isTerminal(s.Phase) {
		return
	}
	switch {
	case isTerminal(oldStatus.Phase):
		s.Phase = oldStatus.Phase
	case isTerminal(pod.Status.Phase):
		s.Phase = pod.Status.Phase
	}
}

// generateConditions keeps the conditions the kubelet does not own (from the API pod),
// adds the resize conditions and the DisruptionTarget it recorded earlier, then appends its
// own in upstream's order.
func generateConditions(pod *v1.Pod, podStatus *container.PodStatus, oldStatus v1.PodStatus, s *v1.PodStatus, resize []v1.PodCondition) []v1.PodCondition {
	conditions := make([]v1.PodCondition, 0, len(pod.Status.Conditions)+len(resize)+5)
	for _, c := range pod.Status.Conditions {
		if !kubeletOwnsCondition(c.Type) {
			conditions = append(conditions, c)
		}
	}
	for _, c := range resize {
		if pod.Generation == 0 {
			c.ObservedGeneration = 0 // a pod without generations (static) shows none
		}
		conditions = append(conditions, c)
	}
	if c := findCondition(oldStatus.Conditions, v1.DisruptionTarget); c != nil {
		conditions = replaceOrAppendCondition(conditions, c)
	}
	all := append(append([]v1.ContainerStatus{}, s.InitContainerStatuses...), s.ContainerStatuses...)
	conditions = append(conditions, GeneratePodReadyToStartContainersCondition(pod, podStatus))
	conditions = append(conditions, GeneratePodInitializedCondition(pod, all, s.Phase))
	conditions = append(conditions, GeneratePodReadyCondition(pod, conditions, all, s.Phase))
	conditions = append(conditions, GenerateContainersReadyCondition(pod, all, s.Phase))
	return append(conditions, condition(pod, v1.PodScheduled, v1.ConditionTrue, "", ""))
}

func replaceOrAppendCondition(conditions []v1.PodCondition, c *v1.PodCondition) []v1.PodCondition {
	if existing := findCondition(conditions, c.Type); existing != nil {
		*existing = *c
		return conditions
	}
	return append(conditions, *c)
}

// setHostIPs reports the node's IPs, and gives them to host-network pods as pod IPs. Pod IPs
// once set do not change, except that a dual-stack node adds the second family.
func setHostIPs(pod *v1.Pod, s *v1.PodStatus, hostIPs []string) {
	if len(hostIPs) == 0 {
		return
	}
	s.HostIP = hostIPs[0]
	s.HostIPs = []v1.HostIP{{IP: hostIPs[0]}}
	if len(hostIPs) > 1 {
		s.HostIPs = append(s.HostIPs, v1.HostIP{IP: hostIPs[1]})
	}
	if !pod.Spec.HostNetwork {
		return
	}
	if s.PodIP == "" {
		s.PodIP = hostIPs[0]
		s.PodIPs = []v1.PodIP{{IP: s.PodIP}}
	}
	if len(hostIPs) > 1 && len(s.PodIPs) == 1 && utilnet.IsIPv6String(s.PodIPs[0].IP) != utilnet.IsIPv6String(hostIPs[1]) {
		s.PodIPs = append(s.PodIPs, v1.PodIP{IP: hostIPs[1]})
	}
}

// startTime keeps the pod's first start time; a pod without one starts now.
func startTime(oldStatus v1.PodStatus, now func() time.Time) *metav1.Time {
	if oldStatus.StartTime != nil && !oldStatus.StartTime.IsZero() {
		return oldStatus.StartTime.DeepCopy()
	}
	if now == nil {
		now = time.Now
	}
	t := metav1.NewTime(now())
	return &t
}

func isTerminal(phase v1.PodPhase) bool { return phase == v1.PodSucceeded || phase == v1.PodFailed }
