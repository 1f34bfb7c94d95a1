package volumes

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/pkg/runtime/criconfig"
)

var ctx = context.Background()

func newTestManager(t *testing.T) *Manager {
	t.Helper()
	m := NewManager(t.TempDir())
	m.selinuxEnabled = false
	return m
}

func newPod(uid types.UID, volumes ...v1.Volume) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns1", UID: uid},
		Spec:       v1.PodSpec{Volumes: volumes},
	}
}

func emptyDirVolume(name string, medium v1.StorageMedium) v1.Volume {
	return v1.Volume{Name: name, VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{Medium: medium}}}
}

func hostPathVolume(name, path string) v1.Volume {
	return v1.Volume{Name: name, VolumeSource: v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: path}}}
}

func perm(t *testing.T, path string) os.FileMode {
	t.Helper()
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return info.Mode().Perm()
}

func TestPodDirLayout(t *testing.T) {
	m := NewManager("/var/lib/nodelet")
	if got := m.PodDir("abc-123"); got != "/var/lib/nodelet/pods/abc-123" {
		t.Errorf("PodDir = %q", got)
	}
	if got := m.emptyDirPath("abc-123", "cache"); got != "/var/lib/nodelet/pods/abc-123/volumes/kubernetes.io~empty-dir/cache" {
		t.Errorf("emptyDirPath = %q", got)
	}
}

func TestSetUpPodCreatesEmptyDir(t *testing.T) {
	m := newTestManager(t)
	pod := newPod("uid-1", emptyDirVolume("cache", ""))
	must(t, m.SetUpPod(ctx, pod))

	dir := filepath.Join(m.PodDir("uid-1"), "volumes", "kubernetes.io~empty-dir", "cache")
	if got := perm(t, dir); got != 0o777 {
		t.Errorf("emptyDir mode = %o, want 777", got)
	}
	for _, parent := range []string{m.PodDir("uid-1"), filepath.Dir(dir), filepath.Dir(filepath.Dir(dir))} {
		if got := perm(t, parent); got != 0o750 {
			t.Errorf("%s mode = %o, want 750", parent, got)
		}
	}
	// Set-up is idempotent and keeps the volume's content.
	must(t, os.WriteFile(filepath.Join(dir, "f"), []byte("x"), 0o644))
	must(t, os.Chmod(dir, 0o700))
	must(t, m.SetUpPod(ctx, pod))
	if _, err := os.Stat(filepath.Join(dir, "f")); err != nil {
		t.Errorf("second SetUpPod lost the content: %v", err)
	}
	if got := perm(t, dir); got != 0o777 {
		t.Errorf("emptyDir mode after second set-up = %o, want 777", got)
	}
}

func TestSetUpPodWithoutVolumesCreatesPodDir(t *testing.T) {
	m := newTestManager(t)
	must(t, m.SetUpPod(ctx, newPod("uid-1")))
	if got := perm(t, m.PodDir("uid-1")); got != 0o750 {
		t.Errorf("pod dir mode = %o, want 750", got)
	}
}

func TestSetUpPodRejectsInvalidUID(t *testing.T) {
	m := newTestManager(t)
	for _, uid := range []types.UID{"", ".", "..", "a/b"} {
		if err := m.SetUpPod(ctx, newPod(uid)); err == nil {
			t.Errorf("SetUpPod with UID %q succeeded", uid)
		}
		if err := m.CleanupPod(uid); err == nil {
			t.Errorf("CleanupPod(%q) succeeded", uid)
		}
	}
	if _, err := os.Stat(filepath.Join(m.rootDir, "pods")); err == nil {
		entries, _ := os.ReadDir(filepath.Join(m.rootDir, "pods"))
		if len(entries) > 0 {
			t.Errorf("invalid UIDs left directories: %v", entries)
		}
	}
}

func TestSetUpPodEmptyDirMedia(t *testing.T) {
	m := newTestManager(t)
	tests := []struct {
		medium  v1.StorageMedium
		wantErr string
	}{
		{"HugePages", `MountVolume.SetUp failed for volume "v" : medium HugePages needs exactly one huge page size among the containers' requests, found 0`},
		{"HugePages-x", `MountVolume.SetUp failed for volume "v" : invalid huge page size in medium HugePages-x: quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'`},
		{"Floppy", `MountVolume.SetUp failed for volume "v" : unknown storage medium "Floppy"`},
	}
	for _, tt := range tests {
		err := m.SetUpPod(ctx, newPod("uid-1", emptyDirVolume("v", tt.medium)))
		if err == nil || err.Error() != tt.wantErr {
			t.Errorf("medium %s: error = %v, want %q", tt.medium, err, tt.wantErr)
		}
	}
}

