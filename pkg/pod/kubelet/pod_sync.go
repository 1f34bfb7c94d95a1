package kubelet

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/metrics"
	"github.com/nodelet/nodelet/pkg/metrics/podstartup"
	"github.com/nodelet/nodelet/pkg/node/volumes"
	"github.com/nodelet/nodelet/pkg/pod/allocation"
	"github.com/nodelet/nodelet/pkg/pod/podworkers"
	"github.com/nodelet/nodelet/pkg/pod/status"
	"github.com/nodelet/nodelet/pkg/runtime/container"
	"github.com/nodelet/nodelet/pkg/runtime/images"
)

// SyncPod converges one pod (the pod worker's "sync" phase): publish its status, prepare
// volumes, then let the runtime manager do the rest.
func (k *Kubelet) SyncPod(ctx context.Context, updateType podworkers.SyncPodType, pod *v1.Pod, ps *container.PodStatus) (bool, func(), error) {
	// The runtime and image managers mark their phases of the pod's start-up on the trace.
	ctx = k.startup.WithTrace(ctx, pod.UID)
	if updateType == podworkers.SyncPodCreate {
		k.observeSince(metrics.PodWorkerStartDuration, pod)
	}
	k.trackResizeProgress(pod, ps)
	previous, hadStatus := k.previousStatus(pod)
	apiStatus := k.generateStatusFrom(pod, ps, previous, false)
	if hadStatus && previous.Phase == v1.PodPending && apiStatus.Phase == v1.PodRunning {
		k.observeSince(metrics.PodStartDuration, pod)
	}
	k.deps.Status.SetPodStatus(pod, apiStatus)
	k.observeStartup(pod.UID)
	if isTerminalPhase(apiStatus.Phase) {
		klog.V(2).InfoS("Pod is terminal", "pod", klog.KObj(pod), "phase", apiStatus.Phase)
		return true, nil, nil
	}
	// Before its cgroup and directory exist, so housekeeping looks for them once the pod
	// is gone.
	k.housekeeper.noteSynced(pod.UID)
	// The pod's cgroup first, with its limits: the sandbox is created inside it.
	if err := k.deps.Cgroups.EnsurePod(pod); err != nil {
		k.deps.Recorder.Eventf(pod, v1.EventTypeWarning, "FailedCreatePodContainer", "unable to ensure pod container exists: %v", err)
		return false, nil, fmt.Errorf("failed to ensure that the pod: %v cgroups exist and are correctly applied: %w", pod.UID, err)
	}
	k.syncMirrorPod(ctx, pod)
	// Volumes are set up here, on every sync, before the runtime manager (which only mounts
	// them) may start anything: upstream's WaitForAttachAndMount.
	endVolumes := podstartup.FromContext(ctx).Begin(podstartup.Volumes)
	err := k.deps.Volumes.SetUpPod(ctx, pod)
	endVolumes()
	if err != nil {
		k.recordMountFailures(pod, err)
		return false, nil, fmt.Errorf("unable to attach or mount volumes for pod %q: %w", klog.KObj(pod), err)
	}
	// Every sync makes sure the pod is probed (as upstream): a pod re-created with the
	// same UID lost its probes when the old pod's teardown finished.
	k.deps.Prober.AddPod(pod)
	result := k.deps.Runtime.SyncPod(ctx, pod, withAPIPodIPs(ps, apiStatus), nil, k.backOff)
	recordUserNamespacedStart(pod, result)
	k.reasons.Update(pod.UID, result)
	resized := k.recordResizeResult(pod, result)
	if err := result.Error(); err != nil {
		if resized {
			k.refreshStatus(ctx, pod) // a failed resize may have been applied in part
		}
		if onlyBackOff(result) {
			return false, nil, podworkers.ErrBackOffWait
		}
		return false, nil, err
	}
	if !changedRuntime(result) {
		return false, nil, nil
	}
	// The sync changed the pod: relist it at once, so its new containers are seen (and
	// reported Running, then Ready) without waiting for the next periodic relist. After a
	// resize the pod syncs again at once with its status read anew, and finds it done.
	return false, func() {
		if resized {
			k.refreshStatus(context.Background(), pod)
			k.syncAgain(pod.UID)
		}
		k.deps.PLEG.RequestRelist(pod.UID)
	}, nil
}

