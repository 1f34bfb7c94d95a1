package kuberuntime

import (
	"context"
	"errors"
	"sync"
	"testing"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/pkg/pod/status"
	"github.com/nodelet/nodelet/pkg/runtime/container"
)

// secretStore is a criconfig.EnvSources holding secrets only, filled as a test goes.
type secretStore struct {
	mu      sync.Mutex
	secrets map[string]*v1.Secret // by namespace/name
}

func (s *secretStore) add(secret *v1.Secret) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.secrets[secret.Namespace+"/"+secret.Name] = secret
}

func (s *secretStore) GetSecret(_ context.Context, ns, name string) (*v1.Secret, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if secret, ok := s.secrets[ns+"/"+name]; ok {
		return secret, nil
	}
	return nil, apierrors.NewNotFound(v1.Resource("secret"), name)
}

func (s *secretStore) GetConfigMap(_ context.Context, _, name string) (*v1.ConfigMap, error) {
	return nil, apierrors.NewNotFound(v1.Resource("configmap"), name)
}

func (s *secretStore) ListServices(string) ([]*v1.Service, error) { return nil, nil }
func (s *secretStore) ServicesSynced() bool                       { return true }

// configRecorder keeps the configs of the containers created.
type configRecorder struct {
	internalapi.RuntimeService
	mu      sync.Mutex
	configs []*runtimeapi.ContainerConfig
}

func (r *configRecorder) CreateContainer(ctx context.Context, sandboxID string, config *runtimeapi.ContainerConfig, sandboxConfig *runtimeapi.PodSandboxConfig) (string, error) {
	r.mu.Lock()
	r.configs = append(r.configs, config)
	r.mu.Unlock()
	return r.RuntimeService.CreateContainer(ctx, sandboxID, config, sandboxConfig)
}

// A container whose secret does not exist yet waits with CreateContainerConfigError and
// upstream's message; the first sync after the secret appears starts it.
func TestMissingSecretIsCreateContainerConfigErrorUntilCreated(t *testing.T) {
	secrets := &secretStore{secrets: map[string]*v1.Secret{}}
	var recorder *configRecorder
	env := newTestEnv(t, func(o *Options) {
		o.EnvSources = secrets
		recorder = &configRecorder{RuntimeService: o.RuntimeService}
		o.RuntimeService = recorder
	})
	app := ctr("app")
	app.Env = []v1.EnvVar{{Name: "PASSWORD", ValueFrom: &v1.EnvVarSource{SecretKeyRef: &v1.SecretKeySelector{
		LocalObjectReference: v1.LocalObjectReference{Name: "creds"}, Key: "password"}}}}
	pod := newPod("needs-secret", app)
	reasons := status.NewReasonCache()

	r := syncPod(t, env, pod, nil)
	reasons.Update(pod.UID, *r)
	failed := failedResult(r, container.StartContainer)
	if failed == nil || !errors.Is(failed.Error, container.ErrCreateContainerConfig) {
		t.Fatalf("want ErrCreateContainerConfig, got %+v", r.SyncResults)
	}
	const msg = `secret "creds" not found`
	if reason, message, _ := reasons.Get(pod.UID, "app"); reason != "CreateContainerConfigError" || message != msg {
		t.Errorf("waiting reason %q message %q, want CreateContainerConfigError %q", reason, message, msg)
	}
	if !hasEvent(env.events(), `Warning Failed Error: `+msg) {
		t.Error("no Failed event with the message")
	}
	if len(env.rt.Containers) != 0 {
		t.Fatalf("a container was created without its secret: %v", env.rt.Containers)
	}

	secrets.add(&v1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "creds"},
		Data: map[string][]byte{"password": []byte("s3cret")}})
	r = syncPod(t, env, pod, nil)
	reasons.Update(pod.UID, *r)
	if err := r.Error(); err != nil {
		t.Fatalf("sync after the secret appeared: %v", err)
	}
	if got := startedNames(r); len(got) != 1 || got[0] != "app" {
		t.Fatalf("started %v, want app", got)
	}
	if _, _, ok := reasons.Get(pod.UID, "app"); ok {
		t.Error("the waiting reason outlived the successful start")
	}
	recorder.mu.Lock()
	defer recorder.mu.Unlock()
	envs := recorder.configs[len(recorder.configs)-1].Envs
	if len(envs) != 1 || envs[0].Key != "PASSWORD" || string(envs[0].Value) != "s3cret" {
		t.Errorf("container env %v, want PASSWORD=s3cret", envs)
	}
}
