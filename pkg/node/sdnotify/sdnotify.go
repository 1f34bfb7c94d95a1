// Package sdnotify speaks systemd's service notification protocol, so that nodelet runs
// under a Type=notify unit as upstream's kubelet does: READY=1 once the pod loop runs,
// and, when the unit sets WatchdogSec, WATCHDOG=1 every half period while nodelet is
// healthy (upstream's systemd watchdog health checker).
package sdnotify

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"time"

	"k8s.io/klog/v2"
)

// Ready and Watchdog are the states nodelet sends.
const (
	Ready    = "READY=1"
	Watchdog = "WATCHDOG=1"
)

// Notify sends state to $NOTIFY_SOCKET; it returns false and no error when nodelet was not
// started by a service manager that listens (no NOTIFY_SOCKET).
func Notify(state string) (bool, error) {
	socket := os.Getenv("NOTIFY_SOCKET")
	if socket == "" {
		return false, nil
	}
	if socket[0] == '@' {
		socket = "\x00" + socket[1:] // an abstract socket
	}
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: socket, Net: "unixgram"})
	if err != nil {
		return false, err
	}
	defer conn.Close()
	if _, err := conn.Write([]byte(state)); err != nil {
		return false, err
	}
	return true, nil
}

// WatchdogInterval is half of the unit's WatchdogSec (WATCHDOG_USEC), the period upstream
// pings at; 0 when the watchdog is off or meant for another process (WATCHDOG_PID).
func WatchdogInterval() (time.Duration, error) {
	usec := os.Getenv("WATCHDOG_USEC")
	if usec == "" {
		return 0, nil
	}
	if pid := os.Getenv("WATCHDOG_PID"); pid != "" && pid != strconv.Itoa(os.Getpid()) {
		return 0, nil
	}
	n, err := strconv.ParseInt(usec, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("configure watchdog: invalid WATCHDOG_USEC %q", usec)
	}
	timeout := time.Duration(n) * time.Microsecond
	if timeout <= time.Second {
		return 0, fmt.Errorf("configure watchdog timeout too small: %v", timeout)
	}
	return timeout / 2, nil
}

// RunWatchdog sends WATCHDOG=1 every interval while healthy returns nil, until ctx ends;
// an unhealthy check skips the ping, so systemd restarts a stuck nodelet.
func RunWatchdog(ctx context.Context, interval time.Duration, healthy func() error) {
	klog.InfoS("Starting systemd watchdog with interval", "interval", interval)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if err := healthy(); err != nil {
			klog.ErrorS(err, "Do not notify watchdog this iteration as the kubelet is reportedly not healthy")
		} else if _, err := Notify(Watchdog); err != nil {
			klog.ErrorS(err, "Failed to notify watchdog")
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
