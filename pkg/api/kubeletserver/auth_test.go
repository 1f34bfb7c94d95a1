package kubeletserver

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stesting "k8s.io/client-go/testing"
)

// allowAll allows every SubjectAccessReview.
func allowAll(authorizationv1.SubjectAccessReviewSpec) bool { return true }

func TestClientCertificates(t *testing.T) {
	ca, other := newTestCA(t, "client-ca"), newTestCA(t, "other-ca")
	rv := &reviews{allow: allowAll}
	o := defaultOptions(t)
	o.ClientCAFile = writeFile(t, t.TempDir(), "ca.crt", ca.pem)
	s := startServer(t, o, Deps{Client: rv.client()})

	good := do(t, client(ca.clientCert(t, "system:kube-apiserver", "system:masters", "team-a")), "GET", base(s)+"/pods", "")
	if good.code != http.StatusOK {
		t.Fatalf("cert from the client CA: %d %q", good.code, good.body)
	}
	sar := rv.lastSAR()
	// (DER sorts the organizations; system:authenticated comes last.)
	if sar.User != "system:kube-apiserver" || !slices.Equal(sar.Groups, []string{"team-a", "system:masters", "system:authenticated"}) {
		t.Errorf("user from the certificate: %q %v, want CN and O (+system:authenticated)", sar.User, sar.Groups)
	}
	if id := sar.Extra[credentialIDExtraKey]; len(id) != 1 || !strings.HasPrefix(id[0], "X509SHA256=") {
		t.Errorf("credential id extra: %v", sar.Extra)
	}
	for name, cert := range map[string]tls.Certificate{
		"another CA": other.clientCert(t, "system:kube-apiserver", "system:masters"),
		"no CN":      ca.clientCert(t, "", "system:masters"),
	} {
		if r := do(t, client(cert), "GET", base(s)+"/pods", ""); r.code != http.StatusUnauthorized || r.body != "Unauthorized" {
			t.Errorf("%s: %d %q, want 401 Unauthorized", name, r.code, r.body)
		}
	}
}

func TestClientCAFileReloaded(t *testing.T) {
	first, second := newTestCA(t, "first"), newTestCA(t, "second")
	o := defaultOptions(t)
	o.AuthorizationMode = "AlwaysAllow"
	o.ClientCAFile = writeFile(t, t.TempDir(), "ca.crt", first.pem)
	s := startServer(t, o, Deps{Client: (&reviews{}).client()})
	cert := second.clientCert(t, "admin")
	if r := do(t, client(cert), "GET", base(s)+"/pods", ""); r.code != http.StatusUnauthorized {
		t.Fatalf("before the reload: %d", r.code)
	}
	writeFile(t, "", o.ClientCAFile, second.pem)
	for _, w := range s.watchers {
		w.check()
	}
	// A new connection, and a Go client that sends a certificate only for a CA the
	// server names in its handshake: the advertised CAs follow the file too.
	goClient := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true, Certificates: []tls.Certificate{cert}}}}
	if r := do(t, goClient, "GET", base(s)+"/pods", ""); r.code != http.StatusOK {
		t.Fatalf("after the reload: %d %q", r.code, r.body)
	}
}

func TestBearerTokensReviewedOncePerTTL(t *testing.T) {
	rv := &reviews{allow: allowAll, tokens: map[string]authenticationv1.UserInfo{
		"good": {Username: "alice", UID: "u1", Groups: []string{"devs"}, Extra: map[string]authenticationv1.ExtraValue{"scopes": {"a"}}},
	}}
	o := defaultOptions(t)
	o.TokenCacheTTL = time.Minute
	s := startServer(t, o, Deps{Client: rv.client()})
	now := time.Now()
	s.authnForTest().tokens.cache.now = func() time.Time { return now }
	c := client()
	for range 3 {
		if r := do(t, c, "GET", base(s)+"/pods", "good"); r.code != http.StatusOK {
			t.Fatalf("good token: %d %q", r.code, r.body)
		}
	}
	if n, _ := rv.counts(); n != 1 {
		t.Fatalf("%d token reviews for three requests within the TTL, want 1", n)
	}
	sar := rv.lastSAR()
	if sar.User != "alice" || sar.UID != "u1" || !slices.Equal(sar.Groups, []string{"devs", "system:authenticated"}) || sar.Extra["scopes"][0] != "a" {
		t.Errorf("user from the token review: %+v", sar)
	}
	for range 2 {
		if r := do(t, c, "GET", base(s)+"/pods", "bad"); r.code != http.StatusUnauthorized || r.body != "Unauthorized" {
			t.Fatalf("bad token: %d %q", r.code, r.body)
		}
	}
	if n, _ := rv.counts(); n != 2 {
		t.Fatalf("%d token reviews, want 2: a rejected token is remembered for the TTL too", n)
	}
	now = now.Add(time.Minute + time.Second)
	do(t, c, "GET", base(s)+"/pods", "good")
	if n, _ := rv.counts(); n != 3 {
		t.Fatalf("%d token reviews after the TTL, want 3", n)
	}
}

