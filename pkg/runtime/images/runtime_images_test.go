package images

import (
	"context"
	"errors"
	"reflect"
	"sort"
	"sync"
	"testing"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	critest "k8s.io/cri-api/pkg/apis/testing"

	"github.com/nodelet/nodelet/pkg/runtime/container"
)

// authCheckingService is the CRI fake with a registry that accepts only some
// credentials; it records the credentials of every pull attempt, in order.
type authCheckingService struct {
	*critest.FakeImageService
	accept func(*runtimeapi.AuthConfig) bool

	mu       sync.Mutex
	attempts []*runtimeapi.AuthConfig
}

func (s *authCheckingService) PullImage(ctx context.Context, image *runtimeapi.ImageSpec, auth *runtimeapi.AuthConfig, sc *runtimeapi.PodSandboxConfig) (string, error) {
	s.mu.Lock()
	s.attempts = append(s.attempts, auth)
	s.mu.Unlock()
	if !s.accept(auth) {
		return "", errors.New("unauthorized: " + auth.GetUsername())
	}
	return s.FakeImageService.PullImage(ctx, image, auth, sc)
}

func (s *authCheckingService) attemptUsers() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, a := range s.attempts {
		if a == nil {
			out = append(out, "<anonymous>")
		} else {
			out = append(out, a.Username)
		}
	}
	return out
}

func pullSecret(body string) v1.Secret {
	return v1.Secret{Type: v1.SecretTypeDockerConfigJson, Data: map[string][]byte{v1.DockerConfigJsonKey: []byte(body)}}
}

