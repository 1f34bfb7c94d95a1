package host

import (
	"context"
	"time"
)

// Sleep waits for d, or less when ctx is done first, and then says so with ctx's error:
// the benches' pauses, which Ctrl-C must cut short.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
