package admission

import (
	"fmt"
	"slices"

	v1 "k8s.io/api/core/v1"
	"k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/kubetypes"
	"github.com/nodelet/nodelet/pkg/qos"
)

// Reasons of the node-state handlers (upstream's eviction and nodeshutdown packages).
const (
	ReasonEvicted      = "Evicted"
	ReasonNodeShutdown = "NodeShutdown"
)

// admitNodePressure is the eviction manager's admit handler: under resource pressure the
// node takes no new pods but critical ones; under memory pressure alone it still takes
// pods that are not BestEffort, and BestEffort pods that tolerate the memory-pressure
// taint.
func (a *Admitter) admitNodePressure(pod *v1.Pod, _ []*v1.Pod) Result {
	if a.opts.PressureConditions == nil {
		return admitted()
	}
	conditions := a.opts.PressureConditions()
	if len(conditions) == 0 || kubetypes.IsCriticalPod(pod) {
		return admitted()
	}
	if len(conditions) == 1 && slices.Contains(conditions, v1.NodeMemoryPressure) {
		if qos.GetPodQOS(pod) != v1.PodQOSBestEffort {
			return admitted()
		}
		taint := &v1.Taint{Key: v1.TaintNodeMemoryPressure, Effect: v1.TaintEffectNoSchedule}
		if corev1.TolerationsTolerateTaint(klog.Background(), pod.Spec.Tolerations, taint, false) {
			return admitted()
		}
	}
	return reject(ReasonEvicted, fmt.Sprintf("The node had condition: %v. ", conditions))
}

// admitShutdown is the node-shutdown manager's admit handler.
func (a *Admitter) admitShutdown(_ *v1.Pod, _ []*v1.Pod) Result {
	if a.opts.ShuttingDown != nil && a.opts.ShuttingDown() {
		return reject(ReasonNodeShutdown, "Pod was rejected as the node is shutting down.")
	}
	return admitted()
}
