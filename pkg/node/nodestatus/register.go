package nodestatus

import (
	"context"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	nodeutil "k8s.io/component-helpers/node/util"
	"k8s.io/klog/v2"
	kubeletapis "k8s.io/kubelet/pkg/apis"

	"github.com/nodelet/nodelet/pkg/resourcename"
)

// Registration back-off: upstream waits 100ms before the first attempt and doubles the
// wait up to 7s.
const (
	registerFirstBackoff = 100 * time.Millisecond
	registerMaxBackoff   = 7 * time.Second
)

// defaultLabels are the labels the kubelet owns on an existing Node: registration sets
// them to this kubelet's values (upstream's updateDefaultLabels).
var defaultLabels = []string{
	v1.LabelHostname,
	v1.LabelTopologyZone,
	v1.LabelTopologyRegion,
	v1.LabelFailureDomainBetaZone,
	v1.LabelFailureDomainBetaRegion,
	v1.LabelInstanceTypeStable,
	v1.LabelInstanceType,
	v1.LabelOSStable,
	v1.LabelArchStable,
	v1.LabelWindowsBuild,
	kubeletapis.LabelOS,
	kubeletapis.LabelArch,
}

// registerWithAPIServer creates the Node, or reconciles the one that exists, retrying
// with back-off until it succeeds or ctx ends. Each failed attempt is one log line.
func (c *Controller) registerWithAPIServer(ctx context.Context) {
	if c.registered.Load() {
		return
	}
	logger := klog.FromContext(ctx)
	c.startup.RecordAttemptRegisterNode()
	step := registerFirstBackoff
	for attempt := 0; ; attempt++ {
		select {
		case <-ctx.Done():
			return
		case <-c.clock.After(step):
		}
		step = min(2*step, registerMaxBackoff)
		node, err := c.InitialNode(ctx)
		if err != nil {
			logger.Error(err, "Unable to construct v1.Node object for kubelet")
			continue
		}
		if attempt == 0 {
			logger.Info("Attempting to register node", "node", klog.KObj(node))
		}
		if err := c.tryRegister(ctx, node); err != nil {
			logger.Error(err, "Unable to register node with API server", "node", klog.KObj(node), "retryIn", step)
			continue
		}
		logger.Info("Successfully registered node", "node", klog.KObj(node))
		c.registered.Store(true)
		return
	}
}

// tryRegister creates node; when it exists already (or creating is forbidden, which
// upstream also treats as "may exist"), it reconciles the existing Node with it.
func (c *Controller) tryRegister(ctx context.Context, node *v1.Node) error {
	_, err := c.client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if err == nil {
		c.startup.RecordRegisteredNewNode()
		return nil
	}
	if !apierrors.IsAlreadyExists(err) && !apierrors.IsForbidden(err) {
		return err
	}
	existing, getErr := c.client.CoreV1().Nodes().Get(ctx, c.opts.NodeName, metav1.GetOptions{})
	if getErr != nil {
		if apierrors.IsForbidden(err) {
			return err
		}
		return getErr
	}
	klog.FromContext(ctx).Info("Node was previously registered", "node", klog.KObj(node))
	original := existing.DeepCopy()
	resetExtended := c.resetExtended != nil && c.resetExtended()
	if !reconcileExisting(ctx, node, existing, resetExtended) {
		return nil
	}
	_, _, err = nodeutil.PatchNodeStatus(c.client.CoreV1(), types.NodeName(c.opts.NodeName), original, existing)
	return err
}

// reconcileExisting brings the kubelet-owned parts of an existing Node in line with the
// one this kubelet would register: the attach/detach annotation, the default labels,
// the huge page resources and, when resetExtended (the node was re-created, its device
// plugins' state is gone), the extended resources. It reports whether anything changed.
func reconcileExisting(ctx context.Context, initial, existing *v1.Node, resetExtended bool) bool {
	changed := reconcileAttachDetach(ctx, initial, existing)
	changed = reconcileDefaultLabels(initial, existing) || changed
	changed = reconcileDefaultResources(initial, existing) || changed
	if resetExtended {
		changed = zeroExtendedResources(ctx, existing) || changed
	}
	changed = reconcileHugePages(ctx, initial, existing) || changed
	return changed
}

