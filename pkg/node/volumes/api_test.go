package volumes

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// fakeAPI serves config maps, secrets, claims and volumes from maps.
type fakeAPI struct {
	configMaps map[string]*v1.ConfigMap
	secrets    map[string]*v1.Secret
	claims     map[string]*v1.PersistentVolumeClaim
	volumes    map[string]*v1.PersistentVolume
	forgotten  []types.UID
}

func (f *fakeAPI) GetConfigMap(_ context.Context, _, name string) (*v1.ConfigMap, error) {
	if cm, ok := f.configMaps[name]; ok {
		return cm, nil
	}
	return nil, apierrors.NewNotFound(v1.Resource("configmap"), name)
}

func (f *fakeAPI) GetSecret(_ context.Context, _, name string) (*v1.Secret, error) {
	if s, ok := f.secrets[name]; ok {
		return s, nil
	}
	return nil, apierrors.NewNotFound(v1.Resource("secret"), name)
}

func (f *fakeAPI) ServiceAccountToken(_ context.Context, pod *v1.Pod, _ *v1.ServiceAccountTokenProjection) ([]byte, error) {
	return []byte("token-of-" + pod.Name), nil
}

func (f *fakeAPI) GetServiceAccountToken(_ context.Context, namespace, name string, tr *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error) {
	out := tr.DeepCopy()
	out.Status.Token = "token-of-" + namespace + "/" + name + "-for-" + tr.Spec.BoundObjectRef.Name
	return out, nil
}

func (f *fakeAPI) DeleteServiceAccountToken(uid types.UID) { f.forgotten = append(f.forgotten, uid) }

func (f *fakeAPI) GetPersistentVolumeClaim(_ context.Context, _, name string) (*v1.PersistentVolumeClaim, error) {
	if c, ok := f.claims[name]; ok {
		return c, nil
	}
	return nil, apierrors.NewNotFound(v1.Resource("persistentvolumeclaims"), name)
}

func (f *fakeAPI) GetPersistentVolume(_ context.Context, name string) (*v1.PersistentVolume, error) {
	if pv, ok := f.volumes[name]; ok {
		return pv, nil
	}
	return nil, apierrors.NewNotFound(v1.Resource("persistentvolumes"), name)
}

func newAPIManager(t *testing.T, api *fakeAPI) *Manager {
	m := newTestManager(t)
	m.SetAPI(API{Objects: api, Tokens: api, Claims: api})
	return m
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestConfigMapVolumeIsWrittenAndMountedReadOnly(t *testing.T) {
	api := &fakeAPI{configMaps: map[string]*v1.ConfigMap{"cfg": {Data: map[string]string{"app.conf": "v=1"}}}}
	m := newAPIManager(t, api)
	vol := v1.Volume{Name: "config", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: "cfg"}}}}
	pod := newPod("uid-1", vol)
	must(t, m.SetUpPod(ctx, pod))
	dir := filepath.Join(m.rootDir, "pods/uid-1/volumes/kubernetes.io~configmap/config")
	if got := readFile(t, filepath.Join(dir, "app.conf")); got != "v=1" {
		t.Errorf("app.conf = %q", got)
	}
	if target, err := os.Readlink(filepath.Join(dir, "app.conf")); err != nil || target != "..data/app.conf" {
		t.Errorf("app.conf is not the atomic writer's symlink: %q, %v", target, err)
	}

	// An edit reaches the file on the next set-up.
	api.configMaps["cfg"] = &v1.ConfigMap{Data: map[string]string{"app.conf": "v=2"}}
	must(t, m.SetUpPod(ctx, pod))
	if got := readFile(t, filepath.Join(dir, "app.conf")); got != "v=2" {
		t.Errorf("after the edit app.conf = %q", got)
	}

	mounts, err := m.MountsFor(pod, &v1.Container{Name: "app", VolumeMounts: []v1.VolumeMount{{Name: "config", MountPath: "/etc/app"}}}, nil)
	must(t, err)
	if mounts[0].HostPath != dir || !mounts[0].Readonly {
		t.Errorf("mount = %+v, want %s read-only", mounts[0], dir)
	}
}

