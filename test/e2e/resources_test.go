//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Resource management: QoS cgroups read back from cgroupfs, eviction under memory
// pressure, OOMKilled.

// withResources gives the pod's container requests and limits ("" leaves one unset).
func withResources(pod *v1.Pod, cpuReq, cpuLim, memReq, memLim string) *v1.Pod {
	r := &pod.Spec.Containers[0].Resources
	set := func(list *v1.ResourceList, name v1.ResourceName, q string) {
		if q == "" {
			return
		}
		if *list == nil {
			*list = v1.ResourceList{}
		}
		(*list)[name] = resource.MustParse(q)
	}
	set(&r.Requests, v1.ResourceCPU, cpuReq)
	set(&r.Limits, v1.ResourceCPU, cpuLim)
	set(&r.Requests, v1.ResourceMemory, memReq)
	set(&r.Limits, v1.ResourceMemory, memLim)
	return pod
}

// cgroupValue reads a cgroup v1 file of controller under this node's cgroup root.
func (c *clusterNode) cgroupValue(t *testing.T, controller, rel, file string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(cgroupFS, controller, c.name, rel, file))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func TestClusterQoSCgroups(t *testing.T) {
	if _, err := os.Stat(filepath.Join(cgroupFS, "cgroup.controllers")); err == nil {
		t.Skip("this test reads cgroup v1 files; the host runs cgroup v2")
	}
	// A pod's status.resources read back from its cgroup need a sync after the API shows
	// the pod Running: the periodic one, here every 10s.
	c := startClusterNode(t, clusterOptions{config: "syncFrequency: 10s\n"})
	eventually(t, 10*time.Second, "node Ready", func() error { return c.nodeReady(t) })
	guaranteed := c.createPod(t, withResources(c.testPod("guaranteed"), "500m", "500m", "64Mi", "64Mi"))
	burstable := c.createPod(t, withResources(c.testPod("burstable"), "250m", "1", "32Mi", ""))
	limited := c.createPod(t, withResources(c.testPod("burstable-limited"), "100m", "200m", "32Mi", "64Mi"))
	bestEffort := c.createPod(t, c.testPod("besteffort"))
	for _, name := range []string{"guaranteed", "burstable", "burstable-limited", "besteffort"} {
		eventually(t, 60*time.Second, name+" Ready", func() error { return c.podReady(name) })
	}
	unlimited := c.cgroupValue(t, "memory", "kubepods/besteffort", "memory.limit_in_bytes")
	for _, tc := range []struct {
		pod                        *v1.Pod
		dir                        string
		shares, quota, memoryLimit string
	}{
		{guaranteed, "kubepods/pod" + string(guaranteed.UID), "512", "50000", "67108864"},
		{burstable, "kubepods/burstable/pod" + string(burstable.UID), "256", "100000", unlimited},
		{limited, "kubepods/burstable/pod" + string(limited.UID), "102", "20000", "67108864"},
		{bestEffort, "kubepods/besteffort/pod" + string(bestEffort.UID), "2", "-1", unlimited},
	} {
		got := []string{
			c.cgroupValue(t, "cpu", tc.dir, "cpu.shares"),
			c.cgroupValue(t, "cpu", tc.dir, "cpu.cfs_quota_us"),
			c.cgroupValue(t, "memory", tc.dir, "memory.limit_in_bytes"),
		}
		if want := []string{tc.shares, tc.quota, tc.memoryLimit}; strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("%s: cpu.shares, cfs_quota_us, memory limit = %v, want %v", tc.pod.Name, got, want)
		}
	}
	// The QoS classes: burstable has the sum of its pods' CPU requests, besteffort the least.
	if got := c.cgroupValue(t, "cpu", "kubepods/burstable", "cpu.shares"); got != "358" {
		t.Errorf("kubepods/burstable cpu.shares = %s, want 358 (350m)", got)
	}
	if got := c.cgroupValue(t, "cpu", "kubepods/besteffort", "cpu.shares"); got != "2" {
		t.Errorf("kubepods/besteffort cpu.shares = %s, want 2", got)
	}
	// The pods' processes are in their pod cgroups (in the containers' cgroups below them).
	podDir := filepath.Join(cgroupFS, "memory", c.name, "kubepods", "pod"+string(guaranteed.UID))
	found := false
	_ = filepath.WalkDir(podDir, func(path string, d os.DirEntry, err error) error {
		if err == nil && d.Name() == "cgroup.procs" {
			b, _ := os.ReadFile(path)
			found = found || strings.TrimSpace(string(b)) != ""
		}
		return nil
	})
	if !found {
		t.Errorf("no process under the Guaranteed pod's memory cgroup %s", podDir)
	}
	checkPodLevelResourcesStatus(t, c, unlimited)
}

