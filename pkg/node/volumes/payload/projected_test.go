package payload

import (
	"context"
	"errors"
	"fmt"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

type fakeTokens struct {
	err  error
	seen []string // "ns/pod audience path"
}

func (f *fakeTokens) ServiceAccountToken(_ context.Context, pod *v1.Pod, src *v1.ServiceAccountTokenProjection) ([]byte, error) {
	f.seen = append(f.seen, fmt.Sprintf("%s/%s %s %s", pod.Namespace, pod.Name, src.Audience, src.Path))
	if f.err != nil {
		return nil, f.err
	}
	return []byte("jwt-for-" + pod.Name), nil
}

type fakeTrustBundles struct{ calls []string }

func (f *fakeTrustBundles) GetTrustAnchorsByName(_ context.Context, name string, allowMissing bool) ([]byte, error) {
	f.calls = append(f.calls, fmt.Sprintf("name=%s optional=%v", name, allowMissing))
	return []byte("PEM " + name), nil
}

func (f *fakeTrustBundles) GetTrustAnchorsBySigner(_ context.Context, signer string, sel *metav1.LabelSelector, allowMissing bool) ([]byte, error) {
	f.calls = append(f.calls, fmt.Sprintf("signer=%s selector=%v optional=%v", signer, sel.MatchLabels, allowMissing))
	return []byte("PEM " + signer), nil
}

// kubeAPIAccess is the projected volume the service-account admission
// plugin adds to every pod.
func kubeAPIAccess() *v1.ProjectedVolumeSource {
	return &v1.ProjectedVolumeSource{
		DefaultMode: ptr[int32](0o644),
		Sources: []v1.VolumeProjection{
			{ServiceAccountToken: &v1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: ptr[int64](3607)}},
			{ConfigMap: &v1.ConfigMapProjection{
				LocalObjectReference: v1.LocalObjectReference{Name: "kube-root-ca.crt"},
				Items:                []v1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}},
			}},
			{DownwardAPI: &v1.DownwardAPIProjection{Items: []v1.DownwardAPIVolumeFile{
				fieldItem("namespace", "metadata.namespace"),
			}}},
		},
	}
}

func projectedDeps() (ProjectedDeps, *fakeTokens) {
	objs := testObjects()
	objs.configMaps["ns/kube-root-ca.crt"] = &v1.ConfigMap{Data: map[string]string{"ca.crt": "CA"}}
	tokens := &fakeTokens{}
	return ProjectedDeps{Objects: objs, Tokens: tokens}, tokens
}

func TestProjectedKubeAPIAccess(t *testing.T) {
	deps, tokens := projectedDeps()
	files, err := Projected(context.Background(), testPod(), kubeAPIAccess(), deps)
	// No runAsUser and no fsGroup: the token keeps the default mode.
	expectFiles(t, files, err, `token 0644 "jwt-for-web"`, `ca.crt 0644 "CA"`, `namespace 0644 "ns"`)
	if fmt.Sprint(tokens.seen) != "[ns/web  token]" {
		t.Errorf("token requests = %v", tokens.seen)
	}
}

func TestProjectedDefaultModeUnset(t *testing.T) {
	deps, _ := projectedDeps()
	src := kubeAPIAccess()
	src.DefaultMode = nil
	files, err := Projected(context.Background(), testPod(), src, deps)
	expectFiles(t, files, err, `token 0644 "jwt-for-web"`, `ca.crt 0644 "CA"`, `namespace 0644 "ns"`)
}

func withUsers(podUser *int64, fsGroup *int64, containerUsers ...*int64) *v1.Pod {
	pod := testPod()
	pod.Spec.SecurityContext = &v1.PodSecurityContext{RunAsUser: podUser, FSGroup: fsGroup}
	for i, u := range containerUsers {
		c := v1.Container{Name: fmt.Sprint("c", i)}
		if u != nil {
			c.SecurityContext = &v1.SecurityContext{RunAsUser: u}
		}
		pod.Spec.Containers = append(pod.Spec.Containers, c)
	}
	return pod
}

