// Package state reads and writes the CPU manager's checkpoint file, cpu_manager_state,
// in the formats of upstream's pkg/kubelet/cm/cpumanager/state, so that a node can move
// between upstream's kubelet and nodelet without losing its CPU assignments.
//
// Upstream v1.37 writes its "v4" format: the v2 fields (policyName, defaultCpuSet,
// entries, checksum) for older kubelets, plus "data", the JSON of the same state, and
// "dataChecksum". It reads v4, and falls back to v3 (v2 plus podEntries) and v2 files,
// which it migrates. The v1 format (entries by container ID) is no longer read.
//
// Both checksums are FNV-32a hashes of a text dump (k8s.io/utils/dump.ForHash, a spew
// %#v): of the data string for dataChecksum, and of the v2/v3 struct for checksum. That
// dump spells upstream's package, type and field names, so this package writes the
// dump text out itself (see legacyDump) rather than dumping its own Go types.
package state

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"

	"k8s.io/utils/cpuset"
)

// FileName is the checkpoint's name in the kubelet's root directory, upstream's.
const FileName = "cpu_manager_state"

// ErrNotFound is returned by Read when there is no checkpoint file.
var ErrNotFound = errors.New("checkpoint is not found")

// CorruptError is returned by Read when a stored checksum does not match the content.
type CorruptError struct {
	ActualCS, ExpectedCS uint64
}

func (CorruptError) Error() string { return "checkpoint is corrupted" }

// Checkpoint is the CPU manager's state: the policy that wrote it, the shared pool
// and the CPUs assigned to containers, by pod UID and container name.
type Checkpoint struct {
	PolicyName    string
	DefaultCPUSet cpuset.CPUSet
	Entries       map[string]map[string]cpuset.CPUSet
}

// v2Fields are the fields every upstream version reads.
type v2Fields struct {
	PolicyName    string                       `json:"policyName"`
	DefaultCPUSet string                       `json:"defaultCpuSet"`
	Entries       map[string]map[string]string `json:"entries,omitempty"`
	Checksum      uint64                       `json:"checksum"`
}

// v4File is the file upstream v1.37 writes: the v2 fields, then the authoritative data.
type v4File struct {
	v2Fields
	Data         string `json:"data"`
	DataChecksum uint64 `json:"dataChecksum"`
}

// v4Data is the JSON held in v4File.Data. Upstream also keeps pod-level entries and
// in-place resize baselines there, behind feature gates that are off by default; they
// are neither read nor written here.
type v4Data struct {
	PolicyName    string                       `json:"policyName"`
	DefaultCPUSet string                       `json:"defaultCpuSet"`
	Entries       map[string]map[string]string `json:"entries,omitempty"`
}

// v3File is the format upstream v1.36 wrote: v2 plus pod-level entries.
type v3File struct {
	PolicyName    string                       `json:"policyName"`
	DefaultCPUSet string                       `json:"defaultCpuSet"`
	Entries       map[string]map[string]string `json:"entries,omitempty"`
	PodEntries    map[string]podEntry          `json:"podEntries,omitempty"`
	Checksum      uint64                       `json:"checksum"`
}

type podEntry struct {
	CPUSet string `json:"cpuSet,omitempty"`
}

// Write stores the checkpoint at path in upstream's v4 format, atomically.
func Write(path string, cp Checkpoint) error {
	data := v4Data{
		PolicyName:    cp.PolicyName,
		DefaultCPUSet: cp.DefaultCPUSet.String(),
		Entries:       entriesToStrings(cp.Entries),
	}
	dataJSON, err := json.Marshal(data)
	if err != nil {
		return fmt.Errorf("failed to serialize cpu manager checkpoint data: %w", err)
	}
	legacy := v2Fields{PolicyName: data.PolicyName, DefaultCPUSet: data.DefaultCPUSet, Entries: data.Entries}
	legacy.Checksum = hashDump(legacyDump(legacyName, legacy.PolicyName, legacy.DefaultCPUSet, legacy.Entries, nil))
	file := v4File{v2Fields: legacy, Data: string(dataJSON), DataChecksum: hashDump(stringDump(string(dataJSON)))}
	blob, err := json.Marshal(file)
	if err != nil {
		return err
	}
	return writeAtomically(path, blob)
}

// Read loads the checkpoint at path as upstream does: as v4, or, when the file has no
// v4 data at all, as v3 and then as v2. It returns ErrNotFound when there is no file,
// and the error of the last format tried when none fits.
func Read(path string) (Checkpoint, error) {
	blob, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return Checkpoint{}, ErrNotFound
	}
	if err != nil {
		return Checkpoint{}, err
	}
	fields, err := readV4(blob)
	if err != nil {
		fields, err = readOlder(blob, err)
	}
	if err != nil {
		return Checkpoint{}, err
	}
	return parse(fields)
}

// readV4 decodes a v4 file and verifies its data checksum. Its error is an errNotV4
// when the file has neither data nor a data checksum.
func readV4(blob []byte) (v4Data, error) {
	var file v4File
	var data v4Data
	err := json.Unmarshal(blob, &file)
	if err != nil {
		err = fmt.Errorf("failed to deserialize cpu manager checkpoint: %w", err)
	} else {
		err = decodeV4Data(file, &data)
	}
	// A type error leaves the other fields decoded, as upstream sees them too.
	if err != nil && file.Data == "" && file.DataChecksum == 0 {
		return data, errNotV4{err}
	}
	return data, err
}

