// Package userns gives pods that set `hostUsers: false` a user namespace of their own
// (upstream's pkg/kubelet/userns). Each such pod gets a block of host IDs, idsPerPod long
// (65536 by default), from the range the node sets aside for pods: the `kubelet` user's
// subordinate IDs, else every ID from idsPerPod up. Container UID and GID 0 map to the
// block's first host ID. A pod's block is written to <pods dir>/<uid>/userns, so that a
// restarted nodelet gives a running pod the same mapping, and is freed when the pod is
// cleaned up.
//
// A pod is refused, with a reason, when the runtime does not report user namespace
// support for its runtime handler (CRI Status: runtime_handlers[].features.user_namespaces);
// the runtime in turn reports it only when its OCI runtime and the kernel can do
// idmapped mounts.
package userns

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
)

const (
	// DefaultIDsPerPod is how many IDs a pod's user namespace maps unless the
	// configuration (userNamespaces.idsPerPod) says otherwise, as upstream.
	DefaultIDsPerPod = 65536
	// idsUnit: idsPerPod must be a multiple of it.
	idsUnit = 65536
)

// HandlerSupport says whether a runtime handler ("" is the runtime's default) can run
// pods in their own user namespace.
type HandlerSupport interface {
	SupportsUserNamespaces(ctx context.Context, runtimeHandler string) (bool, error)
}

// Config configures a Manager.
type Config struct {
	// PodsDir holds the pod directories, <root-dir>/pods.
	PodsDir string
	// IDsPerPod is the length of each pod's mapping; 0 means DefaultIDsPerPod.
	IDsPerPod int64
	// MaxPods is the most pods the node runs: the range must hold a block for each.
	MaxPods int
	// Range is the host IDs that pods' blocks are carved from; nil means KubeletRange.
	Range *IDRange
	// Handlers reports the runtime's support; nil refuses every pod with hostUsers: false.
	Handlers HandlerSupport
}

// Manager hands out and remembers the pods' ID blocks. It is safe for concurrent use.
type Manager struct {
	podsDir   string
	handlers  HandlerSupport
	idsPerPod uint32
	// The range is blocks [firstBlock, firstBlock+len(taken)) of idsPerPod IDs each.
	firstBlock int

	mu    sync.Mutex
	taken []bool
	byPod map[types.UID]int // block index into taken
	intN  func(n int) int   // picks where a free-block search starts
}

// NewManager validates the configuration, works out the range and reads back the
// mappings of the pods that have a directory, so that they keep them. A mapping file it
// cannot accept fails it, as upstream, rather than risk giving its block to another pod.
func NewManager(cfg Config) (*Manager, error) {
	idsPerPod, err := idsPerPod(cfg.IDsPerPod)
	if err != nil {
		return nil, err
	}
	r := cfg.Range
	if r == nil {
		kr, err := KubeletRange(idsPerPod)
		if err != nil {
			return nil, fmt.Errorf("kubelet mappings: %w", err)
		}
		r = &kr
	}
	if err := checkRange(*r, idsPerPod, cfg.MaxPods); err != nil {
		return nil, err
	}
	m := &Manager{
		podsDir:    cfg.PodsDir,
		handlers:   cfg.Handlers,
		idsPerPod:  idsPerPod,
		firstBlock: int(r.First / idsPerPod),
		taken:      make([]bool, r.Length/idsPerPod),
		byPod:      map[types.UID]int{},
		intN:       rand.IntN,
	}
	klog.V(5).InfoS("User namespace manager mapping", "offset", m.firstBlock, "length", len(m.taken), "idsPerPod", idsPerPod)
	if err := m.readPodsFromDisk(); err != nil {
		return nil, err
	}
	return m, nil
}

func idsPerPod(configured int64) (uint32, error) {
	switch {
	case configured == 0:
		return DefaultIDsPerPod, nil
	case configured < idsUnit:
		return 0, fmt.Errorf("invalid configuration: userNamespaces.idsPerPod must not be less than %d", idsUnit)
	case configured%idsUnit != 0:
		return 0, fmt.Errorf("invalid configuration: userNamespaces.idsPerPod must be a multiple of %d", idsUnit)
	case configured > math.MaxUint32:
		return 0, fmt.Errorf("invalid configuration: userNamespaces.idsPerPod must not be more than %d", int64(math.MaxUint32))
	}
	return uint32(configured), nil
}

