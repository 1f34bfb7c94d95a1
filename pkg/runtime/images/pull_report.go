package images

import (
	"context"
	"sync"
)

// pullReport is where RuntimeImages.PullImage leaves the credential that pulled the
// image. container.ImageService.PullImage returns only the image reference, while
// upstream's also returns the credential used; the report carries it through the
// context instead, so that wrappers of the image service (which pass the context on)
// keep working.
type pullReport struct {
	mu       sync.Mutex
	reported bool
	used     *TrackedAuthConfig
}

type pullReportKey struct{}

// withPullReport returns a context under which a pull reports its credential to the
// returned report.
func withPullReport(ctx context.Context) (context.Context, *pullReport) {
	r := &pullReport{}
	return context.WithValue(ctx, pullReportKey{}, r), r
}

// reportPullCredentials records that the pull succeeded with used (nil: anonymously).
func reportPullCredentials(ctx context.Context, used *TrackedAuthConfig) {
	r, _ := ctx.Value(pullReportKey{}).(*pullReport)
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reported = true
	if used != nil {
		c := *used
		r.used = &c
	}
}

// credentials returns the credential reported (nil: anonymous pull) and whether the
// image service reported at all.
func (r *pullReport) credentials() (*TrackedAuthConfig, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.used, r.reported
}
