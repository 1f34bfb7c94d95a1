package state

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"

	"github.com/nodelet/nodelet/pkg/atomicfile"
)

// The checkpoint's file name and the type it declares in its data.
const (
	CheckpointFileName   = "dra_manager_state"
	CheckpointKind       = "DRACheckpoint"
	CheckpointAPIVersion = "checkpoint.dra.kubelet.k8s.io/v1"
)

// CorruptError is returned when the checksum does not match the data; its text is
// upstream's.
type CorruptError struct {
	ActualCS, ExpectedCS uint64
}

func (CorruptError) Error() string { return "checkpoint is corrupted" }

// CheckpointData is what the checkpoint's Data string holds. Upstream embeds a
// metav1.TypeMeta; these two fields marshal the same way.
type CheckpointData struct {
	Kind               string `json:"kind,omitempty"`
	APIVersion         string `json:"apiVersion,omitempty"`
	ClaimInfoStateList ClaimInfoStateList
}

// checkpointFile is the document on disk: the data is stored as a string so that the
// checksum covers exactly the bytes that were written.
type checkpointFile struct {
	Data     string
	Checksum uint32
}

// MarshalCheckpoint returns the file contents for a list of claims. A nil list is
// written as null, an empty one as [], as upstream does.
func MarshalCheckpoint(list ClaimInfoStateList) ([]byte, error) {
	data, err := json.Marshal(CheckpointData{Kind: CheckpointKind, APIVersion: CheckpointAPIVersion, ClaimInfoStateList: list})
	if err != nil {
		return nil, err
	}
	return json.Marshal(checkpointFile{Data: string(data), Checksum: crc32.ChecksumIEEE(data)})
}

// UnmarshalCheckpoint verifies a file's checksum and returns its claims. The apiVersion
// is not checked: upstream loads older versions of the same structure.
func UnmarshalCheckpoint(blob []byte) (ClaimInfoStateList, error) {
	var cp checkpointFile
	if err := json.Unmarshal(blob, &cp); err != nil {
		return nil, err
	}
	if sum := crc32.ChecksumIEEE([]byte(cp.Data)); sum != cp.Checksum {
		return nil, &CorruptError{ActualCS: uint64(cp.Checksum), ExpectedCS: uint64(sum)}
	}
	var data CheckpointData
	if err := json.Unmarshal([]byte(cp.Data), &data); err != nil {
		return nil, err
	}
	return data.ClaimInfoStateList, nil
}

// ReadOrCreateCheckpoint loads dir's checkpoint, creating an empty one when there is
// none (upstream's GetOrCreate). The directory is created if needed.
func ReadOrCreateCheckpoint(dir string) (ClaimInfoStateList, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("failed to initialize checkpoint manager: %w", err)
	}
	blob, err := os.ReadFile(filepath.Join(dir, CheckpointFileName))
	if errors.Is(err, os.ErrNotExist) {
		if err := WriteCheckpoint(dir, nil); err != nil {
			return nil, fmt.Errorf("failed to store checkpoint %s: %w", CheckpointFileName, err)
		}
		return nil, nil
	}
	if err == nil {
		var list ClaimInfoStateList
		if list, err = UnmarshalCheckpoint(blob); err == nil {
			return list, nil
		}
	}
	return nil, fmt.Errorf("failed to get checkpoint %s: %w", CheckpointFileName, err)
}

// WriteCheckpoint replaces dir's checkpoint with the list of claims.
func WriteCheckpoint(dir string, list ClaimInfoStateList) error {
	blob, err := MarshalCheckpoint(list)
	if err != nil {
		return err
	}
	if err := atomicfile.Write(filepath.Join(dir, CheckpointFileName), blob, 0o600); err != nil {
		return fmt.Errorf("could not save checkpoint %s: %w", CheckpointFileName, err)
	}
	return nil
}
