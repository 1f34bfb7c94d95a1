// Package checkpoint reads and writes the device manager's checkpoint file,
// kubelet_internal_checkpoint, in upstream's format (pkg/kubelet/cm/devicemanager/checkpoint
// stored through pkg/kubelet/checkpointmanager), so that a node can switch between
// upstream's kubelet and nodelet without losing its device allocations.
//
// The file is the JSON of {"Data": {...}, "Checksum": N}, where N is the FNV-32a hash of
// the %#v dump (k8s.io/utils/dump.ForHash) of Data. That dump spells the Go package name,
// type names, field names and field types of the data, so the package name "checkpoint"
// and the names and shapes of checkpointData, PodDevicesEntry and DevicesPerNUMA are part
// of the format: renaming any of them changes every checksum.
package checkpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"sort"

	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/utils/dump"

	"github.com/nodelet/nodelet/pkg/atomicfile"
)

// FileName is the checkpoint's file name in the device plugin directory, upstream's.
const FileName = "kubelet_internal_checkpoint"

// ErrNotFound is returned by Read when there is no checkpoint file.
var ErrNotFound = errors.New("checkpoint is not found")

// CorruptError is returned by Read when the stored checksum does not match the data.
type CorruptError struct {
	ActualCS, ExpectedCS uint64
}

func (CorruptError) Error() string { return "checkpoint is corrupted" }

// DevicesPerNUMA holds device IDs by the NUMA node they are attached to (-1 for devices
// without topology).
type DevicesPerNUMA map[int64][]string

// Devices returns the device IDs of all NUMA nodes.
func (d DevicesPerNUMA) Devices() sets.Set[string] {
	out := sets.New[string]()
	for _, ids := range d {
		out.Insert(ids...)
	}
	return out
}

// PodDevicesEntry records the devices of one resource allocated to one container, with
// the plugin's Allocate response (protobuf-encoded ContainerAllocateResponse).
type PodDevicesEntry struct {
	PodUID        string
	ContainerName string
	ResourceName  string
	DeviceIDs     DevicesPerNUMA
	AllocResp     []byte
}

// checkpointData is what the checksum covers; see the package comment before renaming.
type checkpointData struct {
	PodDeviceEntries  []PodDevicesEntry
	RegisteredDevices map[string][]string
}

// file is the JSON document on disk.
type file struct {
	Data     checkpointData
	Checksum uint64
}

// checksum is upstream's checksum.New: FNV-32a over the hash dump of the data.
func checksum(data checkpointData) uint64 {
	h := fnv.New32a()
	fmt.Fprintf(h, "%v", dump.ForHash(data))
	return uint64(h.Sum32())
}

// Write stores the allocations and the healthy devices by resource in dir, atomically
// (a temporary file renamed over the old one, as upstream's file store does). Device
// lists are sorted so that the same state always gives the same bytes.
func Write(dir string, entries []PodDevicesEntry, registered map[string][]string) error {
	data := checkpointData{PodDeviceEntries: entries, RegisteredDevices: registered}
	if len(entries) == 0 {
		// Upstream builds the entries with append on a nil slice: "null" when empty.
		data.PodDeviceEntries = nil
	}
	if data.RegisteredDevices == nil {
		data.RegisteredDevices = map[string][]string{}
	}
	for _, ids := range data.RegisteredDevices {
		sort.Strings(ids)
	}
	blob, err := json.Marshal(file{Data: data, Checksum: checksum(data)})
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return atomicfile.Write(filepath.Join(dir, FileName), blob, 0o600)
}

// Read loads the checkpoint from dir, verifying its checksum. It returns ErrNotFound
// when there is none and a CorruptError when the checksum does not match.
func Read(dir string) ([]PodDevicesEntry, map[string][]string, error) {
	blob, err := os.ReadFile(filepath.Join(dir, FileName))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil, ErrNotFound
	}
	if err != nil {
		return nil, nil, err
	}
	// Start from what upstream's getCheckpoint starts from: the checksum is verified on
	// the decoded values, and a field missing from the file keeps these.
	cp := file{Data: checkpointData{PodDeviceEntries: []PodDevicesEntry{}, RegisteredDevices: map[string][]string{}}}
	if err := json.Unmarshal(blob, &cp); err != nil {
		return nil, nil, err
	}
	if actual := checksum(cp.Data); actual != cp.Checksum {
		return nil, nil, CorruptError{ActualCS: actual, ExpectedCS: cp.Checksum}
	}
	return cp.Data.PodDeviceEntries, cp.Data.RegisteredDevices, nil
}
