//go:build e2e

package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/pkg/runtime/cri"
)

// The disk-pressure chaos test's rig: a loop-mounted filesystem of its own
// (hack/chaos-disk.sh) holding a containerd of its own (hack/runtime.sh) and the
// node's root and pod logs directories, so that everything the eviction manager
// measures and reclaims for nodefs is on one small disk the test can fill.

// chaosDiskDir is where the chaos disk is mounted: a fixed path, so that a run killed
// before its cleanup is cleaned up by the next one.
const chaosDiskDir = "/var/lib/nodelet-chaos-e2e"

// chaosRig is the dedicated containerd's settings: its state on the chaos disk, its own
// run directory, bridge and pod subnet.
var chaosRig = []string{
	"NODELET_STATE_DIR=" + chaosDiskDir + "/containerd",
	"NODELET_RUN_DIR=/run/nodelet-chaos",
	"NODELET_BRIDGE=nodeletdp",
	"NODELET_POD_CIDR=10.95.0.0/24",
}

// hackScript runs a script of hack/ with args (and env added) and returns its stdout.
func hackScript(env []string, script string, args ...string) (string, error) {
	cmd := exec.Command(filepath.Join(repoRoot(), "hack", script), args...)
	cmd.Env = append(os.Environ(), env...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("hack/%s %s: %w\n%s", script, strings.Join(args, " "), err, stderr.String())
	}
	return strings.TrimSpace(string(out)), nil
}

// chaosDisk runs hack/chaos-disk.sh with args.
func chaosDisk(t *testing.T, args ...string) {
	t.Helper()
	if _, err := hackScript(nil, "chaos-disk.sh", args...); err != nil {
		t.Fatal(err)
	}
}

// startChaosRig mounts a fresh filesystem of size at chaosDiskDir and starts a
// containerd whose state (images, snapshots, writable layers) is on it. When the test
// ends, whatever happened, the containerd goes with its pods and mounts, then the disk.
// It returns the disk's mount point and the containerd's CRI endpoint.
func startChaosRig(t *testing.T, size string) (dir, endpoint string) {
	t.Helper()
	down := func() error {
		_, errDown := hackScript(chaosRig, "runtime.sh", "down")
		_, errTeardown := hackScript(nil, "chaos-disk.sh", "teardown", chaosDiskDir)
		return errors.Join(errDown, errTeardown)
	}
	// Leftovers of a run that was killed: both commands are safe when nothing is up.
	if err := down(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := down(); err != nil {
			t.Error(err)
		}
	})
	chaosDisk(t, "setup", chaosDiskDir, size)
	out, err := hackScript(chaosRig, "runtime.sh", "up")
	if err != nil {
		t.Fatal(err)
	}
	return chaosDiskDir, strings.TrimPrefix(out, "CONTAINER_RUNTIME_ENDPOINT=")
}

// availableBytes is what the eviction manager reads as nodefs.available: statfs's
// available blocks.
func availableBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Bavail) * st.Bsize
}

// emptyDirPath is where a pod's emptyDir volume lives under the node's root directory.
func emptyDirPath(rootDir string, pod *v1.Pod, volume string) string {
	return filepath.Join(rootDir, "pods", string(pod.UID), "volumes", "kubernetes.io~empty-dir", volume)
}

// fileDigest is the SHA-256 and modification time of a file, to tell it untouched.
func fileDigest(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return fmt.Sprintf("%s %d %s", hex.EncodeToString(sum[:]), fi.Size(), fi.ModTime().UTC().Format(time.RFC3339Nano))
}

// withEmptyDir gives the pod's container an emptyDir on disk mounted at /data.
func withEmptyDir(pod *v1.Pod) *v1.Pod {
	pod.Spec.Volumes = append(pod.Spec.Volumes, v1.Volume{Name: "data", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}})
	pod.Spec.Containers[0].VolumeMounts = append(pod.Spec.Containers[0].VolumeMounts, v1.VolumeMount{Name: "data", MountPath: "/data"})
	return pod
}

// withEphemeralStorage sets the container's ephemeral-storage request and limit ("" leaves
// one unset).
func withEphemeralStorage(pod *v1.Pod, request, limit string) *v1.Pod {
	r := &pod.Spec.Containers[0].Resources
	if request != "" {
		if r.Requests == nil {
			r.Requests = v1.ResourceList{}
		}
		r.Requests[v1.ResourceEphemeralStorage] = *ptrQuantity(request)
	}
	if limit != "" {
		if r.Limits == nil {
			r.Limits = v1.ResourceList{}
		}
		r.Limits[v1.ResourceEphemeralStorage] = *ptrQuantity(limit)
	}
	return pod
}

