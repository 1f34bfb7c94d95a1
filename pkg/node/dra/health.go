package dra

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
	drahealth "k8s.io/kubelet/pkg/apis/dra-health/v1"

	"github.com/nodelet/nodelet/pkg/node/dra/state"
)

const (
	// DefaultHealthTimeout is how long a device's reported health stays valid when the
	// driver does not say; after that the device reads as Unknown.
	DefaultHealthTimeout = 30 * time.Second
	// maxDevicesPerDriver bounds the cache (and the file rewritten on each change)
	// against a driver inventing device names: reports are not checked against slices.
	maxDevicesPerDriver = 16384
)

// healthCache is the last known health of the devices, persisted to dra_health_state.
type healthCache struct {
	mu      sync.RWMutex
	path    string
	devices state.DevicesHealthMap
}

// loadHealthCache reads the health file; a file that cannot be read is logged and
// ignored, as upstream does: health is reported again by the drivers.
func loadHealthCache(logger klog.Logger, path string) *healthCache {
	devices, err := state.ReadHealth(path)
	if err != nil {
		logger.Error(err, "Failed to load health checkpoint, proceeding with empty cache")
	}
	return &healthCache{path: path, devices: devices}
}

// timeoutOf is a device's validity period.
func timeoutOf(d state.DeviceHealth) time.Duration {
	if d.HealthCheckTimeout == 0 {
		return DefaultHealthTimeout
	}
	return d.HealthCheckTimeout
}

// get returns a device's health; unknown or stale devices read as Unknown.
func (c *healthCache) get(driverName, poolName, deviceName string) state.DeviceHealth {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if d, ok := c.devices[driverName].Devices[poolName+"/"+deviceName]; ok && time.Since(d.LastUpdated) <= timeoutOf(d) {
		return d
	}
	return state.DeviceHealth{PoolName: poolName, DeviceName: deviceName, Health: state.DeviceHealthStatusUnknown}
}

// update merges a driver's report and returns the devices whose health, message or
// timeout changed. Devices missing from the report are dropped once stale, reported as
// changed to Unknown if they were not Unknown already.
func (c *healthCache) update(logger klog.Logger, driverName string, reported []state.DeviceHealth) []state.DeviceHealth {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	driver, ok := c.devices[driverName]
	if !ok || driver.Devices == nil {
		driver = state.DriverHealthState{Devices: map[string]state.DeviceHealth{}}
		c.devices[driverName] = driver
	}
	var changed []state.DeviceHealth
	seen := sets.New[string]()
	ignored := 0
	for _, d := range reported {
		d.LastUpdated = now
		key := d.PoolName + "/" + d.DeviceName
		seen.Insert(key)
		old, known := driver.Devices[key]
		if !known && len(driver.Devices) >= maxDevicesPerDriver {
			ignored++
			continue
		}
		if !known || old.Health != d.Health || old.Message != d.Message || old.HealthCheckTimeout != d.HealthCheckTimeout {
			changed = append(changed, d)
		}
		driver.Devices[key] = d
	}
	if ignored > 0 {
		logger.Error(nil, "Health report contains more devices than the cache keeps per driver, ignoring new devices beyond the limit", "driverName", driverName, "limit", maxDevicesPerDriver, "ignoredDevices", ignored)
	}
	removed := false
	for key, d := range driver.Devices {
		if seen.Has(key) || now.Sub(d.LastUpdated) <= timeoutOf(d) {
			continue
		}
		if d.Health != state.DeviceHealthStatusUnknown {
			d.Health, d.Message, d.LastUpdated = state.DeviceHealthStatusUnknown, "", now
			changed = append(changed, d)
		}
		delete(driver.Devices, key)
		removed = true
	}
	if len(changed) > 0 || removed {
		if err := state.WriteHealth(c.path, c.devices); err != nil {
			logger.Error(err, "Failed to save health checkpoint after update. Kubelet restart may lose the device health information.")
		}
	}
	return changed
}

// clearDriver forgets a driver's devices when its stream ends.
func (c *healthCache) clearDriver(driverName string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.devices, driverName)
	return state.WriteHealth(c.path, c.devices)
}

