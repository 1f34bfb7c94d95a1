package credentialprovider

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	kubeletconfigv1 "k8s.io/kubelet/config/v1"
	credentialproviderapi "k8s.io/kubelet/pkg/apis/credentialprovider"
	"k8s.io/utils/clock"
)

// authMap is a plugin response's auth: registry (glob, path or URL) to credentials. It is
// shared between callers and the cache, and never modified.
type authMap = map[string]credentialproviderapi.AuthConfig

// provider is one configured plugin with its cache (upstream's pluginProvider).
type provider struct {
	name        string
	matchImages []string
	// defaultCacheDuration applies when a response has no cacheDuration.
	defaultCacheDuration time.Duration
	// tokens is set in service-account token mode.
	tokens *tokenAttributes
	plugin *execPlugin
	clock  clock.Clock
	cache  *credentialCache
	// flights merges concurrent runs for the same request.
	flights flightGroup[*credentialproviderapi.CredentialProviderResponse]
}

func newProvider(binDir string, cfg *kubeletconfigv1.CredentialProvider, o *options, m *metrics) *provider {
	p := &provider{
		name:                 cfg.Name,
		matchImages:          cfg.MatchImages,
		defaultCacheDuration: cfg.DefaultCacheDuration.Duration,
		plugin:               newExecPlugin(binDir, cfg, o, m),
		clock:                o.clock,
		cache:                newCredentialCache(o.clock),
	}
	if ta := cfg.TokenAttributes; o.serviceAccountTokens && ta != nil && ta.ServiceAccountTokenAudience != "" {
		p.tokens = &tokenAttributes{
			audience:              ta.ServiceAccountTokenAudience,
			requireServiceAccount: *ta.RequireServiceAccount,
			requiredKeys:          ta.RequiredServiceAccountAnnotationKeys,
			optionalKeys:          ta.OptionalServiceAccountAnnotationKeys,
			cacheType:             ta.CacheType,
		}
	}
	return p
}

// matches tells whether image is one the plugin is to be asked about.
func (p *provider) matches(image string) bool {
	for _, m := range p.matchImages {
		if ok, _ := URLsMatch(m, image); ok {
			return true
		}
	}
	return false
}

// provide returns the plugin's credentials for image, from the cache or by running it,
// and the service account it was given a token of (nil: none). An image the plugin does
// not match, or a pod the plugin is not to be asked for in service-account token mode,
// gets no credentials and no error.
func (p *provider) provide(ctx context.Context, image string, pod Pod, access ServiceAccountAccess) (authMap, *ServiceAccountRef, error) {
	if !p.matches(image) {
		return nil, nil, nil
	}
	sa, err := p.serviceAccountRequest(ctx, image, pod, access)
	if err != nil || sa.skip {
		return nil, nil, err
	}
	if auth, ok := p.cache.lookup(image, sa.cacheKey); ok {
		return auth, sa.ref, nil
	}
	// The run is shared by concurrent callers and must not die with the first one's
	// context; only the exec timeout bounds it, as upstream.
	runCtx := context.WithoutCancel(ctx)
	response, err := p.flights.do(p.flightKey(image, sa), func() (*credentialproviderapi.CredentialProviderResponse, error) {
		return p.plugin.run(runCtx, image, sa.token, sa.annotations)
	})
	if err != nil {
		return nil, nil, fmt.Errorf("failed to get credential from external registry credential provider: %w", err)
	}
	if err := p.checkTokenNotEchoed(response, sa.token); err != nil {
		return nil, nil, err
	}
	base, err := cacheBaseKey(response.CacheKeyType, image)
	if err != nil {
		return nil, nil, err
	}
	if expiresAt, ok := p.expiry(response); ok {
		p.cache.add(cacheKey(base, sa.cacheKey), response.Auth, expiresAt)
	}
	return response.Auth, sa.ref, nil
}

// flightKey is the image, plus in service-account token mode the token's hash and the
// annotations: requests with different tokens are not merged.
func (p *provider) flightKey(image string, sa *saRequest) string {
	if sa.ref == nil {
		return image
	}
	var k keyBuilder
	return k.add(image).add(sa.tokenHash).addMap(sa.annotations).String()
}

// checkTokenNotEchoed refuses a response whose password is the service account token
// itself unless credentials are cached per token: cached per service account, the token
// of one pod would be handed to the pulls of others.
func (p *provider) checkTokenNotEchoed(response *credentialproviderapi.CredentialProviderResponse, token string) error {
	if token == "" || p.tokens.cacheType == kubeletconfigv1.TokenServiceAccountTokenCacheType {
		return nil
	}
	for _, auth := range response.Auth {
		if auth.Password == token {
			return errors.New("credential provider plugin returned the service account token as the password which is not allowed when service account cache type is not set to 'Token'")
		}
	}
	return nil
}

// cacheBaseKey is where a response is cached, by the plugin's cacheKeyType.
func cacheBaseKey(keyType credentialproviderapi.PluginCacheKeyType, image string) (string, error) {
	switch keyType {
	case credentialproviderapi.ImagePluginCacheKeyType:
		return image, nil
	case credentialproviderapi.RegistryPluginCacheKeyType:
		return registryOf(image), nil
	case credentialproviderapi.GlobalPluginCacheKeyType:
		return globalCacheKey, nil
	}
	return "", fmt.Errorf("credential provider plugin did not return a valid cacheKeyType: %s", keyType)
}

