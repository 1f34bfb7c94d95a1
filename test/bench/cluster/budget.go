package main

import (
	"fmt"
	"io"
	"path/filepath"
	"runtime"
	"time"

	"github.com/nodelet/nodelet/test/internal/host"
)

// A bring-up on a small machine can be bound by CPU: then what the whole machine spends
// over it, and who spends it, says how much of a kubelet's time above the containerd
// floor is the load it adds (its own CPU, the control plane's serving it) rather than
// its waiting.

// cpuBudget is CPU time spent over a window: by the whole machine (all CPUs busy), by the
// control plane's four processes, by one kubelet and by its containerd (the daemon itself,
// not its shims).
type cpuBudget struct {
	machine, controlPlane, kubelet, containerd time.Duration
}

// cpuNow reads the CPU the machine, the control plane, k and k's containerd have spent so
// far.
func (b *bench) cpuNow(k *kubelet) (cpuBudget, error) {
	machine, err := host.MachineBusyCPU()
	if err != nil {
		return cpuBudget{}, err
	}
	pids, err := host.ControlPlanePIDs(filepath.Dir(b.kubeconfig))
	if err != nil {
		return cpuBudget{}, err
	}
	kc, err := cpuOf(k)
	if err != nil {
		return cpuBudget{}, err
	}
	return cpuBudget{machine: machine, controlPlane: fromSeconds(host.CPUSecondsOf(pids)),
		kubelet: kc[0], containerd: kc[1]}, nil
}

func fromSeconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

func (c cpuBudget) since(before cpuBudget) cpuBudget {
	return cpuBudget{machine: c.machine - before.machine, controlPlane: c.controlPlane - before.controlPlane,
		kubelet: c.kubelet - before.kubelet, containerd: c.containerd - before.containerd}
}

// medianBudget is the median of each part, taken apart.
func medianBudget(s []cpuBudget) cpuBudget {
	var machine, cp, kubelet, containerd []time.Duration
	for _, c := range s {
		machine, cp = append(machine, c.machine), append(cp, c.controlPlane)
		kubelet, containerd = append(kubelet, c.kubelet), append(containerd, c.containerd)
	}
	return cpuBudget{machine: median(machine), controlPlane: median(cp), kubelet: median(kubelet), containerd: median(containerd)}
}

// printCPUBudgets prints what the whole machine spent over the at-once floor and over each
// kubelet's bring-up (medians), and who spent the bring-ups'.
func printCPUBudgets(out io.Writer, r densityResults) {
	cores := runtime.NumCPU()
	if len(r.floorBudget) > 0 {
		floor := medianBudget(r.floorBudget)
		fmt.Fprintf(out, "  machine CPU (%d cores) over the at-once floor (medians): %.1f s busy in %.2f s = containerd %.1f + control plane (idle) %.1f + the rest (shims, runc, CNI plugins, the bench, the other node idle) %.1f\n",
			cores, floor.machine.Seconds(), median(r.floor).Seconds(), floor.containerd.Seconds(), floor.controlPlane.Seconds(),
			(floor.machine - floor.controlPlane - floor.containerd).Seconds())
	}
	for _, name := range []string{"nodelet", "upstream"} {
		if len(r.upBudget[name]) == 0 {
			continue
		}
		spent := medianBudget(r.upBudget[name])
		rest := spent.machine - spent.controlPlane - spent.kubelet - spent.containerd
		fmt.Fprintf(out, "  %-8s machine CPU over its bring-up (medians): %.1f s busy in %.2f s = control plane %.1f + kubelet %.1f + its containerd %.1f + the rest (shims, runc, CNI plugins, the bench, the other node idle) %.1f\n",
			name, spent.machine.Seconds(), median(r.up[name]).Seconds(), spent.controlPlane.Seconds(),
			spent.kubelet.Seconds(), spent.containerd.Seconds(), rest.Seconds())
	}
}
