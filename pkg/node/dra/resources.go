package dra

import (
	"fmt"
	"slices"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/nodelet/nodelet/pkg/node/dra/state"
	"github.com/nodelet/nodelet/pkg/resourcename"
)

// claimRequests are the requests a container makes of one claim; "" stands for the
// whole claim.
type claimRequests struct {
	claimName string
	requests  []string
}

// GetResources returns the CDI device IDs of the devices prepared for the container's
// claims (all of a claim's devices, or those serving the requests it names) and for
// its extended resources backed by DRA, for the container's CRI config.
func (m *Manager) GetResources(pod *v1.Pod, container *v1.Container) ([]string, error) {
	wanted, err := containerClaimRequests(pod, container)
	if err != nil {
		return nil, err
	}
	cdiDevices := []string{}
	m.cache.RLock()
	defer m.cache.RUnlock()
	for _, w := range wanted {
		info, ok := m.cache.get(w.claimName, pod.Namespace)
		if !ok {
			return nil, fmt.Errorf("internal error: unable to get claim info for ResourceClaim %s in namespace %s", w.claimName, pod.Namespace)
		}
		for _, request := range w.requests {
			cdiDevices = append(cdiDevices, info.cdiDevices(request)...)
		}
	}
	return cdiDevices, nil
}

// containerClaimRequests lists, in the pod's claim order, the claims the container
// uses and the requests it names.
func containerClaimRequests(pod *v1.Pod, container *v1.Container) ([]claimRequests, error) {
	var out []claimRequests
	for i := range pod.Spec.ResourceClaims {
		podClaim := &pod.Spec.ResourceClaims[i]
		var requests []string
		for _, ref := range container.Resources.Claims {
			if ref.Name == podClaim.Name {
				requests = append(requests, ref.Request)
			}
		}
		if len(requests) == 0 {
			continue
		}
		name, _, err := claimName(pod, podClaim)
		if err != nil {
			return nil, err
		}
		// No claim was generated for this entry, which is valid: nothing to add.
		if name != nil {
			out = append(out, claimRequests{claimName: *name, requests: requests})
		}
	}
	if ext := extendedResourceRequests(pod, container); len(ext) > 0 {
		out = append(out, claimRequests{claimName: pod.Status.ExtendedResourceClaimStatus.ResourceClaimName, requests: ext})
	}
	return out, nil
}

// extendedResourceRequests returns the requests of the scheduler's extended resource
// claim that serve the container's extended resources backed by DRA.
func extendedResourceRequests(pod *v1.Pod, container *v1.Container) []string {
	ext := pod.Status.ExtendedResourceClaimStatus
	if ext == nil {
		return nil
	}
	requested := sets.New[string]()
	for name, quantity := range container.Resources.Requests {
		if !quantity.IsZero() && resourcename.IsDRAExtended(name) {
			requested.Insert(string(name))
		}
	}
	var requests []string
	for _, mapping := range ext.RequestMappings {
		if mapping.ContainerName == container.Name && requested.Has(mapping.ResourceName) {
			requests = append(requests, mapping.RequestName)
		}
	}
	return requests
}

// GetContainerClaimInfos returns copies of the prepared claims the container uses,
// including the extended resource claim when the container has a request mapped to it.
func (m *Manager) GetContainerClaimInfos(pod *v1.Pod, container *v1.Container) ([]state.ClaimInfoState, error) {
	var out []state.ClaimInfoState
	m.cache.RLock()
	defer m.cache.RUnlock()
	for i := range pod.Spec.ResourceClaims {
		podClaim := &pod.Spec.ResourceClaims[i]
		if !slices.ContainsFunc(container.Resources.Claims, func(c v1.ResourceClaim) bool { return c.Name == podClaim.Name }) {
			continue
		}
		name, _, err := claimName(pod, podClaim)
		if err != nil {
			return nil, err
		}
		if name == nil {
			continue
		}
		info, ok := m.cache.get(*name, pod.Namespace)
		if !ok {
			return nil, fmt.Errorf("unable to get information for ResourceClaim %s", *name)
		}
		out = append(out, info.Clone())
	}
	ext := pod.Status.ExtendedResourceClaimStatus
	if ext == nil || !slices.ContainsFunc(ext.RequestMappings, func(r v1.ContainerExtendedResourceRequest) bool { return r.ContainerName == container.Name }) {
		return out, nil
	}
	info, ok := m.cache.get(ext.ResourceClaimName, pod.Namespace)
	if !ok {
		return nil, fmt.Errorf("unable to get claim info for claim %s in namespace %s", ext.ResourceClaimName, pod.Namespace)
	}
	return append(out, info.Clone()), nil
}

// GetDynamicResources is the pod-resources API's view of the container's claims: per
// claim, one entry per prepared device with its driver, pool, name, share ID and CDI
// device IDs. Errors are logged and read as no resources, as upstream's.
func (m *Manager) GetDynamicResources(logger klog.Logger, pod *v1.Pod, container *v1.Container) []*podresourcesv1.DynamicResource {
	infos, err := m.GetContainerClaimInfos(pod, container)
	if err != nil {
		logger.Error(err, "Unable to get container claim info state")
		return []*podresourcesv1.DynamicResource{}
	}
	var out []*podresourcesv1.DynamicResource
	for _, info := range infos {
		out = append(out, &podresourcesv1.DynamicResource{
			ClaimName: info.ClaimName, ClaimNamespace: info.Namespace, ClaimResources: claimResources(info),
		})
	}
	return out
}

func claimResources(info state.ClaimInfoState) []*podresourcesv1.ClaimResource {
	var out []*podresourcesv1.ClaimResource
	for _, driverName := range info.DriverNames() {
		for _, d := range info.DriverState[driverName].Devices {
			var cdi []*podresourcesv1.CDIDevice
			for _, id := range d.CDIDeviceIDs {
				cdi = append(cdi, &podresourcesv1.CDIDevice{Name: id})
			}
			out = append(out, &podresourcesv1.ClaimResource{
				CdiDevices: cdi, DriverName: driverName, PoolName: d.PoolName, DeviceName: d.DeviceName,
				ShareId: (*string)(d.ShareID),
			})
		}
	}
	return out
}
