//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/test/internal/audit"
)

// Volumes from the API: config maps, secrets, the downward API, the default projected
// service-account token, memory emptyDirs, fsGroup, claims on local volumes, teardown.

func (c *clusterNode) createConfigMap(t *testing.T, name string, data map[string]string) *v1.ConfigMap {
	t.Helper()
	cm := &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.namespace}, Data: data}
	created, err := c.admin.CoreV1().ConfigMaps(c.namespace).Create(context.Background(), cm, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return created
}

// mountsUnder lists the mount points under dir in nodelet's (the host's) mount table.
func mountsUnder(t *testing.T, dir string) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			out = append(out, f[4])
		}
	}
	return out
}

// volumesPod reads a config map, a secret, the downward API and its service-account token,
// with an fsGroup and a memory emptyDir. It runs probe-server on the host network, so that
// it can reach the API server on 127.0.0.1 with its token.
func (c *clusterNode) volumesPod() *v1.Pod {
	pod := c.testPod("volumes")
	pod.Labels["tier"] = "e2e"
	pod.Spec.AutomountServiceAccountToken = nil // the default kube-api-access volume
	pod.Spec.HostNetwork = true
	pod.Spec.SecurityContext = &v1.PodSecurityContext{FSGroup: ptr.To[int64](3000)}
	ctr := &pod.Spec.Containers[0]
	ctr.Image = probeServerImage // busybox plus /probe-server (its whoami client); the command stays a shell loop
	ctr.Resources.Limits = v1.ResourceList{v1.ResourceMemory: resource.MustParse("64Mi")}
	ctr.VolumeMounts = []v1.VolumeMount{
		{Name: "config", MountPath: "/config"},
		{Name: "creds", MountPath: "/creds"},
		{Name: "info", MountPath: "/info"},
		{Name: "mem", MountPath: "/mem"},
	}
	pod.Spec.Volumes = []v1.Volume{
		{Name: "config", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{
			LocalObjectReference: v1.LocalObjectReference{Name: "settings"}, DefaultMode: ptr.To[int32](0o440)}}},
		{Name: "creds", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: "creds",
			Items: []v1.KeyToPath{{Key: "password", Path: "db/password", Mode: ptr.To[int32](0o400)}}}}},
		{Name: "info", VolumeSource: v1.VolumeSource{DownwardAPI: &v1.DownwardAPIVolumeSource{Items: []v1.DownwardAPIVolumeFile{
			{Path: "labels", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.labels"}},
			{Path: "mem_limit", ResourceFieldRef: &v1.ResourceFieldSelector{ContainerName: "main", Resource: "limits.memory", Divisor: resource.MustParse("1Mi")}},
		}}}},
		{Name: "mem", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{Medium: v1.StorageMediumMemory}}},
	}
	return pod
}