func TestHugePageSize(t *testing.T) {
	pod := newPod("uid-1")
	pod.Spec.Containers = []v1.Container{{Resources: v1.ResourceRequirements{Requests: v1.ResourceList{"hugepages-2Mi": resource.MustParse("4Mi")}}}}
	for medium, want := range map[v1.StorageMedium]string{"HugePages": "2Mi", "HugePages-1Gi": "1Gi"} {
		got, err := hugePageSize(pod, medium)
		if err != nil || got.String() != want {
			t.Errorf("%s: %v, %v; want %s", medium, got.String(), err, want)
		}
	}
	pod.Spec.InitContainers = []v1.Container{{Resources: v1.ResourceRequirements{Requests: v1.ResourceList{"hugepages-1Gi": resource.MustParse("1Gi")}}}}
	if _, err := hugePageSize(pod, "HugePages"); err == nil {
		t.Error("two page sizes accepted for medium HugePages")
	}
}

func TestSetUpPodMemoryEmptyDirNeedsRoot(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("running as root; TestMemoryEmptyDirTmpfs covers this case")
	}
	m := newTestManager(t)
	err := m.SetUpPod(ctx, newPod("uid-1", emptyDirVolume("mem", v1.StorageMediumMemory)))
	if err == nil || !strings.Contains(err.Error(), "needs root") {
		t.Fatalf("error = %v, want a needs-root error", err)
	}
}

func TestMemoryEmptyDirTmpfs(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting tmpfs needs root")
	}
	m := newTestManager(t)
	vol := emptyDirVolume("mem", v1.StorageMediumMemory)
	vol.EmptyDir.SizeLimit = ptr.To(resource.MustParse("1Mi"))
	pod := newPod("uid-mem", vol, emptyDirVolume("disk", ""))
	dir := m.emptyDirPath(pod.UID, "mem")
	// Never leak a mount, even when CleanupPod is broken.
	t.Cleanup(func() {
		for unix.Unmount(dir, unix.MNT_DETACH) == nil {
		}
	})
	must(t, m.SetUpPod(ctx, pod))
	must(t, m.SetUpPod(ctx, pod)) // idempotent: must not stack a second tmpfs

	mounts, err := readMountInfo(selfMountInfo)
	must(t, err)
	resolved, err := filepath.EvalSymlinks(dir)
	must(t, err)
	if got := mountPointsUnder(mounts, resolved); len(got) != 1 {
		t.Fatalf("mounts at %s: %v, want exactly one", resolved, got)
	}
	ok, err := m.isTmpfsMountPoint(dir)
	if err != nil || !ok {
		t.Fatalf("isTmpfsMountPoint = %v, %v; want a tmpfs", ok, err)
	}
	if got := perm(t, dir); got != 0o777 {
		t.Errorf("tmpfs emptyDir mode = %o, want 777", got)
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode()&os.ModeSticky == 0 {
		t.Errorf("tmpfs emptyDir mode %v (%v): want tmpfs's sticky root (drwxrwxrwt), as upstream", fi.Mode(), err)
	}
	if line := mountInfoLine(t, resolved); !strings.Contains(line, "size=1024k") {
		t.Errorf("tmpfs not mounted with size=1Mi: %q", line)
	}

	must(t, m.CleanupPod(pod.UID))
	if _, err := os.Stat(m.PodDir(pod.UID)); !os.IsNotExist(err) {
		t.Fatalf("pod dir still exists after cleanup: %v", err)
	}
	mounts, err = readMountInfo(selfMountInfo)
	must(t, err)
	if got := mountPointsUnder(mounts, resolved); len(got) != 0 {
		t.Fatalf("tmpfs still mounted after cleanup: %v", got)
	}
}

// mountInfoLine returns the mount table line of the mount at mountPoint.
func mountInfoLine(t *testing.T, mountPoint string) string {
	t.Helper()
	data, err := os.ReadFile(selfMountInfo)
	must(t, err)
	for _, line := range strings.Split(string(data), "\n") {
		if fields := strings.Fields(line); len(fields) > 4 && fields[4] == mountPoint {
			return line
		}
	}
	return ""
}