func decodeV4Data(file v4File, data *v4Data) error {
	if err := json.Unmarshal([]byte(file.Data), data); err != nil {
		return fmt.Errorf("failed to deserialize cpu manager checkpoint data: %w", err)
	}
	if actual := hashDump(stringDump(file.Data)); actual != file.DataChecksum {
		return CorruptError{ActualCS: actual, ExpectedCS: file.DataChecksum}
	}
	return nil
}

// errNotV4 marks a file without v4 data, which upstream reads as an older format.
type errNotV4 struct{ error }

// readOlder reads the file as v3, then v2, when it holds no v4 data; a broken v4 file
// is an error, not a reason to fall back.
func readOlder(blob []byte, v4Err error) (v4Data, error) {
	var notV4 errNotV4
	if !errors.As(v4Err, &notV4) {
		return v4Data{}, fmt.Errorf("could not load v4 checkpoint: %w", v4Err)
	}
	if fields, err := readV3(blob); err == nil {
		return fields, nil
	}
	return readV2(blob)
}

// readV3 decodes a v3 file; its checksum may have been computed under the current or
// the legacy struct name. Pod-level entries are dropped, as upstream drops them with
// its PodLevelResourceManagers gate off.
func readV3(blob []byte) (v4Data, error) {
	// Maps start empty, not nil, as upstream's do: the checksum's dump tells them apart.
	file := v3File{Entries: map[string]map[string]string{}, PodEntries: map[string]podEntry{}}
	if err := json.Unmarshal(blob, &file); err != nil {
		return v4Data{}, err
	}
	pods := podEntriesDump(file.PodEntries)
	if err := verifyLegacy(file.Checksum, false, file.PolicyName, file.DefaultCPUSet, file.Entries, &pods, "CPUManagerCheckpointV3"); err != nil {
		return v4Data{}, err
	}
	return v4Data{PolicyName: file.PolicyName, DefaultCPUSet: file.DefaultCPUSet, Entries: file.Entries}, nil
}

// readV2 decodes a v2 file. A zero checksum is accepted, as upstream accepts it for
// files of its old file backend.
func readV2(blob []byte) (v4Data, error) {
	file := v2Fields{Entries: map[string]map[string]string{}}
	if err := json.Unmarshal(blob, &file); err != nil {
		return v4Data{}, err
	}
	if err := verifyLegacy(file.Checksum, true, file.PolicyName, file.DefaultCPUSet, file.Entries, nil, "CPUManagerCheckpointV2"); err != nil {
		return v4Data{}, err
	}
	return v4Data{PolicyName: file.PolicyName, DefaultCPUSet: file.DefaultCPUSet, Entries: file.Entries}, nil
}

// verifyLegacy accepts a v2/v3 checksum computed under either upstream's current struct
// name or the legacy one.
func verifyLegacy(stored uint64, zeroOK bool, policy, defaultSet string, entries map[string]map[string]string, pods *string, currentName string) error {
	if zeroOK && stored == 0 {
		return nil
	}
	if hashDump(legacyDump(currentName, policy, defaultSet, entries, pods)) == stored {
		return nil
	}
	actual := hashDump(legacyDump(legacyName, policy, defaultSet, entries, pods))
	if actual != stored {
		return CorruptError{ActualCS: actual, ExpectedCS: stored}
	}
	return nil
}

// parse turns the stored strings into CPU sets, with upstream's error messages.
func parse(d v4Data) (Checkpoint, error) {
	cp := Checkpoint{PolicyName: d.PolicyName, Entries: map[string]map[string]cpuset.CPUSet{}}
	var err error
	if cp.DefaultCPUSet, err = cpuset.Parse(d.DefaultCPUSet); err != nil {
		return Checkpoint{}, fmt.Errorf("could not parse default CPU set %q: %w", d.DefaultCPUSet, err)
	}
	for pod, containers := range d.Entries {
		cp.Entries[pod] = make(map[string]cpuset.CPUSet, len(containers))
		for container, cpus := range containers {
			set, err := cpuset.Parse(cpus)
			if err != nil {
				return Checkpoint{}, fmt.Errorf("could not parse cpuset %q for container %q in pod %q: %w", cpus, container, pod, err)
			}
			cp.Entries[pod][container] = set
		}
	}
	return cp, nil
}

func entriesToStrings(entries map[string]map[string]cpuset.CPUSet) map[string]map[string]string {
	out := make(map[string]map[string]string, len(entries))
	for pod, containers := range entries {
		out[pod] = make(map[string]string, len(containers))
		for container, cpus := range containers {
			out[pod][container] = cpus.String()
		}
	}
	return out
}

func hashDump(dump string) uint64 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(dump))
	return uint64(h.Sum32())
}

// writeAtomically writes blob to path through a synced temporary file named with a
// leading ".", renamed over the old file, as upstream's file store does.
func writeAtomically(path string, blob []byte) (err error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, ".")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	if _, err = tmp.Write(blob); err != nil {
		return err
	}
	if err = tmp.Sync(); err != nil {
		return err
	}
	if err = tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
