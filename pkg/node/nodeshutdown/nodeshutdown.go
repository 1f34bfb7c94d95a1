// Package nodeshutdown is the kubelet's graceful node shutdown, upstream's
// pkg/kubelet/nodeshutdown on Linux. It holds a logind "delay" inhibitor
// lock so that a shutdown waits for it; when logind announces a shutdown
// (PrepareForShutdown true) it refuses new pods, reports the node not
// ready, kills the running pods in priority groups, each within its grace
// period, and then releases the lock so that the shutdown goes on. If the
// shutdown is cancelled (PrepareForShutdown false) the node is back and the
// lock is taken again.
package nodeshutdown

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	kubeletconfig "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/pkg/node/nodeshutdown/logind"
)

const (
	// NodeShutdownNotAdmittedReason is the reason of a pod refused while the
	// node shuts down.
	NodeShutdownNotAdmittedReason  = "NodeShutdown"
	nodeShutdownNotAdmittedMessage = "Pod was rejected as the node is shutting down."

	// The status reason and message of a pod killed for the shutdown.
	nodeShutdownReason  = "Terminated"
	nodeShutdownMessage = "Pod was terminated in response to imminent node shutdown."

	// EventReason is the reason of the Normal events recorded on the node
	// when a shutdown starts or is cancelled (upstream's events.NodeShutdown).
	EventReason = "Shutdown"

	// dbusReconnectPeriod is how long to wait before watching logind again
	// once the connection to the bus is lost.
	dbusReconnectPeriod = time.Second
	// reloadAttempts is how many times logind's InhibitDelayMaxUSec is read
	// after asking it to reload, with waits of 100 ms doubling in between.
	reloadAttempts = 5
)

// errShuttingDown is ShutdownStatus's answer while the node shuts down.
var errShuttingDown = errors.New("node is shutting down")

// KillPodFunc stops pod, giving its containers gracePeriodOverride seconds,
// and sets its final status with statusFn. It returns once the pod is
// stopped, or with an error (the eviction manager's KillPodFunc).
type KillPodFunc func(pod *v1.Pod, statusFn func(*v1.PodStatus), gracePeriodOverride int64) error

// Logind is what the manager needs of logind; *logind.Client is one.
type Logind interface {
	InhibitDelayMax() (time.Duration, error)
	InhibitShutdown() (io.Closer, error)
	ReloadConfig() error
	WatchShutdown() (<-chan bool, error)
	Close() error
}

// Config is the kubelet configuration of graceful node shutdown. With no
// ShutdownGracePeriodByPodPriority and a zero ShutdownGracePeriod the
// feature is off.
type Config struct {
	// ShutdownGracePeriod is the whole time pods get, of which
	// ShutdownGracePeriodCriticalPods is kept for critical pods.
	ShutdownGracePeriod             time.Duration
	ShutdownGracePeriodCriticalPods time.Duration
	// ShutdownGracePeriodByPodPriority, when set, replaces the two periods
	// above with one grace period per priority range.
	ShutdownGracePeriodByPodPriority []kubeletconfig.ShutdownGracePeriodByPodPriority
	// StateDir is the kubelet's root directory, where StateFile is kept.
	StateDir string
}

// Deps are the manager's collaborators. ActivePods and KillPod are required.
type Deps struct {
	// ActivePods are the pods to kill when the node shuts down.
	ActivePods func() []*v1.Pod
	// KillPod kills one pod, through the pod workers.
	KillPod KillPodFunc
	// SyncNodeStatus, optional, updates the node's status now, so that it
	// turns not ready as soon as the shutdown starts.
	SyncNodeStatus func()
	// WaitForPodsUnmount, optional, waits until the pods' volumes are
	// unmounted (upstream's volume manager WaitForAllPodsUnmount); a group's
	// wait covers it.
	WaitForPodsUnmount func(ctx context.Context, pods []*v1.Pod) error
	// Recorder records the shutdown events on NodeRef; without either, no
	// event is recorded.
	Recorder record.EventRecorder
	NodeRef  *v1.ObjectReference
	// Clock defaults to the real clock.
	Clock clock.Clock
	// Logger defaults to klog's.
	Logger klog.Logger
	// ConnectLogind defaults to a logind.Client on the system bus.
	ConnectLogind func() (Logind, error)
	// LogindConfigDir defaults to logind.DefaultConfigDir.
	LogindConfigDir string
}

