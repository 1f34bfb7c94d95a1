// Package images pulls container images for nodelet: the image manager that applies a
// container's pull policy, per-image back-off and pull throttling (upstream's
// pkg/kubelet/images), the CRI-backed image service that tries pull-secret credentials
// (upstream's kuberuntime_image.go), and the docker keyring that picks those credentials
// (upstream's pkg/credentialprovider). With a PullManager it also keeps, as upstream's
// kubelet does with KubeletEnsureSecretPulledImages (KEP-2535), records of the images it
// pulled and with which credentials, in upstream's files under
// <root-dir>/image_manager/, so that an image on the node is no way around registry
// credentials: a pod may need to pull it again, with its own, before using it.
package images

import (
	"context"
	"errors"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/util/flowcontrol"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	crierrors "k8s.io/cri-api/pkg/errors"
)

// Reasons an image could not be made present. Their texts become container waiting
// reasons, so they are upstream's exactly.
var (
	// ErrImagePullBackOff: a recent pull of the image failed and the back-off has not passed.
	ErrImagePullBackOff = errors.New("ImagePullBackOff")
	// ErrImageInspect: the runtime could not say whether the image is present.
	ErrImageInspect = errors.New("ImageInspectError")
	// ErrImagePull: the pull failed for any other reason.
	ErrImagePull = errors.New("ErrImagePull")
	// ErrImageNeverPull: the image is absent and the pull policy is Never.
	ErrImageNeverPull = errors.New("ErrImageNeverPull")
	// ErrInvalidImageName: the image reference does not parse.
	ErrInvalidImageName = errors.New("InvalidImageName")
	// ErrRegistryUnavailable: the runtime reported the registry unreachable. It is the CRI
	// error value itself, so errors.Is works on both.
	ErrRegistryUnavailable = crierrors.ErrRegistryUnavailable
	// ErrSignatureValidationFailed: the runtime rejected the image's signature.
	ErrSignatureValidationFailed = crierrors.ErrSignatureValidationFailed
)

// Upstream's image pull back-off: 10s doubling to 5 minutes, per pod and image.
const (
	ImageBackOffPeriod = 10 * time.Second
	MaxImageBackOff    = 300 * time.Second
)

// ImageManager makes sure a container's image is present, as its pull policy asks.
// Implementations are safe for concurrent use.
type ImageManager interface {
	// EnsureImageExists returns the image's ID once present. On failure err is one of the
	// reasons above and message says why, for the container's waiting state. objRef, when
	// not nil, is the container the events are about.
	EnsureImageExists(ctx context.Context, objRef *v1.ObjectReference, pod *v1.Pod, image string, pullSecrets []v1.Secret, sandboxConfig *runtimeapi.PodSandboxConfig, runtimeHandler string, pullPolicy v1.PullPolicy) (imageRef, message string, err error)
}

// Options tune how the image manager pulls (the kubelet's serializeImagePulls,
// maxParallelImagePulls, registryPullQPS and registryBurst settings).
type Options struct {
	// SerializeImagePulls pulls one image at a time, in arrival order.
	SerializeImagePulls bool
	// MaxParallelImagePulls caps concurrent pulls when they are not serialized; nil or
	// less than 1 means no cap.
	MaxParallelImagePulls *int32
	// RegistryPullQPS limits pull starts per second (token bucket of RegistryBurst);
	// 0 means no limit. A pull over the limit fails with "pull QPS exceeded".
	RegistryPullQPS float32
	RegistryBurst   int
	// Backoff is the per-image pull back-off; nil means ImageBackOffPeriod to MaxImageBackOff.
	Backoff *flowcontrol.Backoff
	// PullManager keeps the records of pulled images and the credentials that pulled them
	// (NewPullManager), so that a present image is verified by the
	// imagePullCredentialsVerificationPolicy before a pod uses it. nil: images on the node
	// are usable by every pod (the KubeletEnsureSecretPulledImages feature gate off).
	PullManager ImagePullManager
	// PullSecrets, when set, reads a pod's spec.imagePullSecrets from the API server for
	// EnsureImageExists calls that pass no pull secrets.
	PullSecrets SecretGetter
	// NodeKeyring holds the node's own registry credentials (NewNodeKeyring: docker
	// config files in the root directory, the working directory, $HOME, /), tried after a
	// pod's pull secrets; nil: none.
	NodeKeyring Keyring
	// CredentialPlugins are the image credential provider plugins, asked after the node's
	// keyring; nil: none.
	CredentialPlugins CredentialPlugins
}
