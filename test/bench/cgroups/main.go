// Command cgroups measures what the container manager (pkg/node/cm) costs per pod on this
// host's real cgroup filesystem: ContainerManager.EnsurePod, which a pod start calls
// before its sandbox (QoS cgroups updated for the new pod, the pod cgroup created and
// limited), and Remove, which a pod's cleanup calls. It runs nodelet's default settings
// under a cgroup root of its own, with -active pods' cgroups in place (the QoS update
// walks the active pods), creates and removes -pods more pods one at a time, cycling
// through the QoS classes so that machine noise hits them alike, and removes everything
// it made.
//
//	go run ./test/bench/cgroups -active 100 -pods 300
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/go-logr/logr"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/node/cm"
	"github.com/nodelet/nodelet/pkg/node/nodestatus"
	"github.com/nodelet/nodelet/test/internal/host"
)

func main() {
	active := flag.Int("active", 100, "pods whose cgroups exist throughout (the node's running pods)")
	pods := flag.Int("pods", 300, "pods created and removed one at a time (the measured ones)")
	flag.Parse()
	// The container manager's logs (node allocatable enforced) are not the bench's output.
	klog.SetLogger(logr.Discard())
	start := time.Now()
	if err := run(*active, *pods); err != nil {
		fmt.Fprintln(os.Stderr, "cgroups:", err)
		os.Exit(1)
	}
	fmt.Printf("  (wall time %v)\n", time.Since(start).Round(time.Second))
}

// qosClasses are the kinds of pods the bench cycles through, with the resources that
// make them so: a Guaranteed pod's cgroup sits under kubepods, the others' under their
// QoS cgroup, and only Burstable pods change the burstable cgroup's CPU shares.
var qosClasses = []struct {
	class     v1.PodQOSClass
	resources v1.ResourceRequirements
}{
	{v1.PodQOSGuaranteed, resources("100m", "64Mi", "100m", "64Mi")},
	{v1.PodQOSBurstable, resources("50m", "32Mi", "", "")},
	{v1.PodQOSBestEffort, resources("", "", "", "")},
}

func resources(cpuReq, memReq, cpuLim, memLim string) v1.ResourceRequirements {
	r := v1.ResourceRequirements{Requests: v1.ResourceList{}, Limits: v1.ResourceList{}}
	set := func(l v1.ResourceList, name v1.ResourceName, v string) {
		if v != "" {
			l[name] = resource.MustParse(v)
		}
	}
	set(r.Requests, v1.ResourceCPU, cpuReq)
	set(r.Requests, v1.ResourceMemory, memReq)
	set(r.Limits, v1.ResourceCPU, cpuLim)
	set(r.Limits, v1.ResourceMemory, memLim)
	return r
}

func newPod(name string, r v1.ResourceRequirements) *v1.Pod {
	p := &v1.Pod{Spec: v1.PodSpec{Containers: []v1.Container{{Name: "app", Resources: r}}}}
	p.Name, p.Namespace, p.UID = name, "bench", types.UID(fmt.Sprintf("cgbench-%d-%s", os.Getpid(), name))
	return p
}

// podSet is the pods the manager counts as active (the QoS cgroups are sized by them).
type podSet struct{ pods []*v1.Pod }

func (s *podSet) active() []*v1.Pod { return s.pods }

func run(active, measured int) (err error) {
	root := fmt.Sprintf("nodelet-cgbench-%d", os.Getpid())
	if err := host.MakeCgroupRoot(root); err != nil {
		return err
	}
	defer func() { err = errors.Join(err, host.RemoveCgroupRoot(root)) }()
	m, err := newManager("/" + root)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	set := &podSet{}
	if err := m.Start(ctx, set.active); err != nil {
		return err
	}
	defer func() { err = errors.Join(err, removeAll(m, set.pods)) }()
	for i := range active {
		p := newPod(fmt.Sprint("active-", i), qosClasses[i%len(qosClasses)].resources)
		set.pods = append(set.pods, p)
		if err := m.EnsurePod(p); err != nil {
			return err
		}
	}
	if got := len(m.Pods()); got != active {
		return fmt.Errorf("%d pod cgroups after creating %d", got, active)
	}
	s, err := measure(m, set, measured)
	if err != nil {
		return err
	}
	s.print(active, m.CgroupV2())
	return nil
}

