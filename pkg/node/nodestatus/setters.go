package nodestatus

import (
	"context"
	"fmt"
	"net"
	goruntime "runtime"
	"sort"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	utilversion "k8s.io/apimachinery/pkg/util/version"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/pkg/resourcename"
	"github.com/nodelet/nodelet/pkg/runtime/container"
)

const (
	// maxNamesPerImage is how many of an image's names node status lists.
	maxNamesPerImage = 5
	// annotationProvidedIPAddr tells an external cloud provider the --node-ip addresses.
	annotationProvidedIPAddr = "alpha.kubernetes.io/provided-node-ip"
	// taintExternalCloudProvider marks a node the external cloud provider has not
	// initialized yet.
	taintExternalCloudProvider = "node.cloudprovider.kubernetes.io/uninitialized"
	// annotationControllerManagedAttach asks the attach/detach controller to attach the
	// node's volumes.
	annotationControllerManagedAttach = "volumes.kubernetes.io/controller-managed-attach-detach"
)

// setter fills part of a node's status in place (upstream's nodestatus.Setter).
type setter struct {
	name string
	set  func(ctx context.Context, node *v1.Node) error
}

// setters are upstream's defaultNodeStatusFuncs, in its order: the conditions come
// last so that Ready can check the capacity set before it, and Ready is the last
// condition in a new node's list.
func (c *Controller) setters() []setter {
	return []setter{
		{"addresses", c.setAddresses},
		{"machineInfo", c.setMachineInfo},
		{"versionInfo", c.setVersionInfo},
		{"daemonEndpoints", c.setDaemonEndpoints},
		{"images", c.setImages},
		{"goRuntime", setGoRuntime},
		{"runtimeHandlers", c.setRuntimeHandlers},
		{"features", c.setFeatures},
		{"memoryPressure", c.pressureSetter(memoryPressure)},
		{"diskPressure", c.pressureSetter(diskPressure)},
		{"pidPressure", c.pressureSetter(pidPressure)},
		{"ready", c.setReady},
		{"volumesInUse", c.setVolumesInUse},
		{"schedulable", c.recordSchedulableChange},
		{"declaredFeatures", c.setDeclaredFeatures},
	}
}

// setVolumesInUse lists the attachable volumes the node uses (upstream's VolumesInUse
// setter): the attach/detach controller does not detach them while they are listed.
func (c *Controller) setVolumesInUse(_ context.Context, node *v1.Node) error {
	if c.volumes != nil {
		node.Status.VolumesInUse = c.volumes.VolumesInUse()
	}
	return nil
}

// markVolumesFromNode tells the volume manager which volumes the API server has as in
// use: only those may be mounted (upstream's markVolumesFromNode).
func (c *Controller) markVolumesFromNode(node *v1.Node) {
	if c.volumes != nil && node != nil {
		c.volumes.MarkVolumesAsReportedInUse(node.Status.VolumesInUse)
	}
}

// setNodeStatus runs every setter; one that fails is logged and the others still run.
func (c *Controller) setNodeStatus(ctx context.Context, node *v1.Node) {
	logger := klog.FromContext(ctx)
	for _, s := range c.setters() {
		if err := s.set(ctx, node); err != nil {
			logger.Error(err, "Failed to set some node status fields", "node", klog.KObj(node), "setter", s.name)
		}
	}
}

// setAddresses sets InternalIP(s) and Hostname (upstream's NodeAddress setter).
func (c *Controller) setAddresses(ctx context.Context, node *v1.Node) error {
	configured := c.opts.NodeIPs
	if err := c.ips.validateConfigured(configured); err != nil {
		return err
	}
	primary, secondary := split(configured)
	if c.opts.ExternalCloudProvider && specified(primary) {
		if node.Annotations == nil {
			node.Annotations = map[string]string{}
		}
		value := primary.String()
		if specified(secondary) {
			value += "," + secondary.String()
		}
		node.Annotations[annotationProvidedIPAddr] = value
	} else {
		delete(node.Annotations, annotationProvidedIPAddr)
	}
	if c.opts.ExternalCloudProvider {
		// The cloud provider's addresses win once it has set them; until then the node
		// offers its hostname, or the addresses it was told.
		if len(node.Status.Addresses) > 0 {
			return nil
		}
		if primary == nil {
			node.Status.Addresses = []v1.NodeAddress{{Type: v1.NodeHostName, Address: c.opts.Hostname}}
			return nil
		}
	}
	ips, err := c.ips.choose(node.Name, c.opts.Hostname, configured)
	if err != nil {
		return err
	}
	node.Status.Addresses = nodeAddresses(ips, c.opts.Hostname)
	return nil
}

