package kuberuntime

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sort"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	kubelettypes "k8s.io/kubelet/pkg/types"

	"github.com/nodelet/nodelet/pkg/outage"
	"github.com/nodelet/nodelet/pkg/runtime/container"
	"github.com/nodelet/nodelet/pkg/runtime/cri"
	"github.com/nodelet/nodelet/pkg/runtime/criconfig"
)

// GetPods lists the pods found in the runtime, grouped by the pod UID of their sandbox
// metadata or container labels, newest pod first; sandboxes and containers are newest
// first too. all=false keeps only ready sandboxes and running containers.
func (m *Manager) GetPods(ctx context.Context, all bool) ([]*container.Pod, error) {
	sandboxes, err := m.listSandboxes(ctx, all)
	if err != nil {
		return nil, err
	}
	containers, err := m.listContainers(ctx, all)
	if err != nil {
		return nil, err
	}
	return m.groupPods(sandboxes, containers), nil
}

// GetPod lists one pod's sandboxes and containers, in every state, by the pod UID label
// both carry; nil when the runtime has none of them. The evented PLEG relists a pod at
// each of its container events: listing all pods each time would decode every pod's
// containers once per event, which is quadratic in a burst of pod starts.
func (m *Manager) GetPod(ctx context.Context, uid types.UID) (*container.Pod, error) {
	selector := map[string]string{criconfig.PodUIDLabel: string(uid)}
	sandboxes, err := m.runtime.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{LabelSelector: selector})
	if err != nil {
		outage.ErrorS(err, "Failed to list pod sandboxes", "podUID", uid)
		return nil, err
	}
	containers, err := m.runtime.ListContainers(ctx, &runtimeapi.ContainerFilter{LabelSelector: selector})
	if err != nil {
		outage.ErrorS(err, "ListContainers failed", "podUID", uid)
		return nil, err
	}
	for _, p := range m.groupPods(sandboxes, containers) {
		if p.ID == uid {
			return p, nil
		}
	}
	return nil, nil
}

// groupPods groups sandboxes and containers into pods by their metadata and labels.
func (m *Manager) groupPods(sandboxes []*runtimeapi.PodSandbox, containers []*runtimeapi.Container) []*container.Pod {
	pods := map[types.UID]*container.Pod{}
	for _, s := range sandboxes {
		if s.GetMetadata() == nil || s.Id == "" {
			klog.V(4).InfoS("Sandbox does not have metadata", "sandbox", s)
			continue
		}
		md := s.GetMetadata()
		p := podEntry(pods, types.UID(md.Uid), md.Name, md.Namespace)
		p.Sandboxes = append(p.Sandboxes, m.sandboxToContainer(s))
		p.CreatedAt = max(p.CreatedAt, s.CreatedAt)
	}
	for _, c := range containers {
		if c.GetMetadata() == nil || c.Id == "" {
			klog.V(4).InfoS("Container does not have metadata", "container", c)
			continue
		}
		info := criconfig.GetContainerInfoFromLabels(c.Labels)
		p := podEntry(pods, info.PodUID, info.PodName, info.PodNamespace)
		p.Containers = append(p.Containers, m.toContainer(c))
	}
	return sortedPods(pods)
}

func podEntry(pods map[types.UID]*container.Pod, uid types.UID, name, namespace string) *container.Pod {
	p, ok := pods[uid]
	if !ok {
		p = &container.Pod{ID: uid, Name: name, Namespace: namespace}
		pods[uid] = p
	}
	return p
}

// sortedPods orders pods, and their sandboxes and containers, newest first: several pods
// of one name can coexist while an old one terminates, and name lookups must find the new.
func sortedPods(pods map[types.UID]*container.Pod) []*container.Pod {
	out := make([]*container.Pod, 0, len(pods))
	for _, p := range pods {
		sortNewestFirst(p.Sandboxes)
		sortNewestFirst(p.Containers)
		out = append(out, p)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].CreatedAt > out[j].CreatedAt })
	return out
}

func sortNewestFirst(cs []*container.Container) {
	sort.SliceStable(cs, func(i, j int) bool { return cs[i].CreatedAt > cs[j].CreatedAt })
}

func (m *Manager) listSandboxes(ctx context.Context, all bool) ([]*runtimeapi.PodSandbox, error) {
	var filter *runtimeapi.PodSandboxFilter
	if !all {
		filter = &runtimeapi.PodSandboxFilter{
			State: &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY},
		}
	}
	sandboxes, err := m.runtime.ListPodSandbox(ctx, filter)
	if err != nil {
		outage.ErrorS(err, "Failed to list pod sandboxes")
		return nil, err
	}
	return sandboxes, nil
}

func (m *Manager) listContainers(ctx context.Context, all bool) ([]*runtimeapi.Container, error) {
	filter := &runtimeapi.ContainerFilter{}
	if !all {
		filter.State = &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING}
	}
	containers, err := m.runtime.ListContainers(ctx, filter)
	if err != nil {
		outage.ErrorS(err, "ListContainers failed")
		return nil, err
	}
	return containers, nil
}

