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
	return withoutNilMaps(health), nil
}

// withoutNilMaps makes a file's "null" maps empty ones, so that a malformed file never
// makes a later health report panic.
func withoutNilMaps(health DevicesHealthMap) DevicesHealthMap {
	if health == nil {
		health = DevicesHealthMap{}
	}
	for name, driver := range health {
		if driver.Devices == nil {
			driver.Devices = map[string]DeviceHealth{}
			health[name] = driver
		}
	}
	return health
}

// WriteHealth replaces a health file atomically.
func WriteHealth(path string, health DevicesHealthMap) error {
	blob, err := json.Marshal(health)
	if err != nil {
		return err
	}
	return atomicfile.Write(path, blob, 0o600)
}
