package logs

import (
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/wait"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/outage"
)

const (
	// rotatedTimeFormat is the suffix of a rotated log: <log>.20061225-150405.
	// Its names sort in time order.
	rotatedTimeFormat = "20060102-150405"
	// compressSuffix marks a rotated log that was compressed.
	compressSuffix = ".gz"
	// tmpSuffix marks a compression in progress; a leftover one is garbage.
	tmpSuffix = ".tmp"
)

// ContainerLogManager rotates the logs of running containers: a log that has
// grown to the maximum size is renamed to <log>.<timestamp> and the runtime
// is asked to reopen the log, which creates a new file. Older rotated logs
// are compressed, and the oldest are removed so that at most maxFiles files
// (the live log included) remain. It is safe for concurrent use.
type ContainerLogManager struct {
	runtimeService  internalapi.RuntimeService
	maxSize         int64 // bytes; negative disables rotation
	maxFiles        int
	monitorInterval time.Duration
	now             func() time.Time
	// mu keeps a rotation and Clean from working on the same files at once; it guards
	// logPaths.
	mu sync.Mutex
	// logPaths are the log paths of the containers the last rotation round listed. A
	// container's log path never changes, so a round asks the runtime for the running
	// containers and the status of new ones only, not for every container's status
	// every monitor interval (upstream asks for each).
	logPaths map[string]string
}

// NewContainerLogManager returns a manager that rotates a container log
// once it reaches maxSize (a quantity such as "10Mi"; negative disables
// rotation) and keeps at most maxFiles files per container (at least 2),
// looking every monitorInterval.
func NewContainerLogManager(runtimeService internalapi.RuntimeService, maxSize string, maxFiles int, monitorInterval time.Duration) (*ContainerLogManager, error) {
	if maxFiles <= 1 {
		return nil, fmt.Errorf("invalid MaxFiles %d, must be > 1", maxFiles)
	}
	size, err := parseMaxSize(maxSize)
	if err != nil {
		return nil, fmt.Errorf("failed to parse container log max size %q: %w", maxSize, err)
	}
	if monitorInterval <= 0 {
		return nil, fmt.Errorf("invalid container log monitor interval %v, must be > 0", monitorInterval)
	}
	return &ContainerLogManager{
		runtimeService:  runtimeService,
		maxSize:         size,
		maxFiles:        maxFiles,
		monitorInterval: monitorInterval,
		now:             time.Now,
		logPaths:        map[string]string{},
	}, nil
}

// parseMaxSize converts a quantity such as "10Mi" to bytes.
func parseMaxSize(size string) (int64, error) {
	quantity, err := resource.ParseQuantity(size)
	if err != nil {
		return 0, err
	}
	bytes, ok := quantity.AsInt64()
	if !ok {
		return 0, errors.New("invalid max log size")
	}
	return bytes, nil
}

// Start rotates logs every monitor interval until ctx ends. It returns at
// once; the work runs in the background.
func (m *ContainerLogManager) Start(ctx context.Context) {
	if m.maxSize < 0 {
		klog.InfoS("Container log rotation is disabled")
		return
	}
	klog.InfoS("Starting container log rotation", "maxSize", m.maxSize, "maxFiles", m.maxFiles, "monitorPeriod", m.monitorInterval)
	go wait.UntilWithContext(ctx, func(ctx context.Context) {
		if err := m.rotateLogs(ctx); err != nil {
			outage.ErrorS(err, "Failed to rotate container logs")
		}
	}, m.monitorInterval)
}

// Clean removes all logs of a container, the rotated ones included.
func (m *ContainerLogManager) Clean(ctx context.Context, containerID string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.logPaths, containerID)
	path, err := m.logPath(ctx, containerID)
	if err != nil || path == "" {
		return err
	}
	logs, err := filepath.Glob(path + "*")
	if err != nil {
		return fmt.Errorf("failed to list all log files with pattern %q: %w", path+"*", err)
	}
	for _, l := range logs {
		if err := os.Remove(l); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("failed to remove container %q log %q: %w", containerID, l, err)
		}
	}
	return nil
}

