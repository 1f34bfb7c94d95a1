package admission

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/kubetypes"
)

// Upstream's rejection reasons (pkg/kubelet/lifecycle/predicate.go and the scheduler
// plugin names the kubelet reuses as reasons).
const (
	ReasonInvalidNodeInfo                      = "InvalidNodeInfo"
	ReasonPodOSSelectorNodeLabelDoesNotMatch   = "PodOSSelectorNodeLabelDoesNotMatch"
	ReasonPodOSNotSupported                    = "PodOSNotSupported"
	ReasonSupplementalGroupsPolicyNotSupported = "SupplementalGroupsPolicyNotSupported"
	// ReasonOutOfPrefix prefixes a resource name: OutOfcpu, OutOfmemory, OutOfpods,
	// OutOfephemeral-storage, OutOfhugepages-2Mi, OutOfexample.com/gpu.
	ReasonOutOfPrefix     = "OutOf"
	ReasonNodeAffinity    = "NodeAffinity"
	ReasonNodeName        = "NodeName"
	ReasonNodePorts       = "NodePorts"
	ReasonTaintToleration = "TaintToleration"
)

// The scheduler plugins' failure descriptions, quoted in "Predicate <name> failed: <desc>".
const (
	descNodeAffinity    = "node(s) didn't match Pod's node affinity/selector"
	descNodeName        = "node(s) didn't match the requested node name"
	descNodePorts       = "node(s) didn't have free ports for the requested pod ports"
	descTaintToleration = "node(s) had taints that the pod didn't tolerate"
)

// failure is one failed predicate, already in the shape of its Result.
type failure struct {
	Result
	// resource is set for OutOf<resource> failures, which a critical pod may override.
	resource bool
}

func predicateFailure(name, desc string) failure {
	return failure{Result: reject(name, fmt.Sprintf("Predicate %s failed: %s", name, desc))}
}

func insufficientResource(name v1.ResourceName, requested, used, capacity int64) failure {
	msg := fmt.Sprintf("Node didn't have enough resource: %s, requested: %d, used: %d, capacity: %d",
		name, requested, used, capacity)
	return failure{Result: reject(ReasonOutOfPrefix+string(name), msg), resource: true}
}

// admitPredicates is upstream's predicateAdmitHandler: the checks preemption cannot help
// first, then the scheduler's general predicates against this node.
func (a *Admitter) admitPredicates(pod *v1.Pod, others []*v1.Pod) Result {
	node, err := a.node()
	if err != nil || node == nil {
		klog.ErrorS(err, "Cannot get Node info")
		return reject(ReasonInvalidNodeInfo, "Kubelet cannot get node info.")
	}
	if podOSLabelMismatch(pod, a.goos) {
		return reject(ReasonPodOSSelectorNodeLabelDoesNotMatch,
			"Failed to admit pod as the `kubernetes.io/os` label doesn't match node label")
	}
	if pod.Spec.OS != nil && string(pod.Spec.OS.Name) != a.goos {
		return reject(ReasonPodOSNotSupported, "Failed to admit pod as the OS field doesn't match node OS")
	}
	if strictSupplementalGroupsUnsupported(pod, node) {
		return reject(ReasonSupplementalGroupsPolicyNotSupported,
			fmt.Sprintf("SupplementalGroupsPolicy=%s is not supported in this node", v1.SupplementalGroupsPolicyStrict))
	}

	// Extended resources the node does not have are cluster-level or DRA-backed
	// resources; the node cannot account for them, so they do not count.
	fitPod := withoutMissingExtendedResources(pod, node)
	failures := generalPredicates(fitPod, others, node)
	if onlyNodeAffinity(failures) && a.opts.RefreshNode != nil {
		// The labels may have changed since the cached Node: check a fresh one.
		if fresh, err := a.opts.RefreshNode(); err != nil {
			klog.ErrorS(err, "Failed to synchronously fetch node info")
		} else if fresh != nil {
			failures = generalPredicates(fitPod, others, fresh)
		}
	}
	if kubetypes.IsCriticalPod(pod) {
		failures = criticalPodFailures(failures)
	}
	if len(failures) == 0 {
		return admitted()
	}
	klog.V(2).InfoS("Predicate failed on Pod", "pod", klog.KObj(pod), "err", failures[0].Message)
	return failures[0].Result
}

