package host

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"
)

// SharedLock takes the machine's lock on the shared control plane (an flock, like
// `flock /run/nodelet-shared.lock`), saying so while it waits. The returned function
// releases it. An empty path takes no lock.
func SharedLock(ctx context.Context, path string) (func(), error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	release := func() { f.Close() } // closing the last descriptor drops the lock
	for waited := time.Duration(0); ; waited += time.Second {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return release, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			release()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		if waited%(30*time.Second) == 0 {
			fmt.Fprintf(os.Stderr, "waiting for %s (held by another test; %v so far). "+
				"Under `flock %s make bench`, set NODELET_BENCH_LOCK= instead.\n", path, waited, path)
		}
		select {
		case <-ctx.Done():
			release()
			return nil, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}