func TestMissingConfigMapFailsThatVolumeOnly(t *testing.T) {
	m := newAPIManager(t, &fakeAPI{})
	pod := newPod("uid-1",
		v1.Volume{Name: "config", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: "missing"}}}},
		v1.Volume{Name: "opt", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: "missing"}, Optional: ptr.To(true)}}},
		emptyDirVolume("scratch", ""),
	)
	failed := MountErrors(m.SetUpPod(ctx, pod))
	if len(failed) != 1 || failed[0].Error() != `MountVolume.SetUp failed for volume "config" : configmap "missing" not found` {
		t.Fatalf("mount errors %v, want one for config, worded as upstream", failed)
	}
}

func TestSecretAndProjectedVolumesAreOnTmpfs(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("tmpfs mounts need root")
	}
	api := &fakeAPI{secrets: map[string]*v1.Secret{"creds": {Data: map[string][]byte{"password": []byte("hunter2")}}}}
	m := newAPIManager(t, api)
	pod := newPod("uid-1",
		v1.Volume{Name: "creds", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: "creds"}}},
		v1.Volume{Name: "token", VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{Sources: []v1.VolumeProjection{
			{ServiceAccountToken: &v1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: ptr.To[int64](3600)}}}}}},
	)
	must(t, m.SetUpPod(ctx, pod))
	t.Cleanup(func() { _ = m.CleanupPod("uid-1") })
	for _, vol := range pod.Spec.Volumes {
		dir := m.projectionPath("uid-1", &vol)
		mounted, err := m.isTmpfsMountPoint(dir)
		if err != nil || !mounted {
			t.Errorf("volume %s: tmpfs mounted %v, %v", vol.Name, mounted, err)
		}
	}
	if got := readFile(t, filepath.Join(m.projectionPath("uid-1", &pod.Spec.Volumes[1]), "token")); got != "token-of-web" {
		t.Errorf("token = %q", got)
	}
	must(t, m.SetUpPod(ctx, pod)) // idempotent: no second tmpfs
	must(t, m.CleanupPod("uid-1"))
	if _, err := os.Stat(m.PodDir("uid-1")); !os.IsNotExist(err) {
		t.Errorf("pod directory left after cleanup: %v", err)
	}
	if len(api.forgotten) != 1 || api.forgotten[0] != "uid-1" {
		t.Errorf("the pod's tokens were not forgotten: %v", api.forgotten)
	}
}

func boundClaim(name, pvName string, uid types.UID) *v1.PersistentVolumeClaim {
	return &v1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns1", UID: uid},
		Spec:       v1.PersistentVolumeClaimSpec{VolumeName: pvName},
		Status:     v1.PersistentVolumeClaimStatus{Phase: v1.ClaimBound},
	}
}

func TestClaimOnHostPathVolume(t *testing.T) {
	data := t.TempDir()
	api := &fakeAPI{
		claims: map[string]*v1.PersistentVolumeClaim{"data": boundClaim("data", "pv1", "claim-uid"), "pending": {Status: v1.PersistentVolumeClaimStatus{Phase: v1.ClaimPending}}},
		volumes: map[string]*v1.PersistentVolume{"pv1": {
			ObjectMeta: metav1.ObjectMeta{Name: "pv1"},
			Spec: v1.PersistentVolumeSpec{
				PersistentVolumeSource: v1.PersistentVolumeSource{HostPath: &v1.HostPathVolumeSource{Path: data}},
				ClaimRef:               &v1.ObjectReference{UID: "claim-uid"},
			},
		}},
	}
	m := newAPIManager(t, api)
	pod := newPod("uid-1",
		v1.Volume{Name: "data", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "data", ReadOnly: true}}},
		v1.Volume{Name: "pending", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "pending"}}},
		v1.Volume{Name: "scratch", VolumeSource: v1.VolumeSource{Ephemeral: &v1.EphemeralVolumeSource{}}},
	)
	failed := MountErrors(m.SetUpPod(ctx, pod))
	want := map[string]string{
		"pending": "error processing PVC ns1/pending: PVC is not bound",
		"scratch": `error processing PVC ns1/web-scratch: persistentvolumeclaims "web-scratch" not found`,
	}
	if len(failed) != len(want) {
		t.Fatalf("mount errors %v, want %v", failed, want)
	}
	for _, me := range failed {
		if me.Err.Error() != want[me.Volume] {
			t.Errorf("volume %s: %v, want %q", me.Volume, me.Err, want[me.Volume])
		}
	}
	mounts, err := m.MountsFor(pod, &v1.Container{Name: "app", VolumeMounts: []v1.VolumeMount{{Name: "data", MountPath: "/data"}}}, nil)
	must(t, err)
	if mounts[0].HostPath != data || !mounts[0].Readonly {
		t.Errorf("mount = %+v, want %s read-only", mounts[0], data)
	}
}