// rotateLogs rotates the log of each running container that has grown too
// big. Stopped containers write nothing more, so their logs stay as they are.
func (m *ContainerLogManager) rotateLogs(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	running := &runtimeapi.ContainerFilter{State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING}}
	containers, err := m.runtimeService.ListContainers(ctx, running)
	if err != nil {
		return fmt.Errorf("failed to list containers: %w", err)
	}
	m.keepLogPathsOf(containers)
	for _, c := range containers {
		if ctx.Err() != nil {
			return nil // stopping: nothing to report
		}
		if err := m.rotateIfTooBig(ctx, c.GetId()); err != nil && ctx.Err() == nil {
			klog.ErrorS(err, "Failed to rotate log for container", "containerID", c.GetId())
		}
	}
	return nil
}

// logPath asks the runtime where a container's log is.
func (m *ContainerLogManager) logPath(ctx context.Context, containerID string) (string, error) {
	resp, err := m.runtimeService.ContainerStatus(ctx, containerID, false)
	if err != nil {
		return "", fmt.Errorf("failed to get container status %q: %w", containerID, err)
	}
	if resp.GetStatus() == nil {
		return "", fmt.Errorf("container status is nil for %q", containerID)
	}
	return resp.GetStatus().GetLogPath(), nil
}

// keepLogPathsOf forgets the log paths of containers that are no longer listed.
func (m *ContainerLogManager) keepLogPathsOf(containers []*runtimeapi.Container) {
	listed := make(map[string]bool, len(containers))
	for _, c := range containers {
		listed[c.GetId()] = true
	}
	for id := range m.logPaths {
		if !listed[id] {
			delete(m.logPaths, id)
		}
	}
}

// cachedLogPath is logPath, asked once per container.
func (m *ContainerLogManager) cachedLogPath(ctx context.Context, containerID string) (string, error) {
	if path, ok := m.logPaths[containerID]; ok {
		return path, nil
	}
	path, err := m.logPath(ctx, containerID)
	if err == nil && path != "" {
		m.logPaths[containerID] = path
	}
	return path, err
}

func (m *ContainerLogManager) rotateIfTooBig(ctx context.Context, containerID string) error {
	path, err := m.cachedLogPath(ctx, containerID)
	if err != nil || path == "" {
		return err
	}
	info, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		// Someone removed the live log; have the runtime create it again.
		if err := m.runtimeService.ReopenContainerLog(ctx, containerID); err != nil {
			return fmt.Errorf("container log %q doesn't exist, reopen container log failed: %w", path, err)
		}
		info, err = os.Stat(path)
	}
	if err != nil {
		return fmt.Errorf("failed to stat container log %q: %w", path, err)
	}
	if info.Size() < m.maxSize {
		return nil
	}
	return m.rotateLog(ctx, containerID, path)
}

// rotateLog makes room among the rotated files, compresses them, then
// rotates the live log.
func (m *ContainerLogManager) rotateLog(ctx context.Context, containerID, path string) error {
	pattern := path + ".*"
	rotated, err := filepath.Glob(pattern)
	if err != nil {
		return fmt.Errorf("failed to list all log files with pattern %q: %w", pattern, err)
	}
	if rotated, err = removeUnusedLogs(rotated); err != nil {
		return fmt.Errorf("failed to cleanup logs: %w", err)
	}
	if rotated, err = m.removeExcessLogs(rotated); err != nil {
		return fmt.Errorf("failed to remove excess logs: %w", err)
	}
	for _, l := range rotated {
		if strings.HasSuffix(l, compressSuffix) {
			continue
		}
		if err := compressLog(l); err != nil {
			return fmt.Errorf("failed to compress log %q: %w", l, err)
		}
	}
	if err := m.rotateLatestLog(ctx, containerID, path); err != nil {
		return fmt.Errorf("failed to rotate log %q: %w", path, err)
	}
	return nil
}

