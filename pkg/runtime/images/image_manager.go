package images

import (
	"context"
	"errors"
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
	kc "k8s.io/kubelet/config/v1beta1"

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

// imageManager is upstream's imageManager. With a pull manager (Options.PullManager, the
// KubeletEnsureSecretPulledImages feature) a present image is used only when the
// credential verification policy and the pulled records let the pod use it; otherwise
// the pod pulls it again, with its own credentials, to show it may.
type imageManager struct {
	recorder record.EventRecorder
	images   container.ImageService
	backOff  *flowcontrol.Backoff
	puller   *puller
	// pulls is nil when pulled images are not verified (the feature gate off).
	pulls ImagePullManager
	// secrets resolves a pod's imagePullSecrets when the caller passes none; nil: never.
	secrets SecretGetter
	// plugins are the credential provider plugins (nil: none): for a present image, the
	// service account a plugin would pull it with is one of the pod's credentials.
	plugins CredentialPlugins
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
		pulls:    opts.PullManager,
		secrets:  opts.PullSecrets,
		plugins:  opts.CredentialPlugins,
	}
}

// EnsureImageExists implements ImageManager.
func (m *imageManager) EnsureImageExists(ctx context.Context, objRef *v1.ObjectReference, pod *v1.Pod, image string, pullSecrets []v1.Secret, sandboxConfig *runtimeapi.PodSandboxConfig, runtimeHandler string, pullPolicy v1.PullPolicy) (string, string, error) {
	ctx = withPullingPod(ctx, pod)
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
	// The pod's pull secrets are only looked up when needed, and at most once.
	resolved := sync.OnceValues(func() ([]v1.Secret, []string) { return m.resolvePullSecrets(ctx, pod, pullSecrets) })
	podSecrets := func() []v1.Secret { s, _ := resolved(); return s }
	if imageRef != "" {
		if m.pulls == nil {
			msg := fmt.Sprintf("Container image %q already present on machine", image)
			m.event(ctx, objRef, v1.EventTypeNormal, EventPulledImage, logPrefix, msg)
			return imageRef, msg, nil
		}
		mustPull, err := m.pulls.MustAttemptImagePull(ctx, image, imageRef, m.podCredentialsFunc(ctx, spec.Image, podSecrets))
		if err != nil {
			return "", err.Error(), err
		}
		if !mustPull {
			msg := fmt.Sprintf("Container image %q already present on machine and can be accessed by the pod", image)
			m.event(ctx, objRef, v1.EventTypeNormal, EventPulledImage, logPrefix, msg)
			return imageRef, msg, nil
		}
		klog.FromContext(ctx).V(2).Info("Image is present but the pod must pull it to verify its credentials", "pod", klog.KObj(pod), "image", image)
	}
	if pullPolicy == v1.PullNever {
		// Present, but not for this pod: it is told what it would be told of an absent
		// image, so as not to reveal that the image is on the node.
		msg, err := m.neverPullError(ctx, objRef, logPrefix, image)
		return "", msg, err
	}
	secrets, missing := resolved()
	imageRef, msg, err = m.pullImage(ctx, objRef, logPrefix, pod.UID, image, spec, secrets, sandboxConfig)
	if errors.Is(err, ErrImagePull) && len(missing) > 0 && m.recorder != nil {
		// Upstream's kubelet says so after a sync whose pull failed.
		m.recorder.Eventf(pod, v1.EventTypeWarning, EventFailedToRetrieveImagePullSecret,
			"Unable to retrieve some image pull secrets (%s); attempting to pull the image may not succeed.", strings.Join(missing, ", "))
	}
	return imageRef, msg, err
}

