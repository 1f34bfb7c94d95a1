package credentialprovider

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// saTokenAttributes is a tokenAttributes block for recorderConfig's provider.
func saTokenAttributes(cacheType string, requireSA bool, required, optional []string) string {
	s := fmt.Sprintf("  tokenAttributes:\n    serviceAccountTokenAudience: registry.example.com\n    cacheType: %s\n    requireServiceAccount: %t\n", cacheType, requireSA)
	if len(required) > 0 {
		s += fmt.Sprintf("    requiredServiceAccountAnnotationKeys: [%s]\n", strings.Join(required, ", "))
	}
	if len(optional) > 0 {
		s += fmt.Sprintf("    optionalServiceAccountAnnotationKeys: [%s]\n", strings.Join(optional, ", "))
	}
	return s
}

// fakeAPI serves service accounts and issues tokens named after the pod they are bound
// to, recording the token requests.
type fakeAPI struct {
	mu       sync.Mutex
	accounts map[string]*v1.ServiceAccount // namespace/name
	requests []*authenticationv1.TokenRequest
}

func (a *fakeAPI) access() ServiceAccountAccess {
	return ServiceAccountAccess{
		GetServiceAccount: func(namespace, name string) (*v1.ServiceAccount, error) {
			a.mu.Lock()
			defer a.mu.Unlock()
			if sa, ok := a.accounts[namespace+"/"+name]; ok {
				return sa.DeepCopy(), nil
			}
			return nil, fmt.Errorf("serviceaccounts %q not found", name)
		},
		GetToken: func(namespace, name string, tr *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error) {
			a.mu.Lock()
			defer a.mu.Unlock()
			a.requests = append(a.requests, tr.DeepCopy())
			out := tr.DeepCopy()
			out.Status.Token = "token-for-" + tr.Spec.BoundObjectRef.Name
			return out, nil
		},
	}
}

func (a *fakeAPI) setAccount(namespace, name, uid string, annotations map[string]string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.accounts == nil {
		a.accounts = map[string]*v1.ServiceAccount{}
	}
	a.accounts[namespace+"/"+name] = &v1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{
		Namespace: namespace, Name: name, UID: types.UID(uid), Annotations: annotations,
	}}
}

func podOf(name, sa string) *Pod {
	return &Pod{Namespace: "team", Name: name, UID: types.UID("uid-" + name), ServiceAccountName: sa}
}

// TestServiceAccountRequest: the token request (audience, bound to the pod, service
// account UID, no expiration set) and the plugin request (token, annotations wanted).
func TestServiceAccountRequest(t *testing.T) {
	f := newFixture(t)
	p := f.load(recorderConfig + saTokenAttributes("ServiceAccount", true, []string{"example.com/role"}, []string{"example.com/opt", "example.com/absent"}))
	api := &fakeAPI{}
	api.setAccount("team", "puller", "sa-uid", map[string]string{"example.com/role": "reader", "example.com/opt": "yes", "example.com/other": "not passed"})
	p.SetServiceAccountAccess(api.access())
	f.respond(v1Response("Image", "", map[string][2]string{"registry.example.com": {"u", "p"}}))

	got := p.Credentials(context.Background(), "registry.example.com/app", podOf("web", "puller"))
	want := []Credential{{Registry: "registry.example.com", Username: "u", Password: "p",
		ServiceAccount: &ServiceAccountRef{UID: "sa-uid", Namespace: "team", Name: "puller"}}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("credentials = %+v, want %+v", got, want)
	}
	wantTR := &authenticationv1.TokenRequest{
		ObjectMeta: metav1.ObjectMeta{UID: "sa-uid"},
		Spec: authenticationv1.TokenRequestSpec{
			Audiences:      []string{"registry.example.com"},
			BoundObjectRef: &authenticationv1.BoundObjectReference{APIVersion: "v1", Kind: "Pod", Name: "web", UID: "uid-web"},
		},
	}
	if len(api.requests) != 1 || !reflect.DeepEqual(api.requests[0], wantTR) {
		t.Errorf("token requests = %+v, want %+v", api.requests, wantTR)
	}
	wantRequest := `{"kind":"CredentialProviderRequest","apiVersion":"credentialprovider.kubelet.k8s.io/v1","image":"registry.example.com/app",` +
		`"serviceAccountToken":"token-for-web","serviceAccountAnnotations":{"example.com/opt":"yes","example.com/role":"reader"}}` + "\n"
	if req := f.readState("request"); req != wantRequest {
		t.Errorf("request:\n got %s\nwant %s", req, wantRequest)
	}
}

