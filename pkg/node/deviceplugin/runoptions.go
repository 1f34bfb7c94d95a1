package deviceplugin

import (
	"context"
	"fmt"
	"maps"
	"slices"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// DeviceRunContainerOptions are what a container needs to use its devices, merged from
// its plugins' Allocate answers; the runtime manager turns them into the CRI container
// config (envs, mounts, devices, annotations, CDI devices).
type DeviceRunContainerOptions struct {
	Envs        []EnvVar
	Mounts      []Mount
	Devices     []DeviceInfo
	Annotations []Annotation
	CDIDevices  []CDIDevice
}

// EnvVar is an environment variable to set.
type EnvVar struct {
	Name, Value string
}

// Mount is a host path to bind into the container. Name is the container path, as
// upstream names it; upstream never relabels these mounts for SELinux.
type Mount struct {
	Name          string
	ContainerPath string
	HostPath      string
	ReadOnly      bool
}

// DeviceInfo is a host device node to expose in the container, with its cgroup
// permissions ("rwm" letters).
type DeviceInfo struct {
	PathOnHost      string
	PathInContainer string
	Permissions     string
}

// Annotation is a container annotation.
type Annotation struct {
	Name, Value string
}

// CDIDevice is a fully qualified CDI device name (vendor.com/class=name).
type CDIDevice struct {
	Name string
}

// GetDeviceRunContainerOptions returns the options of the container's devices, nil when
// it has none. It first calls PreStartContainer on the plugins that asked for it. A
// device resource of an active pod with no recorded allocation (the kubelet restarted
// before its checkpoint had it) is allocated again.
func (m *Manager) GetDeviceRunContainerOptions(ctx context.Context, pod *v1.Pod, container *v1.Container) (*DeviceRunContainerOptions, error) {
	logger := klog.FromContext(ctx)
	podUID := string(pod.UID)
	needsReAllocate := false
	for _, resource := range sortedResourceNames(container.Resources.Limits) {
		q := container.Resources.Limits[v1.ResourceName(resource)]
		if !m.isDevicePluginResource(resource) || q.Value() == 0 {
			continue
		}
		if err := m.callPreStartContainerIfNeeded(ctx, podUID, container.Name, resource); err != nil {
			return nil, err
		}
		if !m.isPodActive(pod) {
			logger.V(5).Info("Pod deleted from activePods, skip to reAllocate", "pod", klog.KObj(pod), "podUID", podUID, "containerName", container.Name)
			continue
		}
		if m.containerDevices(podUID, container.Name, resource) == nil {
			needsReAllocate = true
		}
	}
	if needsReAllocate {
		logger.V(2).Info("Needs to re-allocate device plugin resources for pod", "pod", klog.KObj(pod), "containerName", container.Name)
		if err := m.Allocate(ctx, pod, container); err != nil {
			return nil, err
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.podDevices.runContainerOptions(logger, podUID, container.Name), nil
}

func (m *Manager) containerDevices(podUID, container, resource string) sets.Set[string] {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.podDevices.containerDevices(podUID, container, resource)
}

// callPreStartContainerIfNeeded lets the plugin prepare the container's devices (reset
// them, say) when its options ask for PreStartContainer.
func (m *Manager) callPreStartContainerIfNeeded(ctx context.Context, podUID, container, resource string) error {
	e, devices, err := m.preStartTarget(ctx, podUID, container, resource)
	if err != nil || e == nil {
		return err
	}
	klog.FromContext(ctx).V(4).Info("Issuing a PreStartContainer call for container", "containerName", container, "podUID", podUID)
	if _, err := e.preStartContainer(ctx, devices); err != nil {
		return fmt.Errorf("device plugin PreStartContainer rpc failed with err: %v", err)
	}
	return nil
}

// preStartTarget returns the endpoint to call PreStartContainer on and the devices to
// pass it, no endpoint when the plugin does not need the call.
func (m *Manager) preStartTarget(ctx context.Context, podUID, container, resource string) (*endpoint, []string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.endpoints[resource]
	if !ok {
		return nil, nil, fmt.Errorf("endpoint not found in cache for a registered resource: %s", resource)
	}
	if e.opts == nil || !e.opts.PreStartRequired {
		klog.FromContext(ctx).V(5).Info("Plugin options indicate to skip PreStartContainer for resource", "podUID", podUID, "resourceName", resource, "containerName", container)
		return nil, nil, nil
	}
	devices := m.podDevices.containerDevices(podUID, container, resource)
	if devices == nil {
		return nil, nil, fmt.Errorf("no devices found allocated in local cache for pod %s, container %s, resource %s", podUID, container, resource)
	}
	return e, sets.List(devices), nil
}

// runContainerOptions merges the container's Allocate answers, resource by resource in
// name order. The first setting of an env, device path, mount path or annotation wins;
// a conflicting later one is logged and dropped, as upstream does.
func (p podDevices) runContainerOptions(logger klog.Logger, podUID, container string) *DeviceRunContainerOptions {
	resources, ok := p[podUID][container]
	if !ok {
		return nil
	}
	b := newOptionsBuilder(logger)
	for _, name := range slices.Sorted(maps.Keys(resources)) {
		b.add(resources[name].resp)
	}
	return &b.opts
}

// optionsBuilder accumulates the options, remembering what each key was set to.
type optionsBuilder struct {
	logger      klog.Logger
	opts        DeviceRunContainerOptions
	envs        map[string]string
	devices     map[string]string
	mounts      map[string]string
	annotations map[string]string
	cdiDevices  sets.Set[string]
}

func newOptionsBuilder(logger klog.Logger) *optionsBuilder {
	return &optionsBuilder{logger: logger, envs: map[string]string{}, devices: map[string]string{},
		mounts: map[string]string{}, annotations: map[string]string{}, cdiDevices: sets.New[string]()}
}

func (b *optionsBuilder) add(resp *pluginapi.ContainerAllocateResponse) {
	if resp == nil {
		return
	}
	for _, k := range slices.Sorted(maps.Keys(resp.Envs)) {
		if b.firstSetting("Environment variable", b.envs, k, resp.Envs[k]) {
			b.opts.Envs = append(b.opts.Envs, EnvVar{Name: k, Value: resp.Envs[k]})
		}
	}
	for _, d := range resp.Devices {
		if b.firstSetting("Container device", b.devices, d.ContainerPath, d.HostPath) {
			b.opts.Devices = append(b.opts.Devices, DeviceInfo{PathOnHost: d.HostPath, PathInContainer: d.ContainerPath, Permissions: d.Permissions})
		}
	}
	for _, mnt := range resp.Mounts {
		if b.firstSetting("Container mount", b.mounts, mnt.ContainerPath, mnt.HostPath) {
			b.opts.Mounts = append(b.opts.Mounts, Mount{Name: mnt.ContainerPath, ContainerPath: mnt.ContainerPath, HostPath: mnt.HostPath, ReadOnly: mnt.ReadOnly})
		}
	}
	for _, k := range slices.Sorted(maps.Keys(resp.Annotations)) {
		if b.firstSetting("Annotation", b.annotations, k, resp.Annotations[k]) {
			b.opts.Annotations = append(b.opts.Annotations, Annotation{Name: k, Value: resp.Annotations[k]})
		}
	}
	for _, cdi := range resp.CdiDevices {
		if !b.cdiDevices.Has(cdi.Name) {
			b.cdiDevices.Insert(cdi.Name)
			b.opts.CDIDevices = append(b.opts.CDIDevices, CDIDevice{Name: cdi.Name})
		}
	}
}

// firstSetting records key=value unless key was set already, which it logs as an error
// when the values differ.
func (b *optionsBuilder) firstSetting(what string, seen map[string]string, key, value string) bool {
	old, ok := seen[key]
	if !ok {
		seen[key] = value
		return true
	}
	if old != value {
		b.logger.Error(nil, what+" has conflicting setting", "key", key, "kept", old, "dropped", value)
	}
	return false
}
