package images

import (
	"context"

	v1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/pkg/runtime/credentialprovider"
)

// CredentialPlugins gives the credentials the image credential provider plugins return
// for a repository and the pod pulling it (*credentialprovider.Plugins).
type CredentialPlugins interface {
	Credentials(ctx context.Context, image string, pod *credentialprovider.Pod) []credentialprovider.Credential
}

// pluginKeyring is the plugins' answer for one pod as a Keyring. A credential the plugin
// got with the pod's service account token carries that account as its source (the
// pulled-image records note it); the others are the node's, as upstream counts them.
type pluginKeyring struct {
	ctx     context.Context
	plugins CredentialPlugins
	pod     *credentialprovider.Pod
}

func (k pluginKeyring) Lookup(repo string) ([]TrackedAuthConfig, bool) {
	var out []TrackedAuthConfig
	for _, c := range k.plugins.Credentials(k.ctx, repo, k.pod) {
		var src *CredentialSource
		if sa := c.ServiceAccount; sa != nil {
			src = &CredentialSource{ServiceAccount: &ServiceAccountCoordinates{UID: sa.UID, Namespace: sa.Namespace, Name: sa.Name}}
		}
		out = append(out, NewTrackedAuthConfig(AuthConfig{Username: c.Username, Password: c.Password}, src))
	}
	return out, len(out) > 0
}

type pullingPodKey struct{}

// withPullingPod tells the image service, through ctx, which pod an image is pulled for:
// plugins in service-account token mode ask for that pod's token.
func withPullingPod(ctx context.Context, pod *v1.Pod) context.Context {
	if pod == nil {
		return ctx
	}
	return context.WithValue(ctx, pullingPodKey{}, &credentialprovider.Pod{
		Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID, ServiceAccountName: pod.Spec.ServiceAccountName,
	})
}

func pullingPod(ctx context.Context) *credentialprovider.Pod {
	p, _ := ctx.Value(pullingPodKey{}).(*credentialprovider.Pod)
	return p
}

// nodeCredentials is the keyring of credentials every pod of the node may use after its
// pull secrets: the node's docker config files, then the plugins' answers for the pod.
func nodeCredentials(ctx context.Context, node Keyring, plugins CredentialPlugins) Keyring {
	if plugins == nil {
		return node
	}
	return UnionKeyring{node, pluginKeyring{ctx: ctx, plugins: plugins, pod: pullingPod(ctx)}}
}
