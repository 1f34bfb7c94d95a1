package checkpoint

import (
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// These files were written by upstream's kubelet code itself (v1.37.2:
// devicemanager/checkpoint.New stored with checkpointmanager.CreateCheckpoint) for the
// data of upstreamEntries and upstreamRegistered, and for no entry and no resource.
const (
	upstreamFile = `{"Data":{"PodDeviceEntries":[{"PodUID":"pod1","ContainerName":"ctr1","ResourceName":"example.com/gpu",` +
		`"DeviceIDs":{"-1":["dev1"],"0":["dev2","dev3"]},"AllocResp":"CgsKA0dQVRIEZGV2MRIKCgIvYxICL2gYARoUCgYvZGV2L2MSBi9kZXYvaBoCcnciBgoBYRIBYioSChB2ZW5kb3IuY29tL2dwdT0w"}],` +
		`"RegisteredDevices":{"example.com/gpu":["dev1","dev2","dev3"],"example.com/nic":[]}},"Checksum":116669118}`
	upstreamEmptyFile = `{"Data":{"PodDeviceEntries":null,"RegisteredDevices":{}},"Checksum":3467439661}`
	// upstreamAllocResp is the protobuf ContainerAllocateResponse of the entry.
	upstreamAllocResp = "CgsKA0dQVRIEZGV2MRIKCgIvYxICL2gYARoUCgYvZGV2L2MSBi9kZXYvaBoCcnciBgoBYRIBYioSChB2ZW5kb3IuY29tL2dwdT0w"
)

func upstreamData(t *testing.T) ([]PodDevicesEntry, map[string][]string) {
	t.Helper()
	resp, err := base64.StdEncoding.DecodeString(upstreamAllocResp)
	if err != nil {
		t.Fatal(err)
	}
	entries := []PodDevicesEntry{{PodUID: "pod1", ContainerName: "ctr1", ResourceName: "example.com/gpu",
		DeviceIDs: DevicesPerNUMA{-1: {"dev1"}, 0: {"dev2", "dev3"}}, AllocResp: resp}}
	registered := map[string][]string{"example.com/gpu": {"dev3", "dev1", "dev2"}, "example.com/nic": {}}
	return entries, registered
}

// A checkpoint written by upstream's kubelet is read back with its data.
func TestReadUpstreamCheckpoint(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, FileName), []byte(upstreamFile), 0o600); err != nil {
		t.Fatal(err)
	}
	entries, registered, err := Read(dir)
	if err != nil {
		t.Fatalf("Read of upstream's checkpoint: %v", err)
	}
	wantEntries, wantRegistered := upstreamData(t)
	wantRegistered["example.com/gpu"] = []string{"dev1", "dev2", "dev3"}
	if !reflect.DeepEqual(entries, wantEntries) {
		t.Errorf("entries = %+v, want %+v", entries, wantEntries)
	}
	if !reflect.DeepEqual(registered, wantRegistered) {
		t.Errorf("registered = %v, want %v", registered, wantRegistered)
	}
}

// nodelet writes the same bytes as upstream's kubelet for the same state, so either
// kubelet reads the other's checkpoint.
func TestWriteMatchesUpstreamBytes(t *testing.T) {
	for name, tc := range map[string]struct {
		entries    func(t *testing.T) ([]PodDevicesEntry, map[string][]string)
		wantOnDisk string
	}{
		"allocations": {entries: upstreamData, wantOnDisk: upstreamFile},
		"empty": {
			entries:    func(*testing.T) ([]PodDevicesEntry, map[string][]string) { return []PodDevicesEntry{}, nil },
			wantOnDisk: upstreamEmptyFile,
		},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			entries, registered := tc.entries(t)
			if err := Write(dir, entries, registered); err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(filepath.Join(dir, FileName))
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.wantOnDisk {
				t.Errorf("written:\n%s\nupstream writes:\n%s", got, tc.wantOnDisk)
			}
			if _, _, err := Read(dir); err != nil {
				t.Errorf("Read of own checkpoint: %v", err)
			}
		})
	}
}

// A checkpoint whose data no longer matches its checksum is refused; a missing one is
// ErrNotFound. No temporary file is left behind by writes.
func TestReadErrors(t *testing.T) {
	dir := t.TempDir()
	if _, _, err := Read(dir); !errors.Is(err, ErrNotFound) {
		t.Errorf("Read of a missing checkpoint = %v, want ErrNotFound", err)
	}
	tampered := strings.Replace(upstreamFile, `"dev2","dev3"]},"AllocResp"`, `"dev2","dev4"]},"AllocResp"`, 1)
	if err := os.WriteFile(filepath.Join(dir, FileName), []byte(tampered), 0o600); err != nil {
		t.Fatal(err)
	}
	var corrupt CorruptError
	if _, _, err := Read(dir); !errors.As(err, &corrupt) || corrupt.ExpectedCS != 116669118 {
		t.Errorf("Read of a tampered checkpoint = %v, want CorruptError expecting 116669118", err)
	}
	if err := Write(dir, nil, nil); err != nil {
		t.Fatal(err)
	}
	files, _ := os.ReadDir(dir)
	if len(files) != 1 || files[0].Name() != FileName {
		t.Errorf("directory holds %v, want only %s", files, FileName)
	}
}

func TestDevicesPerNUMA(t *testing.T) {
	got := DevicesPerNUMA{-1: {"a"}, 0: {"b", "c"}, 1: {"c"}}.Devices()
	if got.Len() != 3 || !got.HasAll("a", "b", "c") {
		t.Errorf("Devices() = %v", got)
	}
}
