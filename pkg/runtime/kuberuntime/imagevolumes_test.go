package kuberuntime

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/pkg/metrics"
	"github.com/nodelet/nodelet/pkg/runtime/container"
	"github.com/nodelet/nodelet/pkg/runtime/images"
)

const (
	toolsImage = "registry.example/tools:1.0"
	toolsID    = "sha256:70015"
)

// mountRecorder keeps the config of each container created; createErr, when set, may
// fail CreateContainer for a config, as a runtime would.
type mountRecorder struct {
	internalapi.RuntimeService
	mu        sync.Mutex
	configs   map[string]*runtimeapi.ContainerConfig
	createErr func(*runtimeapi.ContainerConfig) error
}

func (r *mountRecorder) CreateContainer(ctx context.Context, sandbox string, config *runtimeapi.ContainerConfig, sc *runtimeapi.PodSandboxConfig) (string, error) {
	if r.createErr != nil {
		if err := r.createErr(config); err != nil {
			return "", err
		}
	}
	id, err := r.RuntimeService.CreateContainer(ctx, sandbox, config, sc)
	if err == nil {
		r.mu.Lock()
		r.configs[config.GetMetadata().GetName()] = config
		r.mu.Unlock()
	}
	return id, err
}

func (r *mountRecorder) config(name string) *runtimeapi.ContainerConfig {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.configs[name]
}

// pullRecorder records the image and the user name of each pull.
type pullRecorder struct {
	internalapi.ImageManagerService
	mu    sync.Mutex
	pulls []string
}

func (p *pullRecorder) PullImage(ctx context.Context, spec *runtimeapi.ImageSpec, auth *runtimeapi.AuthConfig, sc *runtimeapi.PodSandboxConfig) (string, error) {
	p.mu.Lock()
	p.pulls = append(p.pulls, spec.GetImage()+" as "+auth.GetUsername())
	p.mu.Unlock()
	return p.ImageManagerService.PullImage(ctx, spec, auth, sc)
}

func (p *pullRecorder) pulled() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.pulls...)
}

// hostVolumes keeps MountsFor's contract: one host mount per volumeMount of a volume that
// is not an image volume, in order.
type hostVolumes struct{ dir string }

func (v hostVolumes) MountsFor(pod *v1.Pod, c *v1.Container, _ map[string]string) ([]*runtimeapi.Mount, error) {
	image := map[string]bool{}
	for _, vol := range pod.Spec.Volumes {
		image[vol.Name] = vol.Image != nil
	}
	var out []*runtimeapi.Mount
	for _, vm := range c.VolumeMounts {
		if !image[vm.Name] {
			out = append(out, &runtimeapi.Mount{ContainerPath: vm.MountPath, HostPath: filepath.Join(v.dir, vm.Name)})
		}
	}
	return out, nil
}

func (v hostVolumes) DevicesFor(*v1.Pod, *v1.Container) ([]*runtimeapi.Device, error) {
	return nil, nil
}

func (v hostVolumes) PodDir(uid types.UID) string { return filepath.Join(v.dir, string(uid)) }

type imageVolumeEnv struct {
	*testEnv
	runtime *mountRecorder
	pulls   *pullRecorder
}

// newImageVolumeEnv is a test env whose runtime has the tools image (ID toolsID) and
// records container configs and pulls.
func newImageVolumeEnv(t *testing.T, mutate ...func(*Options)) *imageVolumeEnv {
	t.Helper()
	e := &imageVolumeEnv{}
	env := newTestEnv(t, append([]func(*Options){func(o *Options) {
		e.runtime = &mountRecorder{RuntimeService: o.RuntimeService, configs: map[string]*runtimeapi.ContainerConfig{}}
		e.pulls = &pullRecorder{ImageManagerService: o.ImageService}
		o.RuntimeService, o.ImageService = e.runtime, e.pulls
		o.Volumes = hostVolumes{dir: t.TempDir()}
	}}, mutate...)...)
	env.img.Images[toolsImage] = &runtimeapi.Image{Id: toolsID, RepoTags: []string{toolsImage}, Spec: &runtimeapi.ImageSpec{Image: toolsImage}}
	e.testEnv = env
	return e
}

