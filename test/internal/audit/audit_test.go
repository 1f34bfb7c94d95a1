package audit

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

const (
	getNode   = `{"kind":"Event","auditID":"a1","stage":"ResponseComplete","verb":"get","user":{"username":"system:node:n1"},"objectRef":{"resource":"nodes","name":"n1"},"requestReceivedTimestamp":"2026-11-28T16:00:01.000000Z"}`
	watchPods = `{"kind":"Event","auditID":"a2","stage":"ResponseStarted","verb":"watch","user":{"username":"system:node:n1"},"objectRef":{"resource":"pods"},"requestReceivedTimestamp":"2026-11-28T16:00:02.000000Z"}`
	watchDone = `{"kind":"Event","auditID":"a2","stage":"ResponseComplete","verb":"watch","user":{"username":"system:node:n1"},"objectRef":{"resource":"pods"},"requestReceivedTimestamp":"2026-11-28T16:00:02.000000Z"}`
	patchSt   = `{"kind":"Event","auditID":"a3","stage":"ResponseComplete","verb":"patch","user":{"username":"system:node:n2"},"objectRef":{"resource":"pods","subresource":"status"},"requestReceivedTimestamp":"2026-11-28T16:00:03.000000Z"}`
	discovery = `{"kind":"Event","auditID":"a4","stage":"ResponseComplete","verb":"get","requestURI":"/api?timeout=32s","user":{"username":"system:node:n1"},"requestReceivedTimestamp":"2026-11-28T16:00:04.000000Z"}`
)

func at(sec int) time.Time { return time.Date(2026, 11, 28, 16, 0, sec, 0, time.UTC) }

func TestTallyCountsEachRequestOnceInItsWindow(t *testing.T) {
	events, err := Parse(strings.NewReader(strings.Join([]string{getNode, watchPods, watchDone, patchSt, discovery}, "\n")))
	if err != nil {
		t.Fatal(err)
	}
	got := Tally(events, "system:node:n1", at(0), at(10))
	want := Counts{"get nodes": 1, "watch pods": 1, "get /api": 1}
	if !reflect.DeepEqual(got, want) || got.Total() != 3 {
		t.Fatalf("n1: %v, want %v", got, want)
	}
	if got := Tally(events, "system:node:n1", at(2), at(4)); !reflect.DeepEqual(got, Counts{"watch pods": 1}) {
		t.Errorf("n1 in [2s, 4s): %v", got)
	}
	if got := Tally(events, "system:node:n2", at(0), at(10)); !reflect.DeepEqual(got, Counts{"patch pods/status": 1}) {
		t.Errorf("n2: %v", got)
	}
}

func TestParseRefusesAGarbledLine(t *testing.T) {
	if _, err := Parse(strings.NewReader(getNode + "\n{not json\n")); err == nil {
		t.Fatal("no error for a line that is not an event")
	}
}

func appendTo(t *testing.T, path, text string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(text); err != nil {
		t.Fatal(err)
	}
}

func kinds(events []Event) []string {
	var out []string
	for _, e := range events {
		out = append(out, e.AuditID+" "+e.Kind())
	}
	return out
}

// The tail reads only what came after it was opened, keeps a torn last line for the next
// read, and follows a rotation without losing the renamed file's rest.
func TestTailAcrossATornLineAndARotation(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.log")
	appendTo(t, path, getNode+"\n")
	tail, err := OpenTail(path)
	if err != nil {
		t.Fatal(err)
	}
	defer tail.Close()
	appendTo(t, path, watchPods+"\n"+watchDone[:40])
	events, err := tail.Read()
	if err != nil {
		t.Fatal(err)
	}
	if got := kinds(events); !reflect.DeepEqual(got, []string{"a2 watch pods"}) {
		t.Fatalf("first read %v", got)
	}
	appendTo(t, path, watchDone[40:]+"\n")
	if err := os.Rename(path, filepath.Join(dir, "audit-2026-11-28T16-00-00.000.log")); err != nil {
		t.Fatal(err)
	}
	appendTo(t, path, patchSt+"\n")
	events, err = tail.Read()
	if err != nil {
		t.Fatal(err)
	}
	if got := kinds(events); !reflect.DeepEqual(got, []string{"a2 watch pods", "a3 patch pods/status"}) {
		t.Fatalf("read across the rotation %v", got)
	}
	appendTo(t, path, discovery+"\n")
	events, err = tail.Read()
	if err != nil {
		t.Fatal(err)
	}
	if got := kinds(events); !reflect.DeepEqual(got, []string{"a4 get /api"}) {
		t.Fatalf("read after the rotation %v", got)
	}
}