// checkRange applies upstream's rules: whole blocks, never the host's ID 0 (which would
// make container root the host's root), and room for maxPods pods.
func checkRange(r IDRange, idsPerPod uint32, maxPods int) error {
	switch {
	case r.First%idsPerPod != 0:
		return fmt.Errorf("kubelet user assigned ID %v is not a multiple of %v", r.First, idsPerPod)
	case r.First < idsPerPod:
		return fmt.Errorf("kubelet user assigned ID %v must be greater or equal to %v", r.First, idsPerPod)
	case r.Length%idsPerPod != 0:
		return fmt.Errorf("kubelet user assigned IDs length %v is not a multiple of %v", r.Length, idsPerPod)
	case uint64(r.First)+uint64(r.Length) > math.MaxUint32:
		// Host ID 4294967295 is no ID: the kernel refuses a mapping that includes it.
		return fmt.Errorf("kubelet user assigned IDs %v+%v reach past ID %d", r.First, r.Length, uint32(math.MaxUint32-1))
	case int(r.Length/idsPerPod) < maxPods:
		return fmt.Errorf("kubelet user assigned IDs are not enough to support %v pods", maxPods)
	}
	return nil
}

// readPodsFromDisk records the mapping of every pod directory that has one.
func (m *Manager) readPodsFromDisk() error {
	uids, err := m.podDirs()
	if err != nil {
		return fmt.Errorf("read pods from disk: %w", err)
	}
	for _, uid := range uids {
		if _, _, err := m.recordFromFile(uid); err != nil {
			return fmt.Errorf("record pod mappings for existing pod %q: %w", uid, err)
		}
	}
	return nil
}

// podDirs lists the UIDs of the pod directories; none when the pods dir does not exist.
func (m *Manager) podDirs() ([]types.UID, error) {
	entries, err := os.ReadDir(m.podsDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var uids []types.UID
	for _, e := range entries {
		if e.IsDir() {
			uids = append(uids, types.UID(e.Name()))
		}
	}
	return uids, nil
}

func (m *Manager) podDir(uid types.UID) string { return filepath.Join(m.podsDir, string(uid)) }

// GetOrCreateUserNamespaceMappings returns the user namespace of pod's sandbox and
// containers: the node's for a pod that shares it (hostUsers unset or true), else the
// pod's own, its block allocated on first use. A pod with hostUsers: false is refused
// when runtimeHandler does not support user namespaces.
func (m *Manager) GetOrCreateUserNamespaceMappings(ctx context.Context, pod *v1.Pod, runtimeHandler string) (*runtimeapi.UserNamespace, error) {
	if pod == nil || pod.Spec.HostUsers == nil || *pod.Spec.HostUsers {
		return &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_NODE}, nil
	}
	if err := m.checkHandler(ctx, runtimeHandler); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	first, found, err := m.recordFromFile(pod.UID)
	if err != nil {
		return nil, fmt.Errorf("user namespace: %w", err)
	}
	if !found {
		if first, err = m.create(pod.UID); err != nil {
			return nil, fmt.Errorf("create user namespace: %w", err)
		}
	}
	mapping := []*runtimeapi.IDMapping{{HostId: first, ContainerId: 0, Length: m.idsPerPod}}
	return &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_POD, Uids: mapping,
		Gids: []*runtimeapi.IDMapping{{HostId: first, ContainerId: 0, Length: m.idsPerPod}}}, nil
}

// checkHandler refuses a handler that does not support user namespaces, in upstream's words.
func (m *Manager) checkHandler(ctx context.Context, runtimeHandler string) error {
	supported, err := false, error(nil)
	if m.handlers != nil {
		supported, err = m.handlers.SupportsUserNamespaces(ctx, runtimeHandler)
	}
	if err == nil && supported {
		return nil
	}
	msg := "can't set `spec.hostUsers: false`, runtime does not support user namespaces"
	if runtimeHandler != "" {
		msg = fmt.Sprintf("can't set `spec.hostUsers: false`, RuntimeClass handler %q does not support user namespaces", runtimeHandler)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", msg, err)
	}
	return errors.New(msg)
}

