package nodestatus

import (
	"context"
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/klog/v2"
)

// pressureKind describes one pressure condition with upstream's reasons, messages and
// event names for both states.
type pressureKind struct {
	condition     v1.NodeConditionType
	underPressure func(Pressure) bool
	trueReason    string
	trueMessage   string
	trueEvent     string
	falseReason   string
	falseMessage  string
	falseEvent    string
}

var (
	memoryPressure = pressureKind{
		condition: v1.NodeMemoryPressure, underPressure: Pressure.MemoryPressure,
		trueReason: "KubeletHasInsufficientMemory", trueMessage: "kubelet has insufficient memory available", trueEvent: "NodeHasInsufficientMemory",
		falseReason: "KubeletHasSufficientMemory", falseMessage: "kubelet has sufficient memory available", falseEvent: "NodeHasSufficientMemory",
	}
	diskPressure = pressureKind{
		condition: v1.NodeDiskPressure, underPressure: Pressure.DiskPressure,
		trueReason: "KubeletHasDiskPressure", trueMessage: "kubelet has disk pressure", trueEvent: "NodeHasDiskPressure",
		falseReason: "KubeletHasNoDiskPressure", falseMessage: "kubelet has no disk pressure", falseEvent: "NodeHasNoDiskPressure",
	}
	pidPressure = pressureKind{
		condition: v1.NodePIDPressure, underPressure: Pressure.PIDPressure,
		trueReason: "KubeletHasInsufficientPID", trueMessage: "kubelet has insufficient PID available", trueEvent: "NodeHasInsufficientPID",
		falseReason: "KubeletHasSufficientPID", falseMessage: "kubelet has sufficient PID available", falseEvent: "NodeHasSufficientPID",
	}
)

// pressureSetter keeps one pressure condition: the heartbeat moves every time, the
// status, reason, message and transition time only when the state flips, and each flip
// (including the first, from Unknown) is recorded as an event.
func (c *Controller) pressureSetter(kind pressureKind) func(context.Context, *v1.Node) error {
	return func(ctx context.Context, node *v1.Node) error {
		now := metav1.NewTime(c.clock.Now())
		idx := conditionIndex(node, kind.condition)
		if idx < 0 {
			node.Status.Conditions = append(node.Status.Conditions, v1.NodeCondition{Type: kind.condition, Status: v1.ConditionUnknown})
			idx = len(node.Status.Conditions) - 1
		}
		cond := &node.Status.Conditions[idx]
		cond.LastHeartbeatTime = now
		want, reason, message, event := v1.ConditionFalse, kind.falseReason, kind.falseMessage, kind.falseEvent
		if c.pressure != nil && kind.underPressure(c.pressure) {
			want, reason, message, event = v1.ConditionTrue, kind.trueReason, kind.trueMessage, kind.trueEvent
		}
		if cond.Status == want {
			return nil
		}
		cond.Status, cond.Reason, cond.Message, cond.LastTransitionTime = want, reason, message, now
		c.recordStatusEvent(ctx, v1.EventTypeNormal, event)
		return nil
	}
}

// readyErrors lists why the node is not ready: the runtime, its network, the extra
// checks, and capacity the node cannot report.
func (c *Controller) readyErrors(node *v1.Node) error {
	errs := []error{c.runtime.RuntimeErr(), c.runtime.NetworkErr()}
	for _, check := range c.readyChecks {
		errs = append(errs, check())
	}
	required := []v1.ResourceName{v1.ResourceCPU, v1.ResourceMemory, v1.ResourcePods}
	if c.opts.LocalStorageCapacityIsolation {
		required = append(required, v1.ResourceEphemeralStorage)
	}
	var missing []string
	for _, name := range required {
		if _, ok := node.Status.Capacity[name]; !ok {
			missing = append(missing, string(name))
		}
	}
	if len(missing) > 0 {
		errs = append(errs, fmt.Errorf("missing node capacity for resources: %s", strings.Join(missing, ", ")))
	}
	return utilerrors.NewAggregate(errs)
}

// setReady keeps the Ready condition (upstream's ReadyCondition setter). It is appended
// last to a new node's conditions; an existing one keeps its transition time while its
// status holds, and a change of status is recorded as NodeReady or NodeNotReady.
func (c *Controller) setReady(ctx context.Context, node *v1.Node) error {
	now := metav1.NewTime(c.clock.Now())
	want := v1.NodeCondition{
		Type: v1.NodeReady, Status: v1.ConditionTrue, Reason: "KubeletReady",
		Message: "kubelet is posting ready status", LastHeartbeatTime: now,
	}
	if err := c.readyErrors(node); err != nil {
		want.Status, want.Reason, want.Message = v1.ConditionFalse, "KubeletNotReady", err.Error()
	}
	idx := conditionIndex(node, v1.NodeReady)
	if idx < 0 {
		want.LastTransitionTime = now
		node.Status.Conditions = append(node.Status.Conditions, want)
		return nil
	}
	old := node.Status.Conditions[idx]
	want.LastTransitionTime = old.LastTransitionTime
	changed := old.Status != want.Status
	if changed {
		want.LastTransitionTime = now
	}
	node.Status.Conditions[idx] = want
	if !changed {
		return nil
	}
	if want.Status == v1.ConditionTrue {
		c.recordStatusEvent(ctx, v1.EventTypeNormal, "NodeReady")
	} else {
		c.recordStatusEvent(ctx, v1.EventTypeNormal, "NodeNotReady")
		klog.FromContext(ctx).Info("Node became not ready", "node", klog.KObj(node), "condition", want)
	}
	return nil
}

func conditionIndex(node *v1.Node, t v1.NodeConditionType) int {
	for i := range node.Status.Conditions {
		if node.Status.Conditions[i].Type == t {
			return i
		}
	}
	return -1
}

// recordStatusEvent records "Node <name> status is now: <event>" against the Node.
func (c *Controller) recordStatusEvent(ctx context.Context, eventType, event string) {
	klog.FromContext(ctx).V(2).Info("Recording event message for node", "node", klog.KRef("", c.opts.NodeName), "event", event)
	c.recorder.Eventf(c.NodeRef(), eventType, event, "Node %s status is now: %s", c.opts.NodeName, event)
}
