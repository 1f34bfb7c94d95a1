package app

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/nodelet/nodelet/pkg/api/podresources"
	"github.com/nodelet/nodelet/pkg/node/deviceplugin"
	"github.com/nodelet/nodelet/pkg/node/dra"
	"github.com/nodelet/nodelet/pkg/node/pluginwatcher"
	"github.com/nodelet/nodelet/pkg/node/volumes/csi"
	"github.com/nodelet/nodelet/pkg/pod/kubelet"
	"github.com/nodelet/nodelet/pkg/pod/podmanager"
	"github.com/nodelet/nodelet/pkg/runtime/criconfig"
)

// podResourcesMetrics count the pod-resources API's requests (registered with the
// kubelet's metrics at start, as upstream's are).
var podResourcesMetrics = podresources.NewMetrics()

// newDevicePlugins builds the device plugin manager on upstream's fixed socket directory
// (/var/lib/kubelet/device-plugins whatever --root-dir is: that is where plugins look).
func newDevicePlugins() (*deviceplugin.Manager, error) {
	return deviceplugin.New(deviceplugin.Options{Dir: deviceplugin.DefaultDir})
}

// newDRA builds the DRA manager, its checkpoint under the root directory as upstream's.
// Standalone it has no API client: a pod with resource claims is then refused with that
// reason when its sandbox would be created.
func newDRA(rootDir, nodeName string, cl *cluster, reg prometheus.Registerer) (*dra.Manager, error) {
	o := dra.Options{StateDir: rootDir, NodeName: nodeName}
	if cl != nil {
		o.Client = cl.clients.Kube
	}
	m, err := dra.New(o)
	if err != nil {
		return nil, fmt.Errorf("failed to initialize the DRA manager: %w", err)
	}
	for _, c := range m.Collectors() {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// releaser frees what a stopped pod held: its DRA claims, then its NUMA affinities.
type releaser struct {
	claims   *dra.Manager
	managers *resourceManagers
}

func (r releaser) ReleaseResources(ctx context.Context, pod *v1.Pod) error {
	if err := r.claims.UnprepareResources(ctx, pod); err != nil {
		return err
	}
	r.managers.forgetPod(pod)
	return nil
}

// startDRA starts the DRA manager's reconcile loop and forwards its health reports. Its
// plugin handler must be registered with the plugin watcher only after this (the start
// wipes the node's stale ResourceSlices first).
func startDRA(ctx context.Context, m *dra.Manager, loop *kubelet.Kubelet, health *resourceHealth) error {
	if err := m.Start(ctx, loop.ActivePods, loop.AllSourcesReady); err != nil {
		return err
	}
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case u := <-m.Updates():
				health.forward(ctx, u.PodUIDs)
			}
		}
	}()
	return nil
}

// startPluginWatcher watches <root-dir>/plugins_registry for the sockets of node plugins
// (DRA and CSI drivers) and registers each with the handler of its type. Like upstream's
// plugin manager it starts at once, not waiting for the pod sources.
func startPluginWatcher(ctx context.Context, rootDir string, claims *dra.Manager, drivers *csi.Manager, reg prometheus.Registerer) error {
	w := pluginwatcher.New(filepath.Join(rootDir, pluginwatcher.RegistryDirName))
	w.AddHandler(dra.PluginType, claims.PluginHandler())
	w.AddHandler(csi.PluginType, drivers)
	if err := reg.Register(w.Collector()); err != nil {
		return err
	}
	if err := reg.Register(csi.Collector()); err != nil {
		return err
	}
	return w.Run(ctx, nil)
}

// startDevicePlugins serves the plugins' registration socket and keeps the node status
// up to date with their devices. The containers running when nodelet starts keep the
// devices the checkpoint gives them.
func startDevicePlugins(ctx context.Context, m *deviceplugin.Manager, loop *kubelet.Kubelet, sourcesReady func() bool, rs internalapi.RuntimeService, syncNode func(), health *resourceHealth) error {
	if err := m.Start(ctx, deviceplugin.StartOptions{
		ActivePods: loop.ActivePods, SourcesReady: sourcesReady, RunningContainers: runningContainers(ctx, rs),
	}); err != nil {
		return err
	}
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-m.CapacityChanged():
				syncNode()
			case u := <-m.Updates():
				health.forward(ctx, u.PodUIDs)
			}
		}
	}()
	return nil
}

// resourceHealth joins what the device plugins and the DRA drivers say of their devices'
// health for the loop: in the containers' allocatedResourcesStatus, and a sync of the
// pods concerned when it changes.
type resourceHealth struct {
	devices *deviceplugin.Manager
	dra     *dra.Manager
	updates chan []types.UID
}

func newResourceHealth(devices *deviceplugin.Manager, d *dra.Manager) *resourceHealth {
	return &resourceHealth{devices: devices, dra: d, updates: make(chan []types.UID, 16)}
}

func (h *resourceHealth) Updates() <-chan []types.UID { return h.updates }

func (h *resourceHealth) UpdateAllocatedResourcesStatus(pod *v1.Pod, st *v1.PodStatus) {
	h.devices.UpdateAllocatedResourcesStatus(pod, st)
	h.dra.UpdateAllocatedResourcesStatus(pod, st)
}

// forward hands the loop the pods whose devices' health changed.
func (h *resourceHealth) forward(ctx context.Context, podUIDs []string) {
	uids := make([]types.UID, 0, len(podUIDs))
	for _, u := range podUIDs {
		uids = append(uids, types.UID(u))
	}
	select {
	case h.updates <- uids:
	case <-ctx.Done():
	}
}