// podCredentialsFunc returns, once asked, the pod's credentials that match the image, as
// the pulled records identify them: its pull secrets (coordinates and credential hash)
// and the service account a credential provider plugin used the pod's token of. A pull
// secret that does not parse is an error.
func (m *imageManager) podCredentialsFunc(ctx context.Context, image string, pullSecrets func() []v1.Secret) GetPodCredentials {
	var once sync.Once
	var secrets []kc.ImagePullSecret
	var sa *kc.ImagePullServiceAccount
	var err error
	return func() ([]kc.ImagePullSecret, *kc.ImagePullServiceAccount, error) {
		once.Do(func() { secrets, sa, err = podCredentials(ctx, image, pullSecrets(), m.plugins) })
		return secrets, sa, err
	}
}

func podCredentials(ctx context.Context, image string, pullSecrets []v1.Secret, plugins CredentialPlugins) ([]kc.ImagePullSecret, *kc.ImagePullServiceAccount, error) {
	repo, _, _, err := parseImageName(image)
	if err != nil {
		return nil, nil, err
	}
	keyring, err := KeyringFromSecrets(pullSecrets, nodeCredentials(ctx, nil, plugins))
	if err != nil || keyring == nil {
		return nil, nil, err
	}
	creds, _ := keyring.Lookup(repo)
	var secrets []kc.ImagePullSecret
	var sa *kc.ImagePullServiceAccount
	for _, c := range creds {
		switch {
		case c.Source == nil:
		case c.Source.Secret != nil:
			s := c.Source.Secret
			secrets = append(secrets, kc.ImagePullSecret{UID: s.UID, Namespace: s.Namespace, Name: s.Name, CredentialHash: c.AuthConfigHash})
		case c.Source.ServiceAccount != nil && sa == nil:
			a := c.Source.ServiceAccount
			sa = &kc.ImagePullServiceAccount{UID: a.UID, Namespace: a.Namespace, Name: a.Name}
		}
	}
	return secrets, sa, nil
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
		msg, err := m.neverPullError(ctx, objRef, logPrefix, image)
		return "", msg, err
	}
	return imageRef, "", nil
}

// neverPullError is the ErrImageNeverPull of an image that is absent, or present but not
// for this pod (upstream's imageNotPresentOnNeverPolicyError): the same event and message
// in both cases.
func (m *imageManager) neverPullError(ctx context.Context, objRef *v1.ObjectReference, logPrefix, image string) (string, error) {
	msg := fmt.Sprintf("Container image %q is not present with pull policy of Never", image)
	m.event(ctx, objRef, v1.EventTypeWarning, EventErrImageNeverPull, logPrefix, msg)
	return msg, ErrImageNeverPull
}

// pullImage pulls unless the pod's last pull of this image failed within the back-off.
// With a pull manager, an intent is recorded first and, once the pull ends, the pulled
// record with the credential that pulled (or the intent is dropped).
func (m *imageManager) pullImage(ctx context.Context, objRef *v1.ObjectReference, logPrefix string, podUID types.UID, image string, spec container.ImageSpec, pullSecrets []v1.Secret, sandboxConfig *runtimeapi.PodSandboxConfig) (imageRef, message string, err error) {
	if m.pulls != nil {
		if err := m.pulls.RecordPullIntent(image); err != nil {
			return "", fmt.Sprintf("Failed to record image pull intent for container image %q: %v", image, err), err
		}
		var report *pullReport
		ctx, report = withPullReport(ctx)
		defer func() {
			if err != nil {
				m.pulls.RecordImagePullFailed(ctx, image)
				return
			}
			var creds *kc.ImagePullCredentials
			if used, reported := report.credentials(); reported {
				creds = credentialsOfPull(used)
			}
			// Unreported (an image service other than RuntimeImages): the record has no
			// credentials, so every pod verifies.
			m.pulls.RecordImagePulled(ctx, image, imageRef, creds)
		}()
	}
	return m.pullNow(ctx, objRef, logPrefix, podUID, image, spec, pullSecrets, sandboxConfig)
}

func (m *imageManager) pullNow(ctx context.Context, objRef *v1.ObjectReference, logPrefix string, podUID types.UID, image string, spec container.ImageSpec, pullSecrets []v1.Secret, sandboxConfig *runtimeapi.PodSandboxConfig) (string, string, error) {
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
