package state

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// FileName is the state file's name in the kubelet's root directory, upstream's.
const FileName = "memory_manager_state"

// Load restores the state of dir's state file for the named policy; when there is no
// file, it writes one with an empty state and returns that. A file that cannot be
// read, fails its checksum or was written for another policy is an error with
// upstream's advice: drain the node and delete the file.
func Load(dir, policyName string) (Data, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Data{}, fmt.Errorf("failed to initialize checkpoint manager: %v", err)
	}
	d, err := restore(dir, policyName)
	if err != nil {
		return Data{}, fmt.Errorf("could not restore state from checkpoint: %v, please drain this node and delete the memory manager checkpoint file %q before restarting Kubelet",
			err, filepath.Join(dir, FileName))
	}
	return d, nil
}

func restore(dir, policyName string) (Data, error) {
	blob, err := os.ReadFile(filepath.Join(dir, FileName))
	if errors.Is(err, os.ErrNotExist) {
		d := Data{PolicyName: policyName, MachineState: NUMANodeMap{}, Entries: ContainerMemoryAssignments{}}
		return d, Save(dir, d)
	}
	if err != nil {
		return Data{}, err
	}
	d, err := Unmarshal(blob)
	if err != nil {
		return Data{}, err
	}
	if d.PolicyName != policyName {
		return Data{}, fmt.Errorf("[memorymanager] configured policy %q differs from state checkpoint policy %q", policyName, d.PolicyName)
	}
	return d, nil
}

// Save replaces dir's state file with d, atomically: a temporary file (named with a
// leading dot, which upstream's checkpoint store skips) synced and renamed over it.
func Save(dir string, d Data) error {
	blob, err := Marshal(d)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, ".")
	if err != nil {
		return err
	}
	if err := writeAndClose(tmp, blob); err != nil {
		_ = os.Remove(tmp.Name())
		return err
	}
	if err := os.Rename(tmp.Name(), filepath.Join(dir, FileName)); err != nil {
		_ = os.Remove(tmp.Name())
		return err
	}
	return nil
}

func writeAndClose(f *os.File, blob []byte) error {
	if _, err := f.Write(blob); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}