// runningContainers are the containers the runtime runs now, by pod UID and name.
func runningContainers(ctx context.Context, rs internalapi.RuntimeService) []deviceplugin.ContainerKey {
	list, err := rs.ListContainers(ctx, &runtimeapi.ContainerFilter{State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING}})
	if err != nil {
		klog.ErrorS(err, "Failed to list the running containers for the device plugin manager")
		return nil
	}
	keys := make([]deviceplugin.ContainerKey, 0, len(list))
	for _, c := range list {
		keys = append(keys, deviceplugin.ContainerKey{
			PodUID: c.Labels[criconfig.PodUIDLabel], ContainerName: c.Labels[criconfig.ContainerNameLabel]})
	}
	return keys
}

// deviceRunOptions turns a container's devices into what the CRI config takes: those the
// device plugins allocated to it, and the CDI devices of its prepared DRA claims.
func deviceRunOptions(m *deviceplugin.Manager, claims *dra.Manager) func(ctx context.Context, pod *v1.Pod, c *v1.Container) (*criconfig.DeviceOptions, error) {
	return func(ctx context.Context, pod *v1.Pod, c *v1.Container) (*criconfig.DeviceOptions, error) {
		d, err := pluginDeviceOptions(ctx, m, pod, c)
		if err != nil {
			return nil, err
		}
		cdi, err := claims.GetResources(pod, c)
		if err != nil {
			return nil, err
		}
		if len(cdi) > 0 && d == nil {
			d = &criconfig.DeviceOptions{}
		}
		for _, name := range cdi {
			d.CDIDevices = append(d.CDIDevices, &runtimeapi.CDIDevice{Name: name})
		}
		return d, nil
	}
}

// pluginDeviceOptions are the device plugins' allocation for the container (nil: none).
func pluginDeviceOptions(ctx context.Context, m *deviceplugin.Manager, pod *v1.Pod, c *v1.Container) (*criconfig.DeviceOptions, error) {
	o, err := m.GetDeviceRunContainerOptions(ctx, pod, c)
	if err != nil || o == nil {
		return nil, err
	}
	d := &criconfig.DeviceOptions{Annotations: map[string]string{}}
	for _, e := range o.Envs {
		d.Envs = append(d.Envs, &runtimeapi.KeyValue{Key: e.Name, Value: []byte(e.Value)})
	}
	for _, mnt := range o.Mounts {
		d.Mounts = append(d.Mounts, &runtimeapi.Mount{ContainerPath: mnt.ContainerPath, HostPath: mnt.HostPath, Readonly: mnt.ReadOnly})
	}
	for _, dev := range o.Devices {
		d.Devices = append(d.Devices, &runtimeapi.Device{HostPath: dev.PathOnHost, ContainerPath: dev.PathInContainer, Permissions: dev.Permissions})
	}
	for _, cdi := range o.CDIDevices {
		d.CDIDevices = append(d.CDIDevices, &runtimeapi.CDIDevice{Name: cdi.Name})
	}
	for _, a := range o.Annotations {
		d.Annotations[a.Name] = a.Value
	}
	return d, nil
}

// servePodResources serves the pod-resources API on <root-dir>/pod-resources/kubelet.sock
// (monitoring agents read the devices and claims of each container there) until ctx ends.
func servePodResources(ctx context.Context, rootDir string, loop *kubelet.Kubelet, pods *podmanager.Manager, devices *deviceplugin.Manager, claims *dra.Manager, managers *resourceManagers, metrics *podresources.Metrics) {
	cfg := podresources.Config{
		Providers: podresources.Providers{Pods: podsProvider{loop, pods}, Devices: devicesProvider{devices}, DynamicResources: claims,
			CPUs: cpusProvider{managers.cpus}, Memory: memoryProvider{managers.memory}},
		Options: podresources.DefaultOptions(), Metrics: metrics,
	}
	go func() {
		if err := podresources.Serve(ctx, podresources.SocketPath(rootDir), cfg); err != nil {
			klog.ErrorS(err, "Failed to serve the pod-resources API")
		}
	}()
}

type podsProvider struct {
	loop *kubelet.Kubelet
	pods *podmanager.Manager
}

func (p podsProvider) GetActivePods() []*v1.Pod { return p.loop.ActivePods() }
func (p podsProvider) GetPods() []*v1.Pod       { return p.pods.GetPods() }
func (p podsProvider) GetPodByName(namespace, name string) (*v1.Pod, bool) {
	return p.pods.GetPodByName(namespace, name)
}

type devicesProvider struct{ m *deviceplugin.Manager }

func (d devicesProvider) UpdateAllocatedDevices(klog.Logger) { d.m.UpdateAllocatedDevices() }
func (d devicesProvider) GetDevices(podUID, containerName string) []*podresourcesv1.ContainerDevices {
	return containerDevices(d.m.GetDevices(podUID, containerName))
}
func (d devicesProvider) GetAllocatableDevices(klog.Logger) []*podresourcesv1.ContainerDevices {
	return containerDevices(d.m.GetAllocatableDevices())
}

// containerDevices lists each device once per NUMA node it is on (once without a
// topology), as upstream's pod-resources API does.
func containerDevices(devs deviceplugin.ResourceDeviceInstances) []*podresourcesv1.ContainerDevices {
	var out []*podresourcesv1.ContainerDevices
	for resource, byID := range devs {
		for id, dev := range byID {
			nodes := dev.GetTopology().GetNodes()
			if len(nodes) == 0 {
				out = append(out, &podresourcesv1.ContainerDevices{ResourceName: resource, DeviceIds: []string{id}})
				continue
			}
			for _, n := range nodes {
				out = append(out, &podresourcesv1.ContainerDevices{ResourceName: resource, DeviceIds: []string{id},
					Topology: &podresourcesv1.TopologyInfo{Nodes: []*podresourcesv1.NUMANode{{ID: n.GetID()}}}})
			}
		}
	}
	return out
}