// handleHealthStream records a driver's health reports and tells the kubelet which
// pods use devices whose health changed, until the stream ends.
func (m *Manager) handleHealthStream(ctx context.Context, stream drahealth.DRAResourceHealth_NodeWatchResourcesClient, driverName string) error {
	logger := klog.FromContext(ctx).WithName("dra-manager").WithValues("pluginName", driverName)
	defer func() {
		if err := m.health.clearDriver(driverName); err != nil {
			logger.Error(err, "Failed to clear health info cache for driver")
		}
	}()
	for {
		resp, err := stream.Recv()
		switch {
		case errors.Is(err, io.EOF):
			return nil
		case err != nil:
			if status.Code(err) != codes.Unimplemented && ctx.Err() == nil {
				logger.Error(err, "Error receiving from WatchResources stream")
			}
			return err
		}
		devices := make([]state.DeviceHealth, 0, len(resp.GetDevices()))
		for _, d := range resp.GetDevices() {
			devices = append(devices, deviceHealthFromReport(logger, d))
		}
		if changed := m.health.update(logger, driverName, devices); len(changed) > 0 {
			m.notifyPods(logger, m.podsUsingDevices(driverName, changed))
		}
	}
}

// deviceHealthFromReport converts a driver's report; a timeout that is not positive
// means the default.
func deviceHealthFromReport(logger klog.Logger, d *drahealth.DeviceHealth) state.DeviceHealth {
	timeout := DefaultHealthTimeout
	if s := d.GetHealthCheckTimeoutSeconds(); s > 0 {
		timeout = time.Duration(s) * time.Second
	} else if s < 0 {
		logger.V(4).Info("Ignoring negative health check timeout, using default", "poolName", d.GetDevice().GetPoolName(), "deviceName", d.GetDevice().GetDeviceName(), "providedTimeout", s)
	}
	health := state.DeviceHealthStatusUnknown
	switch d.GetHealth() {
	case drahealth.HealthStatus_HEALTHY:
		health = state.DeviceHealthStatusHealthy
	case drahealth.HealthStatus_UNHEALTHY:
		health = state.DeviceHealthStatusUnhealthy
	}
	return state.DeviceHealth{
		PoolName: d.GetDevice().GetPoolName(), DeviceName: d.GetDevice().GetDeviceName(),
		Health: health, LastUpdated: time.Unix(d.GetLastUpdatedTime(), 0),
		HealthCheckTimeout: timeout, Message: truncateHealthMessage(d.GetMessage()),
	}
}

// truncateHealthMessage keeps a message within the API's limit, marking the cut.
func truncateHealthMessage(msg string) string {
	if len(msg) <= v1.ResourceHealthMessageMaxLength {
		return msg
	}
	return msg[:v1.ResourceHealthMessageMaxLength-3] + "..."
}

// podsUsingDevices returns the pods whose claims use any of the driver's devices.
func (m *Manager) podsUsingDevices(driverName string, devices []state.DeviceHealth) []string {
	changed := sets.New[string]()
	for _, d := range devices {
		changed.Insert(d.PoolName + "/" + d.DeviceName)
	}
	pods := sets.New[string]()
	m.cache.RLock()
	defer m.cache.RUnlock()
	for _, info := range m.cache.claims {
		for _, d := range info.DriverState[driverName].Devices {
			if changed.Has(d.PoolName + "/" + d.DeviceName) {
				pods = pods.Union(info.PodUIDs)
			}
		}
	}
	return sets.List(pods)
}

// notifyPods sends an update without blocking the stream: a full channel drops it.
func (m *Manager) notifyPods(logger klog.Logger, pods []string) {
	if len(pods) == 0 {
		logger.V(4).Info("Health info changed, but no active pods found using the affected devices")
		return
	}
	select {
	case m.updates <- ResourceUpdate{PodUIDs: pods}:
		logger.V(2).Info("Sending health update notification for pods", "pods", pods)
	default:
		logger.Error(nil, "DRA health update channel is full, discarding pod update notification", "pods", pods)
	}
}

// UpdateAllocatedResourcesStatus sets, for each container using claims, one
// allocatedResourcesStatus entry per claim reference ("claim:<name>" or
// "claim:<name>/<request>") with the health of the claim's devices (upstream's
// ResourceHealthStatus). Entries of other sources (device plugins) are kept; entries
// left without devices are dropped.
func (m *Manager) UpdateAllocatedResourcesStatus(pod *v1.Pod, status *v1.PodStatus) {
	if !m.reportHealth {
		return
	}
	for i := range status.ContainerStatuses {
		cs := &status.ContainerStatuses[i]
		idx := slices.IndexFunc(pod.Spec.Containers, func(c v1.Container) bool { return c.Name == cs.Name })
		if idx < 0 || len(pod.Spec.Containers[idx].Resources.Claims) == 0 {
			continue
		}
		m.updateContainerResourcesStatus(pod, &pod.Spec.Containers[idx], cs)
	}
}