func TestClusterVolumesFromTheAPI(t *testing.T) {
	c := startClusterNode(t, clusterOptions{config: "syncFrequency: 10s\n"})
	ctx := context.Background()
	eventually(t, 10*time.Second, "node Ready", func() error { return c.nodeReady(t) })
	secret := &v1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "creds", Namespace: c.namespace}, StringData: map[string]string{"password": "hunter2"}}
	if _, err := c.admin.CoreV1().Secrets(c.namespace).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	settings := c.createConfigMap(t, "settings", map[string]string{"a": "1", "b": "1"})
	requests := openAuditTail(t)
	pod := c.createPod(t, c.volumesPod())
	took := eventually(t, 60*time.Second, "pod with API volumes Ready", func() error { return c.podReady("volumes") })
	t.Logf("Ready %v after create", took)

	check := func(what, want string, cmd ...string) {
		t.Helper()
		if got := strings.TrimSpace(c.execIn(t, "volumes", cmd...)); got != want {
			t.Errorf("%s: %q, want %q", what, got, want)
		}
	}
	check("config files and their mode", "1 1 440", "sh", "-c", "echo $(cat /config/a) $(cat /config/b) $(stat -L -c %a /config/a)")
	// fsGroup adds group read to every file, as upstream's ownership change does.
	check("secret item and its mode", "hunter2 440", "sh", "-c", "echo $(cat /creds/db/password) $(stat -L -c %a /creds/db/password)")
	check("downward API labels and limit", `app="volumes"`+"\n"+`tier="e2e"`+"\n64", "sh", "-c", "cat /info/labels; echo; cat /info/mem_limit")
	check("fsGroup on the volumes", "3000 3000", "sh", "-c", "echo $(stat -c %g /mem) $(stat -L -c %g /config/a)")
	check("memory emptyDir is tmpfs", "tmpfs", "sh", "-c", "awk '$2==\"/mem\" {print $3}' /proc/mounts")
	check("secret volume is tmpfs", "tmpfs", "sh", "-c", "awk '$2==\"/creds\" {print $3}' /proc/mounts")
	check("the pod's token authenticates it", "system:serviceaccount:"+c.namespace+":default",
		"/probe-server", "whoami", "https://127.0.0.1:6443")

	// An edit of the config map reaches the files, both keys at once.
	before := strings.TrimSpace(c.execIn(t, "volumes", "readlink", "/config/..data"))
	settings.Data = map[string]string{"a": "2", "b": "2"}
	if _, err := c.admin.CoreV1().ConfigMaps(c.namespace).Update(ctx, settings, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	took = eventually(t, 90*time.Second, "config map edit in the container", func() error {
		if got := strings.TrimSpace(c.execIn(t, "volumes", "sh", "-c", "cat /config/..data/a; echo; cat /config/..data/b")); got != "2\n2" {
			return fmt.Errorf("files show %q", got)
		}
		return nil
	})
	after := strings.TrimSpace(c.execIn(t, "volumes", "readlink", "/config/..data"))
	t.Logf("edit visible %v after the update; ..data %s -> %s", took, before, after)
	if after == before || !strings.HasPrefix(after, "..") {
		t.Errorf("..data was not swapped to a new timestamped directory: %s -> %s", before, after)
	}
	// At least one periodic sync (syncFrequency 10 s) more, past a TTL cache's 5 s.
	time.Sleep(12 * time.Second)
	c.checkWatchedNotRead(t, requests, "configmaps/settings", "secrets/creds")

	// Deleting the pod unmounts everything and leaves no directory behind.
	podDir := filepath.Join(c.rootDir, "pods", string(pod.UID))
	if n := len(mountsUnder(t, podDir)); n < 3 {
		t.Errorf("%d mounts under %s while the pod runs, want tmpfs for the secret, token and memory emptyDir", n, podDir)
	}
	if err := c.admin.CoreV1().Pods(c.namespace).Delete(ctx, "volumes", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "pod gone", func() error { return c.podGone("volumes") })
	if left := mountsUnder(t, podDir); len(left) > 0 {
		t.Errorf("mounts left after the pod was deleted: %v", left)
	}
	if _, err := os.Stat(podDir); !os.IsNotExist(err) {
		t.Errorf("pod directory left after the pod was deleted: %v", err)
	}
}