// recordUserNamespacedStart counts a sync that created the sandbox of a pod with
// hostUsers: false in kubelet_started_user_namespaced_pods_total, and in the errors
// counter when anything in that sync failed: upstream's runtime manager counts them so
// once SyncPod is done, which its result shows as well.
func recordUserNamespacedStart(pod *v1.Pod, result container.PodSyncResult) {
	if pod.Spec.HostUsers == nil || *pod.Spec.HostUsers {
		return
	}
	for _, r := range result.SyncResults {
		if r.Action == container.CreatePodSandbox {
			metrics.RecordUserNamespacedPodStart(result.Error() != nil)
			return
		}
	}
}

// changedRuntime reports whether a sync did anything to the pod in the runtime. Building
// the sandbox config (ConfigPodSandbox) changes nothing, so a pod with nothing to do has
// no other result: no reason to relist it. The once-a-minute resync of every pod used to
// relist each one (a runtime listing per pod and minute).
func changedRuntime(result container.PodSyncResult) bool {
	for _, r := range result.SyncResults {
		if r.Action != container.ConfigPodSandbox {
			return true
		}
	}
	return false
}

// trackResizeProgress sets PodResizeInProgress while the allocated resources of a running
// container differ from those applied, and clears it, with a ResizeCompleted event, once
// they match.
func (k *Kubelet) trackResizeProgress(pod *v1.Pod, ps *container.PodStatus) {
	if k.deps.Resize == nil || ps == nil {
		return
	}
	if k.deps.Resize.IsPodResizeInProgress(pod, ps) {
		k.resizes.SetInProgress(pod.UID, "", "", pod.Generation)
		return
	}
	if generation, cleared := k.resizes.ClearInProgress(pod.UID); cleared {
		k.deps.Recorder.Event(pod, v1.EventTypeNormal, allocation.EventResizeCompleted,
			allocation.ResizeEventMessage(allocation.ResizeCompletedPrefix, pod, generation, ""))
	}
}

// recordResizeResult turns a failed resize into PodResizeInProgress with reason Error (and
// a ResizeError event when that is news). It reports whether the sync resized anything.
func (k *Kubelet) recordResizeResult(pod *v1.Pod, result container.PodSyncResult) bool {
	resized := false
	for _, r := range result.SyncResults {
		if r.Action != container.ResizePodInPlace {
			continue
		}
		resized = true
		if r.Error == nil {
			continue
		}
		if generation, changed := k.resizes.SetInProgress(pod.UID, v1.PodReasonError, r.Message, pod.Generation); changed {
			k.deps.Recorder.Event(pod, v1.EventTypeWarning, allocation.EventResizeError,
				allocation.ResizeEventMessage(allocation.ResizeErrorPrefix, pod, generation, r.Message))
		}
	}
	return resized
}

// refreshStatus reads the pod's status from the runtime into the cache: a resize changes
// no container's state, so the PLEG would not, and the next sync must see the resources
// the runtime now reports (upstream reinspects the pod). From postSync the entry is newer
// than the sync just done, so the next one need not wait for a relist.
func (k *Kubelet) refreshStatus(ctx context.Context, pod *v1.Pod) {
	st, err := k.deps.Runtime.GetPodStatus(ctx, pod.UID, pod.Name, pod.Namespace)
	if err != nil {
		klog.V(2).InfoS("Failed to read the pod's status after a resize", "pod", klog.KObj(pod), "err", err)
		return
	}
	k.deps.Cache.Set(pod.UID, st, nil, k.deps.Clock.Now())
}

// syncAgain makes the pod's worker sync the pod as its source last delivered it.
func (k *Kubelet) syncAgain(uid types.UID) {
	if pod, ok := k.pods.GetPodByUID(uid); ok {
		k.dispatch(pod, podworkers.SyncPodSync)
	}
}

// recordMountFailures tells the pod's owner which volumes did not mount and why, one
// FailedMount event per volume as upstream's volume manager words them.
func (k *Kubelet) recordMountFailures(pod *v1.Pod, err error) {
	failed := volumes.MountErrors(err)
	if len(failed) == 0 {
		k.deps.Recorder.Eventf(pod, v1.EventTypeWarning, "FailedMount", "Unable to attach or mount volumes: %v", err)
		return
	}
	for _, me := range failed {
		k.deps.Recorder.Event(pod, v1.EventTypeWarning, "FailedMount", me.Error())
	}
}

// onlyBackOff reports results whose failures are all back-offs (CrashLoopBackOff,
// ImagePullBackOff): expected waiting, not sync errors.
func onlyBackOff(r container.PodSyncResult) bool {
	if r.SyncError != nil {
		return false
	}
	for _, sr := range r.SyncResults {
		if sr.Error != nil && !errors.Is(sr.Error, container.ErrCrashLoopBackOff) && !errors.Is(sr.Error, images.ErrImagePullBackOff) {
			return false
		}
	}
	return true
}

