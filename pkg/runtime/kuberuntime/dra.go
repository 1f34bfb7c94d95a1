package kuberuntime

import (
	"context"
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/runtime/container"
)

// eventFailedPrepareDynamicResources is upstream's reason when a pod's resource claims
// cannot be prepared before its sandbox is created.
const eventFailedPrepareDynamicResources = "FailedPrepareDynamicResources"

// prepareDynamicResources prepares the pod's DRA resource claims before its sandbox, as
// upstream: a claim that is not allocated or reserved for the pod, or whose driver is
// not registered, keeps the pod pending with a warning event, and the sync is retried.
// Without a DRA manager a pod that claims devices is not started: running it without
// them would be silently wrong.
func (m *Manager) prepareDynamicResources(ctx context.Context, pod *v1.Pod, result *container.PodSyncResult) bool {
	if len(pod.Spec.ResourceClaims) == 0 && pod.Status.ExtendedResourceClaimStatus == nil {
		return true
	}
	var err error
	if m.opts.PrepareDynamicResources == nil {
		names := make([]string, 0, len(pod.Spec.ResourceClaims))
		for _, c := range pod.Spec.ResourceClaims {
			names = append(names, c.Name)
		}
		err = fmt.Errorf("resource claims %s need a DRA driver, and this nodelet runs none", strings.Join(names, ", "))
	} else {
		err = m.opts.PrepareDynamicResources(ctx, pod)
	}
	if err == nil {
		return true
	}
	m.recordPodEvent(pod, v1.EventTypeWarning, eventFailedPrepareDynamicResources, "Failed to prepare dynamic resources: %v", err)
	klog.ErrorS(err, "Failed to prepare dynamic resources", "pod", klog.KObj(pod))
	result.Fail(err)
	return false
}