func TestPullImageTriesCredentialsInKeyringOrder(t *testing.T) {
	svc := &authCheckingService{FakeImageService: critest.NewFakeImageService(), accept: func(a *runtimeapi.AuthConfig) bool {
		return a.GetUsername() == "good"
	}}
	r := NewRuntimeImages(svc)
	secrets := []v1.Secret{
		pullSecret(`{"auths":{"reg.io":{"username":"general","password":"x"},"unrelated.io":{"username":"other","password":"x"}}}`),
		pullSecret(`{"auths":{"reg.io/team":{"username":"stale","password":"x"}}}`),
		pullSecret(`{"auths":{"reg.io/team":{"username":"good","password":"pw"}}}`),
	}
	ref, err := r.PullImage(context.Background(), container.ImageSpec{Image: "reg.io/team/app:1"}, secrets, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ref != "reg.io/team/app:1" {
		t.Errorf("ref = %q", ref)
	}
	// The two reg.io/team credentials (most specific) in secret order; the first accepted
	// one ends the attempts, so the broader reg.io one is never sent.
	if got, want := svc.attemptUsers(), []string{"stale", "good"}; !reflect.DeepEqual(got, want) {
		t.Errorf("attempts %v, want %v", got, want)
	}
	svc.AssertImagePulledWithAuth(t, &runtimeapi.ImageSpec{Image: "reg.io/team/app:1", Annotations: map[string]string{}}, &runtimeapi.AuthConfig{Username: "good", Password: "pw"}, "pulled with the accepted credentials")
}

func TestPullImageFailsWithAllErrorsWhenEveryCredentialIsRejected(t *testing.T) {
	svc := &authCheckingService{FakeImageService: critest.NewFakeImageService(), accept: func(a *runtimeapi.AuthConfig) bool { return a == nil }}
	r := NewRuntimeImages(svc)
	secrets := []v1.Secret{pullSecret(`{"auths":{"reg.io":{"username":"a","password":"x"}}}`), pullSecret(`{"auths":{"reg.io":{"username":"b","password":"x"}}}`)}
	_, err := r.PullImage(context.Background(), container.ImageSpec{Image: "reg.io/app:1"}, secrets, nil)
	if err == nil || err.Error() != "[unauthorized: a, unauthorized: b]" {
		t.Fatalf("err = %v, want both rejections", err)
	}
	// As upstream: no anonymous attempt once credentials matched.
	if got, want := svc.attemptUsers(), []string{"a", "b"}; !reflect.DeepEqual(got, want) {
		t.Errorf("attempts %v, want %v", got, want)
	}
}

func TestPullImageAnonymousWithoutMatchingCredentials(t *testing.T) {
	svc := &authCheckingService{FakeImageService: critest.NewFakeImageService(), accept: func(*runtimeapi.AuthConfig) bool { return true }}
	node := &BasicKeyring{}
	node.Add(DockerConfig{"other.io": entry("node")})
	r := NewRuntimeImagesWithKeyring(svc, node, nil)
	secrets := []v1.Secret{pullSecret(`{"auths":{"quay.io":{"username":"q","password":"x"}}}`)}
	sandbox := &runtimeapi.PodSandboxConfig{Metadata: &runtimeapi.PodSandboxMetadata{Name: "p"}}
	spec := container.ImageSpec{Image: "busybox:1.36", RuntimeHandler: "runc", Annotations: map[string]string{"a": "b"}}
	if _, err := r.PullImage(context.Background(), spec, secrets, sandbox); err != nil {
		t.Fatal(err)
	}
	if got := svc.attemptUsers(); !reflect.DeepEqual(got, []string{"<anonymous>"}) {
		t.Errorf("attempts %v, want one anonymous pull", got)
	}
	svc.AssertImagePulledWithAuth(t, &runtimeapi.ImageSpec{Image: "busybox:1.36", RuntimeHandler: "runc", Annotations: map[string]string{"a": "b"}}, nil, "spec passed through")
}

func TestPullImageUsesNodeKeyringAfterSecrets(t *testing.T) {
	svc := &authCheckingService{FakeImageService: critest.NewFakeImageService(), accept: func(a *runtimeapi.AuthConfig) bool { return a.GetUsername() == "node" }}
	node := &BasicKeyring{}
	node.Add(DockerConfig{"https://index.docker.io/v1/": entry("node")})
	r := NewRuntimeImagesWithKeyring(svc, node, nil)
	secrets := []v1.Secret{pullSecret(`{"auths":{"docker.io":{"username":"pod","password":"x"}}}`)}
	if _, err := r.PullImage(context.Background(), container.ImageSpec{Image: "busybox"}, secrets, nil); err != nil {
		t.Fatal(err)
	}
	if got, want := svc.attemptUsers(), []string{"pod", "node"}; !reflect.DeepEqual(got, want) {
		t.Errorf("attempts %v, want %v", got, want)
	}
}

func TestPullImageRejectsBadInput(t *testing.T) {
	r := NewRuntimeImages(critest.NewFakeImageService())
	if _, err := r.PullImage(context.Background(), container.ImageSpec{Image: "Not/Valid"}, nil, nil); err == nil {
		t.Error("invalid image name accepted")
	}
	if _, err := r.PullImage(context.Background(), container.ImageSpec{Image: "busybox"}, []v1.Secret{pullSecret("{")}, nil); err == nil {
		t.Error("malformed pull secret accepted")
	}
}

func TestImageQueries(t *testing.T) {
	fake := critest.NewFakeImageService()
	fake.SetFakeImageSize(100)
	fake.SetFakeImagePinned("registry.k8s.io/pause:3.10", true)
	fake.SetFakeImages([]string{"busybox:1.36", "registry.k8s.io/pause:3.10"})
	r := NewRuntimeImages(fake)
	ctx := context.Background()

	if ref, err := r.GetImageRef(ctx, container.ImageSpec{Image: "busybox:1.36"}); err != nil || ref != "busybox:1.36" {
		t.Errorf("GetImageRef(present) = %q, %v", ref, err)
	}
	if ref, err := r.GetImageRef(ctx, container.ImageSpec{Image: "absent:1"}); err != nil || ref != "" {
		t.Errorf("GetImageRef(absent) = %q, %v", ref, err)
	}
	if size, err := r.GetImageSize(ctx, container.ImageSpec{Image: "busybox:1.36"}); err != nil || size != 100 {
		t.Errorf("GetImageSize = %d, %v", size, err)
	}
	fake.InjectError("ImageStatus", errors.New("boom"))
	if _, err := r.GetImageRef(ctx, container.ImageSpec{Image: "busybox:1.36"}); err == nil {
		t.Error("GetImageRef hid the runtime error")
	}

	list, err := r.ListImages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sort.Slice(list, func(i, j int) bool { return list[i].ID < list[j].ID })
	want := []container.Image{
		{ID: "busybox:1.36", RepoTags: []string{"busybox:1.36"}, Size: 100, Spec: container.ImageSpec{Image: "busybox:1.36"}},
		{ID: "registry.k8s.io/pause:3.10", RepoTags: []string{"registry.k8s.io/pause:3.10"}, Size: 100, Spec: container.ImageSpec{Image: "registry.k8s.io/pause:3.10"}, Pinned: true},
	}
	if !reflect.DeepEqual(list, want) {
		t.Errorf("ListImages = %+v\nwant %+v", list, want)
	}
	stats, err := r.ImageStats(ctx)
	if err != nil || stats.TotalStorageBytes != 200 {
		t.Errorf("ImageStats = %+v, %v", stats, err)
	}
	if err := r.RemoveImage(ctx, container.ImageSpec{Image: "busybox:1.36"}); err != nil {
		t.Fatal(err)
	}
	if ref, _ := r.GetImageRef(ctx, container.ImageSpec{Image: "busybox:1.36"}); ref != "" {
		t.Error("image still present after RemoveImage")
	}
	fake.InjectError("ListImages", errors.New("boom"))
	if _, err := r.ImageStats(ctx); err == nil {
		t.Error("ImageStats hid the runtime error")
	}
}