// writeThenSleep is a shell command writing mib MiB of zeros to path in one go, then
// marking it done and idling until SIGTERM.
func writeThenSleep(path string, mib int64) string {
	return fmt.Sprintf("dd if=/dev/zero of=%s bs=1M count=%d 2>/dev/null && touch /data/done; trap 'exit 0' TERM; while true; do sleep 1; done", path, mib)
}

// imageRefs lists the runtime's images by their tags.
func imageRefs(t *testing.T, is internalapi.ImageManagerService) map[string]bool {
	t.Helper()
	list, err := is.ListImages(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, img := range list {
		for _, tag := range img.RepoTags {
			out[tag] = true
		}
	}
	return out
}

func imageService(t *testing.T, endpoint string) internalapi.ImageManagerService {
	t.Helper()
	is, err := cri.NewRemoteImageService(context.Background(), endpoint, 3*time.Second, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	return is
}

// containerGone is nil once the runtime no longer knows the container.
func (c *clusterNode) containerGone(id string) error {
	list, err := c.rs.ListContainers(context.Background(), &runtimeapi.ContainerFilter{Id: id})
	if err != nil {
		return err
	}
	if len(list) > 0 {
		return fmt.Errorf("container %s still there (%s)", id, list[0].State)
	}
	return nil
}

// diskPressure is nil once the node's DiskPressure condition has status want.
func (c *clusterNode) diskPressure(t *testing.T, want v1.ConditionStatus) error {
	n, err := c.node(t)
	if err != nil {
		return err
	}
	if got := nodeCondition(n, v1.NodeDiskPressure); got.Status != want {
		return fmt.Errorf("DiskPressure=%q (%s), want %s", got.Status, got.Message, want)
	}
	return nil
}

// evicted is nil once the pod is Failed with reason Evicted and upstream's message
// naming res and the nodefs threshold.
func (c *clusterNode) evicted(name string, res v1.ResourceName) error {
	p, err := c.getPod(name)
	if err != nil {
		return err
	}
	if p.Status.Phase != v1.PodFailed || p.Status.Reason != "Evicted" {
		return fmt.Errorf("%s: phase %s reason %q", name, p.Status.Phase, p.Status.Reason)
	}
	want := fmt.Sprintf("The node was low on resource: %s. Threshold quantity: %dMi, available: ", res, nodefsThreshold/mib)
	if !strings.HasPrefix(p.Status.Message, want) {
		return fmt.Errorf("%s: message %q, want it to start with %q", name, p.Status.Message, want)
	}
	return nil
}

// runningUnrestarted checks that the pod runs the container it ran before (same ID),
// never restarted.
func (c *clusterNode) runningUnrestarted(t *testing.T, name, containerID string) {
	t.Helper()
	p, err := c.getPod(name)
	if err != nil {
		t.Fatal(err)
	}
	if p.Status.Phase != v1.PodRunning || len(p.Status.ContainerStatuses) != 1 {
		t.Errorf("%s: phase %s (%s: %s), want Running", name, p.Status.Phase, p.Status.Reason, p.Status.Message)
		return
	}
	cs := p.Status.ContainerStatuses[0]
	if cs.RestartCount != 0 || cs.ContainerID != containerID || cs.State.Running == nil {
		t.Errorf("%s: restartCount %d, container %s (was %s), state %+v", name, cs.RestartCount, cs.ContainerID, containerID, cs.State)
	}
}

// logIndex is where in nodelet's output text first appears after from, or -1.
func logIndex(out, text string, from int) int {
	if from < 0 || from > len(out) {
		return -1
	}
	i := strings.Index(out[from:], text)
	if i < 0 {
		return -1
	}
	return from + i
}

// logLine is the whole line of out around index i.
func logLine(out string, i int) string {
	start := strings.LastIndexByte(out[:i], '\n') + 1
	end := strings.IndexByte(out[i:], '\n')
	if end < 0 {
		return out[start:]
	}
	return out[start : i+end]
}

// rankedOrder is the order in which the pods named appear in a "pods ranked for
// eviction" log line (klog writes each as "namespace/name").
func rankedOrder(line string, names ...string) []string {
	var found []string
	for _, n := range names {
		if strings.Contains(line, "/"+n+`"`) {
			found = append(found, n)
		}
	}
	sort.SliceStable(found, func(i, j int) bool {
		return strings.Index(line, "/"+found[i]+`"`) < strings.Index(line, "/"+found[j]+`"`)
	})
	return found
}
