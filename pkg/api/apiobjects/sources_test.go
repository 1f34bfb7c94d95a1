package apiobjects

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/pkg/runtime/criconfig"
)

var _ criconfig.EnvSources = (*Sources)(nil)

const ttl = 10 * time.Second

func newSources(t *testing.T, objects ...runtime.Object) (*Sources, *fake.Clientset, *testingclock.FakeClock) {
	t.Helper()
	client := fake.NewClientset(objects...)
	clk := testingclock.NewFakeClock(time.Now())
	return New(client, Options{TTL: ttl, Clock: clk}), client, clk
}

func secret(ns, name, rv, password string) *v1.Secret {
	return &v1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, ResourceVersion: rv},
		Data: map[string][]byte{"password": []byte(password)}}
}

// gets lists the GETs of resource the client saw, as "ns/name@resourceVersion".
func gets(client *fake.Clientset, resource string) []string {
	var out []string
	for _, a := range client.Actions() {
		if g, ok := a.(k8stesting.GetActionImpl); ok && a.GetVerb() == "get" && a.GetResource().Resource == resource {
			out = append(out, g.GetNamespace()+"/"+g.GetName()+"@"+g.GetOptions.ResourceVersion)
		}
	}
	return out
}

func password(t *testing.T, s *Sources, ns, name string) string {
	t.Helper()
	got, err := s.GetSecret(context.Background(), ns, name)
	if err != nil {
		t.Fatalf("GetSecret(%s/%s): %v", ns, name, err)
	}
	return string(got.Data["password"])
}

func TestSecretReusedWithinTTLThenRefreshed(t *testing.T) {
	s, client, clk := newSources(t, secret("ns", "creds", "5", "one"))
	if got := password(t, s, "ns", "creds"); got != "one" {
		t.Fatalf("password %q", got)
	}
	if _, err := client.CoreV1().Secrets("ns").Update(context.Background(), secret("ns", "creds", "6", "two"), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	clk.Step(ttl - time.Second)
	if got := password(t, s, "ns", "creds"); got != "one" {
		t.Errorf("within the TTL: password %q, want the cached one", got)
	}
	clk.Step(time.Second)
	if got := password(t, s, "ns", "creds"); got != "two" {
		t.Errorf("after the TTL: password %q, want the updated one", got)
	}
	// The first read is a quorum read; refreshes may come from the API server's cache.
	if got, want := gets(client, "secrets"), []string{"ns/creds@", "ns/creds@0"}; !slices.Equal(got, want) {
		t.Errorf("GETs %v, want %v", got, want)
	}
}

func TestMissingSecretIsAskedForAgainUntilCreated(t *testing.T) {
	s, client, _ := newSources(t)
	_, err := s.GetSecret(context.Background(), "ns", "creds")
	if !apierrors.IsNotFound(err) || err.Error() != `secret "creds" not found` {
		t.Fatalf("error %v, want upstream's NotFound", err)
	}
	// Still missing: asked again, not answered from a cache.
	if _, err := s.GetSecret(context.Background(), "ns", "creds"); !apierrors.IsNotFound(err) {
		t.Fatalf("second read: %v", err)
	}
	if _, err := client.CoreV1().Secrets("ns").Create(context.Background(), secret("ns", "creds", "", "new"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The clock has not moved: a NotFound is never fresh.
	if got := password(t, s, "ns", "creds"); got != "new" {
		t.Errorf("password %q after creation", got)
	}
	if n := len(gets(client, "secrets")); n != 3 {
		t.Errorf("%d GETs, want 3", n)
	}
}

func TestDeletedSecretBecomesNotFound(t *testing.T) {
	s, client, clk := newSources(t, secret("ns", "creds", "5", "one"))
	password(t, s, "ns", "creds")
	if err := client.CoreV1().Secrets("ns").Delete(context.Background(), "creds", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	clk.Step(ttl)
	if _, err := s.GetSecret(context.Background(), "ns", "creds"); !apierrors.IsNotFound(err) {
		t.Errorf("after deletion and the TTL: %v, want NotFound", err)
	}
}

func TestAPIErrorsFallBackToTheLastAnswer(t *testing.T) {
	s, client, clk := newSources(t, secret("ns", "creds", "5", "one"))
	password(t, s, "ns", "creds")
	outage := errors.New("connection refused")
	client.PrependReactor("get", "secrets", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, outage
	})
	clk.Step(ttl)
	if got := password(t, s, "ns", "creds"); got != "one" {
		t.Errorf("during an outage: password %q, want the last known one", got)
	}
	// Nothing known about this one: the error is returned, and not cached.
	if _, err := s.GetSecret(context.Background(), "ns", "other"); !errors.Is(err, outage) {
		t.Errorf("unknown secret during an outage: %v, want the API error", err)
	}
}

func TestOlderAnswerFromAPICacheIsIgnored(t *testing.T) {
	s, client, clk := newSources(t, secret("ns", "creds", "7", "new"))
	password(t, s, "ns", "creds")
	client.PrependReactor("get", "secrets", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, secret("ns", "creds", "6", "stale"), nil
	})
	clk.Step(ttl)
	if got := password(t, s, "ns", "creds"); got != "new" {
		t.Errorf("password %q, want the newer cached one", got)
	}
}

func TestConfigMaps(t *testing.T) {
	cm := &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "conf"}, Data: map[string]string{"MODE": "fast"}}
	s, client, _ := newSources(t, cm)
	got, err := s.GetConfigMap(context.Background(), "ns", "conf")
	if err != nil || got.Data["MODE"] != "fast" {
		t.Fatalf("GetConfigMap: %v, %v", got, err)
	}
	if _, err := s.GetConfigMap(context.Background(), "ns", "conf"); err != nil {
		t.Fatal(err)
	}
	if n := len(gets(client, "configmaps")); n != 1 {
		t.Errorf("%d GETs within the TTL, want 1", n)
	}
	if _, err := s.GetConfigMap(context.Background(), "other", "conf"); err == nil || err.Error() != `configmap "conf" not found` {
		t.Errorf("other namespace: %v, want upstream's NotFound", err)
	}
}