// recordFromFile reads the pod's mapping file, if any, and marks its block taken by the
// pod. It fails when the file is not one nodelet (or a kubelet) wrote for this range, or
// its block belongs to another pod. m.mu is held or m is not shared yet.
func (m *Manager) recordFromFile(uid types.UID) (first uint32, found bool, err error) {
	first, length, found, err := readMappings(m.podDir(uid))
	if err != nil || !found {
		return 0, found, err
	}
	return first, true, m.record(uid, first, length)
}

func (m *Manager) record(uid types.UID, first, length uint32) error {
	if length != m.idsPerPod {
		return fmt.Errorf("wrong user namespace length %v", length)
	}
	if first%m.idsPerPod != 0 {
		return fmt.Errorf("wrong user namespace offset specified %v", first)
	}
	block := int(first/m.idsPerPod) - m.firstBlock
	if prev, ok := m.byPod[uid]; ok {
		if prev != block {
			return fmt.Errorf("different user namespace range already used by pod %q", uid)
		}
		return nil
	}
	if block < 0 || block >= len(m.taken) {
		return fmt.Errorf("id %v is out of range", first)
	}
	if m.taken[block] {
		return fmt.Errorf("range picked for pod %q already taken", uid)
	}
	m.taken[block] = true
	m.byPod[uid] = block
	return nil
}

// create allocates a free block for the pod and writes it to the pod's directory; the
// block is freed again when it cannot be written. m.mu is held.
func (m *Manager) create(uid types.UID) (uint32, error) {
	block, ok := m.freeBlock()
	if !ok {
		return 0, errors.New("could not find an empty slot to allocate a user namespace")
	}
	m.taken[block] = true
	m.byPod[uid] = block
	first := m.firstID(block)
	if err := writeMappings(m.podDir(uid), first, m.idsPerPod); err != nil {
		m.releaseLocked(uid)
		return 0, err
	}
	klog.V(5).InfoS("New pod user namespace allocation", "podUID", uid, "hostID", first)
	return first, nil
}

// freeBlock finds a free block, searching from a random one as upstream does, so that
// a pod's IDs do not predict its neighbours'.
func (m *Manager) freeBlock() (int, bool) {
	n := len(m.taken)
	if n == 0 {
		return 0, false
	}
	start := m.intN(n)
	for i := range n {
		if b := (start + i) % n; !m.taken[b] {
			return b, true
		}
	}
	return 0, false
}

func (m *Manager) firstID(block int) uint32 {
	return uint32(m.firstBlock+block) * m.idsPerPod
}

// Release frees the pod's block and removes its mapping file. The kubelet calls it once
// the pod's containers are stopped for good (upstream: SyncTerminatedPod) and when the
// pod's directory is cleaned up; a pod without a block is a no-op.
func (m *Manager) Release(uid types.UID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.releaseLocked(uid)
}

func (m *Manager) releaseLocked(uid types.UID) {
	block, ok := m.byPod[uid]
	if !ok {
		return
	}
	delete(m.byPod, uid)
	m.taken[block] = false
	if err := os.Remove(filepath.Join(m.podDir(uid), mappingsFileName)); err != nil && !errors.Is(err, os.ErrNotExist) {
		klog.V(4).InfoS("Failed to remove the pod's user namespace mapping file", "podUID", uid, "err", err)
	}
	klog.V(5).InfoS("Released pod user namespace allocation", "podUID", uid)
}

// CleanupOrphaned frees the blocks of pods that are not in use (upstream's
// CleanupOrphanedPodUsernsAllocations, run by housekeeping): those whose directory
// remains but that inUse does not know (neither desired nor running), and those whose
// directory is gone.
func (m *Manager) CleanupOrphaned(inUse func(types.UID) bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	onDisk, err := m.podDirs()
	if err != nil {
		return fmt.Errorf("user namespace: read pods from disk: %w", err)
	}
	present := make(map[types.UID]bool, len(onDisk))
	for _, uid := range onDisk {
		present[uid] = true
		if !inUse(uid) {
			m.releaseLocked(uid)
		}
	}
	for uid := range m.byPod {
		if !present[uid] {
			m.releaseLocked(uid)
		}
	}
	return nil
}

// Allocated reports the pod's first host ID, if it has a block.
func (m *Manager) Allocated(uid types.UID) (uint32, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	block, ok := m.byPod[uid]
	if !ok {
		return 0, false
	}
	return m.firstID(block), true
}
