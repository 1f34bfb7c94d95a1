package userns

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/nodelet/nodelet/pkg/atomicfile"
)

// mappingsFileName is the pod directory's file that keeps the pod's mapping. Its name
// and JSON layout are upstream's, so a pod directory moves between kubelet and nodelet.
const mappingsFileName = "userns"

type mappingsFile struct {
	UIDMappings []idMapping `json:"uidMappings"`
	GIDMappings []idMapping `json:"gidMappings"`
}

type idMapping struct {
	HostID      uint32 `json:"hostId"`
	ContainerID uint32 `json:"containerId"`
	Length      uint32 `json:"length"`
}

// readMappings reads the mapping file in podDir; found is false when there is none.
func readMappings(podDir string) (first, length uint32, found bool, err error) {
	data, err := os.ReadFile(filepath.Join(podDir, mappingsFileName))
	if errors.Is(err, os.ErrNotExist) {
		return 0, 0, false, nil
	}
	if err != nil {
		return 0, 0, false, err
	}
	if len(data) == 0 { // as upstream: an empty file is no mapping
		return 0, 0, false, nil
	}
	first, length, err = parseMappings(data)
	return first, length, err == nil, err
}

// parseMappings accepts only what nodelet writes: one mapping, the same for UIDs and
// GIDs, with container ID 0 mapped (some runtimes assume root is mapped).
func parseMappings(data []byte) (first, length uint32, err error) {
	var f mappingsFile
	if err := json.Unmarshal(data, &f); err != nil {
		return 0, 0, fmt.Errorf("invalid user namespace mappings file: %w", err)
	}
	switch {
	case len(f.UIDMappings) != 1:
		return 0, 0, errors.New("invalid user namespace configuration: no more than one mapping allowed")
	case len(f.GIDMappings) != 1 || f.UIDMappings[0] != f.GIDMappings[0]:
		return 0, 0, errors.New("invalid user namespace configuration: GID and UID mappings should be identical")
	case f.UIDMappings[0].ContainerID != 0:
		return 0, 0, errors.New("invalid user namespace configuration: UID 0 must be mapped")
	}
	return f.UIDMappings[0].HostID, f.UIDMappings[0].Length, nil
}

// writeMappings writes the mapping file into podDir (created if missing) atomically and
// durably: a crash leaves the old file or the new one, and the new one survives a reboot.
func writeMappings(podDir string, first, length uint32) error {
	m := idMapping{HostID: first, ContainerID: 0, Length: length}
	data, err := json.Marshal(mappingsFile{UIDMappings: []idMapping{m}, GIDMappings: []idMapping{m}})
	if err != nil {
		return err
	}
	if err := os.MkdirAll(podDir, 0o750); err != nil {
		return fmt.Errorf("create user namespace store: %w", err)
	}
	if err := atomicfile.Write(filepath.Join(podDir, mappingsFileName), data, 0o600); err != nil {
		return err
	}
	return syncDir(podDir)
}

// syncDir makes a rename in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
