package sdnotify

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// listen is a notification socket like systemd's; it returns what arrives on it.
func listen(t *testing.T) <-chan string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	t.Setenv("NOTIFY_SOCKET", path)
	got := make(chan string, 100)
	go func() {
		buf := make([]byte, 256)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				return
			}
			got <- string(buf[:n])
		}
	}()
	return got
}

func TestNotifyReachesTheServiceManager(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", "")
	if sent, err := Notify(Ready); sent || err != nil {
		t.Errorf("without NOTIFY_SOCKET: %v, %v", sent, err)
	}
	got := listen(t)
	if sent, err := Notify(Ready); !sent || err != nil {
		t.Fatalf("Notify: %v, %v", sent, err)
	}
	if s := <-got; s != "READY=1" {
		t.Errorf("received %q", s)
	}
}

func TestWatchdogInterval(t *testing.T) {
	for _, tc := range []struct {
		usec, pid string
		want      time.Duration
		err       bool
	}{
		{"", "", 0, false},
		{"30000000", "", 15 * time.Second, false},
		{"30000000", strconv.Itoa(os.Getpid()), 15 * time.Second, false},
		{"30000000", "1", 0, false},
		{"500000", "", 0, true},
		{"soon", "", 0, true},
	} {
		t.Setenv("WATCHDOG_USEC", tc.usec)
		t.Setenv("WATCHDOG_PID", tc.pid)
		got, err := WatchdogInterval()
		if got != tc.want || (err != nil) != tc.err {
			t.Errorf("WATCHDOG_USEC=%q WATCHDOG_PID=%q: %v, %v", tc.usec, tc.pid, got, err)
		}
	}
}

// The watchdog pings while healthy and stays silent while not.
func TestWatchdogPingsOnlyWhileHealthy(t *testing.T) {
	got := listen(t)
	var sick atomic.Bool
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go RunWatchdog(ctx, 20*time.Millisecond, func() error {
		if sick.Load() {
			return errors.New("syncloop stuck")
		}
		return nil
	})
	for range 3 {
		select {
		case s := <-got:
			if s != "WATCHDOG=1" {
				t.Fatalf("received %q", s)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("no ping while healthy")
		}
	}
	sick.Store(true)
	time.Sleep(50 * time.Millisecond)
	for len(got) > 0 {
		<-got
	}
	select {
	case s := <-got:
		t.Errorf("pinged %q while unhealthy", s)
	case <-time.After(150 * time.Millisecond):
	}
}
