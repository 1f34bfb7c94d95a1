package lockfile

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestAcquireBlocksUntilReleased(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "kubelet.lock")
	first, err := Acquire(path)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *Lock)
	go func() {
		second, err := Acquire(path)
		if err != nil {
			t.Error(err)
		}
		got <- second
	}()
	select {
	case <-got:
		t.Fatal("second Acquire returned while the first lock was held")
	case <-time.After(200 * time.Millisecond):
	}
	if err := first.Release(); err != nil {
		t.Fatal(err)
	}
	select {
	case second := <-got:
		second.Release()
	case <-time.After(2 * time.Second):
		t.Fatal("second Acquire did not get the lock after release")
	}
}

func TestWatchContentionFiresOnOpen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kubelet.lock")
	lock, err := Acquire(path)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Release()
	contended, err := WatchContention(path)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-contended:
		t.Fatal("contention reported before anyone opened the file")
	case <-time.After(100 * time.Millisecond):
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	select {
	case <-contended:
	case <-time.After(2 * time.Second):
		t.Fatal("opening the lock file was not reported")
	}
}
