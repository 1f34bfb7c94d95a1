package dra

import (
	"errors"
	"fmt"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The errors claimName wraps, with the texts of k8s.io/dynamic-resource-allocation's
// resourceclaim package, which users see in pod events.
var (
	ErrAPIUnsupported = errors.New("none of the supported fields are set")
	ErrClaimNotFound  = errors.New("ResourceClaim not created yet")
)

// claimName resolves the ResourceClaim a pod's claim entry refers to. A claim from a
// template is named in the pod's status by the controller that created it; until then
// the claim does not exist. A nil name (the controller decided no claim is needed)
// means there is nothing to do. mustCheckOwner is set for generated claims, which must
// be owned by the pod.
func claimName(pod *v1.Pod, podClaim *v1.PodResourceClaim) (name *string, mustCheckOwner bool, err error) {
	switch {
	case podClaim.ResourceClaimName != nil:
		return podClaim.ResourceClaimName, false, nil
	case podClaim.ResourceClaimTemplateName != nil:
		for _, status := range pod.Status.ResourceClaimStatuses {
			if status.Name == podClaim.Name {
				return status.ResourceClaimName, true, nil
			}
		}
		return nil, false, fmt.Errorf(`pod "%s/%s": %w`, pod.Namespace, pod.Name, ErrClaimNotFound)
	default:
		return nil, false, fmt.Errorf(`pod "%s/%s", spec.resourceClaim %q: %w`, pod.Namespace, pod.Name, podClaim.Name, ErrAPIUnsupported)
	}
}

// checkClaimIsForPod verifies that a claim generated from a template belongs to the pod
// (same namespace, the pod is its controller), so that a pod cannot take over another
// pod's claim by naming it in its status.
func checkClaimIsForPod(pod *v1.Pod, claim *resourceapi.ResourceClaim) error {
	if claim.Namespace != pod.Namespace {
		return fmt.Errorf("ResourceClaim %s/%s is not in the same namespace as Pod %s/%s", claim.Namespace, claim.Name, pod.Namespace, pod.Name)
	}
	if !metav1.IsControlledBy(claim, pod) {
		return fmt.Errorf("ResourceClaim %s/%s was not created for Pod %s/%s (Pod is not owner)", claim.Namespace, claim.Name, pod.Namespace, pod.Name)
	}
	return nil
}

// isReservedForPod tells whether the scheduler reserved the claim for the pod.
func isReservedForPod(pod *v1.Pod, claim *resourceapi.ResourceClaim) bool {
	for _, consumer := range claim.Status.ReservedFor {
		if consumer.UID == pod.UID {
			return true
		}
	}
	return false
}

// podClaimsToPrepare returns the pod's claims, plus the claim the scheduler created for
// the pod's extended resources backed by DRA (GA in v1.37), which the pod's spec does
// not list.
func podClaimsToPrepare(pod *v1.Pod) []v1.PodResourceClaim {
	claims := pod.Spec.ResourceClaims
	if ext := pod.Status.ExtendedResourceClaimStatus; ext != nil {
		claims = append(claims[:len(claims):len(claims)], v1.PodResourceClaim{ResourceClaimName: &ext.ResourceClaimName})
	}
	return claims
}

// podClaimNames resolves the names of all the pod's claims, skipping the ones for which
// no claim was generated.
func podClaimNames(pod *v1.Pod) ([]string, error) {
	var names []string
	for i := range pod.Spec.ResourceClaims {
		name, _, err := claimName(pod, &pod.Spec.ResourceClaims[i])
		if err != nil {
			return nil, err
		}
		if name != nil {
			names = append(names, *name)
		}
	}
	if ext := pod.Status.ExtendedResourceClaimStatus; ext != nil {
		names = append(names, ext.ResourceClaimName)
	}
	return names, nil
}
