package images

import (
	"context"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
)

// EventFailedToRetrieveImagePullSecret is upstream's pod event when some of a pod's
// imagePullSecrets could not be read and a pull failed.
const EventFailedToRetrieveImagePullSecret = "FailedToRetrieveImagePullSecret"

// SecretGetter reads a secret of the API server (in cluster mode, the same cached reads
// as container environments use).
type SecretGetter interface {
	GetSecret(ctx context.Context, namespace, name string) (*v1.Secret, error)
}

// resolvePullSecrets returns the pull secrets to use for the pod: given, when the caller
// resolved any; otherwise, with a SecretGetter, the pod's spec.imagePullSecrets read from
// the API server as upstream's getPullSecretsForPod does (entries without a name are
// skipped; secrets that cannot be read are left out and named in missing).
func (m *imageManager) resolvePullSecrets(ctx context.Context, pod *v1.Pod, given []v1.Secret) (secrets []v1.Secret, missing []string) {
	if len(given) > 0 || m.secrets == nil {
		return given, nil
	}
	for _, ref := range pod.Spec.ImagePullSecrets {
		if ref.Name == "" {
			continue
		}
		s, err := m.secrets.GetSecret(ctx, pod.Namespace, ref.Name)
		if err != nil {
			klog.FromContext(ctx).Info("Unable to retrieve pull secret, the image pull may not succeed.", "pod", klog.KObj(pod), "secret", klog.KRef(pod.Namespace, ref.Name), "err", err)
			missing = append(missing, ref.Name)
			continue
		}
		secrets = append(secrets, *s)
	}
	return secrets, missing
}