func imageVolume(name, ref string, policy v1.PullPolicy) v1.Volume {
	return v1.Volume{Name: name, VolumeSource: v1.VolumeSource{Image: &v1.ImageVolumeSource{Reference: ref, PullPolicy: policy}}}
}

func (e *imageVolumeEnv) sync(t *testing.T, pod *v1.Pod, secrets ...v1.Secret) *container.PodSyncResult {
	t.Helper()
	r := e.m.SyncPod(context.Background(), pod, e.podStatus(t, pod), secrets, nil)
	return &r
}

// The image volume is pulled before the container starts, with the pod's pull secret, and
// reaches the runtime as an image mount among the other mounts, in volumeMount order:
// no host path, read-only though the volumeMount is not, not relabeled, its subPath as the
// image sub path, its propagation translated.
func TestImageVolumeMountsTheImage(t *testing.T) {
	e := newImageVolumeEnv(t)
	delete(e.img.Images, toolsImage) // absent: pulled
	app := ctr("app")
	app.VolumeMounts = []v1.VolumeMount{
		{Name: "data", MountPath: "/data"},
		{Name: "tools", MountPath: "/tools"},
		{Name: "tools", MountPath: "opt/bin", SubPath: "usr/bin", MountPropagation: ptr.To(v1.MountPropagationHostToContainer)},
		{Name: "cache", MountPath: "/cache"},
	}
	pod := newPod("imgvol", app)
	pod.Annotations = map[string]string{"a": "b"}
	pod.Spec.ImagePullSecrets = []v1.LocalObjectReference{{Name: "regcred"}}
	pod.Spec.Volumes = []v1.Volume{
		{Name: "data", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
		imageVolume("tools", toolsImage, v1.PullIfNotPresent),
		{Name: "cache", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
	}
	secret := v1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "regcred", Namespace: "ns"}, Type: v1.SecretTypeDockerConfigJson,
		Data: map[string][]byte{v1.DockerConfigJsonKey: []byte(`{"auths":{"registry.example":{"username":"robot","password":"pw"}}}`)},
	}
	if err := e.sync(t, pod, secret).Error(); err != nil {
		t.Fatal(err)
	}
	if got := e.pulls.pulled(); len(got) == 0 || got[0] != toolsImage+" as robot" {
		t.Errorf("pulls %q, want the tools image first, with the pod's pull secret", got)
	}
	if !hasEvent(e.events(), `Normal Pulling Pulling image "`+toolsImage+`"`) {
		t.Error("no Pulling event for the image volume")
	}
	mounts := e.runtime.config("app").GetMounts()
	var paths []string
	for _, m := range mounts {
		paths = append(paths, m.ContainerPath)
	}
	if got := strings.Join(paths, ","); !strings.HasPrefix(got, "/data,/tools,/opt/bin,/cache") {
		t.Fatalf("mounts at %s, want the volumeMounts' order", got)
	}
	id := e.img.Images[toolsImage].GetId() // what the pull made
	for i, sub := range map[int]string{1: "", 2: "usr/bin"} {
		m := mounts[i]
		if m.HostPath != "" || m.GetImage().GetImage() != id || m.GetImage().GetUserSpecifiedImage() != toolsImage ||
			m.GetImage().GetAnnotations()["a"] != "b" || m.ImageSubPath != sub || !m.Readonly || m.SelinuxRelabel {
			t.Errorf("mount %d: %+v, want read-only image %s (%s), sub path %q", i, m, id, toolsImage, sub)
		}
	}
	if mounts[1].Propagation != runtimeapi.MountPropagation_PROPAGATION_PRIVATE ||
		mounts[2].Propagation != runtimeapi.MountPropagation_PROPAGATION_HOST_TO_CONTAINER {
		t.Errorf("propagations %v, %v", mounts[1].Propagation, mounts[2].Propagation)
	}
	if mounts[0].GetImage() != nil || mounts[3].GetImage() != nil {
		t.Error("a host volume's mount carries an image")
	}
}

