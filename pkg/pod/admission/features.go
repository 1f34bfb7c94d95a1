package admission

import (
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
	ndf "k8s.io/component-helpers/nodedeclaredfeatures"
)

// ReasonPodFeatureUnsupported rejects a pod that needs a node feature this node does not
// declare.
const ReasonPodFeatureUnsupported = "PodFeatureUnsupported"

// admitDeclaredFeatures is upstream's declared-features handler: the features a pod
// needs (e.g. RestartAllContainers rules, hostNetwork with a user namespace, bind mount
// options) must be in the node's declared features.
func (a *Admitter) admitDeclaredFeatures(pod *v1.Pod, _ []*v1.Pod) Result {
	framework := ndf.DefaultFramework
	needed, err := framework.InferForPodScheduling(&ndf.PodInfo{Spec: &pod.Spec, Status: &pod.Status}, a.version)
	if err != nil {
		return reject(ReasonPodFeatureUnsupported, fmt.Sprintf("Failed to infer pod's feature requirements: %v", err))
	}
	if needed.IsEmpty() {
		return admitted()
	}
	match, err := framework.MatchNodeFeatureSet(needed, a.features)
	if err != nil {
		return reject(ReasonPodFeatureUnsupported,
			fmt.Sprintf("Failed to match pod's feature requirements against the node: %v", err))
	}
	if !match.IsMatch {
		return reject(ReasonPodFeatureUnsupported, fmt.Sprintf("Pod requires node features that are not available: %s",
			strings.Join(match.UnsatisfiedRequirements, ", ")))
	}
	return admitted()
}
