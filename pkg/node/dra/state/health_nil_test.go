package state

import (
	"os"
	"path/filepath"
	"testing"
)

// A health file holding null maps reads as empty ones, never as nil maps a later
// report would write into.
func TestReadHealthNullMaps(t *testing.T) {
	for _, content := range []string{"null", `{"drv":{"Devices":null}}`} {
		path := filepath.Join(t.TempDir(), HealthFileName)
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		health, err := ReadHealth(path)
		if err != nil {
			t.Fatalf("%s: %v", content, err)
		}
		if health == nil {
			t.Fatalf("%s: nil map", content)
		}
		for name, d := range health {
			if d.Devices == nil {
				t.Errorf("%s: driver %s has a nil device map", content, name)
			}
		}
	}
}
