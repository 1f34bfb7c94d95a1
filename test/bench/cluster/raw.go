package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/uuid"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/pkg/node/cm"
	"github.com/nodelet/nodelet/pkg/runtime/criconfig"
)

// The containerd floor: the same pods started with direct CRI calls (RunPodSandbox,
// CreateContainer, StartContainer; configs made before the clock), one pod and -pods at
// once (or paced as a scale-up's pods reached the API), on nodelet's rig. No kubelet can start pods faster than its runtime, so this says
// how much of each figure is the kubelet's own. nodelet is frozen (SIGSTOP) for each run, a
// few seconds at most: it would rightly remove pods nobody asked it for.

// rawCgroupRoot keeps the raw pods' cgroups out of nodelet's cgroup root.
func (b *bench) rawCgroupRoot() string { return b.nodelet.cgroupRoot + "-raw" }

// rawStep starts n pods by direct CRI calls, notes how long that took, and pauses.
func (b *bench) rawStep(ctx context.Context, prefix string, n int, into *[]time.Duration) error {
	return b.rawPacedStep(ctx, prefix, make([]time.Duration, n), into, nil)
}

// rawPacedStep is rawStep with pod i started at offset at[i] from the clock's start, as
// the pods of a scale-up reach the API over seconds: no kubelet can start a pod before
// it sees it. cpu, if not nil, gets the CPU the run took.
func (b *bench) rawPacedStep(ctx context.Context, prefix string, at []time.Duration, into *[]time.Duration, cpu *[]cpuBudget) error {
	d, spent, err := b.rawRun(ctx, b.rawRuntime, prefix, at)
	if err != nil {
		return err
	}
	*into = append(*into, d)
	if cpu != nil {
		*cpu = append(*cpu, spent)
	}
	fmt.Fprintf(os.Stderr, "bench: raw CRI %s (%d pods): %.3f s\n", prefix, len(at), d.Seconds())
	return b.pause(ctx)
}

// rawRun starts len(at) pods, pod i at offset at[i], with nodelet frozen, returns how long
// from the start until the last StartContainer returned and the CPU spent meanwhile, and
// removes them before nodelet resumes.
func (b *bench) rawRun(ctx context.Context, rs internalapi.RuntimeService, prefix string, at []time.Duration) (time.Duration, cpuBudget, error) {
	n := len(at)
	pods := make([]rawPod, n)
	for i := range pods {
		p, err := b.newRawPod(ctx, fmt.Sprintf("%s-%d", prefix, i))
		if err != nil {
			return 0, cpuBudget{}, err
		}
		pods[i] = p
	}
	pid := b.nodelet.cmd.Process.Pid
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		return 0, cpuBudget{}, err
	}
	defer syscall.Kill(pid, syscall.SIGCONT)
	cpuBefore, err := b.cpuNow(b.nodelet)
	if err != nil {
		return 0, cpuBudget{}, err
	}
	start := time.Now()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range pods {
		wg.Go(func() {
			time.Sleep(time.Until(start.Add(at[i])))
			errs[i] = pods[i].start(ctx, rs)
		})
	}
	wg.Wait()
	took := time.Since(start)
	cpuAfter, cpuErr := b.cpuNow(b.nodelet)
	removeErrs := make([]error, n)
	for i := range pods {
		wg.Go(func() { removeErrs[i] = pods[i].remove(ctx, rs) })
	}
	wg.Wait()
	return took, cpuAfter.since(cpuBefore), errors.Join(append(append(errs, cpuErr), removeErrs...)...)
}

// rawPod is one bench pod's CRI configs and, once started, its sandbox.
type rawPod struct {
	sandbox   *runtimeapi.PodSandboxConfig
	container *runtimeapi.ContainerConfig
	id        string
}

func (b *bench) newRawPod(ctx context.Context, name string) (rawPod, error) {
	pod := benchPod(b.runID, "bench-raw", name, b.nodelet.node)
	pod.UID = uuid.NewUUID()
	sb, err := criconfig.GeneratePodSandboxConfig(pod, 0, criconfig.SandboxOptions{
		PodLogsDir: b.nodelet.logsDir(), CgroupParent: cm.NewPodCgroups("/"+b.rawCgroupRoot(), true).Parent(pod)})
	if err != nil {
		return rawPod{}, err
	}
	cc, _, err := criconfig.GenerateContainerConfig(ctx, &pod.Spec.Containers[0], pod, 0, criconfig.ContainerOptions{
		ImageRef: image, PodDir: filepath.Join(b.nodelet.dir, "raw", string(pod.UID)), PodLogsDir: b.nodelet.logsDir(), CPUCFSQuota: true})
	return rawPod{sandbox: sb, container: cc}, err
}

// start runs the pod's three CRI calls.
func (p *rawPod) start(ctx context.Context, rs internalapi.RuntimeService) error {
	id, err := rs.RunPodSandbox(ctx, p.sandbox, "")
	if err != nil {
		return err
	}
	p.id = id // read by remove after the starts are waited for
	cid, err := rs.CreateContainer(ctx, id, p.container, p.sandbox)
	if err != nil {
		return err
	}
	return rs.StartContainer(ctx, cid)
}

// remove stops and removes the pod's sandbox, if it got one.
func (p *rawPod) remove(ctx context.Context, rs internalapi.RuntimeService) error {
	if p.id == "" {
		return nil
	}
	return errors.Join(rs.StopPodSandbox(ctx, p.id), rs.RemovePodSandbox(ctx, p.id))
}