func TestProjectedTokenOwnerAndMode(t *testing.T) {
	src := &v1.ProjectedVolumeSource{
		DefaultMode: ptr[int32](0o444),
		Sources: []v1.VolumeProjection{
			{ServiceAccountToken: &v1.ServiceAccountTokenProjection{Path: "token", Audience: "vault"}},
			{Secret: &v1.SecretProjection{LocalObjectReference: v1.LocalObjectReference{Name: "creds"}, Items: []v1.KeyToPath{{Key: "user", Path: "user"}}}},
		},
	}
	const secretFile = `user 0444 "u"` // other sources never get an owner or 0600
	ephemeralOther := withUsers(ptr[int64](1000), nil, nil)
	ephemeralOther.Spec.EphemeralContainers = []v1.EphemeralContainer{{EphemeralContainerCommon: v1.EphemeralContainerCommon{
		Name: "debug", SecurityContext: &v1.SecurityContext{RunAsUser: ptr[int64](0)},
	}}}
	initOther := withUsers(ptr[int64](1000), nil, nil)
	initOther.Spec.InitContainers = []v1.Container{{Name: "init", SecurityContext: &v1.SecurityContext{RunAsUser: ptr[int64](7)}}}
	for name, tc := range map[string]struct {
		pod   *v1.Pod
		token string
	}{
		"no users":                       {withUsers(nil, nil, nil, nil), `token 0444 "jwt-for-web"`},
		"pod runAsUser":                  {withUsers(ptr[int64](1000), nil, nil, nil), `token 0600 "jwt-for-web" uid=1000`},
		"containers agree":               {withUsers(nil, nil, ptr[int64](5), ptr[int64](5)), `token 0600 "jwt-for-web" uid=5`},
		"container overrides pod":        {withUsers(ptr[int64](1000), nil, ptr[int64](5), ptr[int64](5)), `token 0600 "jwt-for-web" uid=5`},
		"containers differ":              {withUsers(ptr[int64](1000), nil, nil, ptr[int64](5)), `token 0444 "jwt-for-web"`},
		"one container without a user":   {withUsers(nil, nil, ptr[int64](5), nil), `token 0444 "jwt-for-web"`},
		"fsGroup only":                   {withUsers(nil, ptr[int64](2000), nil), `token 0600 "jwt-for-web"`},
		"fsGroup and differing users":    {withUsers(nil, ptr[int64](2000), ptr[int64](1), ptr[int64](2)), `token 0600 "jwt-for-web"`},
		"fsGroup and one user":           {withUsers(ptr[int64](1000), ptr[int64](2000), nil), `token 0600 "jwt-for-web" uid=1000`},
		"root everywhere":                {withUsers(ptr[int64](0), nil, nil), `token 0600 "jwt-for-web" uid=0`},
		"ephemeral container differs":    {ephemeralOther, `token 0444 "jwt-for-web"`},
		"init container differs":         {initOther, `token 0444 "jwt-for-web"`},
		"no security context whatsoever": {testPod(), `token 0444 "jwt-for-web"`},
	} {
		t.Run(name, func(t *testing.T) {
			deps, _ := projectedDeps()
			files, err := Projected(context.Background(), tc.pod, src, deps)
			expectFiles(t, files, err, tc.token, secretFile)
		})
	}
}

func TestProjectedTokenOwnerIsACopy(t *testing.T) {
	pod := withUsers(ptr[int64](1000), nil, nil)
	deps, _ := projectedDeps()
	files, err := Projected(context.Background(), pod, kubeAPIAccess(), deps)
	if err != nil {
		t.Fatal(err)
	}
	*files["token"].FsUser = 1
	if *pod.Spec.SecurityContext.RunAsUser != 1000 {
		t.Error("the payload's FsUser aliases the pod spec")
	}
}