func nodeAddresses(ips []net.IP, hostname string) []v1.NodeAddress {
	out := make([]v1.NodeAddress, 0, len(ips)+1)
	for _, ip := range ips {
		out = append(out, v1.NodeAddress{Type: v1.NodeInternalIP, Address: ip.String()})
	}
	return append(out, v1.NodeAddress{Type: v1.NodeHostName, Address: hostname})
}

// machineCapacity is the capacity the host has: cpu, memory, huge pages and, with local
// storage capacity isolation, the root directory's filesystem (upstream's container
// manager capacity, without the pid count node status does not show).
func (c *Controller) machineCapacity(info *MachineInfo) v1.ResourceList {
	return MachineCapacity(info, c.opts.LocalStorageCapacityIsolation)
}

// MachineCapacity is the host's cpu, memory, huge pages and, with localStorage, the root
// directory's filesystem.
func MachineCapacity(info *MachineInfo, localStorage bool) v1.ResourceList {
	out := v1.ResourceList{
		v1.ResourceCPU:    *resource.NewMilliQuantity(int64(info.NumCores)*1000, resource.DecimalSI),
		v1.ResourceMemory: *resource.NewQuantity(int64(info.MemoryCapacity), resource.BinarySI),
	}
	for _, hp := range info.HugePages {
		bytes := int64(hp.PageSizeKiB*1024) * int64(hp.NumPages)
		out[hugePagesResource(hp.PageSizeKiB)] = *resource.NewQuantity(bytes, resource.BinarySI)
	}
	if localStorage && info.EphemeralStorage != nil {
		out[v1.ResourceEphemeralStorage] = *resource.NewQuantity(int64(*info.EphemeralStorage), resource.DecimalSI)
	}
	return out
}

// podCapacity is maxPods, or podsPerCore × cores when that is smaller.
func (c *Controller) podCapacity(info *MachineInfo) resource.Quantity {
	pods := c.opts.MaxPods
	if c.opts.PodsPerCore > 0 && info.NumCores*c.opts.PodsPerCore < pods {
		pods = info.NumCores * c.opts.PodsPerCore
	}
	return *resource.NewQuantity(int64(pods), resource.DecimalSI)
}

// setMachineInfo sets capacity, allocatable and the machine's identity (upstream's
// MachineInfo setter). Capacity is updated in place so that entries others added
// (extended resources) survive.
func (c *Controller) setMachineInfo(ctx context.Context, node *v1.Node) error {
	if node.Status.Capacity == nil {
		node.Status.Capacity = v1.ResourceList{}
	}
	machineCap := v1.ResourceList{}
	info, err := c.machine()
	if err != nil {
		node.Status.Capacity[v1.ResourceCPU] = *resource.NewMilliQuantity(0, resource.DecimalSI)
		node.Status.Capacity[v1.ResourceMemory] = resource.MustParse("0Gi")
		node.Status.Capacity[v1.ResourcePods] = *resource.NewQuantity(int64(c.opts.MaxPods), resource.DecimalSI)
		klog.FromContext(ctx).Error(err, "Error getting machine info")
	} else {
		node.Status.NodeInfo.MachineID = info.MachineID
		node.Status.NodeInfo.SystemUUID = info.SystemUUID
		machineCap = c.machineCapacity(info)
		for name, q := range machineCap {
			node.Status.Capacity[name] = q
		}
		node.Status.Capacity[v1.ResourcePods] = c.podCapacity(info)
		c.noticeReboot(node, info.BootID)
		node.Status.NodeInfo.BootID = info.BootID
		if info.SwapCapacity != 0 {
			node.Status.NodeInfo.Swap = &v1.NodeSwapStatus{Capacity: ptr.To(int64(info.SwapCapacity))}
		}
		node.Status.NodeInfo.RunningInUserNamespace = ptr.To(info.RunningInUserNamespace)
	}
	deviceAllocatable := c.setDevicePluginCapacity(ctx, node)
	c.setAllocatable(node, machineCap)
	for name, q := range deviceAllocatable {
		node.Status.Allocatable[name] = q
	}
	return nil
}

