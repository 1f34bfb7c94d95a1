package images

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/flowcontrol"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/metrics"
	"github.com/nodelet/nodelet/pkg/metrics/podstartup"
	"github.com/nodelet/nodelet/pkg/runtime/container"
)

// Event reasons, as upstream's pkg/kubelet/events.
const (
	EventPullingImage      = "Pulling"
	EventPulledImage       = "Pulled"
	EventFailedToPullImage = "Failed"
	EventFailedToInspect   = "InspectFailed"
	EventErrImageNeverPull = "ErrImageNeverPull"
	EventBackOffPullImage  = "BackOff"
)

// imageManager is upstream's imageManager without the KubeletEnsureSecretPulledImages
// bookkeeping (a feature gate that is off by default).
type imageManager struct {
	recorder record.EventRecorder
	images   container.ImageService
	backOff  *flowcontrol.Backoff
	puller   *puller
	// prevPullErr keeps, per back-off key, the last pull failure, so that the back-off
	// message says why the image is being backed off.
	prevPullErr sync.Map
}

// NewImageManager builds the image manager over an image service (usually RuntimeImages).
func NewImageManager(recorder record.EventRecorder, images container.ImageService, opts Options) ImageManager {
	backOff := opts.Backoff
	if backOff == nil {
		backOff = flowcontrol.NewBackOff(ImageBackOffPeriod, MaxImageBackOff)
	}
	return &imageManager{
		recorder: recorder,
		images:   images,
		backOff:  backOff,
		puller:   newPuller(images, opts),
	}
}

// EnsureImageExists implements ImageManager.
func (m *imageManager) EnsureImageExists(ctx context.Context, objRef *v1.ObjectReference, pod *v1.Pod, image string, pullSecrets []v1.Secret, sandboxConfig *runtimeapi.PodSandboxConfig, runtimeHandler string, pullPolicy v1.PullPolicy) (string, string, error) {
	logPrefix := fmt.Sprintf("%s/%s/%s", pod.Namespace, pod.Name, image)
	spec, err := ImageSpecFor(pod, image, runtimeHandler)
	if err != nil {
		msg := fmt.Sprintf("Failed to apply default image tag %q: %v", image, err)
		m.event(ctx, objRef, v1.EventTypeWarning, EventFailedToInspect, logPrefix, msg)
		return "", msg, ErrInvalidImageName
	}

	imageRef, msg, err := m.presentImage(ctx, objRef, logPrefix, pullPolicy, spec, image)
	if err != nil {
		return "", msg, err
	}
	if imageRef != "" {
		msg := fmt.Sprintf("Container image %q already present on machine", image)
		m.event(ctx, objRef, v1.EventTypeNormal, EventPulledImage, logPrefix, msg)
		return imageRef, msg, nil
	}
	return m.pullImage(ctx, objRef, logPrefix, pod.UID, image, spec, pullSecrets, sandboxConfig)
}

// ImageSpecFor is the spec under which a container's image is checked and pulled: the
// image with the default tag applied, with the pod's runtime handler and annotations.
func ImageSpecFor(pod *v1.Pod, image, runtimeHandler string) (container.ImageSpec, error) {
	tagged, err := applyDefaultImageTag(image)
	if err != nil {
		return container.ImageSpec{}, err
	}
	return container.ImageSpec{Image: tagged, RuntimeHandler: runtimeHandler, Annotations: maps.Clone(pod.Annotations)}, nil
}

// presentImage returns the ID of the image when the policy lets a present image be used
// ("" for Always, and when absent); an absent image under Never is an error.
func (m *imageManager) presentImage(ctx context.Context, objRef *v1.ObjectReference, logPrefix string, pullPolicy v1.PullPolicy, spec container.ImageSpec, image string) (string, string, error) {
	if pullPolicy != v1.PullIfNotPresent && pullPolicy != v1.PullNever {
		return "", "", nil
	}
	imageRef, err := m.images.GetImageRef(ctx, spec)
	if err != nil {
		msg := fmt.Sprintf("Failed to inspect image %q: %v", image, err)
		m.event(ctx, objRef, v1.EventTypeWarning, EventFailedToInspect, logPrefix, msg)
		return "", msg, ErrImageInspect
	}
	if imageRef == "" && pullPolicy == v1.PullNever {
		msg := fmt.Sprintf("Container image %q is not present with pull policy of Never", image)
		m.event(ctx, objRef, v1.EventTypeWarning, EventErrImageNeverPull, logPrefix, msg)
		return "", msg, ErrImageNeverPull
	}
	return imageRef, "", nil
}