func TestTmpfsSize(t *testing.T) {
	mi := func(n int64) int64 { return n << 20 }
	limits := func(mem string) v1.ResourceRequirements {
		return v1.ResourceRequirements{Limits: v1.ResourceList{v1.ResourceMemory: resource.MustParse(mem)}}
	}
	always := ptr.To(v1.ContainerRestartPolicyAlways)
	tests := []struct {
		name      string
		spec      v1.PodSpec
		sizeLimit string
		want      int64
	}{
		{name: "nothing known", spec: v1.PodSpec{Containers: []v1.Container{{}}}, want: 0},
		{name: "sizeLimit only", spec: v1.PodSpec{Containers: []v1.Container{{}}}, sizeLimit: "64Mi", want: mi(64)},
		{name: "container limits summed", spec: v1.PodSpec{Containers: []v1.Container{{Resources: limits("100Mi")}, {Resources: limits("50Mi")}}}, want: mi(150)},
		{name: "one container without a limit", spec: v1.PodSpec{Containers: []v1.Container{{Resources: limits("100Mi")}, {}}}, want: 0},
		{name: "smaller sizeLimit wins", spec: v1.PodSpec{Containers: []v1.Container{{Resources: limits("100Mi")}}}, sizeLimit: "10Mi", want: mi(10)},
		{name: "smaller pod limit wins", spec: v1.PodSpec{Containers: []v1.Container{{Resources: limits("100Mi")}}}, sizeLimit: "1Gi", want: mi(100)},
		{name: "init container peak", spec: v1.PodSpec{
			InitContainers: []v1.Container{{Resources: limits("500Mi")}},
			Containers:     []v1.Container{{Resources: limits("100Mi")}}}, want: mi(500)},
		{name: "sidecars add up", spec: v1.PodSpec{
			InitContainers: []v1.Container{{Resources: limits("30Mi"), RestartPolicy: always}, {Resources: limits("100Mi")}},
			Containers:     []v1.Container{{Resources: limits("50Mi")}}}, want: mi(130)},
		{name: "overhead added", spec: v1.PodSpec{
			Overhead:   v1.ResourceList{v1.ResourceMemory: resource.MustParse("5Mi")},
			Containers: []v1.Container{{Resources: limits("100Mi")}}}, want: mi(105)},
		{name: "pod-level limit", spec: v1.PodSpec{
			Resources:  &v1.ResourceRequirements{Limits: v1.ResourceList{v1.ResourceMemory: resource.MustParse("200Mi")}},
			Containers: []v1.Container{{}}}, want: mi(200)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := &v1.EmptyDirVolumeSource{Medium: v1.StorageMediumMemory}
			if tt.sizeLimit != "" {
				src.SizeLimit = ptr.To(resource.MustParse(tt.sizeLimit))
			}
			if got := tmpfsSize(&v1.Pod{Spec: tt.spec}, src); got != tt.want {
				t.Errorf("tmpfsSize = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestUnsupportedVolumeTypes(t *testing.T) {
	vols := []v1.Volume{
		{Name: "nfs", VolumeSource: v1.VolumeSource{NFS: &v1.NFSVolumeSource{Server: "x"}}},
		{Name: "none"},
	}
	want := []string{
		`volume "nfs": volume type nfs is not supported by nodelet yet`,
		`volume "none": no volume source is set`,
	}
	m := newTestManager(t)
	pod := newPod("uid-1", append([]v1.Volume{emptyDirVolume("ok", "")}, vols...)...)
	err := m.SetUpPod(ctx, pod)
	if err == nil {
		t.Fatal("SetUpPod succeeded with unsupported volumes")
	}
	failed := MountErrors(err)
	if len(failed) != len(vols) {
		t.Fatalf("%d mount errors, want %d: %v", len(failed), len(vols), err)
	}
	for i, me := range failed {
		if me.Volume != vols[i].Name || !strings.HasSuffix(want[i], me.Err.Error()) {
			t.Errorf("mount error %d = %v, want volume %s and %q", i, me, vols[i].Name, want[i])
		}
		if !strings.HasPrefix(me.Error(), fmt.Sprintf("MountVolume.SetUp failed for volume %q : ", vols[i].Name)) {
			t.Errorf("event text %q is not upstream's", me.Error())
		}
	}
	// The supported volume was still set up.
	if _, err := os.Stat(m.emptyDirPath("uid-1", "ok")); err != nil {
		t.Errorf("supported volume not set up: %v", err)
	}
	for i, v := range vols {
		c := &v1.Container{Name: "app", VolumeMounts: []v1.VolumeMount{{Name: v.Name, MountPath: "/x"}}}
		if _, err := m.MountsFor(pod, c, nil); err == nil || err.Error() != want[i] {
			t.Errorf("MountsFor(%s) error = %v, want %q", v.Name, err, want[i])
		}
	}
}

// An image volume is the runtime's: nothing to set up on the host, and no host mount in
// MountsFor (the runtime manager adds the CRI image mount).
func TestImageVolumeLeftToRuntime(t *testing.T) {
	m := newTestManager(t)
	pod := newPod("uid-1", emptyDirVolume("scratch", ""),
		v1.Volume{Name: "img", VolumeSource: v1.VolumeSource{Image: &v1.ImageVolumeSource{Reference: "x"}}})
	if err := m.SetUpPod(ctx, pod); err != nil {
		t.Fatalf("SetUpPod: %v", err)
	}
	c := &v1.Container{Name: "app", VolumeMounts: []v1.VolumeMount{{Name: "img", MountPath: "/img"}, {Name: "scratch", MountPath: "/s"}}}
	mounts, err := m.MountsFor(pod, c, nil)
	if err != nil {
		t.Fatalf("MountsFor: %v", err)
	}
	if len(mounts) != 1 || mounts[0].ContainerPath != "/s" {
		t.Errorf("mounts %v, want the emptyDir's only", mounts)
	}
}

// Standalone, an inline CSI volume cannot be published: its driver's CSIDriver object
// is in the API.
func TestInlineCSIVolumeStandalone(t *testing.T) {
	m := newTestManager(t)
	pod := newPod("uid-1", v1.Volume{Name: "csi", VolumeSource: v1.VolumeSource{CSI: &v1.CSIVolumeSource{Driver: "x"}}})
	failed := MountErrors(m.SetUpPod(ctx, pod))
	if len(failed) != 1 || !errors.Is(failed[0], errNoAPI) {
		t.Fatalf("mount errors %v, want the no-API error", failed)
	}
}

func TestAPIVolumesStandalone(t *testing.T) {
	// Without an API server, volumes made of API objects fail to mount with a reason;
	// the downward API needs none.
	m := newTestManager(t)
	pod := newPod("uid-1",
		v1.Volume{Name: "cm", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: "x"}}}},
		v1.Volume{Name: "pvc", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "x"}}},
		v1.Volume{Name: "info", VolumeSource: v1.VolumeSource{DownwardAPI: &v1.DownwardAPIVolumeSource{Items: []v1.DownwardAPIVolumeFile{
			{Path: "name", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.name"}}}}}},
	)
	failed := MountErrors(m.SetUpPod(ctx, pod))
	if len(failed) != 2 || failed[0].Volume != "cm" || failed[1].Volume != "pvc" {
		t.Fatalf("mount errors %v, want cm and pvc", failed)
	}
	for _, me := range failed {
		if !errors.Is(me, errNoAPI) {
			t.Errorf("%v does not say there is no API server", me)
		}
	}
	got, err := os.ReadFile(filepath.Join(m.projectionPath("uid-1", &pod.Spec.Volumes[2]), "name"))
	if err != nil || string(got) != "web" {
		t.Errorf("downward API file = %q, %v; want web", got, err)
	}
}

func TestVolumeTypeName(t *testing.T) {
	tests := map[string]v1.VolumeSource{
		"emptyDir":  {EmptyDir: &v1.EmptyDirVolumeSource{}},
		"hostPath":  {HostPath: &v1.HostPathVolumeSource{}},
		"csi":       {CSI: &v1.CSIVolumeSource{}},
		"ephemeral": {Ephemeral: &v1.EphemeralVolumeSource{}},
		"image":     {Image: &v1.ImageVolumeSource{}},
		"":          {},
	}
	for want, src := range tests {
		if got := volumeTypeName(&src); got != want {
			t.Errorf("volumeTypeName = %q, want %q", got, want)
		}
	}
}

func TestMountsFor(t *testing.T) {
	m := newTestManager(t)
	hostDir := t.TempDir()
	pod := newPod("uid-1", emptyDirVolume("cache", ""), hostPathVolume("logs", hostDir))
	must(t, m.SetUpPod(ctx, pod))
	cacheDir := m.emptyDirPath("uid-1", "cache")

	c := &v1.Container{Name: "app", VolumeMounts: []v1.VolumeMount{
		{Name: "cache", MountPath: "/cache"},
		{Name: "logs", MountPath: "/var/log/app", ReadOnly: true},
		{Name: "logs", MountPath: "relative/dir/", MountPropagation: ptr.To(v1.MountPropagationHostToContainer)},
		{Name: "cache", MountPath: "/b", MountPropagation: ptr.To(v1.MountPropagationBidirectional)},
		{Name: "cache", MountPath: "/n", MountPropagation: ptr.To(v1.MountPropagationNone)},
	}}
	got, err := m.MountsFor(pod, c, nil)
	if err != nil {
		t.Fatal(err)
	}
	type mount struct {
		container, host string
		ro              bool
		propagation     string
	}
	var summary []mount
	for _, g := range got {
		if g.SelinuxRelabel || g.RecursiveReadOnly {
			t.Errorf("unexpected relabel/rro on %v", g)
		}
		summary = append(summary, mount{g.ContainerPath, g.HostPath, g.Readonly, g.Propagation.String()})
	}
	want := []mount{
		{"/cache", cacheDir, false, "PROPAGATION_PRIVATE"},
		{"/var/log/app", hostDir, true, "PROPAGATION_PRIVATE"},
		{"/relative/dir", hostDir, false, "PROPAGATION_HOST_TO_CONTAINER"},
		{"/b", cacheDir, false, "PROPAGATION_BIDIRECTIONAL"},
		{"/n", cacheDir, false, "PROPAGATION_PRIVATE"},
	}
	if !reflect.DeepEqual(summary, want) {
		t.Errorf("mounts =\n%v\nwant\n%v", summary, want)
	}
}

func TestMountsForNoVolumeMounts(t *testing.T) {
	m := newTestManager(t)
	got, err := m.MountsFor(newPod("uid-1"), &v1.Container{Name: "app"}, nil)
	if err != nil || len(got) != 0 {
		t.Fatalf("MountsFor = %v, %v; want no mounts", got, err)
	}
}

func TestMountsForSELinuxRelabelsOnlyEmptyDir(t *testing.T) {
	m := newTestManager(t)
	m.selinuxEnabled = true
	pod := newPod("uid-1", emptyDirVolume("cache", ""), hostPathVolume("host", t.TempDir()))
	must(t, m.SetUpPod(ctx, pod))
	got, err := m.MountsFor(pod, &v1.Container{Name: "app", VolumeMounts: []v1.VolumeMount{
		{Name: "cache", MountPath: "/cache"}, {Name: "host", MountPath: "/host"},
	}}, nil)
	must(t, err)
	if !got[0].SelinuxRelabel || got[1].SelinuxRelabel {
		t.Errorf("relabel = %v/%v, want emptyDir only", got[0].SelinuxRelabel, got[1].SelinuxRelabel)
	}
}

func TestMountsForErrors(t *testing.T) {
	m := newTestManager(t)
	pod := newPod("uid-1", emptyDirVolume("cache", ""), emptyDirVolume("never-set-up", ""))
	must(t, m.SetUpPod(ctx, newPod("uid-1", emptyDirVolume("cache", ""))))
	tests := []struct {
		name    string
		mount   v1.VolumeMount
		wantErr string
	}{
		{"missing volume", v1.VolumeMount{Name: "nope", MountPath: "/x"}, `cannot find volume "nope" to mount into container "app"`},
		{"emptyDir not set up", v1.VolumeMount{Name: "never-set-up", MountPath: "/x"}, `volume "never-set-up" is not set up`},
		{"subPathExpr without its variable", v1.VolumeMount{Name: "cache", MountPath: "/x", SubPathExpr: "$(POD_NAME)/$(B)/$(A)"},
			`volume "cache": unable to expand subPathExpr "$(POD_NAME)/$(B)/$(A)": missing value for A, B, POD_NAME`},
		{"invalid propagation", v1.VolumeMount{Name: "cache", MountPath: "/x", MountPropagation: ptr.To(v1.MountPropagationMode("Sideways"))},
			`invalid MountPropagation mode: "Sideways"`},
		{"rro needs readOnly", v1.VolumeMount{Name: "cache", MountPath: "/x", RecursiveReadOnly: ptr.To(v1.RecursiveReadOnlyEnabled)},
			`failed to resolve recursive read-only mode: volume "cache" requested recursive read-only mode, but it is not read-only`},
		{"rro with propagation", v1.VolumeMount{Name: "cache", MountPath: "/x", ReadOnly: true, RecursiveReadOnly: ptr.To(v1.RecursiveReadOnlyEnabled),
			MountPropagation: ptr.To(v1.MountPropagationHostToContainer)},
			`failed to resolve recursive read-only mode: volume "cache" requested recursive read-only mode, but it is not compatible with propagation "HostToContainer"`},
		{"rro enabled unsupported", v1.VolumeMount{Name: "cache", MountPath: "/x", ReadOnly: true, RecursiveReadOnly: ptr.To(v1.RecursiveReadOnlyEnabled)},
			`failed to resolve recursive read-only mode: volume "cache" requested recursive read-only mode, but it is not supported by the runtime`},
		{"rro unknown mode", v1.VolumeMount{Name: "cache", MountPath: "/x", ReadOnly: true, RecursiveReadOnly: ptr.To(v1.RecursiveReadOnlyMode("Maybe"))},
			`failed to resolve recursive read-only mode: unknown recursive read-only mode "Maybe"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := m.MountsFor(pod, &v1.Container{Name: "app", VolumeMounts: []v1.VolumeMount{tt.mount}}, nil)
			if err == nil || !strings.HasPrefix(err.Error(), tt.wantErr) {
				t.Fatalf("error = %v, want %q", err, tt.wantErr)
			}
		})
	}
}

func TestResolveRecursiveReadOnly(t *testing.T) {
	tests := []struct {
		mode      *v1.RecursiveReadOnlyMode
		supported bool
		want      bool
	}{
		{nil, true, false},
		{ptr.To(v1.RecursiveReadOnlyDisabled), true, false},
		{ptr.To(v1.RecursiveReadOnlyIfPossible), false, false},
		{ptr.To(v1.RecursiveReadOnlyIfPossible), true, true},
		{ptr.To(v1.RecursiveReadOnlyEnabled), true, true},
	}
	for _, tt := range tests {
		got, err := criconfig.RecursiveReadOnly(&v1.VolumeMount{Name: "v", ReadOnly: true, RecursiveReadOnly: tt.mode}, tt.supported)
		if err != nil || got != tt.want {
			t.Errorf("mode %v supported=%v: got %v, %v; want %v", tt.mode, tt.supported, got, err, tt.want)
		}
	}
}

func TestSubPath(t *testing.T) {
	requireRoot(t)
	m := newTestManager(t)
	outside := t.TempDir()
	hostDir := t.TempDir()
	must(t, os.Chmod(hostDir, 0o751))
	unmountOnCleanup(t, m.rootDir)
	pod := newPod("uid-1", emptyDirVolume("cache", ""), hostPathVolume("host", hostDir))
	must(t, m.SetUpPod(ctx, pod))
	cache := m.emptyDirPath("uid-1", "cache")
	must(t, os.WriteFile(filepath.Join(cache, "config.yaml"), nil, 0o644))
	must(t, os.Mkdir(filepath.Join(cache, "real"), 0o755))
	must(t, os.Symlink("real", filepath.Join(cache, "inside-link")))
	must(t, os.Symlink(outside, filepath.Join(cache, "escape")))
	must(t, os.Symlink("../../../..", filepath.Join(cache, "relative-escape")))
	must(t, os.Symlink("/nonexistent-target", filepath.Join(cache, "dangling")))
	must(t, os.Symlink("/", filepath.Join(cache, "root")))

	mountsFor := func(vm v1.VolumeMount) (string, error) {
		got, err := m.MountsFor(pod, &v1.Container{Name: "app", VolumeMounts: []v1.VolumeMount{vm}}, nil)
		if err != nil {
			return "", err
		}
		return got[0].HostPath, nil
	}
	// The runtime gets the bind mount of the subPath in the pod's directory, never a
	// path into the volume that a symlink swapped in later could redirect.
	wantMountOf := func(t *testing.T, hostPath, volume, source string) {
		t.Helper()
		if want := filepath.Join(m.PodDir("uid-1"), "volume-subpaths", volume, "app", "0"); hostPath != want {
			t.Fatalf("host path = %q, want the bind mount %q", hostPath, want)
		}
		if n := mountCount(t, hostPath); n != 1 {
			t.Errorf("%d mounts at %s, want 1", n, hostPath)
		}
		assertSameFile(t, hostPath, source)
	}

	t.Run("creates nested directories with the volume's mode", func(t *testing.T) {
		got, err := mountsFor(v1.VolumeMount{Name: "cache", MountPath: "/data", SubPath: "a/b/c"})
		must(t, err)
		wantMountOf(t, got, "cache", filepath.Join(cache, "a/b/c"))
		for _, d := range []string{"a", "a/b", "a/b/c"} {
			if p := perm(t, filepath.Join(cache, d)); p != 0o777 {
				t.Errorf("%s mode = %o, want 777", d, p)
			}
		}
	})
	t.Run("existing file", func(t *testing.T) {
		got, err := mountsFor(v1.VolumeMount{Name: "cache", MountPath: "/etc/app/config.yaml", SubPath: "config.yaml"})
		must(t, err)
		wantMountOf(t, got, "cache", filepath.Join(cache, "config.yaml"))
		if info, err := os.Lstat(got); err != nil || !info.Mode().IsRegular() {
			t.Errorf("target of a file subPath is not a file: %v, %v", info, err)
		}
	})
	t.Run("symlink inside the volume is resolved", func(t *testing.T) {
		got, err := mountsFor(v1.VolumeMount{Name: "cache", MountPath: "/data", SubPath: "inside-link/new"})
		must(t, err)
		wantMountOf(t, got, "cache", filepath.Join(cache, "real", "new"))
	})
	t.Run("hostPath subPath takes the hostPath's mode", func(t *testing.T) {
		got, err := mountsFor(v1.VolumeMount{Name: "host", MountPath: "/data", SubPath: "sub"})
		must(t, err)
		wantMountOf(t, got, "host", filepath.Join(hostDir, "sub"))
		if p := perm(t, filepath.Join(hostDir, "sub")); p != 0o751 {
			t.Errorf("mode = %o, want 751", p)
		}
	})

	rejected := []struct {
		name, subPath, wantErr string
	}{
		{"absolute", "/etc", "error SubPath `/etc` must not be an absolute path"},
		{"backsteps", "a/../../etc", "unable to provision SubPath `a/../../etc`: must not contain '..'"},
		{"leading backstep", "..", "unable to provision SubPath `..`: must not contain '..'"},
		{"symlink escape", "escape", `failed to prepare subPath for volumeMount "cache" of container "app"`},
		{"relative symlink escape", "relative-escape", `failed to prepare subPath for volumeMount "cache" of container "app"`},
		{"symlink to the host's root", "root", `failed to prepare subPath for volumeMount "cache" of container "app"`},
		{"through a symlink to the host's root", "root/etc", `failed to prepare subPath for volumeMount "cache" of container "app"`},
		{"create through an escaping symlink", "escape/newdir", `failed to create subPath directory for volumeMount "cache" of container "app"`},
		{"dangling symlink", "dangling", `failed to create subPath directory for volumeMount "cache" of container "app"`},
	}
	for _, tt := range rejected {
		t.Run(tt.name, func(t *testing.T) {
			_, err := mountsFor(v1.VolumeMount{Name: "cache", MountPath: "/data", SubPath: tt.subPath})
			if err == nil || err.Error() != tt.wantErr {
				t.Fatalf("error = %v, want %q", err, tt.wantErr)
			}
		})
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Errorf("subPath handling created %v outside the volume", entries)
	}
	// A refused subPath leaves no mount behind: only the accepted ones are mounted.
	if got := mountsBelow(t, m.PodDir("uid-1")); len(got) != 2 {
		t.Errorf("mounts in the pod directory: %v, want one per target (cache/app/0, host/app/0)", got)
	}
}

func TestCleanupPod(t *testing.T) {
	m := newTestManager(t)
	pod := newPod("uid-1", emptyDirVolume("cache", ""))
	must(t, m.SetUpPod(ctx, pod))
	must(t, os.WriteFile(filepath.Join(m.emptyDirPath("uid-1", "cache"), "data"), []byte("x"), 0o644))
	must(t, m.SetUpPod(ctx, newPod("uid-2")))

	must(t, m.CleanupPod("uid-1"))
	if _, err := os.Stat(m.PodDir("uid-1")); !os.IsNotExist(err) {
		t.Fatalf("pod dir still there: %v", err)
	}
	if _, err := os.Stat(m.PodDir("uid-2")); err != nil {
		t.Fatalf("another pod's dir was touched: %v", err)
	}
	must(t, m.CleanupPod("uid-1")) // already gone is fine
}

func TestTearDownPodKeepsThePodDir(t *testing.T) {
	m := newTestManager(t)
	must(t, m.SetUpPod(ctx, newPod("uid-1", emptyDirVolume("cache", ""))))
	must(t, os.WriteFile(filepath.Join(m.emptyDirPath("uid-1", "cache"), "data"), []byte("x"), 0o644))
	must(t, os.WriteFile(filepath.Join(m.PodDir("uid-1"), "etc-hosts"), []byte("x"), 0o644))
	must(t, m.SetUpPod(ctx, newPod("uid-2", emptyDirVolume("cache", ""))))

	must(t, m.TearDownPod("uid-1"))
	if _, err := os.Stat(m.podVolumesDir("uid-1")); !os.IsNotExist(err) {
		t.Fatalf("volumes still there: %v", err)
	}
	if _, err := os.Stat(filepath.Join(m.PodDir("uid-1"), "etc-hosts")); err != nil {
		t.Fatalf("the rest of the pod dir went: %v", err)
	}
	if _, err := os.Stat(m.emptyDirPath("uid-2", "cache")); err != nil {
		t.Fatalf("another pod's volume was touched: %v", err)
	}
	must(t, m.TearDownPod("uid-1")) // already gone is fine
	must(t, m.CleanupPod("uid-1"))
}

func TestCleanupPodRefusesWhileMounted(t *testing.T) {
	m := newTestManager(t)
	must(t, m.SetUpPod(ctx, newPod("uid-1", emptyDirVolume("cache", ""))))
	dir, err := filepath.EvalSymlinks(m.emptyDirPath("uid-1", "cache"))
	must(t, err)
	// A mount table claiming a mount that cannot be unmounted (the path is
	// not really a mount point, so umount fails with EINVAL and the entry
	// stays).
	fake := filepath.Join(t.TempDir(), "mountinfo")
	line := "100 1 0:50 / " + strings.ReplaceAll(dir, " ", `\040`) + " rw,relatime - tmpfs tmpfs rw\n"
	must(t, os.WriteFile(fake, []byte(line), 0o644))
	m.mountInfoPath = fake

	err = m.CleanupPod("uid-1")
	if err == nil || !strings.Contains(err.Error(), "is still mounted") {
		t.Fatalf("error = %v, want a still-mounted refusal", err)
	}
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("volume removed despite the mount: %v", err)
	}
}

func TestPodDirs(t *testing.T) {
	m := newTestManager(t)
	uids, err := m.PodDirs()
	if err != nil || len(uids) != 0 {
		t.Fatalf("PodDirs before any pod = %v, %v", uids, err)
	}
	must(t, m.SetUpPod(ctx, newPod("uid-b")))
	must(t, m.SetUpPod(ctx, newPod("uid-a")))
	must(t, os.WriteFile(filepath.Join(m.rootDir, "pods", "stray-file"), nil, 0o644))
	uids, err = m.PodDirs()
	must(t, err)
	if want := []types.UID{"uid-a", "uid-b"}; !reflect.DeepEqual(uids, want) {
		t.Errorf("PodDirs = %v, want %v", uids, want)
	}
	must(t, m.CleanupPod("uid-a"))
	uids, err = m.PodDirs()
	must(t, err)
	if want := []types.UID{"uid-b"}; !reflect.DeepEqual(uids, want) {
		t.Errorf("PodDirs after cleanup = %v, want %v", uids, want)
	}
}

func TestParseMountInfo(t *testing.T) {
	data := `22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
36 22 0:32 / /var/lib/pods/with\040space rw,nosuid master:1 shared:2 - tmpfs tmpfs rw,size=1024k
37 22 0:33 / /back\134slash rw - tmpfs none rw
`
	got, err := parseMountInfo(strings.NewReader(data))
	must(t, err)
	want := []mountEntry{{"/", "ext4"}, {"/var/lib/pods/with space", "tmpfs"}, {`/back\slash`, "tmpfs"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("parseMountInfo = %v, want %v", got, want)
	}
	if _, err := parseMountInfo(strings.NewReader("garbage line\n")); err == nil {
		t.Error("malformed mountinfo accepted")
	}
}

func TestMountPointsUnder(t *testing.T) {
	mounts := []mountEntry{{"/pods/u", "tmpfs"}, {"/pods/u/v/a", "tmpfs"}, {"/pods/uu", "tmpfs"}, {"/pods/u/v", "tmpfs"}, {"/other", "ext4"}}
	got := mountPointsUnder(mounts, "/pods/u")
	want := []string{"/pods/u/v/a", "/pods/u/v", "/pods/u"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("mountPointsUnder = %v, want %v", got, want)
	}
}

// A pod whose runtime handler supports recursively read-only mounts gets them for
// IfPossible and Enabled; a pod whose handler does not gets a plain read-only mount for
// IfPossible, and Enabled is refused.
func TestRecursiveReadOnlyFollowsThePodsHandler(t *testing.T) {
	ctx := context.Background()
	m := newTestManager(t)
	pod := newPod("uid-1", emptyDirVolume("cache", ""))
	must(t, m.SetUpPod(ctx, pod))
	mount := func(mode v1.RecursiveReadOnlyMode) (*runtimeapi.Mount, error) {
		got, err := m.MountsFor(pod, &v1.Container{Name: "app", VolumeMounts: []v1.VolumeMount{
			{Name: "cache", MountPath: "/x", ReadOnly: true, RecursiveReadOnly: ptr.To(mode)}}}, nil)
		if err != nil {
			return nil, err
		}
		return got[0], nil
	}
	m.SetRecursiveReadOnlySupport(func(p *v1.Pod) bool { return p.UID == "uid-1" })
	for _, mode := range []v1.RecursiveReadOnlyMode{v1.RecursiveReadOnlyIfPossible, v1.RecursiveReadOnlyEnabled} {
		if got, err := mount(mode); err != nil || !got.RecursiveReadOnly || !got.Readonly {
			t.Errorf("%s on a supporting handler: %v, %v", mode, got, err)
		}
	}
	m.SetRecursiveReadOnlySupport(func(*v1.Pod) bool { return false })
	if got, err := mount(v1.RecursiveReadOnlyIfPossible); err != nil || got.RecursiveReadOnly || !got.Readonly {
		t.Errorf("IfPossible without support: %v, %v; want a plain read-only mount", got, err)
	}
	if got, err := mount(v1.RecursiveReadOnlyDisabled); err != nil || got.RecursiveReadOnly || !got.Readonly {
		t.Errorf("Disabled: %v, %v; want a plain read-only mount", got, err)
	}
	if _, err := mount(v1.RecursiveReadOnlyEnabled); err == nil {
		t.Error("Enabled without support was accepted")
	}
}

// A memory emptyDir with fsGroup has upstream's drwxrwsrwt root: tmpfs's sticky 1777 plus
// the setgid bit SetVolumeOwnership adds, also once a subPath of it has been created.
func TestMemoryEmptyDirWithFSGroupMode(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting tmpfs needs root")
	}
	m := newTestManager(t)
	unmountOnCleanup(t, m.rootDir)
	pod := newPod("uid-memfs", emptyDirVolume("mem", v1.StorageMediumMemory))
	pod.Spec.SecurityContext = &v1.PodSecurityContext{FSGroup: ptr.To[int64](2000)}
	must(t, m.SetUpPod(ctx, pod))
	if _, err := m.MountsFor(pod, &v1.Container{Name: "app", VolumeMounts: []v1.VolumeMount{{Name: "mem", MountPath: "/m", SubPath: "new/dir"}}}, nil); err != nil {
		t.Fatal(err)
	}
	want := os.ModeDir | os.ModeSetgid | os.ModeSticky | 0o777
	for _, d := range []string{m.emptyDirPath(pod.UID, "mem"), filepath.Join(m.emptyDirPath(pod.UID, "mem"), "new", "dir")} {
		if fi, err := os.Stat(d); err != nil || fi.Mode() != want {
			t.Errorf("%s: mode %v (%v), want %v", d, fi.Mode(), err, want)
		}
	}
}