// openAuditTail follows the control plane's audit log (the kubelets' requests) from now on.
func openAuditTail(t *testing.T) *audit.Tail {
	t.Helper()
	tail, err := audit.OpenTail(filepath.Join(cpDir(t), "logs", "audit.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tail.Close)
	return tail
}

// checkWatchedNotRead checks, from the audit log, that the node watched each object
// ("configmaps/settings") and read it with a GET at most once, however many pod syncs
// went by: with the Watch change-detection strategy, the default, later reads come from
// the watch (a TTL cache would GET each object at every sync).
func (c *clusterNode) checkWatchedNotRead(t *testing.T, tail *audit.Tail, objects ...string) {
	t.Helper()
	time.Sleep(2 * time.Second) // the API server logs a request once it has answered it
	events, err := tail.Read()
	if err != nil {
		t.Fatal(err)
	}
	user := "system:node:" + c.name
	for _, o := range objects {
		resource, name, _ := strings.Cut(o, "/")
		path := "/api/v1/namespaces/" + c.namespace + "/" + resource
		gets, watches := 0, 0
		for _, e := range events {
			uri, query, _ := strings.Cut(e.RequestURI, "?")
			switch {
			case e.User.Username != user:
			case e.Verb == "get" && uri == path+"/"+name && e.Stage == "ResponseComplete":
				gets++
			// A watch still open has logged its start only.
			case e.Verb == "watch" && uri == path && strings.Contains(query, "metadata.name%3D"+name) && e.Stage == "ResponseStarted":
				watches++
			}
		}
		t.Logf("%s: %d GETs, %d watches", o, gets, watches)
		if gets > 1 {
			t.Errorf("%s read %d times with a GET, want at most once (then from its watch)", o, gets)
		}
		if watches == 0 {
			t.Errorf("%s never watched", o)
		}
	}
}

// containerWaiting is nil once the pod's container waits with reason and a message
// containing text.
func (c *clusterNode) containerWaiting(pod, reason, text string) error {
	p, err := c.getPod(pod)
	if err != nil {
		return err
	}
	for _, cs := range p.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil && w.Reason == reason && strings.Contains(w.Message, text) {
			return nil
		}
	}
	return fmt.Errorf("container statuses %+v", p.Status.ContainerStatuses)
}

// hasEvent is nil once the pod has an event of reason whose message contains text.
func (c *clusterNode) hasEvent(uid types.UID, reason, text string) error {
	list, err := c.admin.CoreV1().Events(c.namespace).List(context.Background(), metav1.ListOptions{
		FieldSelector: "involvedObject.uid=" + string(uid) + ",reason=" + reason,
	})
	if err != nil {
		return err
	}
	var seen []string
	for _, e := range list.Items {
		if strings.Contains(e.Message, text) {
			return nil
		}
		seen = append(seen, e.Message)
	}
	return fmt.Errorf("%s events: %q", reason, seen)
}

func TestClusterVolumeFailures(t *testing.T) {
	c := startClusterNode(t, clusterOptions{})
	eventually(t, 10*time.Second, "node Ready", func() error { return c.nodeReady(t) })

	// A missing config map: FailedMount naming volume and reason, then Running once it exists.
	missing := c.testPod("missing-config")
	missing.Spec.Volumes = []v1.Volume{{Name: "cfg", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{
		LocalObjectReference: v1.LocalObjectReference{Name: "later"}}}}}
	missing.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "cfg", MountPath: "/cfg"}}
	missing = c.createPod(t, missing)

	// An inline CSI volume of a driver without a CSIDriver object: upstream's refusal.
	csi := c.testPod("csi")
	csi.Spec.Volumes = []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{CSI: &v1.CSIVolumeSource{Driver: "csi.example.com"}}}}
	csi = c.createPod(t, csi)

	// A subPath through a symlink that leads out of the volume (CVE-2017-1002101 class).
	escape := c.testPod("escape")
	escape.Spec.Volumes = []v1.Volume{{Name: "vol", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}}
	escape.Spec.InitContainers = []v1.Container{{Name: "plant", Image: escape.Spec.Containers[0].Image, ImagePullPolicy: v1.PullIfNotPresent,
		Command: []string{"ln", "-s", "/", "/vol/escape"}, VolumeMounts: []v1.VolumeMount{{Name: "vol", MountPath: "/vol"}}}}
	escape.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "vol", MountPath: "/host", SubPath: "escape"}}
	c.createPod(t, escape)

	eventually(t, 30*time.Second, "FailedMount for the missing config map", func() error {
		return c.hasEvent(missing.UID, "FailedMount", `MountVolume.SetUp failed for volume "cfg" : configmap "later" not found`)
	})
	eventually(t, 30*time.Second, "FailedMount for the CSI volume", func() error {
		return c.hasEvent(csi.UID, "FailedMount", `MountVolume.SetUp failed for volume "data" : volume mode "Ephemeral" not supported by driver csi.example.com (no CSIDriver object)`)
	})
	eventually(t, 30*time.Second, "subPath escape refused", func() error {
		return c.containerWaiting("escape", "CreateContainerConfigError", `failed to prepare subPath for volumeMount "vol" of container "main"`)
	})
	if ids := c.containerIDs(t, "escape"); len(ids) > 0 {
		t.Errorf("the escaping container runs: %v", ids)
	}
	c.createConfigMap(t, "later", map[string]string{"k": "v"})
	took := eventually(t, 60*time.Second, "pod Ready once its config map exists", func() error { return c.podReady("missing-config") })
	t.Logf("Ready %v after the config map was created", took)
}

