package images

import (
	"context"

	v1 "k8s.io/api/core/v1"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/runtime/container"
)

// RuntimeImages is container.ImageService over a CRI image service (upstream's image
// half of kuberuntime): it chooses pull credentials and converts between CRI and
// nodelet types.
type RuntimeImages struct {
	svc         internalapi.ImageManagerService
	nodeKeyring Keyring
	plugins     CredentialPlugins
}

var _ container.ImageService = (*RuntimeImages)(nil)

// NewRuntimeImages uses only the pods' pull secrets for credentials.
func NewRuntimeImages(svc internalapi.ImageManagerService) *RuntimeImages {
	return &RuntimeImages{svc: svc}
}

// NewRuntimeImagesWithKeyring also tries the node's own credentials (e.g. NewNodeKeyring)
// after the pull secrets' ones, then those of the credential provider plugins (nil: none).
func NewRuntimeImagesWithKeyring(svc internalapi.ImageManagerService, nodeKeyring Keyring, plugins CredentialPlugins) *RuntimeImages {
	return &RuntimeImages{svc: svc, nodeKeyring: nodeKeyring, plugins: plugins}
}

// PullImage pulls the image and returns its reference. When credentials match the
// image's registry they are tried one by one, most specific registry first and pull
// secrets before node credentials; the first success wins and, as upstream, there is no
// anonymous attempt after they all fail. With no matching credentials it pulls
// anonymously. Under a context from withPullReport it reports which credential pulled
// the image (nil: anonymously), as upstream's PullImage returns it.
func (r *RuntimeImages) PullImage(ctx context.Context, image container.ImageSpec, pullSecrets []v1.Secret, sandboxConfig *runtimeapi.PodSandboxConfig) (string, error) {
	if memo := memoFrom(ctx); memo != nil {
		defer memo.forget(image) // the pull changes what ImageStatus says
	}
	logger := klog.FromContext(ctx)
	repo, _, _, err := parseImageName(image.Image)
	if err != nil {
		return "", err
	}
	keyring, err := KeyringFromSecrets(pullSecrets, nodeCredentials(ctx, r.nodeKeyring, r.plugins))
	if err != nil {
		return "", err
	}
	spec := toRuntimeImageSpec(image)
	var creds []TrackedAuthConfig
	if keyring != nil {
		creds, _ = keyring.Lookup(repo)
	}
	if len(creds) == 0 {
		logger.V(3).Info("Pulling image without credentials", "image", image.Image)
		ref, err := r.svc.PullImage(ctx, spec, nil, sandboxConfig)
		if err != nil {
			logger.Error(err, "Failed to pull image", "image", image.Image)
			return ref, err
		}
		reportPullCredentials(ctx, nil)
		return ref, nil
	}
	var errs []error
	for i := range creds {
		ref, err := r.svc.PullImage(ctx, spec, toRuntimeAuth(creds[i].AuthConfig), sandboxConfig)
		if err == nil {
			reportPullCredentials(ctx, &creds[i])
			return ref, nil
		}
		errs = append(errs, err)
	}
	return "", utilerrors.NewAggregate(errs)
}

// GetImageRef returns the ID of the image if present, "" if not.
func (r *RuntimeImages) GetImageRef(ctx context.Context, image container.ImageSpec) (string, error) {
	img, err := r.ImageStatus(ctx, image)
	if err != nil || img == nil {
		return "", err
	}
	return img.Id, nil
}

// GetImageSize returns the size of the image if present, 0 if not.
func (r *RuntimeImages) GetImageSize(ctx context.Context, image container.ImageSpec) (uint64, error) {
	img, err := r.ImageStatus(ctx, image)
	if err != nil || img == nil {
		return 0, err
	}
	return img.Size, nil
}

// ImageStatus returns the runtime's view of the image, nil if it is not present. Under a
// context from WithImageStatusMemo the runtime is asked once per image.
func (r *RuntimeImages) ImageStatus(ctx context.Context, image container.ImageSpec) (*runtimeapi.Image, error) {
	ask := func() (*runtimeapi.Image, error) { return r.askImageStatus(ctx, image) }
	if memo := memoFrom(ctx); memo != nil {
		return memo.status(ctx, image, ask)
	}
	return ask()
}

func (r *RuntimeImages) askImageStatus(ctx context.Context, image container.ImageSpec) (*runtimeapi.Image, error) {
	resp, err := r.svc.ImageStatus(ctx, toRuntimeImageSpec(image), false)
	if err != nil {
		klog.FromContext(ctx).Error(err, "Failed to get image status", "image", image.Image)
		return nil, err
	}
	return resp.GetImage(), nil
}

// ListImages returns every image on the node.
func (r *RuntimeImages) ListImages(ctx context.Context) ([]container.Image, error) {
	all, err := r.svc.ListImages(ctx, nil)
	if err != nil {
		klog.FromContext(ctx).Error(err, "Failed to list images")
		return nil, err
	}
	images := make([]container.Image, 0, len(all))
	for _, img := range all {
		images = append(images, container.Image{
			ID:          img.Id,
			RepoTags:    img.RepoTags,
			RepoDigests: img.RepoDigests,
			Size:        int64(img.Size),
			Spec:        imageSpecOf(img),
			Pinned:      img.Pinned,
		})
	}
	return images, nil
}

// RemoveImage removes the image (by ID or reference).
func (r *RuntimeImages) RemoveImage(ctx context.Context, image container.ImageSpec) error {
	if err := r.svc.RemoveImage(ctx, &runtimeapi.ImageSpec{Image: image.Image}); err != nil {
		klog.FromContext(ctx).Error(err, "Failed to remove image", "image", image.Image)
		return err
	}
	return nil
}

// ImageStats sums the sizes of the images (shared layers are counted once per image).
func (r *RuntimeImages) ImageStats(ctx context.Context) (*container.ImageStats, error) {
	all, err := r.svc.ListImages(ctx, nil)
	if err != nil {
		klog.FromContext(ctx).Error(err, "Failed to list images")
		return nil, err
	}
	stats := &container.ImageStats{}
	for _, img := range all {
		stats.TotalStorageBytes += img.Size
	}
	return stats, nil
}

func toRuntimeImageSpec(image container.ImageSpec) *runtimeapi.ImageSpec {
	annotations := make(map[string]string, len(image.Annotations))
	for k, v := range image.Annotations {
		annotations[k] = v
	}
	return &runtimeapi.ImageSpec{Image: image.Image, Annotations: annotations, RuntimeHandler: image.RuntimeHandler}
}

// imageSpecOf names a listed image by its ID. The runtime handler is left out, as
// upstream does while the RuntimeClassInImageCriAPI feature is off.
func imageSpecOf(img *runtimeapi.Image) container.ImageSpec {
	spec := container.ImageSpec{Image: img.Id}
	if a := img.GetSpec().GetAnnotations(); len(a) > 0 {
		spec.Annotations = make(map[string]string, len(a))
		for k, v := range a {
			spec.Annotations[k] = v
		}
	}
	return spec
}

func toRuntimeAuth(c AuthConfig) *runtimeapi.AuthConfig {
	return &runtimeapi.AuthConfig{
		Username:      c.Username,
		Password:      c.Password,
		Auth:          c.Auth,
		ServerAddress: c.ServerAddress,
		IdentityToken: c.IdentityToken,
		RegistryToken: c.RegistryToken,
	}
}