// Manager is the node shutdown manager. ShutdownStatus and Admit are safe
// for concurrent use.
type Manager struct {
	deps      Deps
	logger    klog.Logger
	clock     clock.Clock
	groups    []kubeletconfig.ShutdownGracePeriodByPodPriority
	stateFile string

	mu           sync.Mutex
	shuttingDown bool

	// Set by Start, then used only by the goroutine it starts.
	ctx    context.Context
	stop   context.CancelFunc
	done   chan struct{}
	logind Logind
	lock   io.Closer
}

// New returns a manager; Start runs it.
func New(cfg Config, deps Deps) (*Manager, error) {
	if deps.ActivePods == nil || deps.KillPod == nil {
		return nil, errors.New("node shutdown manager needs ActivePods and KillPod")
	}
	setDefaults(&deps)
	m := &Manager{
		deps:      deps,
		logger:    deps.Logger,
		clock:     deps.Clock,
		groups:    shutdownGroups(cfg),
		stateFile: filepath.Join(cfg.StateDir, StateFile),
	}
	if m.enabled() {
		m.logger.Info("Creating node shutdown manager",
			"shutdownGracePeriodRequested", cfg.ShutdownGracePeriod,
			"shutdownGracePeriodCriticalPods", cfg.ShutdownGracePeriodCriticalPods,
			"shutdownGracePeriodByPodPriority", m.groups)
	}
	return m, nil
}

func setDefaults(deps *Deps) {
	if deps.Clock == nil {
		deps.Clock = clock.RealClock{}
	}
	if deps.Logger.GetSink() == nil {
		deps.Logger = klog.Background()
	}
	if deps.SyncNodeStatus == nil {
		deps.SyncNodeStatus = func() {}
	}
	if deps.ConnectLogind == nil {
		deps.ConnectLogind = connectSystemBus
	}
	if deps.LogindConfigDir == "" {
		deps.LogindConfigDir = logind.DefaultConfigDir
	}
}

func connectSystemBus() (Logind, error) {
	c, err := logind.ConnectSystemBus()
	if err != nil {
		return nil, err
	}
	return c, nil
}

// enabled reports whether any grace period is configured.
func (m *Manager) enabled() bool {
	return len(m.groups) > 0
}

// Start takes the inhibitor lock and watches for shutdowns until Stop. It
// does nothing when no grace period is configured. Where no logind is on the
// system bus it logs so once and returns nil: the node runs without
// graceful shutdown. Other failures are returned, as upstream's; the
// kubelet logs them and runs on. Call it once.
func (m *Manager) Start() error {
	if !m.enabled() {
		return nil
	}
	m.ctx, m.stop = context.WithCancel(context.Background())
	events, err := m.connect()
	if errors.Is(err, logind.ErrUnavailable) {
		m.logger.Info("Warning: graceful node shutdown is off, logind is not reachable on the system bus", "err", err)
		return nil
	}
	if err != nil {
		return err
	}
	m.done = make(chan struct{})
	go m.run(events)
	m.restoreMetrics()
	return nil
}

// Stop stops watching, releases the lock and closes the connection, as the
// process ending would, and waits for the watch to end.
func (m *Manager) Stop() {
	if m.stop == nil {
		return
	}
	m.stop()
	if m.done != nil {
		<-m.done
	}
}

// ShutdownStatus returns an error while the node shuts down: the node is
// then not ready.
func (m *Manager) ShutdownStatus() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.shuttingDown {
		return errShuttingDown
	}
	return nil
}

// Admit refuses every pod while the node shuts down.
func (m *Manager) Admit(*v1.Pod) (admit bool, reason, message string) {
	if m.ShutdownStatus() != nil {
		return false, NodeShutdownNotAdmittedReason, nodeShutdownNotAdmittedMessage
	}
	return true, "", ""
}

func (m *Manager) setShuttingDown(shuttingDown bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.shuttingDown = shuttingDown
}

