// Command fakelogind stands in for systemd-logind, and for the one systemd
// call the kubelet makes on its behalf, on a D-Bus bus, so that graceful node
// shutdown can be tested on a machine without systemd.
//
// It owns org.freedesktop.login1 and serves, on /org/freedesktop/login1:
//   - org.freedesktop.login1.Manager.Inhibit(what, who, why, mode), which
//     returns the write end of a pipe as the lock and notices when every copy
//     of it is closed;
//   - the InhibitDelayMaxUSec property (org.freedesktop.DBus.Properties);
//   - the PrepareForShutdown(bool) signal, sent when told to.
//
// It also owns org.freedesktop.systemd1 and serves
// org.freedesktop.systemd1.Manager.KillUnit: SIGHUP to systemd-logind.service
// re-reads InhibitDelayMaxSec from the *.conf files of -config-dir, the way
// the kubelet makes logind reload its drop-in.
//
// Control: a "shutdown" line on stdin or SIGUSR1 sends PrepareForShutdown
// true, a "cancel" line or SIGUSR2 sends false. SIGINT or SIGTERM ends it.
//
// It reports on stdout, one event a line:
//
//	ready
//	inhibit taken id=<n> what=<what> who=<who> why=<quoted why> mode=<mode>
//	inhibit released id=<n>
//	signal sent true|false
//	reloaded InhibitDelayMaxUSec=<microseconds>
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/godbus/dbus/v5"
	"github.com/godbus/dbus/v5/prop"
)

const (
	logindName      = "org.freedesktop.login1"
	logindPath      = dbus.ObjectPath("/org/freedesktop/login1")
	logindInterface = "org.freedesktop.login1.Manager"
	systemdName     = "org.freedesktop.systemd1"
	systemdPath     = dbus.ObjectPath("/org/freedesktop/systemd1")
	systemdIface    = "org.freedesktop.systemd1.Manager"
	delayProperty   = "InhibitDelayMaxUSec"

	// lockHandOverTime is how long fakelogind keeps its own copy of a lock
	// after Inhibit returns: godbus sends the reply, with the descriptor,
	// after the method returns, so the copy cannot be closed before.
	lockHandOverTime = time.Second
)

func main() {
	address := flag.String("address", "", "D-Bus address of the bus to serve on (default $DBUS_SYSTEM_BUS_ADDRESS, else the system bus)")
	delay := flag.Duration("inhibit-delay-max", 5*time.Second, "initial InhibitDelayMaxUSec (logind's default is 5s)")
	configDir := flag.String("config-dir", "/etc/systemd/logind.conf.d", "drop-in directory read when systemd-logind.service gets SIGHUP")
	flag.Parse()
	if err := run(*address, *delay, *configDir); err != nil {
		fmt.Fprintln(os.Stderr, "fakelogind:", err)
		os.Exit(1)
	}
}

func run(address string, delay time.Duration, configDir string) error {
	conn, err := connect(address)
	if err != nil {
		return err
	}
	defer conn.Close()
	l := &fakeLogind{conn: conn, configDir: configDir}
	if err := l.serve(delay); err != nil {
		return err
	}
	report("ready")
	l.control(os.Stdin)
	return nil
}

func connect(address string) (*dbus.Conn, error) {
	if address == "" {
		return dbus.ConnectSystemBus()
	}
	return dbus.Connect(address)
}

// report prints one event line; the lock keeps lines whole.
var reportMu sync.Mutex

func report(format string, args ...any) {
	reportMu.Lock()
	defer reportMu.Unlock()
	fmt.Printf(format+"\n", args...)
}

type fakeLogind struct {
	conn      *dbus.Conn
	configDir string
	props     *prop.Properties
	lastLock  atomic.Int64
}

// serve exports the objects, then takes the names, so that no call finds
// the names owned but nothing behind them.
func (l *fakeLogind) serve(delay time.Duration) error {
	props, err := prop.Export(l.conn, logindPath, prop.Map{
		logindInterface: {delayProperty: {Value: uint64(delay / time.Microsecond), Emit: prop.EmitTrue}},
	})
	if err != nil {
		return err
	}
	l.props = props
	if err := l.conn.ExportMethodTable(map[string]any{"Inhibit": l.inhibit}, logindPath, logindInterface); err != nil {
		return err
	}
	if err := l.conn.ExportMethodTable(map[string]any{"KillUnit": l.killUnit}, systemdPath, systemdIface); err != nil {
		return err
	}
	for _, name := range []string{logindName, systemdName} {
		if err := own(l.conn, name); err != nil {
			return err
		}
	}
	return nil
}

