package allocation

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/dump"

	"github.com/nodelet/nodelet/pkg/atomicfile"
)

// Checkpoint file names under the kubelet's root directory, as upstream names them.
const (
	// AllocatedPodsStateFile holds the resources admitted for each pod (the allocation
	// manager's).
	AllocatedPodsStateFile = "allocated_pods_state"
	// ActuatedPodsStateFile holds the resources last applied to each pod's containers
	// (the runtime manager's).
	ActuatedPodsStateFile = "actuated_pods_state"
)

// PodResourceInfo is what a store records for one pod: the resources of its containers
// by name and its pod-level resources. The field names are upstream's checkpoint's.
type PodResourceInfo struct {
	ContainerResources map[string]v1.ResourceRequirements
	PodLevelResources  *v1.ResourceRequirements `json:",omitempty"`
}

func (i PodResourceInfo) deepCopy() PodResourceInfo {
	out := PodResourceInfo{ContainerResources: make(map[string]v1.ResourceRequirements, len(i.ContainerResources)),
		PodLevelResources: i.PodLevelResources.DeepCopy()}
	for name, r := range i.ContainerResources {
		out.ContainerResources[name] = *r.DeepCopy()
	}
	return out
}

// checkpoint is upstream's checkpoint format: the entries serialized as a string, and a
// checksum of that string (FNV-32a of its hash dump, as upstream's checkpoint manager
// computes it), so that either kubelet can read the other's file.
type checkpoint struct {
	Data     string `json:"data"`
	Checksum uint64 `json:"checksum"`
}

type checkpointEntries struct {
	Entries map[types.UID]PodResourceInfo `json:"entries,omitempty"`
}

func checksum(data string) uint64 {
	h := fnv.New32a()
	fmt.Fprintf(h, "%v", dump.ForHash(data))
	return uint64(h.Sum32())
}

// Store records resources per pod in memory and, when it has a file, in a checkpoint
// that survives restarts: every change is written at once, except removals, which are
// written with the next change (a stale entry is harmless and removed again then, as
// upstream does). It is safe for concurrent use.
type Store struct {
	path string // "": memory only

	mu           sync.RWMutex
	pods         map[types.UID]PodResourceInfo
	lastChecksum uint64
	// encoded holds each pod's entry as JSON, made when it changes: the checkpoint holds
	// every pod, and marshalling all of them again at each container start made the
	// writes of 110 starting pods cost a tenth of nodelet's CPU.
	encoded map[types.UID][]byte
}

// NewMemoryStore returns a store without a file.
func NewMemoryStore() *Store {
	return &Store{pods: map[types.UID]PodResourceInfo{}, encoded: map[types.UID][]byte{}}
}

// NewStore opens the checkpoint dir/name, restoring its entries; a missing file is an
// empty store. A checkpoint that cannot be read is an error, as upstream: the node
// should be drained and the file removed.
func NewStore(dir, name string) (*Store, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("failed to initialize checkpoint manager for pod resource information tracking: %w", err)
	}
	s := NewMemoryStore()
	s.path = filepath.Join(dir, name)
	if err := s.restore(); err != nil {
		return nil, fmt.Errorf("could not restore state from checkpoint: %w, please drain this node and delete pod resource information checkpoint file %q before restarting Kubelet", err, s.path)
	}
	return s, nil
}

func (s *Store) restore() error {
	data, err := os.ReadFile(s.path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var cp checkpoint
	if err := json.Unmarshal(data, &cp); err != nil {
		return err
	}
	if sum := checksum(cp.Data); sum != cp.Checksum {
		return fmt.Errorf("checkpoint is corrupted (checksum %d, want %d)", sum, cp.Checksum)
	}
	var entries checkpointEntries
	if err := json.Unmarshal([]byte(cp.Data), &entries); err != nil {
		return fmt.Errorf("failed to get pod resource information: %w", err)
	}
	for uid, info := range entries.Entries {
		s.pods[uid] = info
	}
	s.lastChecksum = cp.Checksum
	klog.V(2).InfoS("State checkpoint: restored pod resource state from checkpoint", "path", s.path)
	return nil
}

// Get returns a copy of what the store holds for the pod.
func (s *Store) Get(uid types.UID) (PodResourceInfo, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	info, ok := s.pods[uid]
	if !ok {
		return PodResourceInfo{}, false
	}
	return info.deepCopy(), true
}

// read calls fn with the pod's entry, if any, under the read lock; fn must not keep or
// change it (it saves a copy on the pod workers' path).
func (s *Store) read(uid types.UID, fn func(PodResourceInfo)) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	info, ok := s.pods[uid]
	if ok {
		fn(info)
	}
	return ok
}