// A present image is mounted under its ID, without a pull, when the policy allows.
func TestImageVolumeUsesThePresentImage(t *testing.T) {
	e := newImageVolumeEnv(t)
	app := ctr("app")
	app.VolumeMounts = []v1.VolumeMount{{Name: "tools", MountPath: "/tools"}}
	pod := newPod("present", app)
	pod.Spec.Volumes = []v1.Volume{imageVolume("tools", toolsImage, "")} // defaults to IfNotPresent
	if err := e.sync(t, pod).Error(); err != nil {
		t.Fatal(err)
	}
	if got := e.pulls.pulled(); len(got) != 0 {
		t.Errorf("pulled %q, want none", got)
	}
	if m := e.runtime.config("app").GetMounts()[0]; m.GetImage().GetImage() != toolsID {
		t.Errorf("mount %+v, want image %s", m, toolsID)
	}
	if !hasEvent(e.events(), `Normal Pulled Container image "`+toolsImage+`" already present on machine`) {
		t.Error("no Pulled event for the present image")
	}
}

// The pull policy defaults as the API server's: a :latest image is pulled though present.
func TestImageVolumeLatestIsAlwaysPulled(t *testing.T) {
	e := newImageVolumeEnv(t)
	latest := "registry.example/tools:latest"
	e.img.SetFakeImages([]string{testImage, latest})
	app := ctr("app")
	app.VolumeMounts = []v1.VolumeMount{{Name: "tools", MountPath: "/tools"}}
	pod := newPod("latest", app)
	pod.Spec.Volumes = []v1.Volume{imageVolume("tools", latest, "")}
	if err := e.sync(t, pod).Error(); err != nil {
		t.Fatal(err)
	}
	if got := e.pulls.pulled(); len(got) != 1 || !strings.HasPrefix(got[0], latest) {
		t.Errorf("pulled %q, want %s", got, latest)
	}
}

// A failed pull fails only the containers that mount the volume, with the pull's reason and
// message, before their own image or any config; the others start. The volume is not pulled
// again by a sync that starts nothing.
func TestImageVolumePullFailureFailsTheMountingContainers(t *testing.T) {
	e := newImageVolumeEnv(t)
	uses := ctr("uses")
	uses.VolumeMounts = []v1.VolumeMount{{Name: "absent", MountPath: "/x"}}
	pod := newPod("failing", uses, ctr("other"))
	absent := "registry.example/absent:1.0"
	pod.Spec.Volumes = []v1.Volume{imageVolume("absent", absent, v1.PullNever)}
	r := e.sync(t, pod)
	failed := failedResult(r, container.StartContainer)
	if failed == nil || failed.Target != "uses" || !errors.Is(failed.Error, images.ErrImageNeverPull) ||
		failed.Message != `Container image "`+absent+`" is not present with pull policy of Never` {
		t.Fatalf("failure %+v, want uses refused with ErrImageNeverPull", failed)
	}
	if got := startedNames(r); len(got) != 1 || got[0] != "other" {
		t.Errorf("started %v, want other only", got)
	}
	if e.runtime.config("uses") != nil {
		t.Error("uses was created without its image volume")
	}
	events := e.events()
	for _, want := range []string{
		`Warning ErrImageNeverPull Container image "` + absent + `" is not present with pull policy of Never`,
		"Warning Failed Error: ErrImageNeverPull",
	} {
		if !hasEvent(events, want) {
			t.Errorf("events %q, want %q", events, want)
		}
	}

	// The next sync tries "uses" again, and its volume's image with it.
	r = e.sync(t, pod)
	if failed := failedResult(r, container.StartContainer); failed == nil || failed.Target != "uses" || !errors.Is(failed.Error, images.ErrImageNeverPull) {
		t.Errorf("retry: failure %+v, want uses refused again", failed)
	}
	if !hasEvent(e.events(), `Warning ErrImageNeverPull Container image "`+absent+`"`) {
		t.Error("the retry did not look for the volume's image again")
	}
}

// No container to start, no image volume pulled.
func TestImageVolumeNotPulledWhenNothingStarts(t *testing.T) {
	e := newImageVolumeEnv(t)
	app := ctr("app")
	app.VolumeMounts = []v1.VolumeMount{{Name: "tools", MountPath: "/tools"}}
	pod := newPod("steady", app)
	pod.Spec.Volumes = []v1.Volume{imageVolume("tools", toolsImage, v1.PullAlways)}
	if err := e.sync(t, pod).Error(); err != nil {
		t.Fatal(err)
	}
	if n := len(e.pulls.pulled()); n != 1 {
		t.Fatalf("%d pulls for the first sync, want 1", n)
	}
	if err := e.sync(t, pod).Error(); err != nil {
		t.Fatal(err)
	}
	if n := len(e.pulls.pulled()); n != 1 {
		t.Errorf("%d pulls after a sync that started nothing, want still 1", n)
	}
}