func TestEphemeralClaimMustBeOwnedByThePod(t *testing.T) {
	claim := boundClaim("web-scratch", "pv1", "claim-uid")
	api := &fakeAPI{claims: map[string]*v1.PersistentVolumeClaim{"web-scratch": claim}}
	m := newAPIManager(t, api)
	pod := newPod("uid-1", v1.Volume{Name: "scratch", VolumeSource: v1.VolumeSource{Ephemeral: &v1.EphemeralVolumeSource{}}})
	failed := MountErrors(m.SetUpPod(ctx, pod))
	if len(failed) != 1 || !strings.Contains(failed[0].Error(), "was not created for pod ns1/web (pod is not owner)") {
		t.Fatalf("mount errors %v, want the claim refused", failed)
	}
}

func TestLocalVolumeIsBindMountedAndUnmounted(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("bind mounts need root")
	}
	data := t.TempDir()
	must(t, os.WriteFile(filepath.Join(data, "kept"), []byte("x"), 0o644))
	api := &fakeAPI{
		claims: map[string]*v1.PersistentVolumeClaim{"data": boundClaim("data", "local-pv", "claim-uid")},
		volumes: map[string]*v1.PersistentVolume{"local-pv": {
			ObjectMeta: metav1.ObjectMeta{Name: "local-pv"},
			Spec: v1.PersistentVolumeSpec{
				PersistentVolumeSource: v1.PersistentVolumeSource{Local: &v1.LocalVolumeSource{Path: data}},
				ClaimRef:               &v1.ObjectReference{UID: "claim-uid"},
			},
		}},
	}
	m := newAPIManager(t, api)
	pod := newPod("uid-1", v1.Volume{Name: "data", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}})
	pod.Spec.SecurityContext = &v1.PodSecurityContext{FSGroup: ptr.To[int64](2000)}
	must(t, m.SetUpPod(ctx, pod))
	t.Cleanup(func() { _ = m.CleanupPod("uid-1") })
	must(t, m.SetUpPod(ctx, pod)) // idempotent: no second bind mount
	dir := filepath.Join(m.rootDir, "pods/uid-1/volumes/kubernetes.io~local-volume/local-pv")
	if got := readFile(t, filepath.Join(dir, "kept")); got != "x" {
		t.Errorf("bind mount shows %q", got)
	}
	mounts, err := readMountInfo(m.mountInfoPath)
	must(t, err)
	if n := len(mountPointsUnder(mounts, m.PodDir("uid-1"))); n != 1 {
		t.Errorf("%d mounts under the pod directory, want 1", n)
	}
	must(t, m.CleanupPod("uid-1"))
	if got := readFile(t, filepath.Join(data, "kept")); got != "x" {
		t.Errorf("the local volume's data is gone after cleanup: %q", got)
	}
	if _, err := os.Stat(m.PodDir("uid-1")); !os.IsNotExist(err) {
		t.Errorf("pod directory left after cleanup: %v", err)
	}
}

func TestSubPathExpr(t *testing.T) {
	requireRoot(t)
	m := newTestManager(t)
	unmountOnCleanup(t, m.rootDir)
	pod := newPod("uid-1", emptyDirVolume("logs", ""))
	must(t, m.SetUpPod(ctx, pod))
	c := &v1.Container{Name: "app", VolumeMounts: []v1.VolumeMount{{Name: "logs", MountPath: "/logs", SubPathExpr: "$(POD_NAME)/x"}}}
	mounts, err := m.MountsFor(pod, c, map[string]string{"POD_NAME": "web-1"})
	must(t, err)
	if want := filepath.Join(m.PodDir("uid-1"), "volume-subpaths/logs/app/0"); mounts[0].HostPath != want {
		t.Errorf("host path %s, want %s", mounts[0].HostPath, want)
	}
	assertSameFile(t, mounts[0].HostPath, filepath.Join(m.emptyDirPath("uid-1", "logs"), "web-1/x"))
	c.VolumeMounts[0].SubPathExpr = "$(UP)"
	if _, err := m.MountsFor(pod, c, map[string]string{"UP": "../../etc"}); err == nil {
		t.Error("a subPathExpr expanding to ../.. was accepted")
	}
}