func own(conn *dbus.Conn, name string) error {
	reply, err := conn.RequestName(name, dbus.NameFlagDoNotQueue)
	if err != nil {
		return err
	}
	if reply != dbus.RequestNameReplyPrimaryOwner {
		return fmt.Errorf("cannot own %s: %v", name, reply)
	}
	return nil
}

// inhibit is logind's Inhibit: the lock is the write end of a pipe, and the
// lock is released when the read end sees EOF, i.e. when every copy of the
// write end is closed.
func (l *fakeLogind) inhibit(what, who, why, mode string) (dbus.UnixFD, *dbus.Error) {
	r, w, err := os.Pipe()
	if err != nil {
		return -1, dbus.MakeFailedError(err)
	}
	id := l.lastLock.Add(1)
	report("inhibit taken id=%d what=%s who=%s why=%q mode=%s", id, what, who, why, mode)
	go awaitRelease(id, r)
	go func() {
		time.Sleep(lockHandOverTime)
		_ = w.Close()
	}()
	return dbus.UnixFD(w.Fd()), nil
}

func awaitRelease(id int64, r *os.File) {
	_, _ = io.Copy(io.Discard, r)
	_ = r.Close()
	report("inhibit released id=%d", id)
}

// killUnit is systemd's KillUnit, as far as the kubelet uses it: SIGHUP to
// systemd-logind.service reloads the configuration.
func (l *fakeLogind) killUnit(unit, who string, sig int32) *dbus.Error {
	if unit != "systemd-logind.service" || syscall.Signal(sig) != syscall.SIGHUP {
		return dbus.MakeFailedError(fmt.Errorf("fakelogind only reloads systemd-logind.service on SIGHUP, not %s on signal %d", unit, sig))
	}
	delay, found, err := readInhibitDelayMax(l.configDir)
	if err != nil {
		return dbus.MakeFailedError(err)
	}
	if found {
		l.props.SetMust(logindInterface, delayProperty, uint64(delay/time.Microsecond))
	}
	report("reloaded %s=%d", delayProperty, l.props.GetMust(logindInterface, delayProperty))
	return nil
}

// readInhibitDelayMax returns the last InhibitDelayMaxSec set by the *.conf
// files of dir, read in name order as logind reads its drop-ins.
func readInhibitDelayMax(dir string) (delay time.Duration, found bool, err error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.conf"))
	if err != nil {
		return 0, false, err
	}
	for _, file := range files {
		content, err := os.ReadFile(file)
		if err != nil {
			return 0, false, err
		}
		for _, line := range strings.Split(string(content), "\n") {
			value, ok := strings.CutPrefix(strings.TrimSpace(line), "InhibitDelayMaxSec=")
			if !ok {
				continue
			}
			if delay, err = parseTimeSpan(value); err != nil {
				return 0, false, fmt.Errorf("%s: %w", file, err)
			}
			found = true
		}
	}
	return delay, found, nil
}

// parseTimeSpan reads a systemd time span: plain seconds, or a Go duration.
func parseTimeSpan(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if seconds, err := strconv.ParseFloat(s, 64); err == nil {
		return time.Duration(seconds * float64(time.Second)), nil
	}
	return time.ParseDuration(s)
}

// control sends PrepareForShutdown on commands from stdin and on SIGUSR1
// and SIGUSR2, until SIGINT or SIGTERM.
func (l *fakeLogind) control(stdin io.Reader) {
	signals := make(chan os.Signal, 4)
	signal.Notify(signals, syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGINT, syscall.SIGTERM)
	commands := make(chan string)
	go readCommands(stdin, commands)
	for {
		select {
		case s := <-signals:
			switch s {
			case syscall.SIGUSR1:
				l.prepareForShutdown(true)
			case syscall.SIGUSR2:
				l.prepareForShutdown(false)
			default:
				return
			}
		case command := <-commands:
			l.command(command)
		}
	}
}

// readCommands sends stdin's lines to commands. At EOF it just stops:
// fakelogind keeps running without a stdin.
func readCommands(stdin io.Reader, commands chan<- string) {
	scanner := bufio.NewScanner(stdin)
	for scanner.Scan() {
		commands <- strings.TrimSpace(scanner.Text())
	}
}

func (l *fakeLogind) command(command string) {
	switch command {
	case "shutdown":
		l.prepareForShutdown(true)
	case "cancel":
		l.prepareForShutdown(false)
	case "":
	default:
		fmt.Fprintf(os.Stderr, "fakelogind: unknown command %q (want shutdown or cancel)\n", command)
	}
}

func (l *fakeLogind) prepareForShutdown(active bool) {
	if err := l.conn.Emit(logindPath, logindInterface+".PrepareForShutdown", active); err != nil {
		fmt.Fprintln(os.Stderr, "fakelogind: sending PrepareForShutdown:", err)
		return
	}
	report("signal sent %t", active)
}
