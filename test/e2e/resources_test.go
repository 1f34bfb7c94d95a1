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
