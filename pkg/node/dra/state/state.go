// Package state holds the DRA manager's persistent state in upstream's on-disk formats
// (pkg/kubelet/cm/dra/state of kubelet v1.37.2), so that a node can switch between
// upstream's kubelet and nodelet without losing track of prepared ResourceClaims or of
// the devices' last known health.
//
// Two files live in the kubelet's state directory:
//
//   - dra_manager_state: {"Data": "<JSON of CheckpointData>", "Checksum": <crc32 IEEE of
//     Data's bytes>}, written through a temporary file as upstream's checkpoint manager
//     does. The Go field names below are the JSON keys (the structs carry no tags except
//     skipNodeOperations), so renaming a field changes the format.
//   - dra_health_state: the plain JSON of a DevicesHealthMap.
package state

import (
	"maps"
	"slices"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
)

// ClaimInfoStateList is the list of prepared (or being prepared) claims in a checkpoint.
type ClaimInfoStateList []ClaimInfoState

// ClaimInfoState is what the kubelet remembers about one ResourceClaim on the node.
type ClaimInfoState struct {
	// ClaimUID, ClaimName and Namespace identify the ResourceClaim.
	ClaimUID  types.UID
	ClaimName string
	Namespace string
	// PodUIDs are the pods using the claim; JSON {"<uid>":{},...}.
	PodUIDs sets.Set[string]
	// DriverState has one entry per driver with allocation results in the claim, even
	// when the driver returned no device for them.
	DriverState map[string]DriverState
}

// DriverState is what one driver prepared for a claim.
type DriverState struct {
	Devices []Device
	// SkipNodeOperations are the gRPC calls the allocation said to skip for every device
	// of the driver.
	SkipNodeOperations []resourceapi.SkipNodeOperation `json:"skipNodeOperations,omitempty"`
}

// Skips tells whether the driver's NodePrepareResources or NodeUnprepareResources call is
// skipped for the claim, explicitly or through "*".
func (s DriverState) Skips(op resourceapi.SkipNodeOperation) bool {
	return slices.Contains(s.SkipNodeOperations, resourceapi.SkipNodeOperationAll) ||
		slices.Contains(s.SkipNodeOperations, op)
}

// Device is a device a driver prepared for a claim, as NodePrepareResources returned it.
type Device struct {
	PoolName   string
	DeviceName string
	ShareID    *types.UID
	// RequestNames are the claim's requests the device serves (without subrequest).
	RequestNames []string
	CDIDeviceIDs []string
}

// Clone returns a deep copy, so that a caller can read it without the cache's lock.
func (s ClaimInfoState) Clone() ClaimInfoState {
	out := s
	if s.PodUIDs != nil {
		out.PodUIDs = s.PodUIDs.Clone()
	}
	if s.DriverState != nil {
		out.DriverState = make(map[string]DriverState, len(s.DriverState))
		for name, ds := range s.DriverState {
			out.DriverState[name] = ds.clone()
		}
	}
	return out
}

func (s DriverState) clone() DriverState {
	out := DriverState{SkipNodeOperations: slices.Clone(s.SkipNodeOperations)}
	if s.Devices != nil {
		out.Devices = make([]Device, len(s.Devices))
		for i, d := range s.Devices {
			out.Devices[i] = d.clone()
		}
	}
	return out
}

func (d Device) clone() Device {
	out := d
	if d.ShareID != nil {
		id := *d.ShareID
		out.ShareID = &id
	}
	out.RequestNames = slices.Clone(d.RequestNames)
	out.CDIDeviceIDs = slices.Clone(d.CDIDeviceIDs)
	return out
}

// DriverNames returns the claim's drivers in name order.
func (s ClaimInfoState) DriverNames() []string {
	return slices.Sorted(maps.Keys(s.DriverState))
}

// DevicesHealthMap is the last known health of devices, by driver name.
type DevicesHealthMap map[string]DriverHealthState

// DriverHealthState is the health of one driver's devices.
type DriverHealthState struct {
	// Devices are keyed by "<pool>/<device>".
	Devices map[string]DeviceHealth
}

// DeviceHealthStatus is a device's health as the kubelet records it.
type DeviceHealthStatus string

// The health values a driver can report; anything else reads as Unknown.
const (
	DeviceHealthStatusHealthy   DeviceHealthStatus = "Healthy"
	DeviceHealthStatusUnhealthy DeviceHealthStatus = "Unhealthy"
	DeviceHealthStatusUnknown   DeviceHealthStatus = "Unknown"
)

// DeviceHealth is one device's last reported health.
type DeviceHealth struct {
	PoolName   string
	DeviceName string
	Health     DeviceHealthStatus
	// LastUpdated is when the kubelet received the report.
	LastUpdated time.Time
	// HealthCheckTimeout is how long the report stays valid; zero means the default.
	HealthCheckTimeout time.Duration
	Message            string
}
