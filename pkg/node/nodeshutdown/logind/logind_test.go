package logind

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
)

func TestWriteInhibitDelayOverride(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "logind.conf.d")
	if err := WriteInhibitDelayOverride(dir, 90*time.Second+400*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(dir, "99-kubelet.conf"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "# Kubelet logind override\n[Login]\nInhibitDelayMaxSec=90\n"; string(got) != want {
		t.Errorf("drop-in %q, want %q", got, want)
	}
}

// TestForwardPrepareForShutdown: only logind's PrepareForShutdown signals
// come through, and the channel closes with the connection's.
func TestForwardPrepareForShutdown(t *testing.T) {
	signals := make(chan *dbus.Signal, 5)
	signals <- &dbus.Signal{Path: "/org/freedesktop/DBus", Name: "org.freedesktop.DBus.NameAcquired", Body: []any{":1.5"}}
	signals <- &dbus.Signal{Path: Object, Name: ManagerInterface + ".PrepareForShutdown", Body: []any{true}}
	signals <- &dbus.Signal{Path: Object, Name: ManagerInterface + ".PrepareForShutdown", Body: []any{"not a bool"}}
	signals <- &dbus.Signal{Path: Object, Name: ManagerInterface + ".PrepareForShutdown", Body: []any{false}}
	close(signals)
	out := make(chan bool, 5)
	forwardPrepareForShutdown(signals, out)
	var got []bool
	for active := range out {
		got = append(got, active)
	}
	if want := []bool{true, false}; !slices.Equal(got, want) {
		t.Errorf("forwarded %v, want %v", got, want)
	}
}

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		err         error
		unavailable bool
	}{
		{dbus.Error{Name: "org.freedesktop.DBus.Error.ServiceUnknown"}, true},
		{fmt.Errorf("calling: %w", dbus.Error{Name: "org.freedesktop.DBus.Error.NameHasNoOwner"}), true},
		{dbus.Error{Name: "org.freedesktop.DBus.Error.AccessDenied"}, false},
		{errors.New("other"), false},
	} {
		if got := errors.Is(classify(tc.err), ErrUnavailable); got != tc.unavailable {
			t.Errorf("classify(%v) unavailable = %v, want %v", tc.err, got, tc.unavailable)
		}
	}
}