// A runtime that does not know image mounts (containerd 1.6 drops the field and fails on
// the empty host path) is not worked around: the container is not created, and the
// runtime's error is its CreateContainerError, as under upstream's kubelet.
func TestImageVolumeOnARuntimeWithoutSupport(t *testing.T) {
	const refusal = `failed to generate container "x" spec: failed to generate spec: failed to mkdir "": mkdir : no such file or directory`
	e := newImageVolumeEnv(t)
	e.runtime.createErr = func(config *runtimeapi.ContainerConfig) error {
		for _, m := range config.GetMounts() {
			if m.GetHostPath() == "" {
				return grpcstatus.Error(codes.Unknown, refusal)
			}
		}
		return nil
	}
	app := ctr("app")
	app.VolumeMounts = []v1.VolumeMount{{Name: "tools", MountPath: "/tools"}}
	pod := newPod("old", app)
	pod.Spec.Volumes = []v1.Volume{imageVolume("tools", toolsImage, v1.PullIfNotPresent)}
	requested := testutil.ToFloat64(metrics.ImageVolumeRequestedTotal)
	mountErrors := testutil.ToFloat64(metrics.ImageVolumeMountedErrorsTotal)

	failed := failedResult(e.sync(t, pod), container.StartContainer)
	if failed == nil || !errors.Is(failed.Error, container.ErrCreateContainer) || failed.Message != refusal {
		t.Fatalf("failure %+v, want CreateContainerError with the runtime's message", failed)
	}
	if e.runtime.config("app") != nil {
		t.Error("the container was created without its image volume")
	}
	if !hasEvent(e.events(), "Warning Failed Error: "+refusal) {
		t.Error("no Failed event with the runtime's message")
	}
	if got := testutil.ToFloat64(metrics.ImageVolumeRequestedTotal) - requested; got != 1 {
		t.Errorf("requested +%v, want +1", got)
	}
	// Upstream counts only the runtime's ImageVolumeMountFailed as a mount error.
	if got := testutil.ToFloat64(metrics.ImageVolumeMountedErrorsTotal) - mountErrors; got != 0 {
		t.Errorf("mount errors +%v, want +0", got)
	}
}

// The metrics count the volumes a container mounts and, per mount, its outcome.
func TestImageVolumeMetrics(t *testing.T) {
	e := newImageVolumeEnv(t)
	app := ctr("app")
	app.VolumeMounts = []v1.VolumeMount{{Name: "tools", MountPath: "/a"}, {Name: "tools", MountPath: "/b", SubPath: "etc"}}
	pod := newPod("counted", app, ctr("plain"))
	pod.Spec.Volumes = []v1.Volume{imageVolume("tools", toolsImage, v1.PullIfNotPresent)}
	read := func() [3]float64 {
		return [3]float64{testutil.ToFloat64(metrics.ImageVolumeRequestedTotal),
			testutil.ToFloat64(metrics.ImageVolumeMountedSucceedTotal), testutil.ToFloat64(metrics.ImageVolumeMountedErrorsTotal)}
	}
	before := read()
	if err := e.sync(t, pod).Error(); err != nil {
		t.Fatal(err)
	}
	after := read()
	if d := [3]float64{after[0] - before[0], after[1] - before[1], after[2] - before[2]}; d != [3]float64{1, 2, 0} {
		t.Errorf("requested, succeeded, failed grew by %v, want [1 2 0]", d)
	}

	e2 := newImageVolumeEnv(t)
	e2.runtime.createErr = func(*runtimeapi.ContainerConfig) error {
		return grpcstatus.Error(codes.Unknown, "ImageVolumeMountFailed: failed to resolve image")
	}
	pod2 := newPod("counted2", app)
	pod2.Spec.Volumes = pod.Spec.Volumes
	before = read()
	e2.sync(t, pod2)
	after = read()
	if d := [3]float64{after[0] - before[0], after[1] - before[1], after[2] - before[2]}; d != [3]float64{1, 0, 2} {
		t.Errorf("with the runtime's mount failure: grew by %v, want [1 0 2]", d)
	}
}

