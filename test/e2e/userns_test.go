//go:build e2e

package e2e

// User namespaces (`hostUsers: false`) through the runtime manager on a real runtime.
// containerd 1.6 supports none: there the pod must be refused with the reason, and the
// tests that need support skip. On containerd 2.x (NODELET_RUNTIME=containerd2
// hack/runtime.sh up, docs/runtimes.md) they run:
//
//	NODELET_RUNTIME=containerd2 CONTAINER_RUNTIME_ENDPOINT=unix:///run/nodelet-dev2/containerd.sock \
//	  go test -count=1 -tags e2e -run UserNamespace ./test/e2e/

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/pkg/node/volumes"
	"github.com/nodelet/nodelet/pkg/runtime/container"
	"github.com/nodelet/nodelet/pkg/runtime/cri"
	"github.com/nodelet/nodelet/pkg/runtime/images"
	"github.com/nodelet/nodelet/pkg/runtime/kuberuntime"
	"github.com/nodelet/nodelet/pkg/runtime/userns"
)

// usernsRig is a rig whose runtime manager gives pods user namespaces, as nodelet does:
// a userns.Manager over the rig's pods directory, asking the runtime which handlers
// support them. supported is the runtime's answer for the default handler.
type usernsRig struct {
	*rig
	users     *userns.Manager
	podsDir   string
	supported bool
}