// TestServiceAccountCache: with cacheType ServiceAccount, pods of one service account
// share credentials; another service account, another UID or other annotation values
// do not. With cacheType Token, each token has its own.
func TestServiceAccountCache(t *testing.T) {
	f := newFixture(t)
	p := f.load(recorderConfig + saTokenAttributes("ServiceAccount", true, nil, []string{"example.com/role"}))
	api := &fakeAPI{}
	api.setAccount("team", "a", "uid-a", nil)
	api.setAccount("team", "b", "uid-b", nil)
	p.SetServiceAccountAccess(api.access())
	f.respond(v1Response("Image", "1h", map[string][2]string{"registry.example.com": {"u", "p"}}))

	steps := []struct {
		pod  *Pod
		set  func()
		runs int
	}{
		{podOf("web-1", "a"), nil, 1},
		{podOf("web-2", "a"), nil, 1},
		{podOf("web-1", "b"), nil, 2},
		{podOf("web-3", "a"), func() { api.setAccount("team", "a", "uid-a", map[string]string{"example.com/role": "x"}) }, 3},
		{podOf("web-4", "a"), nil, 3},
		{podOf("web-1", "a"), func() { api.setAccount("team", "a", "uid-a2", map[string]string{"example.com/role": "x"}) }, 4},
	}
	for i, s := range steps {
		if s.set != nil {
			s.set()
		}
		if got := p.Credentials(context.Background(), "registry.example.com/app", s.pod); len(got) != 1 {
			t.Fatalf("step %d: credentials = %+v", i, got)
		}
		if got := f.calls(); got != s.runs {
			t.Fatalf("step %d: plugin ran %d times, want %d", i, got, s.runs)
		}
	}
	// Every request got a token, cached or not.
	if len(api.requests) != len(steps) {
		t.Errorf("token requests = %d, want %d", len(api.requests), len(steps))
	}

	t.Run("Token", func(t *testing.T) {
		f := newFixture(t)
		p := f.load(recorderConfig + saTokenAttributes("Token", true, nil, nil))
		api := &fakeAPI{}
		api.setAccount("team", "a", "uid-a", nil)
		p.SetServiceAccountAccess(api.access())
		f.respond(v1Response("Image", "1h", map[string][2]string{"registry.example.com": {"u", "p"}}))
		for i, pod := range []*Pod{podOf("web-1", "a"), podOf("web-1", "a"), podOf("web-2", "a")} {
			p.Credentials(context.Background(), "registry.example.com/app", pod)
			if want := []int{1, 1, 2}[i]; f.calls() != want {
				t.Fatalf("step %d: plugin ran %d times, want %d", i, f.calls(), want)
			}
		}
	})
}

// TestServiceAccountNotAsked: cases where the plugin is not run, without an error.
func TestServiceAccountNotAsked(t *testing.T) {
	f := newFixture(t)
	p := f.load(recorderConfig + saTokenAttributes("ServiceAccount", true, []string{"example.com/role"}, nil))
	api := &fakeAPI{}
	api.setAccount("team", "plain", "uid", map[string]string{"other": "x"})
	p.SetServiceAccountAccess(api.access())
	f.respond(v1Response("Image", "", map[string][2]string{"registry.example.com": {"u", "p"}}))

	for name, pod := range map[string]Pod{"no service account": *podOf("web", ""), "required annotation missing": *podOf("web", "plain")} {
		auth, sa, err := provideFirst(p, "registry.example.com/app", pod)
		if auth != nil || sa != nil || err != nil {
			t.Errorf("%s: got %v, %v, %v", name, auth, sa, err)
		}
	}
	if f.calls() != 0 || len(api.requests) != 0 {
		t.Errorf("plugin ran %d times, %d tokens requested; want none", f.calls(), len(api.requests))
	}
}