func TestIdleEntriesAreDropped(t *testing.T) {
	s, _, clk := newSources(t, secret("ns", "a", "1", "x"), secret("ns", "b", "1", "y"))
	password(t, s, "ns", "a")
	password(t, s, "ns", "b")
	idle := s.secrets.(*ttlCache[*v1.Secret]).idleExpiry()
	clk.Step(idle / 2)
	password(t, s, "ns", "b")
	clk.Step(idle / 2)
	password(t, s, "ns", "b") // sweeps: a was idle for the whole expiry, b was not
	if n := s.secrets.(*ttlCache[*v1.Secret]).len(); n != 1 {
		t.Errorf("%d entries cached, want only b", n)
	}
}

func service(ns, name, ip string) *v1.Service {
	return &v1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1.ServiceSpec{ClusterIP: ip, Ports: []v1.ServicePort{{Port: 80}}}}
}

func serviceNames(t *testing.T, s *Sources, ns string) []string {
	t.Helper()
	list, err := s.ListServices(ns)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, svc := range list {
		names = append(names, svc.Name)
	}
	slices.Sort(names)
	return names
}

func TestServicesFromInformer(t *testing.T) {
	s, client, _ := newSources(t, service("default", "kubernetes", "10.96.0.1"),
		service("prod", "web", "10.96.0.5"), service("prod", "db", "10.96.0.6"))
	if s.ServicesSynced() {
		t.Fatal("synced before Start")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s.Start(ctx)
	waitCtx, cancelWait := context.WithTimeout(ctx, 10*time.Second)
	defer cancelWait()
	if !s.WaitForServices(waitCtx) || !s.ServicesSynced() {
		t.Fatal("services never synced")
	}
	if got := serviceNames(t, s, "prod"); !slices.Equal(got, []string{"db", "web"}) {
		t.Errorf("prod services %v", got)
	}
	if got := serviceNames(t, s, "default"); !slices.Equal(got, []string{"kubernetes"}) {
		t.Errorf("default services %v", got)
	}
	if got := serviceNames(t, s, "empty"); len(got) != 0 {
		t.Errorf("services of an empty namespace: %v", got)
	}

	// Headless services are not even listed.
	lists := 0
	for _, a := range client.Actions() {
		if l, ok := a.(k8stesting.ListActionImpl); ok && l.GetResource().Resource == "services" {
			lists++
			if got := l.ListRestrictions.Fields.String(); got != "spec.clusterIP!=None" {
				t.Errorf("services listed with field selector %q", got)
			}
		}
	}
	if lists == 0 {
		t.Error("services were never listed")
	}

	// A service created later shows up through the watch.
	if _, err := client.CoreV1().Services("prod").Create(ctx, service("prod", "cache", "10.96.0.7"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return len(serviceNames(t, s, "prod")) == 3, nil
	})
	if err != nil {
		t.Errorf("new service never listed: %v", serviceNames(t, s, "prod"))
	}
}

// End to end with criconfig: what a container in namespace prod gets.
func TestEnvironmentFromSources(t *testing.T) {
	s, client, _ := newSources(t, service("default", "kubernetes", "10.96.0.1"), secret("prod", "creds", "1", "s3cret"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s.Start(ctx)
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "prod", Name: "app"},
		Spec: v1.PodSpec{Containers: []v1.Container{{Name: "app", Env: []v1.EnvVar{
			{Name: "PASSWORD", ValueFrom: &v1.EnvVarSource{SecretKeyRef: &v1.SecretKeySelector{
				LocalObjectReference: v1.LocalObjectReference{Name: "creds"}, Key: "password"}}},
			{Name: "CONF", ValueFrom: &v1.EnvVarSource{ConfigMapKeyRef: &v1.ConfigMapKeySelector{
				LocalObjectReference: v1.LocalObjectReference{Name: "conf"}, Key: "k"}}},
		}}}}}
	opts := criconfig.ContainerOptions{EnvSources: s, EnableServiceLinks: true}
	c := &pod.Spec.Containers[0]
	waitCtx, cancelWait := context.WithTimeout(ctx, 10*time.Second)
	defer cancelWait()
	s.WaitForServices(waitCtx)

	_, err := criconfig.MakeEnvironmentVariables(ctx, pod, c, opts)
	if err == nil || err.Error() != `configmap "conf" not found` {
		t.Fatalf("error %v, want the missing config map", err)
	}
	cm := &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "prod", Name: "conf"}, Data: map[string]string{"k": "v"}}
	if _, err := client.CoreV1().ConfigMaps("prod").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	envs, err := criconfig.MakeEnvironmentVariables(ctx, pod, c, opts)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, kv := range envs {
		got[kv.Key] = string(kv.Value)
	}
	if got["PASSWORD"] != "s3cret" || got["CONF"] != "v" || got["KUBERNETES_SERVICE_HOST"] != "10.96.0.1" || len(got) != 9 {
		t.Errorf("env %v", got)
	}
}
