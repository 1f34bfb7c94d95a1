package kuberuntime

import (
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/runtime/container"
)

// eventFailedPrepareDynamicResources is upstream's reason when a pod's resource claims
// cannot be prepared before its sandbox is created.
const eventFailedPrepareDynamicResources = "FailedPrepareDynamicResources"

// prepareDynamicResources stands where upstream prepares a pod's DRA resource claims,
// before the sandbox. nodelet has no DRA drivers yet, so a pod that claims devices is not
// started: running it without them would be silently wrong. Like upstream when a
// claim's driver is not registered, the pod stays pending with a warning event and the
// sync is retried.
func (m *Manager) prepareDynamicResources(pod *v1.Pod, result *container.PodSyncResult) bool {
	if len(pod.Spec.ResourceClaims) == 0 {
		return true
	}
	names := make([]string, 0, len(pod.Spec.ResourceClaims))
	for _, c := range pod.Spec.ResourceClaims {
		names = append(names, c.Name)
	}
	err := fmt.Errorf("prepare dynamic resources: resource claims %s need a DRA driver, and nodelet does not run DRA drivers yet",
		strings.Join(names, ", "))
	m.recordPodEvent(pod, v1.EventTypeWarning, eventFailedPrepareDynamicResources, "Failed to prepare dynamic resources: %v", err)
	klog.ErrorS(err, "Failed to prepare dynamic resources", "pod", klog.KObj(pod))
	result.Fail(err)
	return false
}