// A pod with pod-level resources only (500m/1 CPU, 512Mi/1Gi) and two containers, one
// with limits of its own and one without: the one without runs under the pod's limits,
// with CPU shares from the pod's CPU limit, and keeps following them when they are
// resized in place. The values are those upstream's kubelet v1.37.2 gives the same pod on
// this cgroup v1 host (generateLinuxContainerResources: getCPULimit/getMemoryLimit,
// NoSwap's memory+swap limit, the OOM score with the unrequested pod-level memory
// request shared by the containers).
func TestClusterPodLevelResources(t *testing.T) {
	skipUnlessCgroupV1(t)
	c := startClusterNode(t, clusterOptions{})
	eventually(t, 10*time.Second, "node Ready", func() error { return c.nodeReady(t) })
	pod := c.testPod("pod-level")
	pod.Spec.Resources = &v1.ResourceRequirements{
		Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("500m"), v1.ResourceMemory: resource.MustParse("512Mi")},
		Limits:   v1.ResourceList{v1.ResourceCPU: resource.MustParse("1"), v1.ResourceMemory: resource.MustParse("1Gi")},
	}
	limited, free := pod.Spec.Containers[0], pod.Spec.Containers[0]
	limited.Name, free.Name = "limited", "free"
	limited.Resources = resources("100m", "200m", "32Mi", "64Mi")
	pod.Spec.Containers = []v1.Container{limited, free}
	c.createPod(t, pod)
	eventually(t, 60*time.Second, "pod-level Ready", func() error { return c.podReady("pod-level") })
	p, err := c.getPod("pod-level")
	if err != nil {
		t.Fatal(err)
	}
	if p.Status.QOSClass != v1.PodQOSBurstable {
		t.Fatalf("QoS class %s, want Burstable", p.Status.QOSClass)
	}
	dirs := map[string]string{"pod": "kubepods/burstable/pod" + string(p.UID)}
	for _, cs := range p.Status.ContainerStatuses {
		_, id, _ := strings.Cut(cs.ContainerID, "://")
		dirs[cs.Name] = filepath.Join(dirs["pod"], id)
	}
	// cpu.shares, cpu.cfs_quota_us, memory.limit_in_bytes, memory.memsw.limit_in_bytes.
	check := func(when string, want map[string]string) {
		t.Helper()
		for name, w := range want {
			dir := dirs[name]
			got := strings.Join([]string{
				c.cgroupValue(t, "cpu", dir, "cpu.shares"), c.cgroupValue(t, "cpu", dir, "cpu.cfs_quota_us"),
				c.cgroupValue(t, "memory", dir, "memory.limit_in_bytes"), c.cgroupValue(t, "memory", dir, "memory.memsw.limit_in_bytes"),
			}, " ")
			if got != w {
				t.Errorf("%s: %s: cpu.shares, cfs_quota_us, memory and memory+swap limits = %s, want %s", when, name, got, w)
			}
		}
	}
	unlimited := c.cgroupValue(t, "memory", "kubepods/besteffort", "memory.limit_in_bytes")
	check("started", map[string]string{
		"pod":     "512 100000 1073741824 " + unlimited,
		"limited": "102 20000 67108864 67108864",
		"free":    "1024 100000 1073741824 1073741824",
	})
	// Burstable containers' OOM score: 1000 − 1000 × (request + 240Mi) / memory, within
	// [3, 999], 240Mi being each one's half of the 480Mi of the pod's request no container
	// requests.
	memory := meminfoBytes(t, "MemTotal:")
	for name, request := range map[string]int64{"limited": 32 << 20, "free": 0} {
		want := strconv.FormatInt(min(max(1000-1000*(request+240<<20)/memory, 3), 999), 10)
		if got := c.containerOOMScoreAdj(t, dirs[name]); got != want {
			t.Errorf("%s: oom_score_adj %s, want %s", name, got, want)
		}
	}

	// The pod's CPU limit resized in place: the container without a limit follows it.
	resized := p.DeepCopy()
	resized.Spec.Resources.Limits[v1.ResourceCPU] = resource.MustParse("2")
	if _, err := c.admin.CoreV1().Pods(c.namespace).UpdateResize(context.Background(), "pod-level", resized, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "pod-level resize applied", func() error {
		got, err := c.getPod("pod-level")
		switch {
		case err != nil:
			return err
		case podCondition(got, v1.PodResizeInProgress) != nil || podCondition(got, v1.PodResizePending) != nil:
			return fmt.Errorf("resize conditions: %+v", got.Status.Conditions)
		case got.Status.ObservedGeneration < got.Generation:
			return fmt.Errorf("observedGeneration %d < %d", got.Status.ObservedGeneration, got.Generation)
		}
		if q := c.cgroupValue(t, "cpu", dirs["free"], "cpu.cfs_quota_us"); q != "200000" {
			return fmt.Errorf("free: cpu.cfs_quota_us %s, want 200000", q)
		}
		return nil
	})
	// The shares are those a container started with the new limit gets: nodelet's start
	// and resize share one conversion (upstream's resize path gives a container without a
	// CPU request the minimum, 2, where its start gives 2048).
	check("resized", map[string]string{
		"pod":     "512 200000 1073741824 " + unlimited,
		"limited": "102 20000 67108864 67108864",
		"free":    "2048 200000 1073741824 1073741824",
	})
}