// generalPredicates is upstream's generalFilter: every failure, in the order resources,
// node affinity, node name, host ports, NoExecute taints.
func generalPredicates(pod *v1.Pod, others []*v1.Pod, node *v1.Node) []failure {
	failures := resourceFailures(pod, others, node)
	if matches, _ := nodeaffinity.GetRequiredNodeAffinity(pod).Match(node); !matches {
		failures = append(failures, predicateFailure(ReasonNodeAffinity, descNodeAffinity))
	}
	if pod.Spec.NodeName != "" && pod.Spec.NodeName != node.Name {
		failures = append(failures, predicateFailure(ReasonNodeName, descNodeName))
	}
	if hostPortsConflict(pod, others) {
		failures = append(failures, predicateFailure(ReasonNodePorts, descNodePorts))
	}
	// Static pods run whatever the node's taints: they are the node's own.
	if !kubetypes.IsStaticPod(pod) && hasUntoleratedNoExecuteTaint(pod, node) {
		failures = append(failures, predicateFailure(ReasonTaintToleration, descTaintToleration))
	}
	return failures
}

func onlyNodeAffinity(failures []failure) bool {
	for _, f := range failures {
		if f.Reason != ReasonNodeAffinity {
			return false
		}
	}
	return len(failures) > 0
}

// criticalPodFailures drops resource failures when others remain: upstream never rejects
// a critical pod for lack of resources, it preempts other pods instead (which nodelet does
// not do yet, so a critical pod that fails only on resources keeps that failure).
func criticalPodFailures(failures []failure) []failure {
	var other []failure
	for _, f := range failures {
		if !f.resource {
			other = append(other, f)
		}
	}
	if len(other) > 0 {
		return other
	}
	return failures
}

// hasUntoleratedNoExecuteTaint: the kubelet only enforces NoExecute taints; NoSchedule and
// PreferNoSchedule are the scheduler's. tolerationSeconds does not matter at admission.
func hasUntoleratedNoExecuteTaint(pod *v1.Pod, node *v1.Node) bool {
	noExecute := func(t *v1.Taint) bool { return t.Effect == v1.TaintEffectNoExecute }
	// The comparison operators (Lt, Gt) are behind an alpha feature gate, off by default.
	_, untolerated := corev1.FindMatchingUntoleratedTaint(klog.Background(), node.Spec.Taints,
		pod.Spec.Tolerations, noExecute, false)
	return untolerated
}

// podOSLabelMismatch is upstream's rejectPodAdmissionBasedOnOSSelector. Despite its
// name it compares the pod's own kubernetes.io/os label (not its nodeSelector, which
// node affinity checks) with the node's OS. Upstream corrects a missing or wrong node
// label to the kubelet's OS before comparing, so the node's OS is always goos.
func podOSLabelMismatch(pod *v1.Pod, goos string) bool {
	podOS, ok := pod.Labels[v1.LabelOSStable]
	return ok && podOS != goos
}

// strictSupplementalGroupsUnsupported: a pod asking for SupplementalGroupsPolicy=Strict
// needs a runtime that supports it, which node status reports in status.features.
func strictSupplementalGroupsUnsupported(pod *v1.Pod, node *v1.Node) bool {
	sc := pod.Spec.SecurityContext
	if sc == nil || sc.SupplementalGroupsPolicy == nil || *sc.SupplementalGroupsPolicy != v1.SupplementalGroupsPolicyStrict {
		return false
	}
	f := node.Status.Features
	return f == nil || f.SupplementalGroupsPolicy == nil || !*f.SupplementalGroupsPolicy
}
