//go:build e2e

package e2e

import (
	"net"
	"path/filepath"
	"testing"
	"time"
)

// Under a systemd Type=notify unit with WatchdogSec=2s: nodelet sends READY=1 once its pod
// loop runs, then WATCHDOG=1 every second while the sync loop is healthy.
func TestStandaloneSystemdNotify(t *testing.T) {
	path := filepath.Join(t.TempDir(), "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	t.Setenv("NOTIFY_SOCKET", path)
	t.Setenv("WATCHDOG_USEC", "2000000")
	start := time.Now()
	s := startStandalone(t)
	s.writeManifest(t, "app.yaml", busyboxPod("app", "Always", "sleep 3600"))
	var got []string
	buf := make([]byte, 256)
	for len(got) < 4 {
		if err := conn.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
			t.Fatal(err)
		}
		n, err := conn.Read(buf)
		if err != nil {
			t.Fatalf("after %q: %v", got, err)
		}
		got = append(got, string(buf[:n]))
	}
	if got[0] != "READY=1" || got[1] != "WATCHDOG=1" || got[3] != "WATCHDOG=1" {
		t.Errorf("systemd was told %q, want READY=1 then WATCHDOG=1 pings", got)
	}
	// Pings every second (WatchdogSec/2): four messages take about two seconds.
	if took := time.Since(start); took > 8*time.Second {
		t.Errorf("four notifications took %v", took)
	}
}