// restoreMetrics sets the metrics from the state file, so that they report
// the shutdown that preceded this boot.
func (m *Manager) restoreMetrics() {
	s, err := loadState(m.stateFile)
	if err != nil {
		m.logger.Error(err, "Failed to load graceful shutdown state")
		return
	}
	if !s.StartTime.IsZero() {
		GracefulShutdownStartTime.Set(unixSeconds(s.StartTime))
	}
	if !s.EndTime.IsZero() {
		GracefulShutdownEndTime.Set(unixSeconds(s.EndTime))
	}
}

// run handles shutdown events until Stop; when the connection to the bus is
// lost it connects again, every second until that works.
func (m *Manager) run(events <-chan bool) {
	defer close(m.done)
	defer m.disconnect()
	for events != nil {
		m.handleEvents(events)
		events = m.reconnect()
	}
}

// handleEvents handles events until the channel closes or Stop.
func (m *Manager) handleEvents(events <-chan bool) {
	for {
		select {
		case <-m.ctx.Done():
			return
		case shuttingDown, ok := <-events:
			if !ok {
				m.logger.Error(nil, "Ended to watching the node for shutdown events")
				return
			}
			m.handleEvent(shuttingDown)
		}
	}
}

// reconnect retries connect every dbusReconnectPeriod until it works, and
// returns nil on Stop.
func (m *Manager) reconnect() <-chan bool {
	for {
		timer := m.clock.NewTimer(dbusReconnectPeriod)
		select {
		case <-m.ctx.Done():
			timer.Stop()
			return nil
		case <-timer.C():
		}
		m.logger.V(1).Info("Restarting watch for node shutdown events")
		events, err := m.connect()
		if err == nil {
			return events
		}
		m.logger.Error(err, "Unable to watch the node for shutdown events")
	}
}

// disconnect releases the lock and closes the connection.
func (m *Manager) disconnect() {
	if err := m.releaseInhibitLock(); err != nil {
		m.logger.Error(err, "Failed to release the inhibitor lock")
	}
	if m.logind != nil {
		m.closeLogind(m.logind, "Failed to close dbus connection")
		m.logind = nil
	}
}

// handleEvent follows logind's delay lock protocol: on a shutdown, kill the
// pods and then release the lock; on a cancellation, take the lock again.
func (m *Manager) handleEvent(shuttingDown bool) {
	kind, message := "cancelled", "Shutdown manager detected shutdown cancellation"
	if shuttingDown {
		kind, message = "shutdown", "Shutdown manager detected shutdown event"
	}
	m.logger.V(1).Info("Shutdown manager detected new shutdown event", "event", kind)
	if m.deps.Recorder != nil && m.deps.NodeRef != nil {
		m.deps.Recorder.Event(m.deps.NodeRef, v1.EventTypeNormal, EventReason, message)
	}
	m.setShuttingDown(shuttingDown)
	if !shuttingDown {
		if err := m.acquireInhibitLock(m.logind); err != nil {
			m.logger.Error(err, "Failed to take the inhibitor lock again after the shutdown was cancelled")
		}
		return
	}
	// The node turns not ready now rather than at the next status update.
	go m.deps.SyncNodeStatus()
	if err := m.processShutdown(); err != nil {
		m.logger.Error(err, "Shutdown manager failed to process shutdown event")
	}
}

// processShutdown kills the active pods, recording when it started and
// ended, and then releases the lock: the shutdown goes on.
func (m *Manager) processShutdown() error {
	m.logger.V(1).Info("Shutdown manager processing shutdown event")
	pods := m.deps.ActivePods()
	defer func() {
		if err := m.releaseInhibitLock(); err != nil {
			m.logger.Error(err, "Failed to release the inhibitor lock")
		}
		m.logger.V(1).Info("Shutdown manager completed processing shutdown event, node will shutdown shortly")
	}()

	start := m.clock.Now()
	m.storeState(state{StartTime: start})
	GracefulShutdownStartTime.Set(unixSeconds(start))
	GracefulShutdownEndTime.Set(0)
	defer func() {
		end := m.clock.Now()
		m.storeState(state{StartTime: start, EndTime: end})
		GracefulShutdownEndTime.Set(unixSeconds(end))
	}()

	return m.killPods(m.ctx, pods)
}