// removeUnusedLogs removes what an interrupted rotation left: temporary
// files, and rotated logs whose compressed copy is complete. It returns the
// rotated logs that remain.
func removeUnusedLogs(logs []string) ([]string, error) {
	var inUse []string
	for _, l := range logs {
		if !isUnused(l, logs) {
			inUse = append(inUse, l)
			continue
		}
		if err := os.Remove(l); err != nil {
			return nil, fmt.Errorf("failed to remove unused log %q: %w", l, err)
		}
	}
	return inUse, nil
}

func isUnused(l string, logs []string) bool {
	if strings.HasSuffix(l, tmpSuffix) {
		return true
	}
	if strings.HasSuffix(l, compressSuffix) {
		return false
	}
	for _, other := range logs {
		if other == l+compressSuffix {
			return true
		}
	}
	return false
}

// removeExcessLogs removes the oldest rotated logs, keeping maxFiles-2 of
// them: the live log and the one about to be rotated make up the rest. It
// returns the rotated logs that remain, oldest first.
func (m *ContainerLogManager) removeExcessLogs(logs []string) ([]string, error) {
	sort.Strings(logs)
	keep := max(m.maxFiles-2, 0)
	excess := max(len(logs)-keep, 0)
	// Oldest first, so that a reader going through them in order is not cut
	// off in the middle.
	for _, l := range logs[:excess] {
		if err := os.Remove(l); err != nil {
			return nil, fmt.Errorf("failed to remove old log %q: %w", l, err)
		}
	}
	return logs[excess:], nil
}

// compressLog replaces a log with its gzip-compressed copy, <log>.gz. The
// copy is written under a temporary name first, so a crash never leaves a
// truncated .gz that would be taken for a complete one.
func compressLog(log string) error {
	src, err := os.Open(log)
	if err != nil {
		return fmt.Errorf("failed to open log %q: %w", log, err)
	}
	defer src.Close()
	info, err := src.Stat()
	if err != nil {
		return fmt.Errorf("failed to stat log %q: %w", log, err)
	}
	tmp := log + tmpSuffix
	if err := writeGzip(tmp, src, info.Mode()); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, log+compressSuffix); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("failed to rename %q to %q: %w", tmp, log+compressSuffix, err)
	}
	if err := os.Remove(log); err != nil {
		return fmt.Errorf("failed to remove log %q after compress: %w", log, err)
	}
	return nil
}

// writeGzip writes the gzip-compressed content of src to a new file.
func writeGzip(path string, src io.Reader, mode fs.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return fmt.Errorf("failed to create temporary log %q: %w", path, err)
	}
	defer f.Close()
	zw := gzip.NewWriter(f)
	if _, err := io.Copy(zw, src); err != nil {
		return fmt.Errorf("failed to compress to %q: %w", path, err)
	}
	if err := zw.Close(); err != nil {
		return fmt.Errorf("failed to compress to %q: %w", path, err)
	}
	return f.Close()
}

// rotateLatestLog renames the live log, without compressing it so that the
// runtime can finish its writes and readers can finish reading, and asks the
// runtime to start a new one.
func (m *ContainerLogManager) rotateLatestLog(ctx context.Context, containerID, path string) error {
	rotated := path + "." + m.now().Format(rotatedTimeFormat)
	if err := os.Rename(path, rotated); err != nil {
		return fmt.Errorf("failed to rotate log %q to %q: %w", path, rotated, err)
	}
	if err := m.runtimeService.ReopenContainerLog(ctx, containerID); err != nil {
		// Put the log back so that the next round can try again.
		if renameErr := os.Rename(rotated, path); renameErr != nil {
			klog.ErrorS(renameErr, "Failed to rename rotated log", "rotatedLog", rotated, "newLog", path, "containerID", containerID)
		}
		return fmt.Errorf("failed to reopen container log %q: %w", containerID, err)
	}
	return nil
}
