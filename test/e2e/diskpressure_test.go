//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Disk-pressure chaos: a node whose root directory, pod logs and containerd all live on
// one small loop-mounted filesystem is filled past its nodefs.available threshold.

const (
	mib = int64(1) << 20
	// nodefsThreshold and nodefsMinReclaim are the node's evictionHard and
	// evictionMinimumReclaim for nodefs.available.
	nodefsThreshold  = 300 * mib
	nodefsMinReclaim = 16 * mib
)

// diskPressureConfig: one hard nodefs threshold and nothing else (an evictionHard given
// in full replaces upstream's defaults, so no imagefs or memory threshold: the image
// filesystem is this same disk, and nodefs covers it). Short periods keep the test short:
// volume usage re-measured every 2 s, the condition kept 5 s, node status every 2 s, and
// images unused for a second may be reclaimed.
var diskPressureConfig = fmt.Sprintf(`evictionHard:
  nodefs.available: "%dMi"
evictionMinimumReclaim:
  nodefs.available: "%dMi"
evictionPressureTransitionPeriod: 5s
volumeStatsAggPeriod: 2s
imageMinimumGCAge: 1s
nodeStatusUpdateFrequency: 2s
`, nodefsThreshold/mib, nodefsMinReclaim/mib)

// TestClusterDiskPressure fills the node's disk from a BestEffort pod and checks what
// upstream's eviction manager does: DiskPressure; dead containers and unused images
// reclaimed first; then, that not being enough, the pod most over its ephemeral-storage
// request evicted, Failed with reason Evicted; its emptyDir removed, so the condition
// clears. A second fill (a ballast file the node cannot reclaim) then evicts the next
// pod in upstream's order: the BestEffort pod using less than the Burstable one, because
// the Burstable one stays within its request. The Guaranteed pod is never touched.
func TestClusterDiskPressure(t *testing.T) {
	began := time.Now()
	disk, endpoint := startChaosRig(t, "1G")
	rootDir := filepath.Join(disk, "kubelet")
	c := startClusterNode(t, clusterOptions{
		rootDir: rootDir, podLogsDir: filepath.Join(disk, "pod-logs"), endpoint: endpoint, config: diskPressureConfig,
	})
	rigUp := time.Since(began)
	eventually(t, 20*time.Second, "node Ready", func() error { return c.nodeReady(t) })
	is := imageService(t, endpoint)

	pods := startDiskPressurePods(t, c, rootDir)
	guaranteedID := pods["guaranteed"].Status.ContainerStatuses[0].ContainerID
	burstableID := pods["burstable"].Status.ContainerStatuses[0].ContainerID
	keepPath := filepath.Join(emptyDirPath(rootDir, pods["guaranteed"], "data"), "keep")
	keep := fileDigest(t, keepPath)
	_, deadID, _ := strings.Cut(pods["dead"].Status.ContainerStatuses[0].ContainerID, "://")
	images := imageRefs(t, is)
	unused := []string{"nodelet.local/probe-server:1.0", "nodelet.local/grpc-health:1.0"}
	for _, ref := range append(slices.Clone(unused), "docker.io/library/busybox:1.36", "registry.k8s.io/pause:3.10") {
		if !images[ref] {
			t.Fatalf("image %s missing before the test: %v", ref, images)
		}
	}

	// Round 1: a BestEffort writer takes the disk to 128 MiB below the threshold, in two
	// steps: the first stays above it and lets the volume stats (every 2 s) see the
	// writer's usage before the second crosses it.
	avail := availableBytes(t, disk)
	step1 := (avail - nodefsThreshold - 64*mib) / mib
	writerCmd := fmt.Sprintf("dd if=/dev/zero of=/data/fill1 bs=1M count=%d 2>/dev/null && sleep 6 && %s", step1, writeThenSleep("/data/fill2", 192))
	writer := c.createPod(t, withEmptyDir(c.testPod("writer", "sh", "-c", writerCmd)))
	t.Logf("nodefs: %d MiB available; the writer writes %d MiB then 192 MiB", avail/mib, step1)
	fillStart := time.Now()
	pressure1 := eventually(t, 40*time.Second, "DiskPressure=True", func() error { return c.diskPressure(t, v1.ConditionTrue) })
	eventually(t, 40*time.Second, "the writer evicted", func() error { return c.evicted("writer", v1.ResourceEphemeralStorage) })
	if p, err := c.getPod("writer"); err == nil {
		t.Logf("writer: %s: %s", p.Status.Reason, p.Status.Message)
	}
	t.Logf("round 1: DiskPressure after %v, writer evicted after %v", pressure1.Round(time.Millisecond), time.Since(fillStart).Round(time.Millisecond))

	// The reclaim came first: the dead container and the unused images are gone, the
	// images in use and the sandbox image kept.
	if err := c.containerGone(deadID); err != nil {
		t.Errorf("dead container not reclaimed: %v", err)
	}
	images = imageRefs(t, is)
	for _, ref := range unused {
		if images[ref] {
			t.Errorf("unused image %s not reclaimed", ref)
		}
	}
	for _, ref := range []string{"docker.io/library/busybox:1.36", "registry.k8s.io/pause:3.10"} {
		if !images[ref] {
			t.Errorf("image %s (in use / sandbox) was removed", ref)
		}
	}
	checkEvictionLog(t, c, 0, "writer", []string{"writer", "besteffort", "burstable", "guaranteed"})

	// The writer's emptyDir goes with it, the space comes back, and the condition
	// clears once the transition period has passed.
	eventually(t, 30*time.Second, "the writer's emptyDir removed", func() error {
		if _, err := os.Stat(emptyDirPath(rootDir, writer, "data")); !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("still there (%v); %d MiB available", err, availableBytes(t, disk)/mib)
		}
		return nil
	})
	cleared1 := eventually(t, 30*time.Second, "DiskPressure=False", func() error { return c.diskPressure(t, v1.ConditionFalse) })
	t.Logf("round 1: DiskPressure cleared %v after the emptyDir went", cleared1.Round(time.Millisecond))
	for _, name := range []string{"besteffort", "burstable", "guaranteed"} {
		if err := c.podReady(name); err != nil {
			t.Fatalf("%s after round 1: %v", name, err)
		}
	}

	// Round 2: a ballast nothing can reclaim leaves 16 MiB less than the threshold. The
	// BestEffort pod (96 MiB over its request of nothing) goes before the Burstable one
	// (128 MiB, but within its 192 MiB request) and the Guaranteed one; evicting it frees
	// enough, so nothing else goes.
	logFrom := len(c.out.String())
	chaosDisk(t, "fill", disk, fmt.Sprint(nodefsThreshold-nodefsMinReclaim))
	fillStart = time.Now()
	eventually(t, 30*time.Second, "DiskPressure=True again", func() error { return c.diskPressure(t, v1.ConditionTrue) })
	eventually(t, 30*time.Second, "the BestEffort pod evicted", func() error { return c.evicted("besteffort", v1.ResourceEphemeralStorage) })
	t.Logf("round 2: besteffort evicted after %v", time.Since(fillStart).Round(time.Millisecond))
	checkEvictionLog(t, c, logFrom, "besteffort", []string{"besteffort", "burstable", "guaranteed"})
	eventually(t, 30*time.Second, "DiskPressure=False again", func() error { return c.diskPressure(t, v1.ConditionFalse) })

	// Nothing of the Guaranteed pod (nor of the Burstable one) was touched.
	c.runningUnrestarted(t, "guaranteed", guaranteedID)
	c.runningUnrestarted(t, "burstable", burstableID)
	if got := fileDigest(t, keepPath); got != keep {
		t.Errorf("the Guaranteed pod's file changed: %s, was %s", got, keep)
	}
	for _, name := range []string{"guaranteed", "burstable"} {
		if err := c.hasEvent(pods[name].UID, "Evicted", ""); err == nil {
			t.Errorf("%s has an Evicted event", name)
		}
	}
	if n := strings.Count(c.out.String(), "Eviction manager: pod is evicted successfully"); n != 2 {
		t.Errorf("%d evictions logged, want 2", n)
	}
	chaosDisk(t, "unfill", disk)
	t.Logf("rig up in %v; whole test %v", rigUp.Round(time.Millisecond), time.Since(began).Round(time.Millisecond))
}

