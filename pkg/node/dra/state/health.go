package state

import (
	"encoding/json"
	"errors"
	"os"

	"github.com/nodelet/nodelet/pkg/atomicfile"
)

// HealthFileName is the device health file's name in the state directory.
const HealthFileName = "dra_health_state"

// ReadHealth loads a health file; a missing file is an empty map.
func ReadHealth(path string) (DevicesHealthMap, error) {
	health := DevicesHealthMap{}
	blob, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return health, nil
	}
	if err != nil {
		return health, err
	}
	if err := json.Unmarshal(blob, &health); err != nil {
		return DevicesHealthMap{}, err
	}
	return health, nil
}

// WriteHealth replaces a health file atomically.
func WriteHealth(path string, health DevicesHealthMap) error {
	blob, err := json.Marshal(health)
	if err != nil {
		return err
	}
	return atomicfile.Write(path, blob, 0o600)
}