func (m *Manager) sandboxToContainer(s *runtimeapi.PodSandbox) *container.Container {
	return &container.Container{
		ID:        container.BuildContainerID(m.runtimeName, s.Id),
		State:     sandboxState(s.State),
		CreatedAt: s.CreatedAt,
	}
}

// sandboxState maps a sandbox state onto a container state, as PLEG expects.
func sandboxState(s runtimeapi.PodSandboxState) container.State {
	switch s {
	case runtimeapi.PodSandboxState_SANDBOX_READY:
		return container.ContainerStateRunning
	case runtimeapi.PodSandboxState_SANDBOX_NOTREADY:
		return container.ContainerStateExited
	default:
		return container.ContainerStateUnknown
	}
}

func (m *Manager) toContainer(c *runtimeapi.Container) *container.Container {
	return &container.Container{
		ID:        container.BuildContainerID(m.runtimeName, c.Id),
		Name:      c.GetMetadata().GetName(),
		Image:     c.GetImage().GetImage(),
		ImageID:   imageID(c.ImageId, c.ImageRef),
		ImageRef:  c.ImageRef,
		Hash:      criconfig.GetContainerInfoFromAnnotations(c.Annotations).Hash,
		State:     container.StateFromCRI(c.State),
		CreatedAt: c.CreatedAt,
	}
}

// imageID prefers the CRI image_id field (added in v1.30) over the older image_ref.
func imageID(id, ref string) string {
	if id != "" {
		return id
	}
	return ref
}

// GetPodStatus reads every sandbox and container of the pod, newest first. The pod IPs
// come from the newest sandbox when it is ready.
func (m *Manager) GetPodStatus(ctx context.Context, uid types.UID, name, namespace string) (*container.PodStatus, error) {
	timestamp := m.clock.Now()
	pod, err := m.GetPod(ctx, uid)
	if err != nil {
		return nil, err
	}
	if pod == nil {
		pod = &container.Pod{ID: uid}
	}
	return m.podStatus(ctx, name, namespace, timestamp, pod)
}

// GetPodStatusOf is GetPodStatus of the sandboxes and containers a listing found for the
// pod (GetPods, GetPod), without listing them again: the PLEG inspects a pod right after
// listing it, and the second listing was half of its runtime calls.
func (m *Manager) GetPodStatusOf(ctx context.Context, pod *container.Pod) (*container.PodStatus, error) {
	return m.podStatus(ctx, pod.Name, pod.Namespace, m.clock.Now(), pod)
}

// podStatus reads the statuses of the sandboxes (newest first, as listings sort them) and
// containers listed for pod, stamped with timestamp.
func (m *Manager) podStatus(ctx context.Context, name, namespace string, timestamp time.Time, pod *container.Pod) (*container.PodStatus, error) {
	status := &container.PodStatus{ID: pod.ID, Name: name, Namespace: namespace, TimeStamp: timestamp}
	sandboxes, err := m.sandboxStatuses(ctx, pod.Sandboxes)
	if err != nil {
		return nil, err
	}
	status.SandboxStatuses = sandboxes
	if len(sandboxes) > 0 && sandboxes[0].State == runtimeapi.PodSandboxState_SANDBOX_READY {
		status.IPs = determinePodSandboxIPs(namespace, name, sandboxes[0])
	}
	status.ContainerStatuses, err = m.containerStatuses(ctx, pod.Containers)
	if err != nil {
		outage.ErrorS(err, "getPodContainerStatuses for pod failed", "pod", klog.KRef(namespace, name))
		return nil, err
	}
	return status, nil
}

// sandboxStatuses returns the statuses of the sandboxes, in the order given. A sandbox
// removed since it was listed is skipped.
func (m *Manager) sandboxStatuses(ctx context.Context, sandboxes []*container.Container) ([]*runtimeapi.PodSandboxStatus, error) {
	var out []*runtimeapi.PodSandboxStatus
	for _, sb := range sandboxes {
		resp, err := m.runtime.PodSandboxStatus(ctx, sb.ID.ID, false)
		if cri.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if resp.GetStatus() == nil {
			return nil, errors.New("pod sandbox status is nil")
		}
		out = append(out, resp.GetStatus())
	}
	return out, nil
}

// sandboxIDsOfPod lists the pod's sandbox IDs by its UID label, newest first.
func (m *Manager) sandboxIDsOfPod(ctx context.Context, uid types.UID) ([]string, error) {
	sandboxes, err := m.runtime.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{
		LabelSelector: map[string]string{kubelettypes.KubernetesPodUIDLabel: string(uid)},
	})
	if err != nil {
		outage.ErrorS(err, "Failed to list sandboxes for pod", "podUID", uid)
		return nil, err
	}
	sort.SliceStable(sandboxes, func(i, j int) bool { return sandboxes[i].CreatedAt > sandboxes[j].CreatedAt })
	ids := make([]string, len(sandboxes))
	for i, s := range sandboxes {
		ids[i] = s.Id
	}
	return ids, nil
}