// createLocalClaim creates a local persistent volume on dir, bound by name to a claim
// of the test's namespace called claim (the volume is removed when the test ends).
func (c *clusterNode) createLocalClaim(t *testing.T, claim, dir string) {
	t.Helper()
	ctx := context.Background()
	pvName := c.name + "-" + claim
	class := "local-" + c.name
	pv := &v1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: pvName},
		Spec: v1.PersistentVolumeSpec{
			Capacity:                      v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:                   []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: v1.PersistentVolumeReclaimRetain,
			StorageClassName:              class,
			PersistentVolumeSource:        v1.PersistentVolumeSource{Local: &v1.LocalVolumeSource{Path: dir}},
			NodeAffinity: &v1.VolumeNodeAffinity{Required: &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{
				MatchExpressions: []v1.NodeSelectorRequirement{{Key: "kubernetes.io/hostname", Operator: v1.NodeSelectorOpIn, Values: []string{c.name}}},
			}}}},
		},
	}
	if _, err := c.admin.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.admin.CoreV1().PersistentVolumes().Delete(ctx, pvName, metav1.DeleteOptions{}) })
	pvc := &v1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: claim, Namespace: c.namespace},
		Spec: v1.PersistentVolumeClaimSpec{
			AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce}, StorageClassName: &class, VolumeName: pvName,
			Resources: v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
	if _, err := c.admin.CoreV1().PersistentVolumeClaims(c.namespace).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func TestClusterLocalVolumeClaimKeepsData(t *testing.T) {
	c := startClusterNode(t, clusterOptions{})
	ctx := context.Background()
	eventually(t, 10*time.Second, "node Ready", func() error { return c.nodeReady(t) })
	c.createLocalClaim(t, "data", t.TempDir())
	withClaim := func(name, script string) *v1.Pod {
		pod := c.testPod(name, "sh", "-c", script)
		pod.Spec.Volumes = []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}}}
		pod.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "data", MountPath: "/data"}}
		return pod
	}
	writer := c.createPod(t, withClaim("writer", "echo kept > /data/file; trap 'exit 0' TERM; while true; do sleep 1; done"))
	eventually(t, 60*time.Second, "writer Ready (claim bound and mounted)", func() error { return c.podReady("writer") })
	if err := c.admin.CoreV1().Pods(c.namespace).Delete(ctx, "writer", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "writer gone", func() error { return c.podGone("writer") })
	if left := mountsUnder(t, filepath.Join(c.rootDir, "pods", string(writer.UID))); len(left) > 0 {
		t.Errorf("bind mount left after the writer was deleted: %v", left)
	}
	c.createPod(t, withClaim("reader", "trap 'exit 0' TERM; while true; do sleep 1; done"))
	eventually(t, 60*time.Second, "reader Ready", func() error { return c.podReady("reader") })
	if got := strings.TrimSpace(c.execIn(t, "reader", "cat", "/data/file")); got != "kept" {
		t.Errorf("the re-created pod reads %q from the claim, want kept", got)
	}
}

func TestClusterKilledMidMountLeaksNoMounts(t *testing.T) {
	c := startClusterNode(t, clusterOptions{})
	ctx := context.Background()
	eventually(t, 10*time.Second, "node Ready", func() error { return c.nodeReady(t) })
	baseline := mountsUnder(t, c.rootDir)
	secret := &v1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "creds", Namespace: c.namespace}, StringData: map[string]string{"password": "hunter2"}}
	if _, err := c.admin.CoreV1().Secrets(c.namespace).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.createConfigMap(t, "settings", map[string]string{"a": "1", "b": "1"})
	pod := c.createPod(t, c.volumesPod())
	// Kill nodelet as soon as the first volume mount exists: the rest is mid-way.
	volumesDir := filepath.Join(c.rootDir, "pods", string(pod.UID))
	eventually(t, 30*time.Second, "a first mount of the pod", func() error {
		if len(mountsUnder(t, volumesDir)) == 0 {
			return fmt.Errorf("none yet")
		}
		return nil
	})
	c.restart(t, true)
	eventually(t, 60*time.Second, "pod Ready after the restart", func() error { return c.podReady("volumes") })
	if n := len(mountsUnder(t, volumesDir)); n != 3 {
		t.Errorf("%d mounts under the pod after the restart, want 3 (secret, token, memory emptyDir; no duplicates): %v", n, mountsUnder(t, volumesDir))
	}
	if err := c.admin.CoreV1().Pods(c.namespace).Delete(ctx, "volumes", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "pod gone", func() error { return c.podGone("volumes") })
	if after := mountsUnder(t, c.rootDir); strings.Join(after, "\n") != strings.Join(baseline, "\n") {
		t.Errorf("mounts under the root dir before: %v, after: %v", baseline, after)
	}
}