func TestConcurrentRequestsShareOneTokenReview(t *testing.T) {
	var calls atomic.Int32
	release := make(chan struct{})
	rv := &reviews{}
	c := rv.client()
	c.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		calls.Add(1)
		<-release
		tr := a.(k8stesting.CreateAction).GetObject().(*authenticationv1.TokenReview).DeepCopy()
		tr.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{Username: "bob"}}
		return true, tr, nil
	})
	tr, err := newTokenReviewer(c.AuthenticationV1().TokenReviews(), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 5 {
		wg.Go(func() {
			if u, err := tr.review(context.Background(), "tok"); err != nil || u == nil || u.Name != "bob" {
				t.Errorf("review: %v %v", u, err)
			}
		})
	}
	time.Sleep(50 * time.Millisecond)
	close(release)
	wg.Wait()
	if n := calls.Load(); n != 1 {
		t.Fatalf("%d reviews for five concurrent requests, want 1", n)
	}
}

func TestTransientReviewErrorsRetriedNotCached(t *testing.T) {
	var calls atomic.Int32
	c := (&reviews{}).client()
	c.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if calls.Add(1) == 1 {
			return true, nil, apierrors.NewInternalError(errTest)
		}
		if calls.Load() == 2 {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "tokenreviews"}, "", errTest)
		}
		tr := a.(k8stesting.CreateAction).GetObject().(*authenticationv1.TokenReview).DeepCopy()
		tr.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{Username: "bob"}}
		return true, tr, nil
	})
	tr, _ := newTokenReviewer(c.AuthenticationV1().TokenReviews(), time.Minute)
	// A 500 is retried; the 403 that follows is final and not remembered.
	if _, err := tr.review(context.Background(), "tok"); !apierrors.IsForbidden(err) {
		t.Fatalf("got %v, want the forbidden error after one retry", err)
	}
	if u, err := tr.review(context.Background(), "tok"); err != nil || u.Name != "bob" {
		t.Fatalf("second review: %v %v (errors must not be cached)", u, err)
	}
	if n := calls.Load(); n != 3 {
		t.Fatalf("%d calls, want 3", n)
	}
}

var errTest = &testError{}

type testError struct{}

func (*testError) Error() string { return "test error" }

func TestWebSocketProtocolToken(t *testing.T) {
	rv := &reviews{allow: allowAll, tokens: map[string]authenticationv1.UserInfo{"good": {Username: "alice"}}}
	o := defaultOptions(t)
	a, err := newAuthenticator(o, rv.client(), nil)
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest("GET", "/exec/ns/p/c", nil)
	r.Header.Set("Upgrade", "websocket")
	r.Header.Set("Connection", "Upgrade")
	r.Header.Set("Sec-WebSocket-Protocol", "v5.channel.k8s.io, "+bearerProtocolPrefix+base64.RawURLEncoding.EncodeToString([]byte("good")))
	u, err := a.authenticate(r)
	if err != nil || u.Name != "alice" {
		t.Fatalf("got %v %v", u, err)
	}
	if got := r.Header.Get("Sec-WebSocket-Protocol"); got != "v5.channel.k8s.io" {
		t.Errorf("protocols left for the handler: %q", got)
	}
}

func TestAnonymous(t *testing.T) {
	rv := &reviews{allow: func(s authorizationv1.SubjectAccessReviewSpec) bool { return s.User == anonymousUser }}
	off := defaultOptions(t)
	if off.Anonymous {
		t.Fatal("anonymous must be off by default")
	}
	s := startServer(t, off, Deps{Client: rv.client()})
	if r := do(t, client(), "GET", base(s)+"/pods", ""); r.code != http.StatusUnauthorized || r.body != "Unauthorized" {
		t.Fatalf("anonymous off: %d %q", r.code, r.body)
	}

	on := defaultOptions(t)
	on.Anonymous = true
	s = startServer(t, on, Deps{Client: rv.client()})
	if r := do(t, client(), "GET", base(s)+"/pods", ""); r.code != http.StatusOK {
		t.Fatalf("anonymous on: %d %q", r.code, r.body)
	}
	if sar := rv.lastSAR(); sar.User != anonymousUser || !slices.Equal(sar.Groups, []string{unauthenticatedGroup}) {
		t.Errorf("anonymous user: %+v", sar)
	}
	// Credentials that fail are refused, never downgraded to anonymous.
	if r := do(t, client(), "GET", base(s)+"/pods", "bad"); r.code != http.StatusUnauthorized {
		t.Fatalf("bad token with anonymous on: %d", r.code)
	}
}

