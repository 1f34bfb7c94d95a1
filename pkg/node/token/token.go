// Package token keeps the service-account tokens that projected volumes
// hand to pods, as upstream's kubelet token manager does: tokens come from
// the TokenRequest API, are cached per request, refreshed before they
// expire, and dropped when their pod goes away or they expire.
package token

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

const (
	// maxTTL is the age after which a token is refreshed however long it
	// still has to live, so that long-lived tokens still rotate daily.
	maxTTL = 24 * time.Hour
	// refreshPercent of a token's lifetime left triggers a refresh: a token
	// is renewed once 80 % of its lifetime has passed.
	refreshPercent = 20
	// maxJitter spreads refreshes of tokens created together.
	maxJitter = 10 * time.Second
	// CleanupPeriod is how often RunCleanup drops expired tokens.
	CleanupPeriod = time.Minute
	// defaultExpirationSeconds is the API's default for
	// serviceAccountToken.expirationSeconds and TokenRequest.
	defaultExpirationSeconds int64 = 3600
	// defaultServiceAccount is the service account of a pod naming none.
	defaultServiceAccount = "default"
)

// CreateFunc asks the API server for a token of a service account:
// ServiceAccounts(namespace).CreateToken(serviceAccount, tr).
type CreateFunc func(ctx context.Context, namespace, serviceAccount string, tr *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error)

// Manager caches service-account tokens of the node's pods.
type Manager struct {
	create CreateFunc
	clock  clock.Clock
	// jitter returns how much earlier than due a token is refreshed;
	// random in [0, maxJitter) and replaced in tests.
	jitter func() time.Duration

	mu    sync.Mutex
	cache map[string]*authenticationv1.TokenRequest
}

// NewManager returns a Manager that requests tokens with create and reads
// time from clk.
func NewManager(create CreateFunc, clk clock.Clock) *Manager {
	return &Manager{
		create: create,
		clock:  clk,
		jitter: randomJitter,
		cache:  make(map[string]*authenticationv1.TokenRequest),
	}
}

// NewManagerForClient returns a Manager that requests tokens from the API
// server through client. A nil client (standalone mode) makes every request
// fail, as upstream's.
func NewManagerForClient(client kubernetes.Interface, clk clock.Clock) *Manager {
	create := func(ctx context.Context, namespace, serviceAccount string, tr *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error) {
		if client == nil {
			return nil, errors.New("cannot use TokenManager when kubelet is in standalone mode")
		}
		return client.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, serviceAccount, tr, metav1.CreateOptions{})
	}
	return NewManager(create, clk)
}

func randomJitter() time.Duration {
	return time.Duration(rand.Float64()*maxJitter.Seconds()) * time.Second
}

// GetServiceAccountToken returns a token for the service account
// namespace/name as requested by tr: the cached one while it is fresh,
// otherwise a new one from the API. If the API fails and the cached token
// has not expired yet, the cached token is returned and the error logged, so
// a short API outage does not break pods.
func (m *Manager) GetServiceAccountToken(ctx context.Context, namespace, name string, tr *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error) {
	key := cacheKey(namespace, name, tr)
	cached, ok := m.get(key)
	if ok && !m.requiresRefresh(ctx, cached) {
		return cached, nil
	}

	fresh, err := m.create(ctx, namespace, name, tr)
	if err != nil {
		switch {
		case !ok:
			return nil, fmt.Errorf("failed to fetch token: %w", err)
		case m.expired(cached):
			return nil, fmt.Errorf("token %s expired and refresh failed: %w", key, err)
		default:
			klog.FromContext(ctx).Error(err, "Couldn't update token", "cacheKey", key)
			return cached, nil
		}
	}
	m.set(key, fresh)
	return fresh, nil
}

// ServiceAccountToken returns the token a projected serviceAccountToken
// source src of pod asks for: bound to the pod, for src's audience (the API
// server's default audiences when empty) and lifetime.
func (m *Manager) ServiceAccountToken(ctx context.Context, pod *v1.Pod, src *v1.ServiceAccountTokenProjection) ([]byte, error) {
	if src == nil {
		return nil, errors.New("no serviceAccountToken projection given")
	}
	serviceAccount := pod.Spec.ServiceAccountName
	if serviceAccount == "" {
		serviceAccount = defaultServiceAccount
	}
	tr, err := m.GetServiceAccountToken(ctx, pod.Namespace, serviceAccount, podTokenRequest(pod, src))
	if err != nil {
		return nil, err
	}
	return []byte(tr.Status.Token), nil
}