// startDiskPressurePods starts the pods the disk is shared with, each with an emptyDir
// on it, and waits until each has written its data: a Guaranteed pod with 8 MiB (its
// request and limit are 256 MiB), a Burstable pod with 128 MiB (request 192 MiB), a
// BestEffort pod with 96 MiB, and a pod that writes 32 MiB into its own writable layer
// and exits, leaving a dead container.
func startDiskPressurePods(t *testing.T, c *clusterNode, rootDir string) map[string]*v1.Pod {
	t.Helper()
	keepCmd := "head -c 8388608 /dev/urandom >/data/keep && touch /data/done; trap 'exit 0' TERM; while true; do sleep 1; done"
	running := []*v1.Pod{
		withEphemeralStorage(withEmptyDir(withResources(c.testPod("guaranteed", "sh", "-c", keepCmd), "100m", "100m", "32Mi", "32Mi")), "256Mi", "256Mi"),
		withEphemeralStorage(withEmptyDir(withResources(c.testPod("burstable", "sh", "-c", writeThenSleep("/data/fill", 128)), "50m", "", "", "")), "192Mi", ""),
		withEmptyDir(c.testPod("besteffort", "sh", "-c", writeThenSleep("/data/fill", 96))),
	}
	dead := c.testPod("dead", "sh", "-c", "dd if=/dev/zero of=/junk bs=1M count=32 2>/dev/null")
	dead.Spec.RestartPolicy = v1.RestartPolicyNever
	created := map[string]*v1.Pod{}
	for _, p := range append(running, dead) {
		created[p.Name] = c.createPod(t, p)
	}
	for _, p := range running {
		done := filepath.Join(emptyDirPath(rootDir, created[p.Name], "data"), "done")
		eventually(t, 60*time.Second, p.Name+" Ready with its data written", func() error {
			if err := c.podReady(p.Name); err != nil {
				return err
			}
			_, err := os.Stat(done)
			return err
		})
	}
	eventually(t, 60*time.Second, "the dead pod Succeeded", func() error {
		p, err := c.getPod("dead")
		if err != nil {
			return err
		}
		if p.Status.Phase != v1.PodSucceeded || len(p.Status.ContainerStatuses) == 0 || p.Status.ContainerStatuses[0].ContainerID == "" {
			return fmt.Errorf("phase %s", p.Status.Phase)
		}
		return nil
	})
	out := map[string]*v1.Pod{}
	for name := range created {
		p, err := c.getPod(name)
		if err != nil {
			t.Fatal(err)
		}
		out[name] = p
	}
	return out
}

