package kubeletserver

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	authorizationclient "k8s.io/client-go/kubernetes/typed/authorization/v1"
	"k8s.io/klog/v2"
)

// Attributes describe one request to the kubelet API as a request on the Node: verb from
// the HTTP method, resource nodes, name the node, subresource from the path.
type Attributes struct {
	User        *UserInfo
	Verb        string
	APIVersion  string
	Resource    string
	Subresource string
	Name        string
	// Path is the request path, for logs.
	Path string
}

// Decision is an authorizer's answer.
type Decision int

const (
	// DecisionNoOpinion: neither allowed nor denied, which refuses the request.
	DecisionNoOpinion Decision = iota
	DecisionAllow
	DecisionDeny
)

// Authorizer decides whether a request may go on.
type Authorizer interface {
	Authorize(ctx context.Context, a Attributes) (Decision, string, error)
}

// alwaysAllow is authorization mode AlwaysAllow.
type alwaysAllow struct{}

func (alwaysAllow) Authorize(context.Context, Attributes) (Decision, string, error) {
	return DecisionAllow, "", nil
}

// Kubelet API paths whose subresource differs from the default "proxy".
const (
	podsPath          = "/pods"
	allocatedPodsPath = "/allocatedPods"
	runningPodsPath   = "/runningpods/"
	healthzPath       = "/healthz"
	configzPath       = "/configz"
	statsPath         = "/stats/"
	metricsPath       = "/metrics"
	logsPath          = "/logs/"
	checkpointPath    = "/checkpoint/"
	statuszPath       = "/statusz"
	flagzPath         = "/flagz"
)

// isSubpath reports whether p is path or below it (path's trailing slash ignored).
func isSubpath(p, path string) bool {
	path = strings.TrimSuffix(path, "/")
	return p == path || (strings.HasPrefix(p, path) && len(p) > len(path) && p[len(path)] == '/')
}

// verbFor maps the HTTP method to the API verb, as upstream: unknown methods get "".
func verbFor(method string) string {
	switch method {
	case http.MethodGet:
		return "get"
	case http.MethodPost:
		return "create"
	case http.MethodPut:
		return "update"
	case http.MethodPatch:
		return "patch"
	case http.MethodDelete:
		return "delete"
	}
	return ""
}

// subresourcesFor lists the node subresources a request path is checked against, most
// specific first. With upstream's fine-grained authorization (GA in 1.36) /pods,
// /runningpods, /healthz and /configz are checked as their own subresource and, failing
// that, as nodes/proxy, so callers granted only nodes/proxy keep working.
func subresourcesFor(p string) []string {
	var subs []string
	switch {
	case isSubpath(p, allocatedPodsPath), isSubpath(p, podsPath), isSubpath(p, runningPodsPath):
		subs = append(subs, "pods")
	case isSubpath(p, healthzPath):
		subs = append(subs, "healthz")
	case isSubpath(p, configzPath):
		subs = append(subs, "configz")
	}
	switch {
	case isSubpath(p, statsPath):
		return append(subs, "stats")
	case isSubpath(p, metricsPath):
		return append(subs, "metrics")
	case isSubpath(p, logsPath):
		return append(subs, "log")
	case isSubpath(p, checkpointPath):
		return append(subs, "checkpoint")
	case isSubpath(p, statuszPath):
		return append(subs, "statusz")
	case isSubpath(p, flagzPath):
		return append(subs, "configz")
	}
	return append(subs, "proxy")
}

// RequestAttributes are the attributes a request is authorized with, one per
// subresource it may be allowed by (see subresourcesFor).
func RequestAttributes(nodeName string, u *UserInfo, r *http.Request) []Attributes {
	verb := verbFor(r.Method)
	var attrs []Attributes
	for _, sub := range subresourcesFor(r.URL.Path) {
		attrs = append(attrs, Attributes{User: u, Verb: verb, APIVersion: "v1", Resource: "nodes", Subresource: sub, Name: nodeName, Path: r.URL.Path})
	}
	return attrs
}

// sarAuthorizer asks the SubjectAccessReview API and remembers answers: allowed ones for
// cacheAuthorizedTTL, the others for cacheUnauthorizedTTL. Failures to ask are not
// remembered.
type sarAuthorizer struct {
	client          authorizationclient.SubjectAccessReviewInterface
	allowedTTL      time.Duration
	unauthorizedTTL time.Duration
	cache           *ttlCache[authorizationv1.SubjectAccessReviewStatus]
}

func newSARAuthorizer(client authorizationclient.SubjectAccessReviewInterface, allowedTTL, unauthorizedTTL time.Duration) *sarAuthorizer {
	return &sarAuthorizer{client: client, allowedTTL: allowedTTL, unauthorizedTTL: unauthorizedTTL,
		cache: newTTLCache[authorizationv1.SubjectAccessReviewStatus]()}
}

func (s *sarAuthorizer) Authorize(ctx context.Context, a Attributes) (Decision, string, error) {
	spec := reviewSpec(a)
	key, err := json.Marshal(spec)
	if err != nil {
		return DecisionNoOpinion, "", err
	}
	st, err := s.cache.get(string(key), func() (authorizationv1.SubjectAccessReviewStatus, time.Duration, error) {
		// Concurrent requests with the same attributes share this review: it must not
		// end when the first of them goes away.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), reviewTimeout)
		defer cancel()
		st, err := s.ask(ctx, spec)
		if st.Allowed {
			return st, s.allowedTTL, err
		}
		return st, s.unauthorizedTTL, err
	})
	if err != nil {
		return DecisionNoOpinion, "", err
	}
	switch {
	case st.Allowed && st.Denied:
		return DecisionDeny, st.Reason, errors.New("webhook subject access review returned both allow and deny response")
	case st.Denied:
		return DecisionDeny, st.Reason, nil
	case st.Allowed:
		return DecisionAllow, st.Reason, nil
	}
	return DecisionNoOpinion, st.Reason, nil
}

func (s *sarAuthorizer) ask(ctx context.Context, spec authorizationv1.SubjectAccessReviewSpec) (authorizationv1.SubjectAccessReviewStatus, error) {
	var result *authorizationv1.SubjectAccessReview
	err := withWebhookRetry(ctx, func() error {
		var err error
		result, err = s.client.Create(ctx, &authorizationv1.SubjectAccessReview{Spec: spec}, metav1.CreateOptions{})
		return err
	})
	if err != nil {
		klog.ErrorS(err, "Failed to make webhook authorizer request")
		return authorizationv1.SubjectAccessReviewStatus{}, err
	}
	return result.Status, nil
}

// reviewSpec is the SubjectAccessReview for a, as upstream's webhook authorizer builds it.
func reviewSpec(a Attributes) authorizationv1.SubjectAccessReviewSpec {
	spec := authorizationv1.SubjectAccessReviewSpec{
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Verb: a.Verb, Version: a.APIVersion, Resource: a.Resource, Subresource: a.Subresource, Name: a.Name,
		},
	}
	if u := a.User; u != nil {
		spec.User, spec.UID, spec.Groups = u.Name, u.UID, u.Groups
		if len(u.Extra) > 0 {
			spec.Extra = make(map[string]authorizationv1.ExtraValue, len(u.Extra))
			for k, v := range u.Extra {
				spec.Extra[k] = authorizationv1.ExtraValue(v)
			}
		}
	}
	return spec
}