// containerOOMScoreAdj reads the oom_score_adj of the first process in a container's
// cgroup (dir, relative to the node's cgroup root).
func (c *clusterNode) containerOOMScoreAdj(t *testing.T, dir string) string {
	t.Helper()
	procs := c.cgroupValue(t, "memory", dir, "cgroup.procs")
	pid, _, _ := strings.Cut(procs, "\n")
	b, err := os.ReadFile(filepath.Join("/proc", pid, "oom_score_adj"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// checkPodLevelResourcesStatus checks the pods' status.allocatedResources (their
// requests) and status.resources (read back from their cgroups while Running) as the
// API stores them, against what upstream's kubelet v1.37.2 writes for the same pods on
// this cgroup v1 host (InPlacePodLevelResourcesVerticalScaling). unlimited is cgroup
// v1's "no memory limit", which upstream reports as the pod's memory limit:
// 9223372036854771712 bytes, "9007199254740988Ki", with 4KiB pages.
func checkPodLevelResourcesStatus(t *testing.T, c *clusterNode, unlimited string) {
	t.Helper()
	n, err := strconv.ParseInt(unlimited, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	noLimit := resource.NewQuantity(n, resource.BinarySI).String()
	want := map[string]string{
		"guaranteed": `{"allocatedResources":{"cpu":"500m","memory":"64Mi"},` +
			`"resources":{"limits":{"cpu":"500m","memory":"64Mi"},"requests":{"cpu":"500m","memory":"64Mi"}}}`,
		"burstable": `{"allocatedResources":{"cpu":"250m","memory":"32Mi"},` +
			`"resources":{"limits":{"cpu":"1","memory":"` + noLimit + `"},"requests":{"cpu":"250m","memory":"32Mi"}}}`,
		"burstable-limited": `{"allocatedResources":{"cpu":"100m","memory":"32Mi"},` +
			`"resources":{"limits":{"cpu":"200m","memory":"64Mi"},"requests":{"cpu":"100m","memory":"32Mi"}}}`,
		"besteffort": `{"resources":{"limits":{"memory":"` + noLimit + `"}}}`,
	}
	for name, w := range want {
		eventually(t, 40*time.Second, name+" pod-level resources status", func() error {
			p, err := c.getPod(name)
			if err != nil {
				return err
			}
			if got := podLevelResourcesJSON(t, p.Status); got != w {
				return fmt.Errorf("got %s, want %s", got, w)
			}
			return nil
		})
	}
}

// podLevelResourcesJSON is the status's allocatedResources and resources as JSON.
func podLevelResourcesJSON(t *testing.T, s v1.PodStatus) string {
	t.Helper()
	b, err := json.Marshal(struct {
		AllocatedResources v1.ResourceList          `json:"allocatedResources,omitempty"`
		Resources          *v1.ResourceRequirements `json:"resources,omitempty"`
	}{s.AllocatedResources, s.Resources})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// memoryAvailable is what the eviction manager compares with memory.available: the
// machine's memory less the root cgroup's working set (usage less inactive file pages).
func memoryAvailable(t *testing.T) int64 {
	t.Helper()
	total := meminfoBytes(t, "MemTotal:")
	usage := readInt(t, filepath.Join(cgroupFS, "memory", "memory.usage_in_bytes"))
	inactive := memoryStat(t, "total_inactive_file")
	return total - (usage - inactive)
}

func meminfoBytes(t *testing.T, key string) int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fields := strings.Fields(sc.Text()); len(fields) >= 2 && fields[0] == key {
			kb, _ := strconv.ParseInt(fields[1], 10, 64)
			return kb * 1024
		}
	}
	t.Fatalf("no %s in /proc/meminfo", key)
	return 0
}

func memoryStat(t *testing.T, key string) int64 {
	b, err := os.ReadFile(filepath.Join(cgroupFS, "memory", "memory.stat"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, " "); ok && k == key {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	t.Fatalf("no %s in memory.stat", key)
	return 0
}

func readInt(t *testing.T, path string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestClusterMemoryPressureEvictsBestEffort(t *testing.T) {
	if _, err := os.Stat(filepath.Join(cgroupFS, "cgroup.controllers")); err == nil {
		t.Skip("this test computes memory.available from cgroup v1 files; the host runs cgroup v2")
	}
	// A threshold 1.5 GiB below what is available now: a 3 GiB hog crosses it, whatever
	// else the machine does meanwhile within a GiB or so.
	threshold := memoryAvailable(t) - 1536<<20
	c := startClusterNode(t, clusterOptions{config: fmt.Sprintf("evictionHard:\n  memory.available: \"%d\"\nevictionPressureTransitionPeriod: 10s\n", threshold)})
	ctx := context.Background()
	eventually(t, 10*time.Second, "node Ready", func() error { return c.nodeReady(t) })
	c.createPod(t, withResources(c.testPod("guaranteed"), "100m", "100m", "32Mi", "32Mi"))
	eventually(t, 60*time.Second, "guaranteed Ready", func() error { return c.podReady("guaranteed") })

	hog := c.testPod("hog", "sh", "-c", "dd if=/dev/zero of=/fill/zeros bs=1M count=3072 2>/dev/null; trap 'exit 0' TERM; while true; do sleep 1; done")
	hog.Spec.Volumes = []v1.Volume{{Name: "fill", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{
		Medium: v1.StorageMediumMemory, SizeLimit: ptrQuantity("4Gi")}}}}
	hog.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "fill", MountPath: "/fill"}}
	c.createPod(t, hog)
	took := eventually(t, 90*time.Second, "the BestEffort hog evicted", func() error {
		p, err := c.getPod("hog")
		if err != nil {
			return err
		}
		if p.Status.Phase != v1.PodFailed || p.Status.Reason != "Evicted" {
			return fmt.Errorf("phase %s reason %q", p.Status.Phase, p.Status.Reason)
		}
		if !strings.Contains(p.Status.Message, "The node was low on resource: memory.") {
			return fmt.Errorf("message %q", p.Status.Message)
		}
		return nil
	})
	t.Logf("hog evicted %v after it was created", took)
	eventually(t, 30*time.Second, "MemoryPressure on the node", func() error {
		n, err := c.node(t)
		if err != nil {
			return err
		}
		for _, cond := range n.Status.Conditions {
			if cond.Type == v1.NodeMemoryPressure && cond.Status == v1.ConditionTrue {
				return nil
			}
		}
		return fmt.Errorf("no MemoryPressure=True")
	})
	if err := c.podReady("guaranteed"); err != nil {
		t.Errorf("the Guaranteed pod: %v", err)
	}
	if p, _ := c.getPod("guaranteed"); p != nil && p.Status.ContainerStatuses[0].RestartCount != 0 {
		t.Errorf("the Guaranteed pod restarted")
	}
	events, err := c.admin.CoreV1().Events(c.namespace).List(ctx, metav1.ListOptions{FieldSelector: "reason=Evicted"})
	if err != nil || len(events.Items) == 0 {
		t.Errorf("no Evicted event: %v", err)
	}
}

func ptrQuantity(s string) *resource.Quantity {
	q := resource.MustParse(s)
	return &q
}

func TestClusterContainerOverMemoryLimitIsOOMKilled(t *testing.T) {
	c := startClusterNode(t, clusterOptions{})
	eventually(t, 10*time.Second, "node Ready", func() error { return c.nodeReady(t) })
	pod := withResources(c.testPod("oom", "sh", "-c", "tail /dev/zero"), "", "", "", "32Mi")
	pod.Spec.RestartPolicy = v1.RestartPolicyNever
	c.createPod(t, pod)
	eventually(t, 60*time.Second, "container OOMKilled", func() error {
		p, err := c.getPod("oom")
		if err != nil {
			return err
		}
		for _, cs := range p.Status.ContainerStatuses {
			if term := cs.State.Terminated; term != nil && term.Reason == "OOMKilled" && term.ExitCode == 137 {
				return nil
			}
		}
		return fmt.Errorf("phase %s, statuses %+v", p.Status.Phase, p.Status.ContainerStatuses)
	})
}
