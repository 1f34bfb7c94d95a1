package payload

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodelet/nodelet/pkg/node/volumes/atomic"
)

// fakeObjects serves configMaps and secrets from maps keyed "ns/name", with
// NotFound errors worded as pkg/api/apiobjects words them.
type fakeObjects struct {
	configMaps map[string]*v1.ConfigMap
	secrets    map[string]*v1.Secret
	err        error // returned for every lookup when set
}

func (f *fakeObjects) GetConfigMap(_ context.Context, ns, name string) (*v1.ConfigMap, error) {
	if f.err != nil {
		return nil, f.err
	}
	if cm, ok := f.configMaps[ns+"/"+name]; ok {
		return cm, nil
	}
	return nil, apierrors.NewNotFound(v1.Resource("configmap"), name)
}

func (f *fakeObjects) GetSecret(_ context.Context, ns, name string) (*v1.Secret, error) {
	if f.err != nil {
		return nil, f.err
	}
	if s, ok := f.secrets[ns+"/"+name]; ok {
		return s, nil
	}
	return nil, apierrors.NewNotFound(v1.Resource("secret"), name)
}

func testObjects() *fakeObjects {
	return &fakeObjects{
		configMaps: map[string]*v1.ConfigMap{
			"ns/cfg": {
				Data:       map[string]string{"app.yaml": "a: 1", "other": "o"},
				BinaryData: map[string][]byte{"blob": {0, 1, 2}},
			},
		},
		secrets: map[string]*v1.Secret{
			"ns/creds": {Data: map[string][]byte{"user": []byte("u"), "pass": []byte("p")}},
		},
	}
}

func testPod() *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns", UID: "uid-1"}}
}

func ptr[T any](v T) *T { return &v }

// describe renders files as sorted "path mode data [uid]" lines for comparison.
func describe(files map[string]atomic.FileProjection) string {
	var lines []string
	for p, f := range files {
		line := fmt.Sprintf("%s %#o %q", p, f.Mode, f.Data)
		if f.FsUser != nil {
			line += fmt.Sprintf(" uid=%d", *f.FsUser)
		}
		lines = append(lines, line)
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

func expectFiles(t *testing.T, got map[string]atomic.FileProjection, err error, want ...string) {
	t.Helper()
	if err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
	sort.Strings(want)
	if g, w := describe(got), strings.Join(want, "\n"); g != w {
		t.Errorf("files:\n%s\nwant:\n%s", g, w)
	}
}

func expectError(t *testing.T, got map[string]atomic.FileProjection, err error, want string) {
	t.Helper()
	if err == nil || err.Error() != want {
		t.Errorf("err = %v, want %q (files %v)", err, want, describe(got))
	}
}

func TestConfigMapAllKeysWithDefaultMode(t *testing.T) {
	files, err := ConfigMap(context.Background(), testPod(), &v1.ConfigMapVolumeSource{
		LocalObjectReference: v1.LocalObjectReference{Name: "cfg"},
	}, testObjects())
	expectFiles(t, files, err, `app.yaml 0644 "a: 1"`, `other 0644 "o"`, `blob 0644 "\x00\x01\x02"`)
}

func TestConfigMapItems(t *testing.T) {
	files, err := ConfigMap(context.Background(), testPod(), &v1.ConfigMapVolumeSource{
		LocalObjectReference: v1.LocalObjectReference{Name: "cfg"},
		DefaultMode:          ptr[int32](0o440),
		Items: []v1.KeyToPath{
			{Key: "app.yaml", Path: "conf/app.yaml"},
			{Key: "blob", Path: "bin/blob", Mode: ptr[int32](0o400)},
		},
	}, testObjects())
	expectFiles(t, files, err, `conf/app.yaml 0440 "a: 1"`, `bin/blob 0400 "\x00\x01\x02"`)
}

func TestConfigMapMissingKey(t *testing.T) {
	src := &v1.ConfigMapVolumeSource{
		LocalObjectReference: v1.LocalObjectReference{Name: "cfg"},
		Items:                []v1.KeyToPath{{Key: "app.yaml", Path: "a"}, {Key: "nope", Path: "n"}},
	}
	files, err := ConfigMap(context.Background(), testPod(), src, testObjects())
	expectError(t, files, err, "configmap references non-existent config key: nope")

	src.Optional = ptr(true)
	files, err = ConfigMap(context.Background(), testPod(), src, testObjects())
	expectFiles(t, files, err, `a 0644 "a: 1"`)
}

func TestConfigMapMissingObject(t *testing.T) {
	src := &v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: "x"}}
	files, err := ConfigMap(context.Background(), testPod(), src, testObjects())
	expectError(t, files, err, `configmap "x" not found`)

	src.Optional = ptr(true)
	files, err = ConfigMap(context.Background(), testPod(), src, testObjects())
	expectFiles(t, files, err)
	if files == nil {
		t.Error("an optional missing configMap must give an empty, non-nil payload")
	}
}

func TestOptionalDoesNotHideOtherErrors(t *testing.T) {
	objs := &fakeObjects{err: errors.New("connection refused")}
	files, err := ConfigMap(context.Background(), testPod(), &v1.ConfigMapVolumeSource{
		LocalObjectReference: v1.LocalObjectReference{Name: "cfg"}, Optional: ptr(true),
	}, objs)
	expectError(t, files, err, "connection refused")
	files, err = Secret(context.Background(), testPod(), &v1.SecretVolumeSource{SecretName: "creds", Optional: ptr(true)}, objs)
	expectError(t, files, err, "connection refused")
}

func TestNoObjectsGetter(t *testing.T) {
	_, err := ConfigMap(context.Background(), testPod(), &v1.ConfigMapVolumeSource{
		LocalObjectReference: v1.LocalObjectReference{Name: "cfg"},
	}, nil)
	if err == nil || !strings.Contains(err.Error(), "no API server") {
		t.Errorf("err = %v, want a no-API-server error", err)
	}
}

func TestSecret(t *testing.T) {
	ctx := context.Background()
	files, err := Secret(ctx, testPod(), &v1.SecretVolumeSource{SecretName: "creds"}, testObjects())
	expectFiles(t, files, err, `user 0644 "u"`, `pass 0644 "p"`)

	files, err = Secret(ctx, testPod(), &v1.SecretVolumeSource{
		SecretName:  "creds",
		DefaultMode: ptr[int32](0o400),
		Items:       []v1.KeyToPath{{Key: "user", Path: "u/name"}, {Key: "pass", Path: "pw", Mode: ptr[int32](0o600)}},
	}, testObjects())
	expectFiles(t, files, err, `u/name 0400 "u"`, `pw 0600 "p"`)

	files, err = Secret(ctx, testPod(), &v1.SecretVolumeSource{
		SecretName: "creds", Items: []v1.KeyToPath{{Key: "token", Path: "t"}},
	}, testObjects())
	expectError(t, files, err, "references non-existent secret key: token")

	files, err = Secret(ctx, testPod(), &v1.SecretVolumeSource{
		SecretName: "creds", Optional: ptr(true), Items: []v1.KeyToPath{{Key: "token", Path: "t"}},
	}, testObjects())
	expectFiles(t, files, err)

	files, err = Secret(ctx, testPod(), &v1.SecretVolumeSource{SecretName: "x"}, testObjects())
	expectError(t, files, err, `secret "x" not found`)

	files, err = Secret(ctx, testPod(), &v1.SecretVolumeSource{SecretName: "x", Optional: ptr(true)}, testObjects())
	expectFiles(t, files, err)
}
