package images

import (
	"context"
	"reflect"
	"testing"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	critest "k8s.io/cri-api/pkg/apis/testing"

	"github.com/nodelet/nodelet/pkg/runtime/container"
	"github.com/nodelet/nodelet/pkg/runtime/credentialprovider"
)

// fakePlugins answers for one repository and remembers the pods it was asked about.
type fakePlugins struct {
	repo  string
	creds []credentialprovider.Credential
	asked []*credentialprovider.Pod
}

func (f *fakePlugins) Credentials(_ context.Context, image string, pod *credentialprovider.Pod) []credentialprovider.Credential {
	f.asked = append(f.asked, pod)
	if image != f.repo {
		return nil
	}
	return f.creds
}

// Plugin credentials come after the pod's pull secrets and the node's files; the plugin
// is asked with the pulling pod's identity, and its service-account credential is
// reported as such.
func TestPullImageTriesPluginCredentialsLast(t *testing.T) {
	svc := &authCheckingService{FakeImageService: critest.NewFakeImageService(), accept: func(a *runtimeapi.AuthConfig) bool { return a.GetUsername() == "from-plugin" }}
	node := &BasicKeyring{}
	node.Add(DockerConfig{"reg.io": entry("node")})
	plugins := &fakePlugins{repo: "reg.io/team/app", creds: []credentialprovider.Credential{
		{Registry: "reg.io", Username: "from-plugin", Password: "pw", ServiceAccount: &credentialprovider.ServiceAccountRef{UID: "sa-uid", Namespace: "ns", Name: "builder"}},
	}}
	r := NewRuntimeImagesWithKeyring(svc, node, plugins)
	pod := &v1.Pod{}
	pod.Namespace, pod.Name, pod.UID, pod.Spec.ServiceAccountName = "ns", "p", "pod-uid", "builder"
	ctx, report := withPullReport(withPullingPod(context.Background(), pod))
	secrets := []v1.Secret{pullSecret(`{"auths":{"reg.io":{"username":"pod","password":"x"}}}`)}
	if _, err := r.PullImage(ctx, container.ImageSpec{Image: "reg.io/team/app:1"}, secrets, nil); err != nil {
		t.Fatal(err)
	}
	if got, want := svc.attemptUsers(), []string{"pod", "node", "from-plugin"}; !reflect.DeepEqual(got, want) {
		t.Errorf("attempts %v, want %v", got, want)
	}
	want := &credentialprovider.Pod{Namespace: "ns", Name: "p", UID: "pod-uid", ServiceAccountName: "builder"}
	if len(plugins.asked) != 1 || !reflect.DeepEqual(plugins.asked[0], want) {
		t.Errorf("plugins asked for %+v, want %+v", plugins.asked, want)
	}
	used := report.used
	if used == nil || used.Source == nil || used.Source.ServiceAccount == nil || used.Source.ServiceAccount.Name != "builder" {
		t.Errorf("reported credential %+v, want the plugin's, from service account builder", used)
	}
}
