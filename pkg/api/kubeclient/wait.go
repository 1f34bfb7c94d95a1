package kubeclient

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
)

// backoff is a capped, jittered exponential back-off.
type backoff struct {
	initial, max time.Duration
	factor       float64
	jitter       float64 // each wait is stretched by up to this fraction
}

// serverBackoff paces retries against an unreachable server: 1s, 2s, 4s … 32s,
// the same ceiling upstream's certificate manager settles at.
var serverBackoff = backoff{initial: time.Second, max: 32 * time.Second, factor: 2, jitter: 0.1}

func (b backoff) next(d time.Duration) time.Duration {
	return min(time.Duration(float64(d)*b.factor), b.max)
}

func (b backoff) jittered(d time.Duration) time.Duration {
	return d + time.Duration(rand.Float64()*b.jitter*float64(d))
}

// probeTimeout bounds one readiness probe, so a black-holed server costs one step
// of the back-off, not a TCP time-out.
const probeTimeout = 5 * time.Second

// retryUntil calls try until it succeeds, fails permanently (IsPermanent) or ctx
// ends. Each transient failure is one log line, with the error and the wait before
// the next try. On ctx's end it returns ctx's error with the last failure.
func retryUntil(ctx context.Context, b backoff, msg string, try func(context.Context) error) error {
	logger := klog.FromContext(ctx)
	delay := b.initial
	for {
		err := try(ctx)
		if err == nil || IsPermanent(err) {
			return err
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%w; last error: %s", ctx.Err(), Describe(err))
		}
		wait := b.jittered(delay)
		logger.Info(msg, "err", Describe(err), "retryIn", wait.Round(time.Millisecond))
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return fmt.Errorf("%w; last error: %s", ctx.Err(), Describe(err))
		case <-timer.C:
		}
		delay = b.next(delay)
	}
}

// probeServer asks the API server whether it is ready to serve, with the
// client's credentials. A 403 counts as ready: the server is up and accepted who
// we are, it only keeps /readyz from us. A not-ready answer is shortened to its
// status, since its body lists every check over many lines.
func probeServer(ctx context.Context, client rest.Interface) error {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	_, err := client.Get().AbsPath("/readyz").DoRaw(ctx)
	var status apierrors.APIStatus
	switch {
	case err == nil, apierrors.IsForbidden(err):
		return nil
	case errors.As(err, &status) && status.Status().Code >= 500:
		return apierrors.NewServiceUnavailable(fmt.Sprintf("/readyz answered HTTP %d, not ready yet", status.Status().Code))
	}
	return err
}