// newManager is the container manager as nodelet builds it by default: per-QoS cgroups,
// node allocatable enforced on kubepods, CFS quota, the host's capacity.
func newManager(cgroupRoot string) (*cm.ContainerManager, error) {
	info, err := nodestatus.ReadMachineInfo("/")
	if err != nil {
		return nil, err
	}
	return cm.NewContainerManager(cm.Options{
		CgroupRoot: cgroupRoot, CgroupsPerQOS: true, EnforceNodeAllocatable: []string{cm.EnforcePods},
		Capacity: nodestatus.MachineCapacity(info, false), PodPidsLimit: -1, CPUCFSQuota: true, MemoryQoS: true,
	})
}

func removeAll(m *cm.ContainerManager, pods []*v1.Pod) error {
	var errs []error
	for _, p := range pods {
		errs = append(errs, m.Remove(p.UID))
	}
	return errors.Join(errs...)
}

// samples are the measured pods' times, wall-clock per call and the process's CPU time
// over all calls, overall and per QoS class.
type samples struct {
	ensure, remove    []time.Duration
	byClass           map[v1.PodQOSClass][]time.Duration // EnsurePod
	ensureCPU, remCPU time.Duration
	n                 int
}

// measure creates and removes pods one at a time; the pod being started counts as
// active, as it does in the kubelet when its cgroup is made.
func measure(m *cm.ContainerManager, set *podSet, n int) (*samples, error) {
	s := &samples{byClass: map[v1.PodQOSClass][]time.Duration{}, n: n}
	base := len(set.pods)
	for i := range n {
		q := qosClasses[i%len(qosClasses)]
		p := newPod(fmt.Sprint("measured-", i), q.resources)
		set.pods = append(set.pods[:base], p)
		cpu0, t0 := host.SelfCPU(), time.Now()
		if err := m.EnsurePod(p); err != nil {
			return nil, err
		}
		t1, cpu1 := time.Now(), host.SelfCPU()
		if !m.PodExists(p) {
			return nil, fmt.Errorf("no cgroup for %s after EnsurePod", p.Name)
		}
		set.pods = set.pods[:base]
		cpu2, t2 := host.SelfCPU(), time.Now()
		if err := m.Remove(p.UID); err != nil {
			return nil, err
		}
		t3, cpu3 := time.Now(), host.SelfCPU()
		if m.PodExists(p) {
			return nil, fmt.Errorf("cgroup of %s left after Remove", p.Name)
		}
		s.ensure = append(s.ensure, t1.Sub(t0))
		s.remove = append(s.remove, t3.Sub(t2))
		s.byClass[q.class] = append(s.byClass[q.class], t1.Sub(t0))
		s.ensureCPU += cpu1 - cpu0
		s.remCPU += cpu3 - cpu2
	}
	return s, nil
}

func (s *samples) print(active int, v2 bool) {
	version := "v1"
	if v2 {
		version = "v2"
	}
	fmt.Printf("pod cgroup set-up on cgroup %s with %d active pods: %d pods created and removed one at a time (QoS classes in turn)\n", version, active, s.n)
	fmt.Printf("  %-34s %9s %9s %9s %12s\n", "", "median", "p90", "max", "CPU per pod")
	row := func(name string, d []time.Duration, cpu time.Duration) {
		cpuCol := ""
		if cpu > 0 {
			cpuCol = fmt.Sprintf("%9.3f ms", ms(cpu/time.Duration(s.n)))
		}
		line := fmt.Sprintf("  %-34s %6.3f ms %6.3f ms %6.3f ms %12s", name+":", ms(host.Median(d)), ms(host.Percentile(d, 90)), ms(host.Percentile(d, 100)), cpuCol)
		fmt.Println(strings.TrimRight(line, " "))
	}
	row("EnsurePod (pod start)", s.ensure, s.ensureCPU)
	for _, q := range qosClasses {
		row("  "+string(q.class), s.byClass[q.class], 0)
	}
	row("Remove (pod cleanup)", s.remove, s.remCPU)
	both := make([]time.Duration, len(s.ensure))
	for i := range both {
		both[i] = s.ensure[i] + s.remove[i]
	}
	row("EnsurePod + Remove", both, s.ensureCPU+s.remCPU)
}

func ms(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }
