// Package logind is the kubelet's client of systemd-logind on the system
// D-Bus, as upstream's pkg/kubelet/nodeshutdown/systemd: it takes and releases
// the "delay" inhibitor lock that holds a shutdown back, reads and raises
// logind's InhibitDelayMaxUSec, and reports logind's PrepareForShutdown
// signal. See https://systemd.io/INHIBITOR_LOCKS/.
package logind

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/godbus/dbus/v5"
)

// The names logind and systemd answer to on the system bus.
const (
	Service          = "org.freedesktop.login1"
	Object           = dbus.ObjectPath("/org/freedesktop/login1")
	ManagerInterface = "org.freedesktop.login1.Manager"

	systemdService   = "org.freedesktop.systemd1"
	systemdObject    = dbus.ObjectPath("/org/freedesktop/systemd1")
	systemdInterface = "org.freedesktop.systemd1.Manager"
)

// The arguments of the kubelet's Inhibit call, as upstream passes them.
const (
	InhibitWhat = "shutdown"
	InhibitWho  = "kubelet"
	InhibitWhy  = "Kubelet needs time to handle node shutdown"
	InhibitMode = "delay"
)

// DefaultConfigDir is logind's drop-in directory, where the kubelet writes
// OverrideFile to raise InhibitDelayMaxSec.
const (
	DefaultConfigDir = "/etc/systemd/logind.conf.d"
	OverrideFile     = "99-kubelet.conf"
)

// ErrUnavailable is wrapped by the errors that mean no logind can be reached:
// there is no system bus, or nothing owns (or can be started as) login1 on it.
var ErrUnavailable = errors.New("logind is not reachable on the system bus")

// Client talks to logind over one private connection to the system bus.
type Client struct {
	bus    *dbus.Conn
	logind dbus.BusObject
}

// ConnectSystemBus connects to the system bus, at DBUS_SYSTEM_BUS_ADDRESS
// when that is set.
func ConnectSystemBus() (*Client, error) {
	return connected(dbus.ConnectSystemBus())
}

// Connect connects to the bus at address (a D-Bus address, unix:path=...).
func Connect(address string) (*Client, error) {
	return connected(dbus.Connect(address))
}

func connected(bus *dbus.Conn, err error) (*Client, error) {
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return &Client{bus: bus, logind: bus.Object(Service, Object)}, nil
}

// Close closes the connection; the channel WatchShutdown returned closes too.
// It does not release an inhibitor lock: the lock is a file descriptor,
// independent of the connection.
func (c *Client) Close() error {
	return c.bus.Close()
}

// InhibitDelayMax returns logind's InhibitDelayMaxUSec: how long logind
// lets delay locks hold a shutdown back.
func (c *Client) InhibitDelayMax() (time.Duration, error) {
	v, err := c.logind.GetProperty(ManagerInterface + ".InhibitDelayMaxUSec")
	if err != nil {
		return 0, fmt.Errorf("failed reading InhibitDelayMaxUSec property from logind: %w", classify(err))
	}
	usec, ok := v.Value().(uint64)
	if !ok {
		return 0, errors.New("InhibitDelayMaxUSec from logind is not a uint64 as expected")
	}
	return time.Duration(usec) * time.Microsecond, nil
}

// InhibitShutdown takes a delay lock on shutdown. logind holds the shutdown
// back until the returned lock is closed (or InhibitDelayMaxUSec passes).
func (c *Client) InhibitShutdown() (io.Closer, error) {
	call := c.logind.Call(ManagerInterface+".Inhibit", 0, InhibitWhat, InhibitWho, InhibitWhy, InhibitMode)
	if call.Err != nil {
		return nil, fmt.Errorf("failed creating systemd inhibitor: %w", classify(call.Err))
	}
	var fd dbus.UnixFD
	if err := call.Store(&fd); err != nil {
		return nil, fmt.Errorf("failed storing inhibit lock file descriptor: %w", err)
	}
	return os.NewFile(uintptr(fd), "logind-inhibitor"), nil
}

// ReloadConfig makes logind re-read its configuration the way upstream
// does: it asks systemd to send SIGHUP to systemd-logind.service. logind
// reloads asynchronously, after this returns.
func (c *Client) ReloadConfig() error {
	const sighup int32 = 1
	systemd := c.bus.Object(systemdService, systemdObject)
	call := systemd.Call(systemdInterface+".KillUnit", 0, "systemd-logind.service", "all", sighup)
	if call.Err != nil {
		return fmt.Errorf("unable to reload logind conf: %w", call.Err)
	}
	return nil
}

// WatchShutdown reports logind's PrepareForShutdown signals: true when a
// shutdown starts, false when it is cancelled. The channel closes with the
// connection.
func (c *Client) WatchShutdown() (<-chan bool, error) {
	err := c.bus.AddMatchSignal(
		dbus.WithMatchInterface(ManagerInterface),
		dbus.WithMatchMember("PrepareForShutdown"),
		dbus.WithMatchObjectPath(Object))
	if err != nil {
		return nil, err
	}
	signals := make(chan *dbus.Signal, 1)
	c.bus.Signal(signals)
	shutdown := make(chan bool, 1)
	go forwardPrepareForShutdown(signals, shutdown)
	return shutdown, nil
}

// forwardPrepareForShutdown sends the argument of each PrepareForShutdown
// signal to out, and closes out when signals closes. The connection also
// delivers signals that are not logind's (NameAcquired, say): those are
// skipped.
func forwardPrepareForShutdown(signals <-chan *dbus.Signal, out chan<- bool) {
	defer close(out)
	for s := range signals {
		if s == nil || s.Path != Object || s.Name != ManagerInterface+".PrepareForShutdown" {
			continue
		}
		if len(s.Body) == 0 {
			continue
		}
		if active, ok := s.Body[0].(bool); ok {
			out <- active
		}
	}
}

// WriteInhibitDelayOverride writes the drop-in that raises logind's
// InhibitDelayMaxSec to delay, in dir (DefaultConfigDir on a real node), as
// upstream's OverrideInhibitDelay does. logind reads it on ReloadConfig.
func WriteInhibitDelayOverride(dir string, delay time.Duration) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("failed creating %v directory: %w", dir, err)
	}
	content := fmt.Sprintf("# Kubelet logind override\n[Login]\nInhibitDelayMaxSec=%.0f\n", delay.Seconds())
	path := filepath.Join(dir, OverrideFile)
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		return fmt.Errorf("failed writing logind shutdown inhibit override file %v: %w", path, err)
	}
	return nil
}

// classify wraps the bus's answers that mean nobody serves login1 in
// ErrUnavailable.
func classify(err error) error {
	var dbusErr dbus.Error
	if errors.As(err, &dbusErr) {
		switch dbusErr.Name {
		case "org.freedesktop.DBus.Error.ServiceUnknown", "org.freedesktop.DBus.Error.NameHasNoOwner":
			return fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
	}
	return err
}