// setDevicePluginCapacity adds the device plugins' resources to the capacity and returns
// their allocatable. A resource whose plugin went away stays in the capacity at 0, so
// that it still reads as managed by a device plugin (upstream's rule).
func (c *Controller) setDevicePluginCapacity(ctx context.Context, node *v1.Node) v1.ResourceList {
	if c.devices == nil {
		return nil
	}
	capacity, allocatable, removed := c.devices()
	for name, q := range capacity {
		if old, ok := node.Status.Capacity[name]; !ok || old.Value() != q.Value() {
			klog.FromContext(ctx).V(2).Info("Updated capacity for device plugin", "plugin", name, "capacity", q.Value())
		}
		node.Status.Capacity[name] = q
	}
	for _, name := range removed {
		klog.FromContext(ctx).V(2).Info("Set capacity for removed resource to 0 on device removal", "device", name)
		node.Status.Capacity[v1.ResourceName(name)] = *resource.NewQuantity(0, resource.DecimalSI)
	}
	return allocatable
}

// noticeReboot records one Rebooted event when the boot ID differs from the one the
// node last reported.
func (c *Controller) noticeReboot(node *v1.Node, bootID string) {
	if node.Status.NodeInfo.BootID == "" || node.Status.NodeInfo.BootID == bootID {
		return
	}
	c.rebootOnce.Do(func() {
		c.recorder.Eventf(c.NodeRef(), v1.EventTypeWarning, "Rebooted",
			"Node %s has been rebooted, boot id: %s", c.opts.NodeName, bootID)
	})
}

func (c *Controller) setAllocatable(node *v1.Node, machineCap v1.ResourceList) {
	if node.Status.Allocatable == nil {
		node.Status.Allocatable = v1.ResourceList{}
	}
	for name := range node.Status.Allocatable {
		if _, ok := node.Status.Capacity[name]; !ok && resourcename.IsExtended(name) {
			delete(node.Status.Allocatable, name)
		}
	}
	reserved := reservation(machineCap, c.opts.SystemReserved, c.opts.KubeReserved, c.eviction)
	for name, q := range allocatable(node.Status.Capacity, reserved) {
		node.Status.Allocatable[name] = q
	}
}

// setVersionInfo sets the kernel, OS image, runtime and kubelet versions.
func (c *Controller) setVersionInfo(ctx context.Context, node *v1.Node) error {
	info, err := c.machine()
	if err != nil {
		return fmt.Errorf("error getting version info: %v", err)
	}
	node.Status.NodeInfo.KernelVersion = info.KernelVersion
	node.Status.NodeInfo.OSImage = info.OSImage
	node.Status.NodeInfo.ContainerRuntimeVersion = fmt.Sprintf("%s://%s", c.runtime.Type(), c.runtimeVersion(ctx))
	node.Status.NodeInfo.KubeletVersion = c.opts.KubeletVersion
	// Deprecated; upstream clears it (DisableNodeKubeProxyVersion is locked on) so a
	// value an older kubelet left behind goes away.
	//lint:ignore SA1019 clearing the deprecated field is the point
	node.Status.NodeInfo.KubeProxyVersion = ""
	return nil
}

// runtimeVersion is the runtime's version as upstream normalises it ("v1.7.24" and
// "1.7.24~ds1" become "1.7.24"), or "Unknown".
func (c *Controller) runtimeVersion(ctx context.Context) string {
	raw, err := c.runtime.Version(ctx)
	if err != nil {
		return "Unknown"
	}
	v, err := utilversion.ParseSemantic(raw)
	if err != nil {
		v, err = utilversion.ParseGeneric(raw)
	}
	if err != nil {
		return "Unknown"
	}
	return v.String()
}

