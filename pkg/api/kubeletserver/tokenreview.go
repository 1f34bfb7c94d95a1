package kubeletserver

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/util/wait"
	authenticationclient "k8s.io/client-go/kubernetes/typed/authentication/v1"
	"k8s.io/klog/v2"
)

// reviewTimeout bounds one token review, shared by every request waiting on it
// (upstream's cached authenticator uses the same 30 seconds).
const reviewTimeout = 30 * time.Second

// webhookBackoff is upstream's retry schedule for authentication and authorization
// webhooks: five tries, 500ms growing by half each time, 20% jitter.
var webhookBackoff = wait.Backoff{Duration: 500 * time.Millisecond, Factor: 1.5, Jitter: 0.2, Steps: 5}

// tokenReviewer authenticates bearer tokens with the TokenReview API and remembers each
// answer for the cache TTL, accepted or rejected alike, as upstream does (failures to ask
// are not remembered). Tokens are kept only as keyed hashes.
type tokenReviewer struct {
	client  authenticationclient.TokenReviewInterface
	ttl     time.Duration
	cache   *ttlCache[*UserInfo]
	hashKey []byte
}

func newTokenReviewer(client authenticationclient.TokenReviewInterface, ttl time.Duration) (*tokenReviewer, error) {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, err
	}
	return &tokenReviewer{client: client, ttl: ttl, cache: newTTLCache[*UserInfo](), hashKey: key}, nil
}

// review returns the token's user, nil when the API server says the token is not valid,
// or an error when it could not be asked or gave a reason for refusing.
func (t *tokenReviewer) review(ctx context.Context, token string) (*UserInfo, error) {
	mac := hmac.New(sha256.New, t.hashKey)
	mac.Write([]byte(token))
	key := hex.EncodeToString(mac.Sum(nil))
	u, err := t.cache.get(key, func() (*UserInfo, time.Duration, error) {
		u, err := t.ask(token)
		return u, t.ttl, err
	})
	if err != nil || u == nil {
		return nil, err
	}
	cp := *u
	return &cp, nil
}

// ask sends one TokenReview (with retries on transient errors). It does not use the
// request's context: other requests with the same token may be waiting on the answer.
func (t *tokenReviewer) ask(token string) (*UserInfo, error) {
	ctx, cancel := context.WithTimeout(context.Background(), reviewTimeout)
	defer cancel()
	var result *authenticationv1.TokenReview
	err := withWebhookRetry(ctx, func() error {
		var err error
		result, err = t.client.Create(ctx, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
		return err
	})
	if err != nil {
		klog.ErrorS(err, "Failed to make webhook authenticator request")
		return nil, err
	}
	st := result.Status
	if !st.Authenticated {
		if st.Error != "" {
			return nil, errors.New(st.Error)
		}
		return nil, nil
	}
	var extra map[string][]string
	if len(st.User.Extra) > 0 {
		extra = make(map[string][]string, len(st.User.Extra))
		for k, v := range st.User.Extra {
			extra[k] = v
		}
	}
	return &UserInfo{Name: st.User.Username, UID: st.User.UID, Groups: st.User.Groups, Extra: extra}, nil
}

// withWebhookRetry calls fn until it succeeds, fails for good, or the back-off runs out;
// it retries only what upstream deems transient.
func withWebhookRetry(ctx context.Context, fn func() error) error {
	var lastErr error
	err := wait.ExponentialBackoffWithContext(ctx, webhookBackoff, func(context.Context) (bool, error) {
		lastErr = fn()
		switch {
		case lastErr == nil:
			return true, nil
		case retriable(lastErr):
			return false, nil
		default:
			return false, lastErr
		}
	})
	switch {
	case lastErr != nil:
		return lastErr
	case err != nil:
		return fmt.Errorf("webhook call failed: %w", err)
	}
	return nil
}

// retriable: connection resets, lost HTTP/2 connections, 500s, timeouts, 429s and any
// answer with Retry-After.
func retriable(err error) bool {
	if utilnet.IsConnectionReset(err) || utilnet.IsHTTP2ConnectionLost(err) || apierrors.IsInternalError(err) ||
		apierrors.IsTimeout(err) || apierrors.IsTooManyRequests(err) {
		return true
	}
	_, retry := apierrors.SuggestsClientDelay(err)
	return retry
}