// podTokenRequest builds the TokenRequest for src bound to pod, as
// upstream's projected volume plugin does.
func podTokenRequest(pod *v1.Pod, src *v1.ServiceAccountTokenProjection) *authenticationv1.TokenRequest {
	var audiences []string
	if src.Audience != "" {
		audiences = []string{src.Audience}
	}
	expiration := defaultExpirationSeconds
	if src.ExpirationSeconds != nil {
		expiration = *src.ExpirationSeconds
	}
	return &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{
			Audiences:         audiences,
			ExpirationSeconds: &expiration,
			BoundObjectRef: &authenticationv1.BoundObjectReference{
				APIVersion: "v1",
				Kind:       "Pod",
				Name:       pod.Name,
				UID:        pod.UID,
			},
		},
	}
}

// DeleteServiceAccountToken forgets the tokens bound to the pod podUID; it
// is called when the pod's volumes are torn down.
func (m *Manager) DeleteServiceAccountToken(podUID types.UID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for key, tr := range m.cache {
		if ref := tr.Spec.BoundObjectRef; ref != nil && ref.UID == podUID {
			delete(m.cache, key)
		}
	}
}

// RunCleanup drops expired tokens every CleanupPeriod until ctx is done.
// Tokens of pods that went away without a DeleteServiceAccountToken expire
// and are dropped here.
func (m *Manager) RunCleanup(ctx context.Context) {
	timer := m.clock.NewTimer(CleanupPeriod)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C():
			m.dropExpired()
			timer.Reset(CleanupPeriod)
		}
	}
}

func (m *Manager) dropExpired() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for key, tr := range m.cache {
		if m.expired(tr) {
			delete(m.cache, key)
		}
	}
}

func (m *Manager) get(key string) (*authenticationv1.TokenRequest, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	tr, ok := m.cache[key]
	return tr, ok
}

func (m *Manager) set(key string, tr *authenticationv1.TokenRequest) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.cache[key] = tr
}

func (m *Manager) expired(tr *authenticationv1.TokenRequest) bool {
	return m.clock.Now().After(tr.Status.ExpirationTimestamp.Time)
}

// requiresRefresh reports whether tr is older than 80 % of its lifetime or
// than maxTTL, each brought forward by a small jitter. The lifetime is the
// server's answer: Spec.ExpirationSeconds before Status.ExpirationTimestamp.
func (m *Manager) requiresRefresh(ctx context.Context, tr *authenticationv1.TokenRequest) bool {
	if tr.Spec.ExpirationSeconds == nil {
		redacted := tr.DeepCopy()
		redacted.Status.Token = ""
		klog.FromContext(ctx).Error(nil, "Expiration seconds was nil for token request", "tokenRequest", redacted)
		return false
	}
	now := m.clock.Now()
	lifetime := time.Duration(*tr.Spec.ExpirationSeconds) * time.Second
	expires := tr.Status.ExpirationTimestamp.Time
	issued := expires.Add(-lifetime)
	jitter := m.jitter()

	if now.After(issued.Add(maxTTL - jitter)) {
		return true
	}
	refreshAt := expires.Add(-lifetime*refreshPercent/100 - jitter)
	return now.After(refreshAt)
}

// cacheKey identifies a token request; it holds no secret and may be logged.
// tr.UID, when set, is the service account's UID precondition: a service
// account re-created under the same name gets new tokens.
func cacheKey(namespace, name string, tr *authenticationv1.TokenRequest) string {
	var expiration int64
	if tr.Spec.ExpirationSeconds != nil {
		expiration = *tr.Spec.ExpirationSeconds
	}
	var ref authenticationv1.BoundObjectReference
	if tr.Spec.BoundObjectRef != nil {
		ref = *tr.Spec.BoundObjectRef
	}
	return fmt.Sprintf("%q/%q/%q/%d/%q/%q/%q/%q/%q", name, namespace, tr.Spec.Audiences, expiration,
		ref.APIVersion, ref.Kind, ref.Name, ref.UID, tr.UID)
}