func newUsernsRig(t *testing.T) *usernsRig {
	t.Helper()
	ctx := context.Background()
	rs, err := cri.NewRemoteRuntimeService(ctx, endpoint(t), 3*time.Second, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	is, err := cri.NewRemoteImageService(ctx, endpoint(t), 3*time.Second, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	handlers := userns.NewRuntimeHandlers(rs)
	supported, err := handlers.SupportsUserNamespaces(ctx, "")
	if err != nil {
		t.Fatalf("asking the runtime about user namespaces: %v", err)
	}
	u := &usernsRig{podsDir: filepath.Join(root, "pods"), supported: supported}
	// The range is the node's: the kubelet user's subordinate IDs, else the default.
	u.users, err = userns.NewManager(userns.Config{PodsDir: u.podsDir, MaxPods: 110, Handlers: handlers})
	if err != nil {
		t.Fatal(err)
	}
	u.rig = &rig{rs: rs, volumes: volumes.NewManager(root), recorder: record.NewFakeRecorder(1000), logsDir: t.TempDir()}
	u.m, err = kuberuntime.NewManager(ctx, kuberuntime.Options{
		RuntimeService: rs, ImageService: is, Recorder: u.recorder,
		Volumes: u.volumes, UserNamespaces: u.users,
		RootDir: root, PodLogsDir: u.logsDir, LegacyLogSymlinkDir: t.TempDir(),
		NodeName: "e2e-node", ImageOptions: images.Options{SerializeImagePulls: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func (u *usernsRig) requireSupport(t *testing.T) {
	t.Helper()
	if !u.supported {
		t.Skipf("the runtime at %s does not report user namespace support for its default handler "+
			"(containerd 1.6 has none); run on containerd 2.x: NODELET_RUNTIME=containerd2 hack/runtime.sh up, "+
			"then NODELET_RUNTIME=containerd2 CONTAINER_RUNTIME_ENDPOINT=unix:///run/nodelet-dev2/containerd.sock go test -tags e2e -run UserNamespace ./test/e2e/",
			endpoint(t))
	}
}

// exec runs cmd in the pod's running container c0 and returns its stdout.
func (u *usernsRig) exec(t *testing.T, pod *v1.Pod, cmd ...string) string {
	t.Helper()
	c := u.status(t, pod).FindContainerStatusByName("c0")
	if c == nil {
		t.Fatal("no container c0")
	}
	stdout, stderr, err := u.rs.ExecSync(context.Background(), c.ID.ID, cmd, 10*time.Second)
	if err != nil {
		t.Fatalf("exec %v: %v (stderr %q)", cmd, err, stderr)
	}
	return string(stdout)
}

// idMap reads /proc/self/{uid,gid}_map in the pod, fields normalized to single spaces.
func (u *usernsRig) idMap(t *testing.T, pod *v1.Pod, which string) string {
	t.Helper()
	return strings.Join(strings.Fields(u.exec(t, pod, "cat", "/proc/self/"+which)), " ")
}

func TestUserNamespacePodMapsToItsOwnIDs(t *testing.T) {
	u := newUsernsRig(t)
	u.requireSupport(t)

	pod := newPod("userns", v1.RestartPolicyAlways, []string{"sleep", "3600"})
	pod.Spec.HostUsers = ptr.To(false)
	pod.Spec.Volumes = []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}}
	pod.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "data", MountPath: "/data"}}
	pod.Spec.Containers[0].TerminationMessagePath = "/dev/termination-log"
	u.track(t, pod)
	u.syncUntil(t, pod, defaultBackOff(), time.Minute, func(s *container.PodStatus) bool { return running(s, "c0") })

	first, ok := u.users.Allocated(pod.UID)
	if !ok {
		t.Fatal("the pod holds no ID block")
	}
	want := "0 " + strconv.FormatUint(uint64(first), 10) + " 65536"
	for _, which := range []string{"uid_map", "gid_map"} {
		got := u.idMap(t, pod, which)
		t.Logf("hostUsers: false pod: /proc/self/%s = %q", which, got)
		if got != want {
			t.Errorf("hostUsers: false pod: %s %q, want %q", which, got, want)
		}
	}
	if hostMap := ownUIDMap(t); hostMap == want {
		t.Errorf("the pod's uid_map is the host's, %q", hostMap)
	}

	// Volumes are idmapped: the emptyDir (host root's) is container root's, and what
	// container root writes there is host root's, not host ID <first>'s.
	if owner := strings.TrimSpace(u.exec(t, pod, "stat", "-c", "%u:%g", "/data")); owner != "0:0" {
		t.Errorf("emptyDir owner in the pod %q, want 0:0", owner)
	}
	u.exec(t, pod, "sh", "-c", "echo hi > /data/written && echo done > /dev/termination-log")
	written := filepath.Join(u.podsDir, string(pod.UID), "volumes", "kubernetes.io~empty-dir", "data", "written")
	fi, err := os.Stat(written)
	if err != nil {
		t.Fatal(err)
	}
	if st := fi.Sys().(*syscall.Stat_t); st.Uid != 0 || st.Gid != 0 {
		t.Errorf("file written by container root is owned by host %d:%d, want 0:0 (idmapped mount)", st.Uid, st.Gid)
	}

	// A restarted nodelet reads the pod's mapping back: same IDs, nothing recreated.
	again, err := userns.NewManager(userns.Config{PodsDir: u.podsDir, MaxPods: 110, Handlers: userns.NewRuntimeHandlers(u.rs)})
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := again.Allocated(pod.UID); !ok || got != first {
		t.Errorf("after a restart the pod maps to %d (%v), want %d", got, ok, first)
	}
	before := u.status(t, pod).FindContainerStatusByName("c0").ID
	if res := u.syncPod(pod, u.status(t, pod), defaultBackOff()); res.Error() != nil {
		err := res.Error()
		t.Fatalf("resync: %v", err)
	}
	if after := u.status(t, pod).FindContainerStatusByName("c0").ID; after != before {
		t.Errorf("resync replaced the container: %v -> %v", before, after)
	}
}

// ownUIDMap is the test process's, i.e. the host's, uid_map: "0 0 4294967295".
func ownUIDMap(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile("/proc/self/uid_map")
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(strings.Fields(string(data)), " ")
}

// With the user namespace manager wired, every pod's configs name a user namespace (the
// node's when hostUsers is unset, as upstream): a runtime without user namespace
// support must run such pods as before.
func TestUserNamespaceHostUsersPodsRunInTheHostsNamespace(t *testing.T) {
	u := newUsernsRig(t)
	pod := newPod("hostusers", v1.RestartPolicyAlways, []string{"sleep", "3600"})
	u.track(t, pod)
	u.syncUntil(t, pod, defaultBackOff(), time.Minute, func(s *container.PodStatus) bool { return running(s, "c0") })
	got, want := u.idMap(t, pod, "uid_map"), ownUIDMap(t)
	t.Logf("host-users pod: /proc/self/uid_map = %q", got)
	if got != want {
		t.Errorf("host-users pod: uid_map %q, want the host's %q", got, want)
	}
	if _, err := os.Stat(filepath.Join(u.podsDir, string(pod.UID), "userns")); !os.IsNotExist(err) {
		t.Errorf("a host-users pod has a mapping file: %v", err)
	}
}

func TestUserNamespacePodRefusedWithoutRuntimeSupport(t *testing.T) {
	u := newUsernsRig(t)
	if u.supported {
		t.Skipf("the runtime at %s supports user namespaces: nothing to refuse", endpoint(t))
	}
	pod := newPod("userns-refused", v1.RestartPolicyAlways, []string{"sleep", "3600"})
	pod.Spec.HostUsers = ptr.To(false)
	u.track(t, pod)
	res := u.syncPod(pod, u.status(t, pod), defaultBackOff())
	const reason = "can't set `spec.hostUsers: false`, runtime does not support user namespaces"
	if err := res.Error(); err == nil || !strings.Contains(err.Error(), reason) {
		t.Fatalf("SyncPod: %v, want a refusal saying %q", err, reason)
	}
	if s := u.status(t, pod); len(s.SandboxStatuses) != 0 || len(s.ContainerStatuses) != 0 {
		t.Errorf("a refused pod left sandboxes %d, containers %d", len(s.SandboxStatuses), len(s.ContainerStatuses))
	}
	if _, ok := u.users.Allocated(pod.UID); ok {
		t.Error("a refused pod holds an ID block")
	}
}
