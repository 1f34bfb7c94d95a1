package podresources

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// Options are the feature gates upstream's v1 server reads.
type Options struct {
	// UseActivePods is KubeletPodResourcesListUseActivePods (deprecated, default true in
	// v1.37): List shows only the pods that hold resources, not terminal ones.
	UseActivePods bool
	// PodLevelResourceManagers is the gate of that name (beta, default false in v1.37):
	// pods carry the CPUs and memory assigned to them as a whole.
	PodLevelResourceManagers bool
}

// DefaultOptions are the v1.37 defaults of the gates.
func DefaultOptions() Options {
	return Options{UseActivePods: true, PodLevelResourceManagers: false}
}

// v1Server implements podresourcesv1.PodResourcesListerServer.
type v1Server struct {
	podresourcesv1.UnsafePodResourcesListerServer
	providers Providers
	opts      Options
	metrics   *Metrics
}

// NewV1Server returns the v1 PodResourcesLister over providers (nil ones read as empty),
// counting its requests in metrics (nil: in counters nobody registered).
func NewV1Server(ctx context.Context, providers Providers, opts Options, metrics *Metrics) podresourcesv1.PodResourcesListerServer {
	klog.FromContext(ctx).Info("podresources", "method", "list", "useActivePods", opts.UseActivePods)
	return &v1Server{providers: providers.withEmptyDefaults(), opts: opts, metrics: metrics.orNew()}
}

// List returns the resources assigned to each listed pod's containers.
func (s *v1Server) List(ctx context.Context, _ *podresourcesv1.ListPodResourcesRequest) (*podresourcesv1.ListPodResourcesResponse, error) {
	s.metrics.requestsTotal.WithLabelValues(apiV1).Inc()
	s.metrics.requestsList.WithLabelValues(apiV1).Inc()
	logger := klog.FromContext(ctx)

	pods := s.listedPods()
	// Free devices of terminated pods first, so no container shows a stale assignment.
	s.providers.Devices.UpdateAllocatedDevices(logger)
	resources := make([]*podresourcesv1.PodResources, len(pods))
	for i, pod := range pods {
		resources[i] = s.podResources(logger, pod)
	}
	return &podresourcesv1.ListPodResourcesResponse{PodResources: resources}, nil
}

// listedPods are the active pods, or with UseActivePods off every known pod, as
// upstream's old behaviour listed terminal pods too.
func (s *v1Server) listedPods() []*v1.Pod {
	if s.opts.UseActivePods {
		return s.providers.Pods.GetActivePods()
	}
	return s.providers.Pods.GetPods()
}

// GetAllocatableResources returns what the node can allocate: its capacity, not what is
// still free.
func (s *v1Server) GetAllocatableResources(ctx context.Context, _ *podresourcesv1.AllocatableResourcesRequest) (*podresourcesv1.AllocatableResourcesResponse, error) {
	s.metrics.requestsTotal.WithLabelValues(apiV1).Inc()
	s.metrics.requestsGetAllocatable.WithLabelValues(apiV1).Inc()
	logger := klog.FromContext(ctx)
	return &podresourcesv1.AllocatableResourcesResponse{
		Devices: s.providers.Devices.GetAllocatableDevices(logger),
		CpuIds:  s.providers.CPUs.GetAllocatableCPUs(),
		Memory:  s.providers.Memory.GetAllocatableMemory(logger),
	}, nil
}

// Get returns the resources assigned to one active pod's containers. Unlike List it does
// not free the devices of terminated pods first, as upstream.
func (s *v1Server) Get(ctx context.Context, req *podresourcesv1.GetPodResourcesRequest) (*podresourcesv1.GetPodResourcesResponse, error) {
	s.metrics.requestsTotal.WithLabelValues(apiV1).Inc()
	s.metrics.requestsGet.WithLabelValues(apiV1).Inc()
	pod, found := s.providers.Pods.GetPodByName(req.PodNamespace, req.PodName)
	if !found {
		s.metrics.errorsGet.WithLabelValues(apiV1).Inc()
		// A plain error, so gRPC reports codes.Unknown, as upstream does.
		return nil, fmt.Errorf("pod %s in namespace %s not found", req.PodName, req.PodNamespace)
	}
	return &podresourcesv1.GetPodResourcesResponse{PodResources: s.podResources(klog.FromContext(ctx), pod)}, nil
}

// podResources describes one pod: its restartable (sidecar) init containers, which hold
// resources for the pod's life, then its regular containers. Other init containers and
// ephemeral containers are left out, as upstream.
func (s *v1Server) podResources(logger klog.Logger, pod *v1.Pod) *podresourcesv1.PodResources {
	res := &podresourcesv1.PodResources{
		Name:       pod.Name,
		Namespace:  pod.Namespace,
		Containers: make([]*podresourcesv1.ContainerResources, 0, len(pod.Spec.InitContainers)+len(pod.Spec.Containers)),
	}
	if s.opts.PodLevelResourceManagers {
		res.CpuIds = s.providers.CPUs.GetPodCPUs(string(pod.UID))
		res.Memory = s.providers.Memory.GetPodMemory(logger, string(pod.UID))
	}
	for i := range pod.Spec.InitContainers {
		if isRestartableInitContainer(&pod.Spec.InitContainers[i]) {
			res.Containers = append(res.Containers, s.containerResources(logger, pod, &pod.Spec.InitContainers[i]))
		}
	}
	for i := range pod.Spec.Containers {
		res.Containers = append(res.Containers, s.containerResources(logger, pod, &pod.Spec.Containers[i]))
	}
	return res
}

func (s *v1Server) containerResources(logger klog.Logger, pod *v1.Pod, container *v1.Container) *podresourcesv1.ContainerResources {
	return &podresourcesv1.ContainerResources{
		Name:             container.Name,
		Devices:          s.providers.Devices.GetDevices(string(pod.UID), container.Name),
		CpuIds:           s.providers.CPUs.GetCPUs(pod, container),
		Memory:           s.providers.Memory.GetMemory(logger, pod, container),
		DynamicResources: s.providers.DynamicResources.GetDynamicResources(logger, pod, container),
	}
}

// isRestartableInitContainer tells a sidecar: an init container with restartPolicy Always.
func isRestartableInitContainer(c *v1.Container) bool {
	return c.RestartPolicy != nil && *c.RestartPolicy == v1.ContainerRestartPolicyAlways
}