// SyncTerminatingPod stops the pod's containers within the grace period and publishes the
// resulting status; it succeeds only when nothing is left running.
func (k *Kubelet) SyncTerminatingPod(ctx context.Context, pod *v1.Pod, ps *container.PodStatus, gracePeriod *int64, statusFn func(*v1.PodStatus)) error {
	klog.V(2).InfoS("Pod terminating", "pod", klog.KObj(pod), "gracePeriod", gracePeriod)
	k.startup.Forget(pod.UID)
	// Liveness and startup failures must not restart what is being stopped.
	k.deps.Prober.StopLivenessAndStartup(pod)
	apiStatus := k.generateStatus(pod, ps, false)
	if statusFn != nil {
		statusFn(&apiStatus)
	}
	k.deps.Status.SetPodStatus(pod, apiStatus)
	running := container.ConvertPodStatusToRunningPod(k.deps.Runtime.Type(), ps)
	if err := k.deps.Runtime.KillPod(ctx, pod, running, gracePeriod); err != nil {
		return fmt.Errorf("killing pod %q: %w", klog.KObj(pod), err)
	}
	// The pod no longer counts towards its QoS class (upstream's killPod does the same).
	if err := k.deps.Cgroups.UpdateQOSCgroups(); err != nil {
		klog.V(2).InfoS("Failed to update QoS cgroups while killing pod", "pod", klog.KObj(pod), "err", err)
	}
	after, err := k.deps.Runtime.GetPodStatus(ctx, pod.UID, pod.Name, pod.Namespace)
	if err != nil {
		return err
	}
	// A stopped sandbox reports no IPs; the final status keeps the ones the pod had.
	if len(after.IPs) == 0 {
		after.IPs = ps.IPs
	}
	if n := len(after.RunningContainerStatuses()); n > 0 {
		return fmt.Errorf("pod %q still has %d running containers after kill", klog.KObj(pod), n)
	}
	// Claims are released after the last container stopped and before the final status
	// reaches the API server, where it lets the claims be deallocated (as upstream).
	if k.deps.Releaser != nil {
		if err := k.deps.Releaser.ReleaseResources(ctx, pod); err != nil {
			return err
		}
	}
	k.deps.Cache.Set(pod.UID, after, nil, k.deps.Clock.Now())
	final := k.generateStatus(pod, after, true)
	if statusFn != nil {
		statusFn(&final)
	}
	k.deps.Status.SetPodStatus(pod, final)
	klog.V(2).InfoS("Pod termination finished", "pod", klog.KObj(pod))
	return nil
}

// SyncTerminatingRuntimePod kills a pod found in the runtime that no source asks for.
func (k *Kubelet) SyncTerminatingRuntimePod(ctx context.Context, running *container.Pod) error {
	klog.InfoS("Killing orphaned pod found in the runtime", "pod", klog.KRef(running.Namespace, running.Name), "podUID", running.ID)
	one := int64(1) // upstream's override: an orphan has no spec to take a grace period from
	return k.deps.Runtime.KillPod(ctx, nil, *running, &one)
}

// SyncTerminatedPod releases what a stopped pod held: its volumes and directory (once the
// pod is deleted or no longer desired) and its cgroup, then marks its status final, which
// lets the API status syncer delete a pod whose deletion was requested. Containers are
// left for the garbage collector (and logs for `logs --previous`).
func (k *Kubelet) SyncTerminatedPod(ctx context.Context, pod *v1.Pod, ps *container.PodStatus) error {
	k.deps.Prober.RemovePod(pod)
	current, desired := k.pods.GetPodByUID(pod.UID)
	if !desired || current.DeletionTimestamp != nil {
		if err := k.deps.Volumes.CleanupPod(pod.UID); err != nil {
			return err
		}
	} else if err := k.deps.Volumes.TearDownPod(pod.UID); err != nil {
		// A pod that stays in the API (Succeeded, Failed, evicted) gives its volumes'
		// disk back now, as upstream: eviction relies on it to relieve disk pressure.
		return err
	}
	if err := k.deps.Cgroups.Remove(pod.UID); err != nil {
		return fmt.Errorf("removing the cgroup of pod %q: %w", klog.KObj(pod), err)
	}
	if k.deps.UserNamespaces != nil {
		k.deps.UserNamespaces.Release(pod.UID)
	}
	k.deps.Status.TerminatePod(pod)
	klog.V(2).InfoS("Pod is terminated and all resources are reclaimed", "pod", klog.KObj(pod))
	return nil
}

