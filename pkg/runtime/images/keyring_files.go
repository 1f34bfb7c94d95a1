package images

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// nodeConfigLifetime is how long docker config files are cached before being read again.
const nodeConfigLifetime = 5 * time.Minute

// FileKeyring serves the node's own docker credentials, read from the first valid
// config.json (then legacy .dockercfg) in its search directories, as upstream's default
// credential provider does. The files are re-read every five minutes.
type FileKeyring struct {
	// configJSONFiles and dockercfgFiles are the candidate files, in search order.
	configJSONFiles []string
	dockercfgFiles  []string
	clock           clock.PassiveClock

	mu      sync.Mutex
	cached  *BasicKeyring
	expires time.Time
}

// NewNodeKeyring searches, in upstream's order, preferredDir (the kubelet's root
// directory; skipped when empty), the working directory, then $HOME and / (config.json
// under their .docker/, .dockercfg directly in them).
func NewNodeKeyring(preferredDir string) *FileKeyring {
	home, _ := os.UserHomeDir()
	f := &FileKeyring{clock: clock.RealClock{}}
	if preferredDir != "" {
		f.configJSONFiles = []string{filepath.Join(preferredDir, "config.json")}
		f.dockercfgFiles = []string{filepath.Join(preferredDir, ".dockercfg")}
	}
	f.configJSONFiles = append(f.configJSONFiles, "config.json", filepath.Join(home, ".docker", "config.json"), "/.docker/config.json")
	f.dockercfgFiles = append(f.dockercfgFiles, ".dockercfg", filepath.Join(home, ".dockercfg"), "/.dockercfg")
	return f
}

// Lookup implements Keyring.
func (f *FileKeyring) Lookup(repo string) ([]TrackedAuthConfig, bool) {
	return f.keyring().Lookup(repo)
}

func (f *FileKeyring) keyring() *BasicKeyring {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cached != nil && f.clock.Now().Before(f.expires) {
		return f.cached
	}
	k := &BasicKeyring{}
	if cfg, err := f.readConfig(); err == nil {
		k.Add(cfg)
	} else {
		klog.V(4).InfoS("No node docker credentials", "err", err)
	}
	f.cached, f.expires = k, f.clock.Now().Add(nodeConfigLifetime)
	return k
}

// readConfig returns the first config.json that parses, else the first .dockercfg.
func (f *FileKeyring) readConfig() (DockerConfig, error) {
	for _, path := range f.configJSONFiles {
		if cfg, err := readDockerConfigJSON(path); err == nil {
			return cfg, nil
		}
	}
	for _, path := range f.dockercfgFiles {
		if cfg, err := readDockercfg(path); err == nil {
			return cfg, nil
		}
	}
	return nil, fmt.Errorf("no valid docker config in %q or %q", f.configJSONFiles, f.dockercfgFiles)
}

func readDockerConfigJSON(path string) (DockerConfig, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var cj DockerConfigJSON
	if err := json.Unmarshal(data, &cj); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return cj.Auths, nil
}

func readDockercfg(path string) (DockerConfig, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var cfg DockerConfig
	if err := json.Unmarshal(data, &cfg); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return cfg, nil
}
