package deviceplugin

import (
	"context"
	"fmt"
	"sync"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// endpoint is the manager's view of one registered device plugin: the RPCs it is called
// with, the options it announced, and when it stopped (upstream's endpointImpl and
// endpointInfo together).
type endpoint struct {
	resourceName string
	socket       string
	// api is nil for an endpoint restored from the checkpoint, which is stopped from the
	// start: its plugin has not registered again yet.
	api  pluginapi.DevicePluginClient
	opts *pluginapi.DevicePluginOptions

	mu       sync.Mutex
	stopTime time.Time
}

func newStoppedEndpoint(resourceName string, now time.Time) *endpoint {
	return &endpoint{resourceName: resourceName, stopTime: now}
}

func (e *endpoint) setStopTime(t time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.stopTime = t
}

func (e *endpoint) isStopped() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return !e.stopTime.IsZero()
}

// stopGracePeriodExpired reports whether the plugin stopped more than grace ago: until
// then its resource stays on the node (with nothing allocatable), so that a plugin that
// restarts quickly does not make the capacity flap.
func (e *endpoint) stopGracePeriodExpired(now time.Time, grace time.Duration) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return !e.stopTime.IsZero() && now.Sub(e.stopTime) > grace
}

func (e *endpoint) errStopped() error {
	return fmt.Errorf("endpoint %v has been stopped", e.resourceName)
}

func (e *endpoint) getPreferredAllocation(ctx context.Context, available, mustInclude []string, size int) (*pluginapi.PreferredAllocationResponse, error) {
	if e.isStopped() {
		return nil, e.errStopped()
	}
	return e.api.GetPreferredAllocation(ctx, &pluginapi.PreferredAllocationRequest{
		ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{{
			AvailableDeviceIDs:   available,
			MustIncludeDeviceIDs: mustInclude,
			AllocationSize:       int32(size),
		}},
	})
}

func (e *endpoint) allocate(ctx context.Context, devs []string) (*pluginapi.AllocateResponse, error) {
	if e.isStopped() {
		return nil, e.errStopped()
	}
	return e.api.Allocate(ctx, &pluginapi.AllocateRequest{
		ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: devs}},
	})
}

// preStartContainer is bounded by the API's KubeletPreStartContainerRPCTimeoutInSecs, as
// upstream bounds it: a plugin's device reset must not hold a container start forever.
func (e *endpoint) preStartContainer(ctx context.Context, devs []string) (*pluginapi.PreStartContainerResponse, error) {
	if e.isStopped() {
		return nil, e.errStopped()
	}
	ctx, cancel := context.WithTimeout(ctx, pluginapi.KubeletPreStartContainerRPCTimeoutInSecs*time.Second)
	defer cancel()
	return e.api.PreStartContainer(ctx, &pluginapi.PreStartContainerRequest{DevicesIds: devs})
}