func (c *Controller) setDaemonEndpoints(_ context.Context, node *v1.Node) error {
	node.Status.DaemonEndpoints = v1.NodeDaemonEndpoints{KubeletEndpoint: v1.DaemonEndpoint{Port: c.opts.KubeletPort}}
	return nil
}

// setImages lists the largest nodeStatusMaxImages images (-1: all), each with up to
// five names, digests first.
func (c *Controller) setImages(ctx context.Context, node *v1.Node) error {
	images, err := c.images.get(ctx)
	if err != nil {
		node.Status.Images = nil
		return fmt.Errorf("error getting image list: %v", err)
	}
	node.Status.Images = nodeImages(images, int(c.opts.NodeStatusMaxImages))
	return nil
}

func nodeImages(images []container.Image, limit int) []v1.ContainerImage {
	sorted := append([]container.Image(nil), images...)
	sortBySizeDesc(sorted)
	if limit > -1 && limit < len(sorted) {
		sorted = sorted[:limit]
	}
	var out []v1.ContainerImage
	for _, img := range sorted {
		names := append(append([]string{}, img.RepoDigests...), img.RepoTags...)
		if len(names) > maxNamesPerImage {
			names = names[:maxNamesPerImage]
		}
		out = append(out, v1.ContainerImage{Names: names, SizeBytes: img.Size})
	}
	return out
}

// sortBySizeDesc orders images largest first, ties by ID descending (upstream's
// ByImageSize).
func sortBySizeDesc(images []container.Image) {
	sort.SliceStable(images, func(i, j int) bool {
		if images[i].Size == images[j].Size {
			return images[i].ID > images[j].ID
		}
		return images[i].Size > images[j].Size
	})
}

func setGoRuntime(_ context.Context, node *v1.Node) error {
	node.Status.NodeInfo.OperatingSystem = goruntime.GOOS
	node.Status.NodeInfo.Architecture = goruntime.GOARCH
	return nil
}

// setRuntimeHandlers lists the runtime's handlers and what each supports, from CRI
// Status; an empty list until the runtime has answered.
func (c *Controller) setRuntimeHandlers(ctx context.Context, node *v1.Node) error {
	status := c.criStatus.cached(ctx)
	handlers := status.GetRuntimeHandlers()
	node.Status.RuntimeHandlers = make([]v1.NodeRuntimeHandler, len(handlers))
	for i, h := range handlers {
		node.Status.RuntimeHandlers[i] = v1.NodeRuntimeHandler{
			Name: h.GetName(),
			Features: &v1.NodeRuntimeHandlerFeatures{
				RecursiveReadOnlyMounts: ptr.To(h.GetFeatures().GetRecursiveReadOnlyMounts()),
				UserNamespaces:          ptr.To(h.GetFeatures().GetUserNamespaces()),
			},
		}
	}
	return nil
}

// setFeatures sets status.features once the runtime has reported its features.
func (c *Controller) setFeatures(ctx context.Context, node *v1.Node) error {
	features := c.criStatus.cached(ctx).GetFeatures()
	if features == nil {
		return nil
	}
	node.Status.Features = &v1.NodeFeatures{SupplementalGroupsPolicy: ptr.To(features.GetSupplementalGroupsPolicy())}
	return nil
}

func (c *Controller) setDeclaredFeatures(_ context.Context, node *v1.Node) error {
	if c.opts.DeclaredFeatures != nil {
		node.Status.DeclaredFeatures = append([]string(nil), c.opts.DeclaredFeatures...)
	}
	return nil
}

// recordSchedulableChange records NodeSchedulable / NodeNotSchedulable when
// spec.unschedulable changes (upstream's recordNodeSchedulableEvent).
func (c *Controller) recordSchedulableChange(ctx context.Context, node *v1.Node) error {
	c.schedMu.Lock()
	defer c.schedMu.Unlock()
	if c.lastUnschedulable == node.Spec.Unschedulable {
		return nil
	}
	if node.Spec.Unschedulable {
		c.recordStatusEvent(ctx, v1.EventTypeNormal, "NodeNotSchedulable")
	} else {
		c.recordStatusEvent(ctx, v1.EventTypeNormal, "NodeSchedulable")
	}
	c.lastUnschedulable = node.Spec.Unschedulable
	return nil
}