func (m *Manager) storeState(s state) {
	if err := storeState(m.stateFile, s); err != nil {
		m.logger.Error(err, "Failed to store graceful shutdown state")
	}
}

// connect is upstream's start: it connects to logind, makes sure logind
// lets a shutdown be delayed for all the grace periods, takes the lock and
// watches for shutdowns. The new connection replaces the previous one only
// when all that worked.
func (m *Manager) connect() (<-chan bool, error) {
	conn, err := m.deps.ConnectLogind()
	if err != nil {
		return nil, err
	}
	events, err := m.watch(conn)
	if err != nil {
		m.closeLogind(conn, "Failed to close dbus connection after start failure")
		return nil, err
	}
	if m.logind != nil {
		m.closeLogind(m.logind, "Failed to close previous dbus connection")
	}
	m.logind = conn
	return events, nil
}

func (m *Manager) watch(conn Logind) (<-chan bool, error) {
	if err := m.ensureInhibitDelay(conn); err != nil {
		return nil, err
	}
	if err := m.acquireInhibitLock(conn); err != nil {
		return nil, err
	}
	events, err := conn.WatchShutdown()
	if err != nil {
		if releaseErr := m.releaseInhibitLock(); releaseErr != nil {
			return nil, fmt.Errorf("failed releasing inhibitLock: %v and failed monitoring shutdown: %v", releaseErr, err)
		}
		return nil, fmt.Errorf("failed to monitor shutdown: %v", err)
	}
	return events, nil
}

func (m *Manager) closeLogind(conn Logind, failure string) {
	if err := conn.Close(); err != nil {
		m.logger.Error(err, failure)
	}
}

// ensureInhibitDelay raises logind's InhibitDelayMaxUSec to the sum of the
// grace periods when it is shorter, with a drop-in and a reload, since
// logind ends a delay lock's hold after that time whatever the kubelet does.
func (m *Manager) ensureInhibitDelay(conn Logind) error {
	current, err := conn.InhibitDelayMax()
	if err != nil {
		return err
	}
	requested := totalGracePeriod(m.groups)
	if requested <= current {
		return nil
	}
	if err := logind.WriteInhibitDelayOverride(m.deps.LogindConfigDir, requested); err != nil {
		return fmt.Errorf("unable to override inhibit delay by shutdown manager: %v", err)
	}
	if err := conn.ReloadConfig(); err != nil {
		return err
	}
	return m.waitForInhibitDelay(conn, requested)
}

// waitForInhibitDelay polls InhibitDelayMaxUSec until it reaches requested:
// logind reloads asynchronously.
func (m *Manager) waitForInhibitDelay(conn Logind, requested time.Duration) error {
	wait := 100 * time.Millisecond
	for attempt := 1; ; attempt++ {
		current, err := conn.InhibitDelayMax()
		if err != nil {
			return err
		}
		if requested <= current {
			return nil
		}
		if attempt == reloadAttempts {
			return fmt.Errorf("node shutdown manager was timed out after %d attempts waiting for logind InhibitDelayMaxSec to update to %v (ShutdownGracePeriod), current value is %v", attempt, requested, current)
		}
		m.logger.V(3).Info("InhibitDelayMaxSec still less than requested, retrying", "attempt", attempt, "current", current, "requested", requested)
		m.clock.Sleep(wait)
		wait *= 2
	}
}

// acquireInhibitLock takes a new lock, then releases the one held, if any.
func (m *Manager) acquireInhibitLock(conn Logind) error {
	lock, err := conn.InhibitShutdown()
	if err != nil {
		return err
	}
	if err := m.releaseInhibitLock(); err != nil {
		m.logger.Error(err, "Failed to release the previous inhibitor lock")
	}
	m.lock = lock
	return nil
}

// releaseInhibitLock closes the lock held, if any: logind then lets the
// shutdown go on.
func (m *Manager) releaseInhibitLock() error {
	if m.lock == nil {
		return nil
	}
	err := m.lock.Close()
	m.lock = nil
	if err != nil {
		return fmt.Errorf("unable to close systemd inhibitor lock: %w", err)
	}
	return nil
}