// Container returns the resources recorded for one container of the pod.
func (s *Store) Container(uid types.UID, name string) (v1.ResourceRequirements, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	r, ok := s.pods[uid].ContainerResources[name]
	return *r.DeepCopy(), ok
}

// PodLevel returns the pod-level resources recorded for the pod; found is false when
// the pod has no entry.
func (s *Store) PodLevel(uid types.UID) (r *v1.ResourceRequirements, found bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	info, ok := s.pods[uid]
	return info.PodLevelResources.DeepCopy(), ok
}

// Has reports whether the store has an entry for the pod.
func (s *Store) Has(uid types.UID) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	_, ok := s.pods[uid]
	return ok
}

// UIDs lists the pods with an entry.
func (s *Store) UIDs() []types.UID {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]types.UID, 0, len(s.pods))
	for uid := range s.pods {
		out = append(out, uid)
	}
	return out
}

// Set replaces the pod's entry.
func (s *Store) Set(uid types.UID, info PodResourceInfo) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pods[uid] = info.deepCopy()
	return s.changed(uid)
}

// SetContainer records one container's resources, creating the pod's entry if needed.
func (s *Store) SetContainer(uid types.UID, name string, r v1.ResourceRequirements) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	info := s.pods[uid]
	if info.ContainerResources == nil {
		info.ContainerResources = map[string]v1.ResourceRequirements{}
	}
	info.ContainerResources[name] = *r.DeepCopy()
	s.pods[uid] = info
	return s.changed(uid)
}

// SetPodLevel records the pod-level resources, creating the pod's entry if needed.
func (s *Store) SetPodLevel(uid types.UID, r *v1.ResourceRequirements) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	info := s.pods[uid]
	info.PodLevelResources = r.DeepCopy()
	s.pods[uid] = info
	return s.changed(uid)
}

// Remove forgets the pod (in memory; the file follows with the next change).
func (s *Store) Remove(uid types.UID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.pods, uid)
	delete(s.encoded, uid)
}

// RemoveOrphans forgets every pod for which keep is false.
func (s *Store) RemoveOrphans(keep func(types.UID) bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for uid := range s.pods {
		if !keep(uid) {
			delete(s.pods, uid)
			delete(s.encoded, uid)
		}
	}
}

// changed encodes the pod's entry afresh and writes the checkpoint. Callers hold s.mu.
func (s *Store) changed(uid types.UID) error {
	if s.path == "" {
		return nil
	}
	b, err := json.Marshal(s.pods[uid])
	if err != nil {
		delete(s.encoded, uid)
		return fmt.Errorf("failed to serialize allocations for checkpointing: %w", err)
	}
	s.encoded[uid] = b
	return s.write()
}

// encodeEntries is json.Marshal(checkpointEntries{Entries: s.pods}) from the entries
// encoded already: the keys sorted, as encoding/json sorts a map's. Callers hold s.mu.
func (s *Store) encodeEntries() (string, error) {
	if len(s.pods) == 0 {
		return "{}", nil
	}
	uids := make([]types.UID, 0, len(s.pods))
	for uid := range s.pods {
		if _, ok := s.encoded[uid]; !ok {
			b, err := json.Marshal(s.pods[uid])
			if err != nil {
				return "", err
			}
			s.encoded[uid] = b
		}
		uids = append(uids, uid)
	}
	slices.Sort(uids)
	var buf strings.Builder
	buf.WriteString(`{"entries":{`)
	for i, uid := range uids {
		if i > 0 {
			buf.WriteByte(',')
		}
		key, err := json.Marshal(string(uid))
		if err != nil {
			return "", err
		}
		buf.Write(key)
		buf.WriteByte(':')
		buf.Write(s.encoded[uid])
	}
	buf.WriteString("}}")
	return buf.String(), nil
}

// write saves the entries to the checkpoint file, through a temporary file and a rename
// so that a crash leaves the old or the new file, unless they have not changed. Callers
// hold s.mu.
func (s *Store) write() error {
	if s.path == "" {
		return nil
	}
	data, err := s.encodeEntries()
	if err != nil {
		return fmt.Errorf("failed to serialize allocations for checkpointing: %w", err)
	}
	cp := checkpoint{Data: data, Checksum: checksum(data)}
	if cp.Checksum == s.lastChecksum {
		return nil
	}
	blob, err := json.Marshal(cp)
	if err != nil {
		return err
	}
	if err := atomicfile.Write(s.path, blob, 0o600); err != nil {
		klog.ErrorS(err, "Failed to save pod resource information checkpoint", "path", s.path)
		return err
	}
	s.lastChecksum = cp.Checksum
	return nil
}