// checkEvictionLog checks nodelet's log from offset from for one round of eviction in
// upstream's order: the attempt to reclaim ephemeral-storage, the container and image
// reclaims, the decision to evict, the ranking (wantRank, first to last), then the
// eviction of victim.
func checkEvictionLog(t *testing.T, c *clusterNode, from int, victim string, wantRank []string) {
	t.Helper()
	out := c.out.String()
	steps := []string{
		"Eviction manager: attempting to reclaim",
		"Attempting to delete unused containers",
		"Attempting to delete unused images",
		"Eviction manager: must evict pod(s) to reclaim",
		"Eviction manager: pods ranked for eviction",
		"Eviction manager: pod is evicted successfully",
	}
	at := from
	var lines []string
	for _, s := range steps {
		i := logIndex(out, s, at)
		if i < 0 {
			t.Errorf("no %q in nodelet's log after %q", s, lines)
			return
		}
		lines = append(lines, logLine(out, i))
		at = i + len(s)
	}
	for _, l := range lines {
		t.Logf("log: %s", l)
	}
	if !strings.Contains(lines[0], "ephemeral-storage") {
		t.Errorf("reclaim of another resource: %s", lines[0])
	}
	if got := rankedOrder(lines[4], wantRank...); !slices.Equal(got, wantRank) {
		t.Errorf("pods ranked %v, want %v: %s", got, wantRank, lines[4])
	}
	if !strings.Contains(lines[5], "/"+victim+`"`) {
		t.Errorf("evicted another pod than %s: %s", victim, lines[5])
	}
	events, err := c.admin.CoreV1().Events(c.namespace).List(context.Background(), metav1.ListOptions{FieldSelector: "reason=Evicted,involvedObject.name=" + victim})
	if err != nil || len(events.Items) == 0 {
		t.Errorf("no Evicted event for %s: %v", victim, err)
	}
}