// generateStatus computes the API status from the runtime's view.
func (k *Kubelet) generateStatus(pod *v1.Pod, ps *container.PodStatus, terminal bool) v1.PodStatus {
	old, _ := k.previousStatus(pod)
	return k.generateStatusFrom(pod, ps, old, terminal)
}

// previousStatus is the status the status manager holds for the pod (hadStatus), or else
// the pod's own.
func (k *Kubelet) previousStatus(pod *v1.Pod) (st v1.PodStatus, hadStatus bool) {
	if st, ok := k.deps.Status.GetPodStatus(pod.UID); ok {
		return st, true
	}
	return pod.Status, false
}

// generateStatusFrom computes the API status from the runtime's view and the previous status.
func (k *Kubelet) generateStatusFrom(pod *v1.Pod, ps *container.PodStatus, old v1.PodStatus, terminal bool) v1.PodStatus {
	st := status.GenerateAPIPodStatus(pod, ps, old, status.GenerateOptions{
		PodIsTerminal: terminal,
		HostIPs:       k.cfg.HostIPs,
		RuntimeSupportsRecursiveReadOnlyMounts: k.deps.SupportsRecursiveReadOnlyMounts != nil &&
			k.deps.SupportsRecursiveReadOnlyMounts(pod),
		Readiness:    k.deps.Readiness,
		Startup:      k.deps.Startup,
		KubeletStart: k.created,
		BackOffReasons: func(name string) (string, string, bool) {
			return k.reasons.Get(pod.UID, name)
		},
		ShouldEvict:       k.deadlines.shouldEvict,
		Now:               time.Now,
		ResizeConditions:  k.resizeConditions(pod, terminal),
		ActuatedResources: k.actuatedResources(pod.UID),
		PodCgroup:         k.deps.Cgroups,
	})
	if k.deps.ResourceHealth != nil {
		k.deps.ResourceHealth.UpdateAllocatedResourcesStatus(pod, &st)
	}
	// The first readiness probe of a container that has just started runs now, not at the
	// worker's next tick.
	k.deps.Prober.TriggerReadinessProbes(pod, &st)
	return st
}

// resizeConditions are the pod's resize conditions to publish; a terminal pod has none
// (they are forgotten).
func (k *Kubelet) resizeConditions(pod *v1.Pod, terminal bool) []v1.PodCondition {
	if terminal {
		k.resizes.ClearInProgress(pod.UID)
		k.resizes.ClearPending(pod.UID, metrics.ResizeTerminated)
		return nil
	}
	return k.resizes.List(pod.UID)
}

// actuatedResources reads the runtime manager's record of the pod's container resources.
func (k *Kubelet) actuatedResources(uid types.UID) func(string) (v1.ResourceRequirements, bool) {
	if k.deps.Resize == nil {
		return nil
	}
	return func(name string) (v1.ResourceRequirements, bool) {
		return k.deps.Resize.ActuatedContainerResources(uid, name)
	}
}

// observeSince observes, on h, the time since the kubelet first saw the pod (upstream's
// pod worker start and pod start latencies); a pod without a first-seen time is skipped.
func (k *Kubelet) observeSince(h prometheus.Observer, pod *v1.Pod) {
	if seen, ok := podstartup.FirstSeen(pod); ok {
		h.Observe(k.deps.Clock.Since(seen).Seconds())
	}
}

// observeStartup ends the pod's start-up trace once the status manager's status shows the
// pod ready, or finished.
func (k *Kubelet) observeStartup(uid types.UID) {
	if !k.startup.Starting(uid) {
		return
	}
	if st, ok := k.deps.Status.GetPodStatus(uid); ok {
		k.startup.StatusChanged(uid, &st)
	}
}

// withAPIPodIPs is ps with the pod IPs of the API status, which the runtime manager gives
// to the containers (downward API, hosts file), as upstream's SyncPod passes them: a
// host-network pod's are the node's, its sandbox reporting none. ps itself, shared with
// the pod cache, is not changed.
func withAPIPodIPs(ps *container.PodStatus, s v1.PodStatus) *container.PodStatus {
	ips := make([]string, 0, len(s.PodIPs))
	for _, ip := range s.PodIPs {
		ips = append(ips, ip.IP)
	}
	if len(ips) == 0 && s.PodIP != "" {
		ips = []string{s.PodIP}
	}
	if ps == nil || slices.Equal(ips, ps.IPs) {
		return ps
	}
	copied := *ps
	copied.IPs = ips
	return &copied
}