func TestProjectedOptionalAndItemModes(t *testing.T) {
	deps, _ := projectedDeps()
	files, err := Projected(context.Background(), testPod(), &v1.ProjectedVolumeSource{
		DefaultMode: ptr[int32](0o400),
		Sources: []v1.VolumeProjection{
			{ConfigMap: &v1.ConfigMapProjection{LocalObjectReference: v1.LocalObjectReference{Name: "absent"}, Optional: ptr(true)}},
			{Secret: &v1.SecretProjection{LocalObjectReference: v1.LocalObjectReference{Name: "absent"}, Optional: ptr(true)}},
			{Secret: &v1.SecretProjection{
				LocalObjectReference: v1.LocalObjectReference{Name: "creds"},
				Optional:             ptr(true),
				Items:                []v1.KeyToPath{{Key: "pass", Path: "pw", Mode: ptr[int32](0o440)}, {Key: "nope", Path: "n"}},
			}},
			{ConfigMap: &v1.ConfigMapProjection{LocalObjectReference: v1.LocalObjectReference{Name: "cfg"}}},
			{DownwardAPI: &v1.DownwardAPIProjection{Items: []v1.DownwardAPIVolumeFile{
				{Path: "podname", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.name"}, Mode: ptr[int32](0o444)},
			}}},
		},
	}, deps)
	expectFiles(t, files, err,
		`pw 0440 "p"`,
		`app.yaml 0400 "a: 1"`, `other 0400 "o"`, `blob 0400 "\x00\x01\x02"`,
		`podname 0444 "web"`,
	)
}

func TestProjectedErrorsAreJoined(t *testing.T) {
	deps, tokens := projectedDeps()
	tokens.err = errors.New("token request refused")
	src := kubeAPIAccess()
	src.Sources = append(src.Sources,
		v1.VolumeProjection{Secret: &v1.SecretProjection{LocalObjectReference: v1.LocalObjectReference{Name: "gone"}}},
		v1.VolumeProjection{ConfigMap: &v1.ConfigMapProjection{
			LocalObjectReference: v1.LocalObjectReference{Name: "cfg"},
			Items:                []v1.KeyToPath{{Key: "missing", Path: "m"}},
		}},
	)
	files, err := Projected(context.Background(), testPod(), src, deps)
	expectError(t, files, err, `[token request refused, secret "gone" not found, configmap references non-existent config key: missing]`)
	if files != nil {
		t.Errorf("files = %v, want none on error", describe(files))
	}
}

func TestProjectedDuplicatePaths(t *testing.T) {
	deps, _ := projectedDeps()
	src := kubeAPIAccess()
	src.Sources = append(src.Sources, v1.VolumeProjection{Secret: &v1.SecretProjection{
		LocalObjectReference: v1.LocalObjectReference{Name: "creds"},
		Items:                []v1.KeyToPath{{Key: "user", Path: "token"}},
	}})
	files, err := Projected(context.Background(), testPod(), src, deps)
	expectError(t, files, err, `projected volume sources[3]: path "token": conflicting duplicate paths`)
}

func TestProjectedWholeObjectKeysOverlap(t *testing.T) {
	deps, _ := projectedDeps()
	deps.Objects.(*fakeObjects).secrets["ns/other"] = &v1.Secret{Data: map[string][]byte{"other": []byte("from secret")}}
	files, err := Projected(context.Background(), testPod(), &v1.ProjectedVolumeSource{Sources: []v1.VolumeProjection{
		{ConfigMap: &v1.ConfigMapProjection{LocalObjectReference: v1.LocalObjectReference{Name: "cfg"}}},
		{Secret: &v1.SecretProjection{LocalObjectReference: v1.LocalObjectReference{Name: "other"}}},
	}}, deps)
	// The later source wins, as upstream.
	expectFiles(t, files, err, `app.yaml 0644 "a: 1"`, `other 0644 "from secret"`, `blob 0644 "\x00\x01\x02"`)
}

func TestProjectedClusterTrustBundle(t *testing.T) {
	src := &v1.ProjectedVolumeSource{Sources: []v1.VolumeProjection{
		{ClusterTrustBundle: &v1.ClusterTrustBundleProjection{Name: ptr("corp-ca"), Path: "corp.pem"}},
		{ClusterTrustBundle: &v1.ClusterTrustBundleProjection{
			SignerName:    ptr("example.com/signer"),
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}},
			Optional:      ptr(true),
			Path:          "signer.pem",
		}},
	}}
	deps, _ := projectedDeps()
	files, err := Projected(context.Background(), testPod(), src, deps)
	// One message for both sources: the aggregate drops repeats, as upstream.
	expectError(t, files, err, "ClusterTrustBundle projection is not supported by nodelet")

	bundles := &fakeTrustBundles{}
	deps.TrustBundles = bundles
	files, err = Projected(context.Background(), withUsers(ptr[int64](1000), nil, nil), src, deps)
	expectFiles(t, files, err, `corp.pem 0600 "PEM corp-ca" uid=1000`, `signer.pem 0600 "PEM example.com/signer" uid=1000`)
	if want := "[name=corp-ca optional=false signer=example.com/signer selector=map[env:prod] optional=true]"; fmt.Sprint(bundles.calls) != want {
		t.Errorf("trust bundle calls = %v, want %v", bundles.calls, want)
	}

	files, err = Projected(context.Background(), testPod(), &v1.ProjectedVolumeSource{Sources: []v1.VolumeProjection{
		{ClusterTrustBundle: &v1.ClusterTrustBundleProjection{Path: "x.pem"}},
	}}, deps)
	expectError(t, files, err, "ClusterTrustBundle projection requires either name or signerName to be set")
}

func TestProjectedUnsupportedSourcesAndMissingDeps(t *testing.T) {
	files, err := Projected(context.Background(), testPod(), &v1.ProjectedVolumeSource{Sources: []v1.VolumeProjection{
		{PodCertificate: &v1.PodCertificateProjection{SignerName: "example.com/s", CredentialBundlePath: "cred.pem"}},
	}}, ProjectedDeps{})
	expectError(t, files, err, "podCertificate projection is not supported by nodelet")

	files, err = Projected(context.Background(), testPod(), kubeAPIAccess(), ProjectedDeps{})
	expectError(t, files, err, "[cannot get a service account token for ns/web: no API server, cannot get configmap ns/kube-root-ca.crt: no API server]")
}
