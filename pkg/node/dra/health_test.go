package dra

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	drahealth "k8s.io/kubelet/pkg/apis/dra-health/v1"
	drahealthv1alpha1 "k8s.io/kubelet/pkg/apis/dra-health/v1alpha1"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/pkg/node/dra/state"
)

func healthReport(device string, health drahealth.HealthStatus, message string) *drahealth.NodeWatchResourcesResponse {
	return &drahealth.NodeWatchResourcesResponse{Devices: []*drahealth.DeviceHealth{{
		Device: &drahealth.DeviceIdentifier{PoolName: "pool", DeviceName: device},
		Health: health, LastUpdatedTime: time.Now().Unix(), Message: message,
	}}}
}

func waitForUpdate(t *testing.T, m *Manager) ResourceUpdate {
	t.Helper()
	select {
	case u := <-m.Updates():
		return u
	case <-time.After(5 * time.Second):
		t.Fatal("no health update")
		return ResourceUpdate{}
	}
}

func TestHealthUpdatesContainerStatus(t *testing.T) {
	for _, healthService := range []string{drahealth.DRAResourceHealthService, drahealthv1alpha1.DRAResourceHealthService} {
		t.Run(healthService, func(t *testing.T) {
			pod := podWithClaim("p", "c")
			pod.Spec.Containers = append(pod.Spec.Containers,
				v1.Container{Name: "by-request", Resources: v1.ResourceRequirements{Claims: []v1.ResourceClaim{{Name: "gpu", Request: "req"}}}},
				v1.Container{Name: "no-claims"})
			claim := allocatedClaim("c", []string{"req"}, pod)
			dir := t.TempDir()
			m := newTestManager(t, fakeClient(claim), Options{StateDir: dir})
			d, _, _ := startDriver(t, m, []string{drapb.DRAPluginService, healthService})
			mustPrepare(t, m, pod)
			select {
			case <-d.healthOpened:
			case <-time.After(5 * time.Second):
				t.Fatal("health stream not opened")
			}

			status := &v1.PodStatus{ContainerStatuses: []v1.ContainerStatus{{Name: "ctr"}, {Name: "by-request"}, {Name: "no-claims"}}}
			m.UpdateAllocatedResourcesStatus(pod, status)
			unknown := []v1.ResourceHealth{{ResourceID: "example.com/gpu=c-req", Health: v1.ResourceHealthStatusUnknown}}
			if got := status.ContainerStatuses[0].AllocatedResourcesStatus; !reflect.DeepEqual(got, []v1.ResourceStatus{{Name: "claim:gpu", Resources: unknown}}) {
				t.Errorf("before any report: %+v", got)
			}

			d.health <- healthReport("c-req", drahealth.HealthStatus_UNHEALTHY, "ECC errors")
			if u := waitForUpdate(t, m); !reflect.DeepEqual(u.PodUIDs, []string{string(pod.UID)}) {
				t.Errorf("update = %+v", u)
			}
			m.UpdateAllocatedResourcesStatus(pod, status)
			unhealthy := []v1.ResourceHealth{{ResourceID: "example.com/gpu=c-req", Health: v1.ResourceHealthStatusUnhealthy, Message: ptr.To("ECC errors")}}
			want := [][]v1.ResourceStatus{
				{{Name: "claim:gpu", Resources: unhealthy}},
				{{Name: "claim:gpu/req", Resources: unhealthy}},
				nil,
			}
			for i, w := range want {
				if got := status.ContainerStatuses[i].AllocatedResourcesStatus; !reflect.DeepEqual(got, w) {
					t.Errorf("%s: %+v, want %+v", status.ContainerStatuses[i].Name, got, w)
				}
			}
			blob, err := os.ReadFile(filepath.Join(dir, state.HealthFileName))
			if err != nil || !strings.Contains(string(blob), `"pool/c-req":{"PoolName":"pool","DeviceName":"c-req","Health":"Unhealthy"`) {
				t.Errorf("health file = %s, %v", blob, err)
			}

			// The same health again changes nothing and a device of no pod notifies
			// nobody: the only update is the recovery's.
			d.health <- healthReport("c-req", drahealth.HealthStatus_UNHEALTHY, "ECC errors")
			d.health <- healthReport("unused", drahealth.HealthStatus_UNHEALTHY, "")
			d.health <- healthReport("c-req", drahealth.HealthStatus_HEALTHY, "")
			if u := waitForUpdate(t, m); !reflect.DeepEqual(u.PodUIDs, []string{string(pod.UID)}) {
				t.Errorf("update = %+v", u)
			}
			select {
			case u := <-m.Updates():
				t.Errorf("unexpected second update %+v", u)
			case <-time.After(100 * time.Millisecond):
			}
			m.UpdateAllocatedResourcesStatus(pod, status)
			if got := status.ContainerStatuses[0].AllocatedResourcesStatus[0].Resources[0]; got.Health != v1.ResourceHealthStatusHealthy || got.Message != nil {
				t.Errorf("after recovery: %+v", got)
			}
		})
	}
}