// TestServiceAccountNotRequired: a pod without a service account gets the plugin run
// without a token, and credentials without a service account.
func TestServiceAccountNotRequired(t *testing.T) {
	f := newFixture(t)
	p := f.load(recorderConfig + saTokenAttributes("ServiceAccount", false, nil, nil))
	f.respond(v1Response("Image", "", map[string][2]string{"registry.example.com": {"u", "p"}}))
	got := p.Credentials(context.Background(), "registry.example.com/app", podOf("static", ""))
	if len(got) != 1 || got[0].ServiceAccount != nil {
		t.Errorf("credentials = %+v", got)
	}
	if req := f.request(); req["serviceAccountToken"] != nil || req["serviceAccountAnnotations"] != nil {
		t.Errorf("request = %v, want no token", req)
	}
	// Nil pod: the same.
	f.clock.Step(11 * time.Minute)
	if got := p.Credentials(context.Background(), "registry.example.com/app", nil); len(got) != 1 || got[0].ServiceAccount != nil {
		t.Errorf("credentials = %+v", got)
	}
}

func TestServiceAccountErrors(t *testing.T) {
	const image = "registry.example.com/app"
	t.Run("standalone", func(t *testing.T) {
		f := newFixture(t)
		p := f.load(recorderConfig + saTokenAttributes("ServiceAccount", true, nil, nil))
		_, _, err := provideFirst(p, image, *podOf("web", "default"))
		if want := "failed to get service account: cannot get ServiceAccounts when kubelet is in standalone mode"; err == nil || err.Error() != want {
			t.Errorf("error = %v, want %s", err, want)
		}
	})
	t.Run("token", func(t *testing.T) {
		f := newFixture(t)
		p := f.load(recorderConfig + saTokenAttributes("ServiceAccount", true, nil, nil))
		api := &fakeAPI{}
		api.setAccount("team", "default", "uid", nil)
		access := api.access()
		access.GetToken = func(string, string, *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error) {
			return nil, errors.New("forbidden")
		}
		p.SetServiceAccountAccess(access)
		_, _, err := provideFirst(p, image, *podOf("web", "default"))
		if want := "failed to get service account token: forbidden"; err == nil || err.Error() != want {
			t.Errorf("error = %v, want %s", err, want)
		}
	})
	t.Run("token echoed", func(t *testing.T) {
		for _, cacheType := range []string{"ServiceAccount", "Token"} {
			f := newFixture(t)
			p := f.load(recorderConfig + saTokenAttributes(cacheType, true, nil, nil))
			api := &fakeAPI{}
			api.setAccount("team", "default", "uid", nil)
			p.SetServiceAccountAccess(api.access())
			f.respond(v1Response("Image", "", map[string][2]string{"registry.example.com": {"u", "token-for-web"}}))
			_, _, err := provideFirst(p, image, *podOf("web", "default"))
			switch cacheType {
			case "ServiceAccount":
				const want = "credential provider plugin returned the service account token as the password which is not allowed when service account cache type is not set to 'Token'"
				if err == nil || err.Error() != want {
					t.Errorf("%s: error = %v, want %s", cacheType, err, want)
				}
			case "Token":
				if err != nil {
					t.Errorf("%s: %v", cacheType, err)
				}
			}
		}
	})
}

// TestServiceAccountGateOff: with the gate off, a provider without tokenAttributes is
// run without pod context.
func TestServiceAccountGateOff(t *testing.T) {
	f := newFixture(t)
	p := f.load(recorderConfig, WithServiceAccountTokens(false))
	f.respond(v1Response("Image", "", map[string][2]string{"registry.example.com": {"u", "p"}}))
	if got := p.Credentials(context.Background(), "registry.example.com/app", podOf("web", "default")); len(got) != 1 || got[0].ServiceAccount != nil {
		t.Errorf("credentials = %+v", got)
	}
}