func TestImageMountChecksTheVolumeMount(t *testing.T) {
	image := &runtimeapi.ImageSpec{Image: toolsID}
	env := map[string]string{"DIR": "usr/share"}
	for _, tc := range []struct {
		name, wantSub, wantErr string
		vm                     v1.VolumeMount
		rro                    bool
		wantRRO                bool
	}{
		{name: "subPathExpr", vm: v1.VolumeMount{Name: "v", MountPath: "/m", SubPathExpr: "$(DIR)/doc"}, wantSub: "usr/share/doc"},
		{name: "missing variable", vm: v1.VolumeMount{Name: "v", MountPath: "/m", SubPathExpr: "$(NOPE)/$(ALSO)"}, wantErr: "missing value for ALSO, NOPE"},
		{name: "absolute subPath", vm: v1.VolumeMount{Name: "v", MountPath: "/m", SubPath: "/etc"}, wantErr: "error SubPath `/etc` must not be an absolute path"},
		{name: "backsteps", vm: v1.VolumeMount{Name: "v", MountPath: "/m", SubPath: "a/../../b"}, wantErr: "unable to provision SubPath `a/../../b`: must not contain '..'"},
		{name: "bad propagation", vm: v1.VolumeMount{Name: "v", MountPath: "/m", MountPropagation: ptr.To(v1.MountPropagationMode("Sideways"))}, wantErr: `invalid MountPropagation mode: "Sideways"`},
		{name: "rro if possible", vm: v1.VolumeMount{Name: "v", MountPath: "/m", ReadOnly: true, RecursiveReadOnly: ptr.To(v1.RecursiveReadOnlyIfPossible)}, rro: true, wantRRO: true},
		{name: "rro if possible, unsupported", vm: v1.VolumeMount{Name: "v", MountPath: "/m", ReadOnly: true, RecursiveReadOnly: ptr.To(v1.RecursiveReadOnlyIfPossible)}},
		{name: "rro enabled, unsupported", vm: v1.VolumeMount{Name: "v", MountPath: "/m", ReadOnly: true, RecursiveReadOnly: ptr.To(v1.RecursiveReadOnlyEnabled)},
			wantErr: `failed to resolve recursive read-only mode: volume "v" requested recursive read-only mode, but it is not supported by the runtime`},
		{name: "rro without readOnly", vm: v1.VolumeMount{Name: "v", MountPath: "/m", RecursiveReadOnly: ptr.To(v1.RecursiveReadOnlyEnabled)}, rro: true,
			wantErr: `volume "v" requested recursive read-only mode, but it is not read-only`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := imageMount(&tc.vm, image, env, tc.rro)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if m.ImageSubPath != tc.wantSub || m.RecursiveReadOnly != tc.wantRRO || !m.Readonly {
				t.Errorf("mount %+v, want sub path %q, rro %v, read-only", m, tc.wantSub, tc.wantRRO)
			}
		})
	}
}

// A volumeMount of an image volume whose image is not at hand is an error, never a
// container without the volume; the host mounts keep their places.
func TestWithImageMountsNeverDropsAnImageVolume(t *testing.T) {
	pod := newPod("p")
	pod.Spec.Volumes = []v1.Volume{imageVolume("img", toolsImage, v1.PullIfNotPresent), {Name: "host"}}
	c := ctr("app")
	c.VolumeMounts = []v1.VolumeMount{{Name: "host", MountPath: "/h1"}, {Name: "img", MountPath: "/i"}, {Name: "host", MountPath: "/h2"}}
	host := []*runtimeapi.Mount{{ContainerPath: "/h1", HostPath: "/x"}, {ContainerPath: "/h2", HostPath: "/y"}}
	if _, err := withImageMounts(pod, &c, host, nil, nil, false); err == nil || !strings.Contains(err.Error(), `image volume "img"`) {
		t.Fatalf("error %v, want the unpulled image volume named", err)
	}
	got, err := withImageMounts(pod, &c, host, imageVolumes{"img": {Image: toolsID}}, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[0] != host[0] || got[1].GetImage().GetImage() != toolsID || got[2] != host[1] {
		t.Errorf("mounts %v", got)
	}
}
