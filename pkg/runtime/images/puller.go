package images

import (
	"context"
	"errors"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/util/flowcontrol"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/pkg/runtime/container"
)

// errPullQPSExceeded is upstream's error when registryPullQPS/registryBurst refuse a pull.
var errPullQPSExceeded = errors.New("pull QPS exceeded")

// pullResult is what one pull produced.
type pullResult struct {
	imageRef  string
	imageSize uint64
	err       error
	// pullDuration is the pull alone, without waiting for a turn.
	pullDuration time.Duration
}

// imageSizer is the optional part of an image service that reports an image's size
// (RuntimeImages has it); without it sizes are reported as 0.
type imageSizer interface {
	GetImageSize(ctx context.Context, image container.ImageSpec) (uint64, error)
}

// puller runs pulls with at most a fixed number at a time (one when serialized), in
// arrival order, and applies the registry QPS limit when a pull starts.
type puller struct {
	images container.ImageService
	// slots holds one token per running pull; nil means no cap.
	slots   chan struct{}
	limiter flowcontrol.RateLimiter
}

func newPuller(images container.ImageService, opts Options) *puller {
	p := &puller{images: images}
	switch {
	case opts.SerializeImagePulls:
		p.slots = make(chan struct{}, 1)
	case opts.MaxParallelImagePulls != nil && *opts.MaxParallelImagePulls > 0:
		p.slots = make(chan struct{}, *opts.MaxParallelImagePulls)
	}
	if opts.RegistryPullQPS != 0 {
		p.limiter = flowcontrol.NewTokenBucketRateLimiter(opts.RegistryPullQPS, opts.RegistryBurst)
	}
	return p
}

// pull waits for a free slot (or ctx), then pulls the image and reads its size.
func (p *puller) pull(ctx context.Context, spec container.ImageSpec, pullSecrets []v1.Secret, sandboxConfig *runtimeapi.PodSandboxConfig) pullResult {
	if p.slots != nil {
		select {
		case p.slots <- struct{}{}:
			defer func() { <-p.slots }()
		case <-ctx.Done():
			return pullResult{err: ctx.Err()}
		}
	}
	start := time.Now()
	ref, err := p.pullNow(ctx, spec, pullSecrets, sandboxConfig)
	var size uint64
	if sizer, ok := p.images.(imageSizer); ok && err == nil && ref != "" {
		// Best effort: the size only decorates the Pulled event.
		size, _ = sizer.GetImageSize(ctx, spec)
	}
	return pullResult{imageRef: ref, imageSize: size, err: err, pullDuration: time.Since(start)}
}

// pullNow pulls unless the registry QPS limit is exhausted; like upstream it fails
// rather than waits, so the pod's back-off spaces the retries.
func (p *puller) pullNow(ctx context.Context, spec container.ImageSpec, pullSecrets []v1.Secret, sandboxConfig *runtimeapi.PodSandboxConfig) (string, error) {
	if p.limiter != nil && !p.limiter.TryAccept() {
		return "", errPullQPSExceeded
	}
	return p.images.PullImage(ctx, spec, pullSecrets, sandboxConfig)
}