func TestNoAuthenticationMethod(t *testing.T) {
	o := defaultOptions(t)
	o.WebhookAuthentication = false
	o.AuthorizationMode = "AlwaysAllow"
	if _, err := New(o, Deps{Host: &fakeHost{}}); err == nil || err.Error() != "no authentication method configured" {
		t.Fatalf("got %v", err)
	}
	o.WebhookAuthentication = true
	if _, err := New(o, Deps{Host: &fakeHost{}}); err == nil || !strings.Contains(err.Error(), "cannot use webhook authentication") {
		t.Fatalf("webhook without a client: %v", err)
	}
	o.WebhookAuthentication, o.Anonymous, o.AuthorizationMode = false, true, "Webhook"
	if _, err := New(o, Deps{Host: &fakeHost{}}); err == nil || !strings.Contains(err.Error(), "cannot use webhook authorization") {
		t.Fatalf("webhook authorization without a client: %v", err)
	}
	o.AuthorizationMode = "RBAC"
	if _, err := New(o, Deps{Host: &fakeHost{}, Client: (&reviews{}).client()}); err == nil || err.Error() != "unknown authorization mode RBAC" {
		t.Fatalf("unknown mode: %v", err)
	}
}

// TestForbiddenBeforeAnyHandler: a caller without the right subresource gets 403 with
// upstream's message, and neither the pod list nor a streaming handler runs.
func TestForbiddenBeforeAnyHandler(t *testing.T) {
	rv := &reviews{tokens: map[string]authenticationv1.UserInfo{"tok": {Username: "eve"}},
		allow: func(s authorizationv1.SubjectAccessReviewSpec) bool {
			return s.ResourceAttributes.Subresource == "stats"
		}}
	host := &fakeHost{}
	var execCalls atomic.Int32
	exec := http.HandlerFunc(func(http.ResponseWriter, *http.Request) { execCalls.Add(1) })
	s := startServer(t, defaultOptions(t), Deps{Host: host, Client: rv.client(), Exec: exec,
		Stats: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("stats")) })})
	c := client()
	for path, want := range map[string]string{
		"/pods":                  "Forbidden (user=eve, verb=get, resource=nodes, subresource(s)=[pods proxy])\n",
		"/exec/ns/pod/ctr?cmd=x": "Forbidden (user=eve, verb=create, resource=nodes, subresource(s)=[proxy])\n",
		"/nosuchpath":            "Forbidden (user=eve, verb=create, resource=nodes, subresource(s)=[proxy])\n",
	} {
		r := do(t, c, "POST", base(s)+path, "tok")
		if r.code != http.StatusForbidden || r.body != strings.Replace(want, "verb=get", "verb=create", 1) {
			t.Errorf("%s: %d %q", path, r.code, r.body)
		}
	}
	if r := do(t, c, "GET", base(s)+"/pods", "tok"); r.code != http.StatusForbidden || r.body != "Forbidden (user=eve, verb=get, resource=nodes, subresource(s)=[pods proxy])\n" {
		t.Errorf("GET /pods: %d %q", r.code, r.body)
	}
	if host.calls() != 0 || execCalls.Load() != 0 {
		t.Fatalf("handlers ran before authorization: pods %d, exec %d", host.calls(), execCalls.Load())
	}
	if r := do(t, c, "GET", base(s)+"/stats/summary", "tok"); r.code != http.StatusOK || r.body != "stats" {
		t.Errorf("allowed subresource: %d %q", r.code, r.body)
	}
}

// TestFineGrainedFallback: nodes/pods allows /pods; without it nodes/proxy still does.
func TestFineGrainedFallback(t *testing.T) {
	for _, granted := range []string{"pods", "proxy"} {
		rv := &reviews{tokens: map[string]authenticationv1.UserInfo{"tok": {Username: "u"}},
			allow: func(s authorizationv1.SubjectAccessReviewSpec) bool {
				return s.ResourceAttributes.Subresource == granted
			}}
		s := startServer(t, defaultOptions(t), Deps{Client: rv.client()})
		if r := do(t, client(), "GET", base(s)+"/pods", "tok"); r.code != http.StatusOK {
			t.Errorf("nodes/%s: GET /pods %d %q", granted, r.code, r.body)
		}
	}
}