// zeroExtendedResources sets every extended resource's capacity and allocatable to 0
// until its device plugin registers again, so that the scheduler does not place pods
// on devices a re-created node may not have (upstream's reconcileExtendedResource).
func zeroExtendedResources(ctx context.Context, node *v1.Node) bool {
	changed := false
	for name := range node.Status.Capacity {
		if !resourcename.IsExtended(name) {
			continue
		}
		klog.FromContext(ctx).Info("Zero out resource capacity in existing node", "resourceName", name, "node", klog.KObj(node))
		node.Status.Capacity[name] = *resource.NewQuantity(0, resource.DecimalSI)
		node.Status.Allocatable[name] = *resource.NewQuantity(0, resource.DecimalSI)
		changed = true
	}
	return changed
}

func reconcileAttachDetach(ctx context.Context, initial, existing *v1.Node) bool {
	want, set := initial.Annotations[annotationControllerManagedAttach]
	if existing.Annotations[annotationControllerManagedAttach] == want {
		return false
	}
	logger := klog.FromContext(ctx)
	if !set {
		logger.Info("Controller attach-detach setting changed to false; updating existing Node")
		delete(existing.Annotations, annotationControllerManagedAttach)
		return true
	}
	logger.Info("Controller attach-detach setting changed to true; updating existing Node")
	if existing.Annotations == nil {
		existing.Annotations = map[string]string{}
	}
	existing.Annotations[annotationControllerManagedAttach] = want
	return true
}

// reconcileDefaultLabels sets each default label this kubelet has a value for; a label
// this kubelet sets empty is removed.
func reconcileDefaultLabels(initial, existing *v1.Node) bool {
	if existing.Labels == nil {
		existing.Labels = map[string]string{}
	}
	changed := false
	for _, key := range defaultLabels {
		want, ok := initial.Labels[key]
		if !ok {
			continue
		}
		if existing.Labels[key] != want {
			existing.Labels[key] = want
			changed = true
		}
		if existing.Labels[key] == "" {
			delete(existing.Labels, key)
		}
	}
	return changed
}

// reconcileDefaultResources gives a Node without capacity or allocatable the initial
// node's.
func reconcileDefaultResources(initial, existing *v1.Node) bool {
	changed := false
	if existing.Status.Capacity == nil {
		existing.Status.Capacity = initial.Status.Capacity.DeepCopy()
		changed = initial.Status.Capacity != nil
	}
	if existing.Status.Allocatable == nil {
		existing.Status.Allocatable = initial.Status.Allocatable.DeepCopy()
		changed = changed || initial.Status.Allocatable != nil
	}
	if existing.Status.Capacity == nil {
		existing.Status.Capacity = v1.ResourceList{}
	}
	if existing.Status.Allocatable == nil {
		existing.Status.Allocatable = v1.ResourceList{}
	}
	return changed
}

// reconcileHugePages updates each huge page size's capacity and allocatable to the
// host's and drops sizes the host no longer has.
func reconcileHugePages(ctx context.Context, initial, existing *v1.Node) bool {
	changed := false
	for name, want := range initial.Status.Capacity {
		if !isHugePages(name) {
			continue
		}
		have, ok := existing.Status.Capacity[name]
		if !ok || have.Cmp(want) != 0 {
			existing.Status.Capacity[name] = want.DeepCopy()
			changed = true
		}
		wantAlloc, haveAlloc := initial.Status.Allocatable[name], existing.Status.Allocatable[name]
		if !ok || haveAlloc.Cmp(wantAlloc) != 0 {
			existing.Status.Allocatable[name] = wantAlloc.DeepCopy()
			changed = true
		}
	}
	for name := range existing.Status.Capacity {
		if _, ok := initial.Status.Capacity[name]; ok || !isHugePages(name) {
			continue
		}
		klog.FromContext(ctx).Info("Removing huge page resource which is no longer supported", "resourceName", name)
		delete(existing.Status.Capacity, name)
		delete(existing.Status.Allocatable, name)
		changed = true
	}
	return changed
}
