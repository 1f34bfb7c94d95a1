package state

import (
	"encoding/json"
	"fmt"
	"strings"

	"k8s.io/utils/dump"

	"github.com/nodelet/nodelet/pkg/node/memorymanager/state/checksum"
)

// Data is what the state file records.
type Data struct {
	PolicyName   string                     `json:"policyName"`
	MachineState NUMANodeMap                `json:"machineState"`
	Entries      ContainerMemoryAssignments `json:"entries,omitempty"`
	PodEntries   PodMemoryAssignments       `json:"podEntries,omitempty"`
}

// The file is upstream's v3 checkpoint: the data serialized as a string with a
// checksum of that string, and beside it the v1 fields (policy, machine state,
// container entries) with their own checksum, which kubelets older than v1.37 read.
// Files written by those kubelets are v1 or v2 (v1 plus podEntries) and are still read.

type checkpointV1 struct {
	PolicyName   string                     `json:"policyName"`
	MachineState NUMANodeMap                `json:"machineState"`
	Entries      ContainerMemoryAssignments `json:"entries,omitempty"`
	Checksum     checksum.Checksum          `json:"checksum"`
}

type checkpointV2 struct {
	PolicyName   string                     `json:"policyName"`
	MachineState NUMANodeMap                `json:"machineState"`
	Entries      ContainerMemoryAssignments `json:"entries,omitempty"`
	PodEntries   PodMemoryAssignments       `json:"podEntries,omitempty"`
	Checksum     checksum.Checksum          `json:"checksum"`
}

type checkpointV3 struct {
	checkpointV1
	Data         string            `json:"data"`
	DataChecksum checksum.Checksum `json:"dataChecksum"`
}

// legacyChecksum is the checksum of a v1 or v2 checkpoint: the hash dump of the
// struct with its checksum zeroed, under the type name all versions of upstream hash,
// MemoryManagerCheckpoint.
func legacyChecksum(cp any, typeName string) checksum.Checksum {
	d := strings.Replace(dump.ForHash(cp), "state."+typeName, "state.MemoryManagerCheckpoint", 1)
	return checksum.OfDump(d)
}

// Marshal returns the state file's contents for d.
func Marshal(d Data) ([]byte, error) {
	// A reader starts from empty maps where the file has none; hash what it will see.
	if d.MachineState == nil {
		d.MachineState = NUMANodeMap{}
	}
	if d.Entries == nil {
		d.Entries = ContainerMemoryAssignments{}
	}
	data, err := json.Marshal(d)
	if err != nil {
		return nil, fmt.Errorf("failed to serialize memory manager checkpoint data: %w", err)
	}
	cp := checkpointV3{
		checkpointV1: checkpointV1{PolicyName: d.PolicyName, MachineState: d.MachineState, Entries: d.Entries},
		Data:         string(data),
		DataChecksum: checksum.New(string(data)),
	}
	cp.Checksum = legacyChecksum(&cp.checkpointV1, "checkpointV1")
	return json.Marshal(cp)
}

// Unmarshal decodes and verifies a state file of any version, as upstream loads it: as
// v3, then, unless the file has v3 fields, as v2, then as v1. A checksum mismatch is a
// *checksum.CorruptError.
func Unmarshal(blob []byte) (Data, error) {
	d, isV3, err := unmarshalV3(blob)
	if err == nil {
		return d, nil
	}
	if isV3 {
		return Data{}, fmt.Errorf("could not load v3 checkpoint: %w", err)
	}
	if d, err := unmarshalV2(blob); err == nil {
		return d, nil
	}
	return unmarshalV1(blob)
}

// unmarshalV3 also reports whether the file has v3 fields: a broken v3 file must not
// be read as an older version.
func unmarshalV3(blob []byte) (Data, bool, error) {
	var cp checkpointV3
	err := json.Unmarshal(blob, &cp)
	// Decoding goes on past a field of the wrong type: judge on what was read.
	isV3 := cp.Data != "" || cp.DataChecksum != 0
	if err != nil {
		return Data{}, isV3, fmt.Errorf("failed to deserialize memory manager checkpoint: %w", err)
	}
	d := Data{MachineState: NUMANodeMap{}, Entries: ContainerMemoryAssignments{}, PodEntries: PodMemoryAssignments{}}
	if err := json.Unmarshal([]byte(cp.Data), &d); err != nil {
		return Data{}, isV3, fmt.Errorf("failed to deserialize memory manager checkpoint data: %w", err)
	}
	if err := cp.DataChecksum.Verify(cp.Data); err != nil {
		return Data{}, isV3, err
	}
	return d, true, nil
}

func unmarshalV2(blob []byte) (Data, error) {
	cp := checkpointV2{MachineState: NUMANodeMap{}, Entries: ContainerMemoryAssignments{}, PodEntries: PodMemoryAssignments{}}
	if err := json.Unmarshal(blob, &cp); err != nil {
		return Data{}, err
	}
	stored := cp.Checksum
	cp.Checksum = 0
	if actual := legacyChecksum(&cp, "checkpointV2"); actual != stored {
		return Data{}, &checksum.CorruptError{ActualCS: uint64(actual), ExpectedCS: uint64(stored)}
	}
	return Data{PolicyName: cp.PolicyName, MachineState: cp.MachineState, Entries: cp.Entries, PodEntries: cp.PodEntries}, nil
}

func unmarshalV1(blob []byte) (Data, error) {
	cp := checkpointV1{MachineState: NUMANodeMap{}, Entries: ContainerMemoryAssignments{}}
	if err := json.Unmarshal(blob, &cp); err != nil {
		return Data{}, err
	}
	// A zero checksum is accepted, as upstream does for files of its old file backend.
	if stored := cp.Checksum; stored != 0 {
		cp.Checksum = 0
		if actual := legacyChecksum(&cp, "checkpointV1"); actual != stored {
			return Data{}, &checksum.CorruptError{ActualCS: uint64(actual), ExpectedCS: uint64(stored)}
		}
	}
	return Data{PolicyName: cp.PolicyName, MachineState: cp.MachineState, Entries: cp.Entries}, nil
}
