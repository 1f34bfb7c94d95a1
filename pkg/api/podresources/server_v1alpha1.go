package podresources

import (
	"context"

	"k8s.io/klog/v2"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
	"k8s.io/kubelet/pkg/apis/podresources/v1alpha1"
)

// v1alpha1Server implements the deprecated v1alpha1.PodResourcesListerServer.
type v1alpha1Server struct {
	v1alpha1.UnsafePodResourcesListerServer
	providers Providers
	metrics   *Metrics
}

// NewV1alpha1Server returns the v1alpha1 PodResourcesLister: devices only, over providers
// (nil ones read as empty), counting its requests in metrics (nil: in counters nobody
// registered).
func NewV1alpha1Server(providers Providers, metrics *Metrics) v1alpha1.PodResourcesListerServer {
	return &v1alpha1Server{providers: providers.withEmptyDefaults(), metrics: metrics.orNew()}
}

// List returns the devices of every known pod's regular containers. Upstream's v1alpha1
// lists all pods, terminal ones included, and no init containers: the fixes went to v1.
func (s *v1alpha1Server) List(ctx context.Context, _ *v1alpha1.ListPodResourcesRequest) (*v1alpha1.ListPodResourcesResponse, error) {
	s.metrics.requestsTotal.WithLabelValues(apiV1alpha1).Inc()
	logger := klog.FromContext(ctx)

	pods := s.providers.Pods.GetPods()
	s.providers.Devices.UpdateAllocatedDevices(logger)
	resources := make([]*v1alpha1.PodResources, len(pods))
	for i, pod := range pods {
		res := &v1alpha1.PodResources{
			Name:       pod.Name,
			Namespace:  pod.Namespace,
			Containers: make([]*v1alpha1.ContainerResources, len(pod.Spec.Containers)),
		}
		for j, container := range pod.Spec.Containers {
			res.Containers[j] = &v1alpha1.ContainerResources{
				Name:    container.Name,
				Devices: toV1alpha1Devices(s.providers.Devices.GetDevices(string(pod.UID), container.Name)),
			}
		}
		resources[i] = res
	}
	return &v1alpha1.ListPodResourcesResponse{PodResources: resources}, nil
}

// toV1alpha1Devices drops the topology, which v1alpha1 does not have.
func toV1alpha1Devices(devices []*podresourcesv1.ContainerDevices) []*v1alpha1.ContainerDevices {
	var out []*v1alpha1.ContainerDevices
	for _, d := range devices {
		out = append(out, &v1alpha1.ContainerDevices{ResourceName: d.ResourceName, DeviceIds: d.DeviceIds})
	}
	return out
}