// expiry is when a response expires: after its cacheDuration, or the provider's
// defaultCacheDuration when it has none. ok is false when that duration is zero, which
// means the response is not cached.
func (p *provider) expiry(response *credentialproviderapi.CredentialProviderResponse) (expiresAt time.Time, ok bool) {
	d := p.defaultCacheDuration
	if response.CacheDuration != nil {
		d = response.CacheDuration.Duration
	}
	if d == 0 {
		return time.Time{}, false
	}
	return p.clock.Now().Add(d), true
}

// tokenAttributes is a provider's service-account token mode (its tokenAttributes).
type tokenAttributes struct {
	audience              string
	requireServiceAccount bool
	requiredKeys          []string
	optionalKeys          []string
	cacheType             kubeletconfigv1.ServiceAccountTokenCacheType
}

// saRequest is what service-account token mode adds to one request. It is empty when
// the provider is not in that mode, or the pod has no service account and the provider
// does not require one.
type saRequest struct {
	// skip: the plugin is not to be asked (no service account, or a required
	// annotation missing).
	skip        bool
	token       string
	tokenHash   string
	annotations map[string]string
	// cacheKey is the service account dimension of cache keys.
	cacheKey string
	ref      *ServiceAccountRef
}

// serviceAccountRequest gets, in service-account token mode, the pod's service account,
// its annotations the plugin wants and a token for the plugin's audience bound to the pod.
func (p *provider) serviceAccountRequest(ctx context.Context, image string, pod Pod, access ServiceAccountAccess) (*saRequest, error) {
	switch {
	case p.tokens == nil:
		return &saRequest{}, nil
	case pod.ServiceAccountName == "" && p.tokens.requireServiceAccount:
		klog.FromContext(ctx).V(5).Info("Service account name is empty", "provider", p.name, "image", image, "pod", klog.KRef(pod.Namespace, pod.Name), "podUID", pod.UID)
		return &saRequest{skip: true}, nil
	case pod.ServiceAccountName == "":
		// Allowed without one (static pods, say): the plugin is asked without a token.
		return &saRequest{}, nil
	}
	sa, err := access.getServiceAccount(pod.Namespace, pod.ServiceAccountName)
	if err != nil {
		return nil, fmt.Errorf("failed to get service account: %w", err)
	}
	annotations, err := p.tokens.annotationsOf(sa.Annotations)
	if err != nil {
		// A required annotation can be how a workload opts in, so its absence is no
		// error worth more than a verbose log.
		klog.FromContext(ctx).V(5).Error(err, "Failed to get service account data", "provider", p.name, "image", image, "pod", klog.KRef(pod.Namespace, pod.Name), "podUID", pod.UID, "serviceAccount", klog.KRef(pod.Namespace, pod.ServiceAccountName))
		return &saRequest{skip: true}, nil
	}
	token, err := access.getToken(pod.Namespace, pod.ServiceAccountName, p.tokens.tokenRequest(sa.UID, pod))
	if err != nil {
		return nil, fmt.Errorf("failed to get service account token: %w", err)
	}
	req := &saRequest{
		token:       token,
		tokenHash:   hashToken(token),
		annotations: annotations,
		ref:         &ServiceAccountRef{UID: string(sa.UID), Namespace: pod.Namespace, Name: pod.ServiceAccountName},
	}
	req.cacheKey = p.tokens.cacheKey(req)
	return req, nil
}

// annotationsOf picks the annotations the plugin wants; a missing required one is an
// error.
func (t *tokenAttributes) annotationsOf(annotations map[string]string) (map[string]string, error) {
	out := make(map[string]string, len(t.requiredKeys)+len(t.optionalKeys))
	for _, k := range t.requiredKeys {
		v, ok := annotations[k]
		if !ok {
			return nil, fmt.Errorf("required annotation %s not found", k)
		}
		out[k] = v
	}
	for _, k := range t.optionalKeys {
		if v, ok := annotations[k]; ok {
			out[k] = v
		}
	}
	return out, nil
}

// tokenRequest asks for a token with the plugin's audience bound to the pod. The
// expiration is left to the API server's default, as upstream.
func (t *tokenAttributes) tokenRequest(saUID types.UID, pod Pod) *authenticationv1.TokenRequest {
	return &authenticationv1.TokenRequest{
		ObjectMeta: metav1.ObjectMeta{UID: saUID},
		Spec: authenticationv1.TokenRequestSpec{
			Audiences: []string{t.audience},
			BoundObjectRef: &authenticationv1.BoundObjectReference{
				APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID,
			},
		},
	}
}

// cacheKey is the service account dimension of the cache: its namespace, name, UID and
// the annotations passed, plus the token's hash when credentials are cached per token.
// The pod is not part of it: pods of one service account share credentials.
func (t *tokenAttributes) cacheKey(req *saRequest) string {
	var k keyBuilder
	k.add(req.ref.Namespace).add(req.ref.Name).add(req.ref.UID).addMap(req.annotations)
	if t.cacheType == kubeletconfigv1.TokenServiceAccountTokenCacheType {
		k.add("token").add(req.tokenHash)
	}
	return k.String()
}

// hashToken keeps tokens out of keys held in memory.
func hashToken(token string) string {
	if token == "" {
		return ""
	}
	return fmt.Sprintf("sha256:%x", sha256.Sum256([]byte(token)))
}