func TestAuthorizationAnswersCached(t *testing.T) {
	rv := &reviews{tokens: map[string]authenticationv1.UserInfo{"tok": {Username: "u"}},
		allow: func(s authorizationv1.SubjectAccessReviewSpec) bool {
			return s.ResourceAttributes.Subresource == "stats"
		}}
	o := defaultOptions(t)
	o.CacheAuthorizedTTL, o.CacheUnauthorizedTTL = 5*time.Minute, 30*time.Second
	s := startServer(t, o, Deps{Client: rv.client(), Stats: http.NotFoundHandler()})
	now := time.Now()
	s.authzForTest().cache.now = func() time.Time { return now }
	c := client()
	for range 3 {
		do(t, c, "GET", base(s)+"/stats/summary", "tok") // allowed
		do(t, c, "GET", base(s)+"/metrics", "tok")       // denied
	}
	if _, n := rv.counts(); n != 2 {
		t.Fatalf("%d reviews, want 2 (one allowed, one denied, each cached)", n)
	}
	now = now.Add(31 * time.Second)
	do(t, c, "GET", base(s)+"/stats/summary", "tok")
	do(t, c, "GET", base(s)+"/metrics", "tok")
	if _, n := rv.counts(); n != 3 {
		t.Fatalf("%d reviews after 31s, want 3: only the denial expired", n)
	}
	spec := rv.lastSAR()
	want := authorizationv1.ResourceAttributes{Verb: "get", Version: "v1", Resource: "nodes", Subresource: "metrics", Name: testNode}
	if *spec.ResourceAttributes != want {
		t.Errorf("review attributes %+v, want %+v", *spec.ResourceAttributes, want)
	}
}

func TestAuthorizationErrorIs500(t *testing.T) {
	c := (&reviews{tokens: map[string]authenticationv1.UserInfo{"tok": {Username: "u"}}}).client()
	c.PrependReactor("create", "subjectaccessreviews", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewBadRequest("nope")
	})
	s := startServer(t, defaultOptions(t), Deps{Client: c})
	r := do(t, client(), "GET", base(s)+"/pods", "tok")
	if r.code != http.StatusInternalServerError || r.body != "Authorization error (user=u, verb=get, resource=nodes, subresource=pods)" {
		t.Fatalf("%d %q", r.code, r.body)
	}
}

func TestClientCertUID(t *testing.T) {
	ca := newTestCA(t, "ca")
	key := newKey(t)
	subject := pkix.Name{CommonName: "carol", ExtraNames: []pkix.AttributeTypeAndValue{{Type: uidOID, Value: "uid-7"}}}
	block, _ := pem.Decode(ca.sign(t, &x509.Certificate{Subject: subject}, &key.PublicKey, x509.ExtKeyUsageClientAuth))
	leaf, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	b := &caBundle{}
	if err := b.set(ca.pem); err != nil {
		t.Fatal(err)
	}
	a := &authenticator{clientCAs: b.Pool}
	r := httptest.NewRequest("GET", "/pods", nil)
	r.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{leaf}}
	if u, err := a.fromClientCert(r); err != nil || u.Name != "carol" || u.UID != "uid-7" {
		t.Fatalf("got %+v %v", u, err)
	}
	// A server-only certificate is not a client credential.
	block, _ = pem.Decode(ca.sign(t, &x509.Certificate{Subject: pkix.Name{CommonName: "srv"}}, &key.PublicKey, x509.ExtKeyUsageServerAuth))
	leaf, _ = x509.ParseCertificate(block.Bytes)
	r.TLS.PeerCertificates = []*x509.Certificate{leaf}
	if _, err := a.fromClientCert(r); err == nil || !strings.Contains(err.Error(), "verifying certificate SN=") {
		t.Fatalf("server certificate: %v", err)
	}
}

func TestCacheBounded(t *testing.T) {
	c := newTTLCache[int]()
	now := time.Now()
	c.now = func() time.Time { return now }
	for i := range maxCacheEntries + 10 {
		ttl := time.Minute
		if i%2 == 0 {
			ttl = time.Second
		}
		c.get(strconv.Itoa(i), func() (int, time.Duration, error) { return i, ttl, nil })
		if i == maxCacheEntries/2 {
			now = now.Add(2 * time.Second) // the short-lived half so far expires
		}
	}
	if len(c.entries) > maxCacheEntries {
		t.Fatalf("%d entries, bound %d", len(c.entries), maxCacheEntries)
	}
	fetched := false
	if v, _ := c.get(strconv.Itoa(maxCacheEntries+9), func() (int, time.Duration, error) { fetched = true; return 0, 0, nil }); v != maxCacheEntries+9 || fetched {
		t.Error("the newest entry was evicted")
	}
}