func (m *Manager) updateContainerResourcesStatus(pod *v1.Pod, container *v1.Container, cs *v1.ContainerStatus) {
	statuses := slices.Clone(cs.AllocatedResourcesStatus)
	for _, ref := range container.Resources.Claims {
		info, ok := m.podClaimInfo(pod, ref.Name)
		if !ok {
			continue
		}
		name := v1.ResourceName("claim:" + ref.Name)
		if ref.Request != "" {
			name = v1.ResourceName(fmt.Sprintf("claim:%s/%s", ref.Name, ref.Request))
		}
		health := m.claimHealth(info, ref.Request)
		if i := slices.IndexFunc(statuses, func(s v1.ResourceStatus) bool { return s.Name == name }); i >= 0 {
			statuses[i].Resources = health
		} else {
			statuses = append(statuses, v1.ResourceStatus{Name: name, Resources: health})
		}
	}
	statuses = slices.DeleteFunc(statuses, func(s v1.ResourceStatus) bool { return len(s.Resources) == 0 })
	cs.AllocatedResourcesStatus = statuses
}

// podClaimInfo finds the prepared claim behind a pod's claim entry, by the name in the
// pod's status or else by resolving the entry (the status may not be written yet when
// a health update comes early).
func (m *Manager) podClaimInfo(pod *v1.Pod, podClaimName string) (state.ClaimInfoState, bool) {
	var name string
	for _, s := range pod.Status.ResourceClaimStatuses {
		if s.Name == podClaimName && s.ResourceClaimName != nil {
			name = *s.ResourceClaimName
		}
	}
	if name == "" {
		for i := range pod.Spec.ResourceClaims {
			if pod.Spec.ResourceClaims[i].Name == podClaimName {
				if n, _, err := claimName(pod, &pod.Spec.ResourceClaims[i]); err == nil && n != nil {
					name = *n
				}
				break
			}
		}
	}
	if name == "" {
		return state.ClaimInfoState{}, false
	}
	m.cache.RLock()
	defer m.cache.RUnlock()
	info, ok := m.cache.get(name, pod.Namespace)
	if !ok {
		return state.ClaimInfoState{}, false
	}
	return info.Clone(), true
}

// claimHealth returns the health of the claim's devices serving a request (all of them
// for an empty request), one entry per resource ID.
func (m *Manager) claimHealth(info state.ClaimInfoState, request string) []v1.ResourceHealth {
	// Devices name the request without its subrequest.
	base, _, _ := strings.Cut(request, "/")
	out := []v1.ResourceHealth{}
	seen := sets.New[v1.ResourceID]()
	for _, driverName := range info.DriverNames() {
		for _, d := range info.DriverState[driverName].Devices {
			if request != "" && len(d.RequestNames) > 0 && !slices.Contains(d.RequestNames, base) {
				continue
			}
			h := resourceHealth(driverName, d, m.health.get(driverName, d.PoolName, d.DeviceName))
			if !seen.Has(h.ResourceID) {
				seen.Insert(h.ResourceID)
				out = append(out, h)
			}
		}
	}
	return out
}

// resourceHealth is a device's entry: identified by its first CDI device ID, or else
// by "<driver>/<pool>/<device>".
func resourceHealth(driverName string, d state.Device, health state.DeviceHealth) v1.ResourceHealth {
	out := v1.ResourceHealth{Health: v1.ResourceHealthStatusUnknown}
	switch health.Health {
	case state.DeviceHealthStatusHealthy:
		out.Health = v1.ResourceHealthStatusHealthy
	case state.DeviceHealthStatusUnhealthy:
		out.Health = v1.ResourceHealthStatusUnhealthy
	}
	if health.Message != "" {
		msg := health.Message
		out.Message = &msg
	}
	if len(d.CDIDeviceIDs) > 0 {
		out.ResourceID = v1.ResourceID(d.CDIDeviceIDs[0])
	} else {
		out.ResourceID = v1.ResourceID(driverName + "/" + d.PoolName + "/" + d.DeviceName)
	}
	return out
}