// containerStatuses reads the status of each container, newest first. A container
// removed since it was listed is skipped.
func (m *Manager) containerStatuses(ctx context.Context, containers []*container.Container) ([]*container.Status, error) {
	statuses := []*container.Status{}
	for _, c := range containers {
		resp, err := m.runtime.ContainerStatus(ctx, c.ID.ID, false)
		if cri.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if resp.GetStatus() == nil {
			return nil, cri.ErrContainerStatusNil
		}
		statuses = append(statuses, m.toStatus(ctx, resp.GetStatus()))
	}
	sortStatusesNewestFirst(statuses)
	return statuses, nil
}

func sortStatusesNewestFirst(s []*container.Status) {
	sort.SliceStable(s, func(i, j int) bool { return s[i].CreatedAt.After(s[j].CreatedAt) })
}

// toStatus converts a CRI container status, adding the termination message of an exited
// container.
func (m *Manager) toStatus(ctx context.Context, s *runtimeapi.ContainerStatus) *container.Status {
	ann := criconfig.GetContainerInfoFromAnnotations(s.Annotations)
	name := criconfig.GetContainerInfoFromLabels(s.Labels).ContainerName
	if name == "" {
		name = s.GetMetadata().GetName()
	}
	out := &container.Status{
		ID:           container.BuildContainerID(m.runtimeName, s.Id),
		Name:         name,
		State:        container.StateFromCRI(s.State),
		CreatedAt:    time.Unix(0, s.CreatedAt),
		Image:        s.GetImage().GetImage(),
		ImageID:      imageID(s.ImageId, s.ImageRef),
		ImageRef:     s.ImageRef,
		Hash:         ann.Hash,
		RestartCount: ann.RestartCount,
		Resources:    s.Resources,
	}
	if s.State != runtimeapi.ContainerState_CONTAINER_CREATED {
		// The container was started at some point.
		out.StartedAt = time.Unix(0, s.StartedAt)
	}
	if s.State == runtimeapi.ContainerState_CONTAINER_EXITED {
		out.Reason, out.Message = s.Reason, s.Message
		out.ExitCode = int(s.ExitCode)
		out.FinishedAt = time.Unix(0, s.FinishedAt)
		m.addTerminationMessage(ctx, out, s, ann)
	}
	return out
}

// determinePodSandboxIPs returns the primary and additional IPs of a sandbox; an
// unparseable IP makes the whole answer nil, as upstream.
func determinePodSandboxIPs(namespace, name string, s *runtimeapi.PodSandboxStatus) []string {
	if s.GetNetwork() == nil {
		klog.InfoS("Pod Sandbox status doesn't have network information, cannot report IPs", "pod", klog.KRef(namespace, name))
		return []string{}
	}
	ips := []string{}
	if ip := s.Network.Ip; ip != "" {
		if net.ParseIP(ip) == nil {
			klog.InfoS("Pod Sandbox reported an unparseable primary IP", "pod", klog.KRef(namespace, name), "IP", ip)
			return nil
		}
		ips = append(ips, ip)
	}
	for _, extra := range s.Network.AdditionalIps {
		if net.ParseIP(extra.GetIp()) == nil {
			klog.InfoS("Pod Sandbox reported an unparseable additional IP", "pod", klog.KRef(namespace, name), "IP", extra.GetIp())
			return nil
		}
		ips = append(ips, extra.GetIp())
	}
	return ips
}

// GeneratePodStatus builds a pod status from a CRI container event (for evented PLEG).
func (m *Manager) GeneratePodStatus(event *runtimeapi.ContainerEventResponse) *container.PodStatus {
	sb := event.GetPodSandboxStatus()
	md := sb.GetMetadata()
	status := &container.PodStatus{
		ID:        types.UID(md.GetUid()),
		Name:      md.GetName(),
		Namespace: md.GetNamespace(),
		TimeStamp: m.clock.Now(),
	}
	if sb != nil {
		status.IPs = determinePodSandboxIPs(md.GetNamespace(), md.GetName(), sb)
		status.SandboxStatuses = []*runtimeapi.PodSandboxStatus{sb}
	}
	status.ContainerStatuses = []*container.Status{}
	for _, cs := range event.GetContainersStatuses() {
		status.ContainerStatuses = append(status.ContainerStatuses, m.toStatus(context.Background(), cs))
	}
	sortStatusesNewestFirst(status.ContainerStatuses)
	return status
}

// podFullName is upstream's format.Pod: "name_namespace(uid)".
func podFullName(pod *v1.Pod) string {
	if pod == nil {
		return "<nil>"
	}
	return fmt.Sprintf("%s_%s(%s)", pod.Name, pod.Namespace, pod.UID)
}