// pullImage pulls unless the pod's last pull of this image failed within the back-off.
func (m *imageManager) pullImage(ctx context.Context, objRef *v1.ObjectReference, logPrefix string, podUID types.UID, image string, spec container.ImageSpec, pullSecrets []v1.Secret, sandboxConfig *runtimeapi.PodSandboxConfig) (string, string, error) {
	backOffKey := fmt.Sprintf("%s_%s", podUID, image)
	if m.backOff.IsInBackOffSinceUpdate(backOffKey, m.backOff.Clock.Now()) {
		msg := fmt.Sprintf("Back-off pulling image %q", image)
		m.event(ctx, objRef, v1.EventTypeNormal, EventBackOffPullImage, logPrefix, msg)
		if prev, ok := m.prevPullErr.Load(backOffKey); ok {
			msg = fmt.Sprintf("%s: %s", msg, prev)
		}
		return "", msg, ErrImagePullBackOff
	}
	m.prevPullErr.Delete(backOffKey)

	m.event(ctx, objRef, v1.EventTypeNormal, EventPullingImage, logPrefix, fmt.Sprintf("Pulling image %q", image))
	start := time.Now()
	// The pod's start-up trace counts the pull, waiting for a turn included.
	endPull := podstartup.FromContext(ctx).Begin(podstartup.ImagePull)
	result := m.puller.pull(ctx, spec, pullSecrets, sandboxConfig)
	endPull()
	if result.err != nil {
		m.event(ctx, objRef, v1.EventTypeWarning, EventFailedToPullImage, logPrefix, fmt.Sprintf("Failed to pull image %q: %v", image, result.err))
		m.backOff.Next(backOffKey, m.backOff.Clock.Now())
		msg, reason := classifyPullError(image, result.err)
		m.prevPullErr.Store(backOffKey, fmt.Sprintf("%s: %s", reason, msg))
		return "", msg, reason
	}
	total := time.Since(start).Truncate(time.Millisecond)
	m.event(ctx, objRef, v1.EventTypeNormal, EventPulledImage, logPrefix, fmt.Sprintf("Successfully pulled image %q in %v (%v including waiting). Image size: %v bytes.",
		image, result.pullDuration.Truncate(time.Millisecond), total, result.imageSize))
	metrics.ImagePullDuration.WithLabelValues(metrics.ImageSizeBucket(result.imageSize)).Observe(total.Seconds())
	m.backOff.GC()
	return result.imageRef, "", nil
}

// classifyPullError maps a runtime pull error to its reason and message. CRI errors
// cross gRPC as text, so the runtime's reasons are recognised by their prefix.
func classifyPullError(image string, err error) (string, error) {
	text := err.Error()
	switch {
	case strings.HasPrefix(text, ErrRegistryUnavailable.Error()):
		return fmt.Sprintf("image pull failed for %s because the registry is unavailable%s",
			image, strings.TrimPrefix(text, ErrRegistryUnavailable.Error())), ErrRegistryUnavailable
	case strings.HasPrefix(text, ErrSignatureValidationFailed.Error()):
		return fmt.Sprintf("image pull failed for %s because the signature validation failed%s",
			image, strings.TrimPrefix(text, ErrSignatureValidationFailed.Error())), ErrSignatureValidationFailed
	}
	return text, ErrImagePull
}

// event records an event about objRef, or logs msg when there is no object to attach it to.
func (m *imageManager) event(ctx context.Context, objRef *v1.ObjectReference, eventType, reason, logPrefix, msg string) {
	if objRef != nil && m.recorder != nil {
		m.recorder.Event(objRef, eventType, reason, msg)
		return
	}
	klog.FromContext(ctx).Info(logPrefix+" "+msg, "type", eventType, "reason", reason)
}
