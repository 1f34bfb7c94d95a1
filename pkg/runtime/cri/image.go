package cri

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
)

// remoteImageService is internalapi.ImageManagerService over a CRI v1 gRPC
// connection.
type remoteImageService struct {
	client    runtimeapi.ImageServiceClient
	closeConn func() error
	timeout   time.Duration
	logger    klog.Logger
}

var _ internalapi.ImageManagerService = (*remoteImageService)(nil)

// NewRemoteImageService connects to the CRI image service at endpoint and
// checks, within connectionTimeout, that it answers the CRI v1 ImageFsInfo
// call (upstream's check). requestTimeout bounds each later call except
// PullImage. Use ImageEndpointOrDefault when no image endpoint is configured.
func NewRemoteImageService(ctx context.Context, endpoint string, connectionTimeout, requestTimeout time.Duration, opts ...Option) (internalapi.ImageManagerService, error) {
	o := buildOptions(opts)
	conn, closeConn, connectionTimeout, err := dialService(o, "image", endpoint, connectionTimeout, requestTimeout)
	if err != nil {
		return nil, err
	}
	r := &remoteImageService{
		client:    runtimeapi.NewImageServiceClient(conn),
		closeConn: closeConn,
		timeout:   requestTimeout,
		logger:    o.logger,
	}
	err = checkCRIv1(ctx, o.logger, "image", endpoint, connectionTimeout, func(ctx context.Context) error {
		_, err := r.client.ImageFsInfo(ctx, &runtimeapi.ImageFsInfoRequest{})
		return err
	})
	if err != nil {
		_ = closeConn()
		return nil, err
	}
	if o.metrics != nil {
		return NewInstrumentedImageService(r, o.metrics), nil
	}
	return r, nil
}

func (r *remoteImageService) trace(msg string, keysAndValues ...any) {
	if v := r.logger.V(10); v.Enabled() {
		v.Info("[RemoteImageService] "+msg, keysAndValues...)
	}
}

// Close closes the gRPC connection.
func (r *remoteImageService) Close(context.Context) error {
	return r.closeConn()
}

// ListImages returns the images that match filter.
func (r *remoteImageService) ListImages(ctx context.Context, filter *runtimeapi.ImageFilter) ([]*runtimeapi.Image, error) {
	r.trace("ListImages", "filter", filter, "timeout", r.timeout)
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	resp, err := r.client.ListImages(ctx, &runtimeapi.ListImagesRequest{Filter: filter})
	if err != nil {
		r.logger.Error(err, "ListImages with filter from image service failed", "filter", filter)
		return nil, err
	}
	r.trace("ListImages Response", "filter", filter, "images", len(resp.GetImages()))
	return resp.GetImages(), nil
}

// ImageStatus returns an image's status; resp.Image is nil when the image is
// not present.
func (r *remoteImageService) ImageStatus(ctx context.Context, image *runtimeapi.ImageSpec, verbose bool) (*runtimeapi.ImageStatusResponse, error) {
	r.trace("ImageStatus", "image", image.GetImage(), "timeout", r.timeout)
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	resp, err := r.client.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: image, Verbose: verbose})
	if err != nil {
		r.logger.Error(err, "Get ImageStatus from image service failed", "image", image.GetImage())
		return nil, err
	}
	r.trace("ImageStatus Response", "image", image.GetImage(), "status", resp.GetImage())
	if err := checkImage(image.GetImage(), resp.GetImage()); err != nil {
		r.logger.Error(err, "ImageStatus failed", "image", image.GetImage())
		return nil, err
	}
	return resp, nil
}

// PullImage pulls an image and returns its reference. It sets no deadline of
// its own, only the caller's: a large pull can take far longer than a normal
// request.
func (r *remoteImageService) PullImage(ctx context.Context, image *runtimeapi.ImageSpec, auth *runtimeapi.AuthConfig, podSandboxConfig *runtimeapi.PodSandboxConfig) (string, error) {
	r.trace("PullImage", "image", image.GetImage())
	resp, err := r.client.PullImage(ctx, &runtimeapi.PullImageRequest{Image: image, Auth: auth, SandboxConfig: podSandboxConfig})
	if err != nil {
		r.logger.Error(err, "PullImage from image service failed", "image", image.GetImage())
		return "", plainUnknownError(err)
	}
	if resp.GetImageRef() == "" {
		err := invalidResponse("PullImage", ErrMissingImageRef, "for image %q", image.GetImage())
		r.logger.Error(err, "PullImage failed", "image", image.GetImage())
		return "", err
	}
	r.trace("PullImage Response", "image", image.GetImage(), "imageRef", resp.GetImageRef())
	return resp.GetImageRef(), nil
}

// plainUnknownError turns a gRPC Unknown status into a plain error with the
// runtime's message, as upstream does: the "rpc error: code = Unknown" prefix
// adds nothing to pod events, and the image manager matches pull errors by
// message.
func plainUnknownError(err error) error {
	if s, ok := status.FromError(err); ok && s.Code() == codes.Unknown {
		return errors.New(s.Message())
	}
	return err
}

// RemoveImage removes an image.
func (r *remoteImageService) RemoveImage(ctx context.Context, image *runtimeapi.ImageSpec) error {
	r.trace("RemoveImage", "image", image.GetImage(), "timeout", r.timeout)
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	if _, err := r.client.RemoveImage(ctx, &runtimeapi.RemoveImageRequest{Image: image}); err != nil {
		r.logger.Error(err, "RemoveImage from image service failed", "image", image.GetImage())
		return err
	}
	r.trace("RemoveImage Response", "image", image.GetImage())
	return nil
}

// ImageFsInfo returns usage of the filesystems holding images and container
// writable layers.
func (r *remoteImageService) ImageFsInfo(ctx context.Context) (*runtimeapi.ImageFsInfoResponse, error) {
	r.trace("ImageFsInfo", "timeout", r.timeout)
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	resp, err := r.client.ImageFsInfo(ctx, &runtimeapi.ImageFsInfoRequest{})
	if err != nil {
		r.logger.Error(err, "ImageFsInfo from image service failed")
		return nil, err
	}
	r.trace("ImageFsInfo Response", "imageFilesystems", resp.GetImageFilesystems())
	return resp, nil
}