func TestAllocatedResourcesStatusKeepsOtherEntries(t *testing.T) {
	pod := podWithClaim("p", "c")
	m := newTestManager(t, nil, Options{StateDir: t.TempDir()})
	m.cache.add(&claimInfo{ClaimInfoState: state.ClaimInfoState{
		ClaimUID: "uid-c", ClaimName: "c", Namespace: testNS,
		DriverState: map[string]state.DriverState{testDriver: {Devices: []state.Device{{PoolName: "pool", DeviceName: "d0"}}}},
	}})
	devicePlugin := v1.ResourceStatus{Name: "vendor.com/nic", Resources: []v1.ResourceHealth{{ResourceID: "nic0", Health: v1.ResourceHealthStatusHealthy}}}
	status := &v1.PodStatus{ContainerStatuses: []v1.ContainerStatus{{Name: "ctr", AllocatedResourcesStatus: []v1.ResourceStatus{devicePlugin}}}}
	m.UpdateAllocatedResourcesStatus(pod, status)
	want := []v1.ResourceStatus{devicePlugin, {Name: "claim:gpu", Resources: []v1.ResourceHealth{{ResourceID: "gpu.example.com/pool/d0", Health: v1.ResourceHealthStatusUnknown}}}}
	if got := status.ContainerStatuses[0].AllocatedResourcesStatus; !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}

	disabled := newTestManager(t, nil, Options{DisableResourceHealthStatus: true})
	status = &v1.PodStatus{ContainerStatuses: []v1.ContainerStatus{{Name: "ctr"}}}
	disabled.UpdateAllocatedResourcesStatus(pod, status)
	if status.ContainerStatuses[0].AllocatedResourcesStatus != nil {
		t.Error("health reported although disabled")
	}
}

func TestHealthCacheStaleDevices(t *testing.T) {
	c := &healthCache{path: filepath.Join(t.TempDir(), state.HealthFileName), devices: state.DevicesHealthMap{}}
	changed := c.update(klog.Background(), "drv", []state.DeviceHealth{
		{PoolName: "p", DeviceName: "a", Health: state.DeviceHealthStatusHealthy, HealthCheckTimeout: time.Millisecond},
	})
	if len(changed) != 1 {
		t.Fatalf("changed = %+v", changed)
	}
	time.Sleep(5 * time.Millisecond)
	if got := c.get("drv", "p", "a"); got.Health != state.DeviceHealthStatusUnknown {
		t.Errorf("stale device reads %s", got.Health)
	}
	// Not reported any more and stale: dropped, announced as Unknown.
	changed = c.update(klog.Background(), "drv", nil)
	if len(changed) != 1 || changed[0].Health != state.DeviceHealthStatusUnknown || len(c.devices["drv"].Devices) != 0 {
		t.Errorf("changed = %+v, cache = %+v", changed, c.devices)
	}
	if err := c.clearDriver("drv"); err != nil || len(c.devices) != 0 {
		t.Errorf("clearDriver: %v, %+v", err, c.devices)
	}
	if long := truncateHealthMessage(strings.Repeat("x", 2000)); len(long) != v1.ResourceHealthMessageMaxLength || !strings.HasSuffix(long, "...") {
		t.Errorf("truncated message has length %d", len(long))
	}
}
