package audit

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

const (
	getNode   = `{"kind":"Event","auditID":"a1","stage":"ResponseComplete","verb":"get","user":{"username":"system:node:n1"},"objectRef":{"resource":"nodes","name":"n1"}}`
	watchPods = `{"kind":"Event","auditID":"a2","stage":"ResponseStarted","verb":"watch","user":{"username":"system:node:n1"},"objectRef":{"resource":"pods"}}`
	watchDone = `{"kind":"Event","auditID":"a2","stage":"ResponseComplete","verb":"watch","user":{"username":"system:node:n1"},"objectRef":{"resource":"pods"}}`
	patchSt   = `{"kind":"Event","auditID":"a3","stage":"ResponseComplete","verb":"patch","user":{"username":"system:node:n2"},"objectRef":{"resource":"pods","subresource":"status"}}`
	discovery = `{"kind":"Event","auditID":"a4","stage":"ResponseComplete","verb":"get","user":{"username":"system:node:n2"}}`
)

func TestCountItemisesOncePerRequest(t *testing.T) {
	in := strings.Join([]string{getNode, watchPods, watchDone, patchSt, discovery, `{"torn`}, "\n")
	c, err := Count(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	want := Counts{
		"system:node:n1": {"get nodes": 1, "watch pods": 1},
		"system:node:n2": {"patch pods/status": 1, "get": 1},
	}
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("counts %v, want %v", c, want)
	}
	if c.Total("system:node:n1") != 2 || c.Total("nobody") != 0 {
		t.Errorf("totals %d, %d", c.Total("system:node:n1"), c.Total("nobody"))
	}
	if k := c.Kinds("system:node:n1", "system:node:n2"); !reflect.DeepEqual(k, []string{"get", "get nodes", "patch pods/status", "watch pods"}) {
		t.Errorf("kinds %v", k)
	}
}

func TestWindowCountsOnlyWhatCameAfterTheMarkAcrossARotation(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.log")
	write := func(p string, lines ...string) {
		f, err := os.OpenFile(p, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.WriteString(strings.Join(lines, "\n") + "\n"); err != nil {
			t.Fatal(err)
		}
	}
	write(path, getNode)
	w, err := Mark(path)
	if err != nil {
		t.Fatal(err)
	}
	write(path, watchPods)
	if err := os.Rename(path, filepath.Join(dir, "audit-2026-11-28T16-00-00.000.log")); err != nil {
		t.Fatal(err)
	}
	write(path, watchDone, patchSt)
	c, err := w.Count()
	if err != nil {
		t.Fatal(err)
	}
	want := Counts{"system:node:n1": {"watch pods": 1}, "system:node:n2": {"patch pods/status": 1}}
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("counts %v, want %v", c, want)
	}
}

func TestMarkBeforeTheLogExists(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	w, err := Mark(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(getNode+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := w.Count()
	if err != nil || c.Total("system:node:n1") != 1 {
		t.Fatalf("counts %v, %v", c, err)
	}
}
