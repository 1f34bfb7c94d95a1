package stats

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// podFixture is a runtime with pod default/web (a ready sandbox, and an
// older one left behind), two running containers "app" and "sidecar" and an
// exited earlier "app", and pod batch/job whose only sandbox is not ready.
type podFixture struct {
	rt    *fakeRuntime
	clock *fakeClock
	p     *Provider
	web   *v1.Pod
}

// newPodFixture makes the fixture on the given /proc and cgroupfs, with
// podCgroupRoot as the pod cgroup root.
func newPodFixture(t *testing.T, proc, cgroups, podCgroupRoot string) *podFixture {
	clock := &fakeClock{t: time.Unix(1800000000, 0)}
	rt := &fakeRuntime{}
	f := &podFixture{rt: rt, clock: clock}
	f.p = newTestProvider(t, rt, proc, cgroups, clock, func(o *Options) { o.PodCgroupRoot = podCgroupRoot })
	t0 := time.Unix(1790000000, 0).UnixNano()
	meta := func(name, ns, uid string) *runtimeapi.PodSandboxMetadata {
		return &runtimeapi.PodSandboxMetadata{Name: name, Namespace: ns, Uid: uid}
	}
	rt.sandboxes = []*runtimeapi.PodSandbox{
		{Id: "sb-old", Metadata: meta("web", "default", "u0"), State: runtimeapi.PodSandboxState_SANDBOX_NOTREADY, CreatedAt: t0 - 1e9},
		{Id: "sb-web", Metadata: meta("web", "default", "u1"), State: runtimeapi.PodSandboxState_SANDBOX_READY, CreatedAt: t0},
		{Id: "sb-job", Metadata: meta("job", "batch", "u2"), State: runtimeapi.PodSandboxState_SANDBOX_NOTREADY, CreatedAt: t0 + 1e9},
	}
	ctr := func(id, sb, name string, state runtimeapi.ContainerState, created int64) *runtimeapi.Container {
		return &runtimeapi.Container{Id: id, PodSandboxId: sb, Metadata: &runtimeapi.ContainerMetadata{Name: name},
			State: state, CreatedAt: created}
	}
	rt.containers = []*runtimeapi.Container{
		ctr("c-app-0", "sb-web", "app", runtimeapi.ContainerState_CONTAINER_EXITED, t0+1e9),
		ctr("c-app", "sb-web", "app", runtimeapi.ContainerState_CONTAINER_RUNNING, t0+2e9),
		ctr("c-side", "sb-web", "sidecar", runtimeapi.ContainerState_CONTAINER_RUNNING, t0+3e9),
	}
	f.setUsage(10e9, 6e9)

	// Logs: app's log file, one file of the pod's own; sidecar has no log dir.
	logs := f.p.opts.PodLogsDir
	writeTree(t, logs, map[string]string{
		"default_web_u1/app/0.log":  strings.Repeat("x", 10000),
		"default_web_u1/extra.log":  strings.Repeat("y", 3000),
		"default_web_u1/app/1.log~": "",
	})
	root := f.p.opts.RootDir
	writeTree(t, root, map[string]string{
		"pods/u1/etc-hosts": "127.0.0.1 localhost\n",
		"pods/u1/volumes/kubernetes.io~empty-dir/cache/data": strings.Repeat("z", 8192),
		"pods/u1/volumes/kubernetes.io~secret/creds/token":   "secret",
		"pods/u1/volumes/kubernetes.io~empty-dir/mem/x":      "in memory",
	})
	f.web = &v1.Pod{}
	f.web.UID = "u1"
	f.web.Spec.Volumes = []v1.Volume{
		{Name: "cache", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
		{Name: "mem", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{Medium: v1.StorageMediumMemory}}},
		{Name: "creds", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: "s"}}},
		{Name: "host", VolumeSource: v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: "/"}}},
		{Name: "missing", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{}}},
	}
	return f
}

// setUsage sets the runtime's answer: pod web used podCPU core-ns, its app
// container appCPU, stamped with the fake clock.
func (f *podFixture) setUsage(podCPU, appCPU uint64) {
	now := f.clock.now().UnixNano()
	mem := func(ws uint64) *runtimeapi.MemoryUsage {
		return &runtimeapi.MemoryUsage{Timestamp: now, WorkingSetBytes: u64(ws), UsageBytes: u64(ws + 1000),
			RssBytes: u64(ws / 2), AvailableBytes: u64(0), PageFaults: u64(10), MajorPageFaults: u64(1)}
	}
	app := &runtimeapi.ContainerStats{
		Attributes: &runtimeapi.ContainerAttributes{Id: "c-app", Metadata: &runtimeapi.ContainerMetadata{Name: "app"}},
		// containerd 1.6 reports usageNanoCores 0 until it has two samples.
		Cpu:    &runtimeapi.CpuUsage{Timestamp: now, UsageCoreNanoSeconds: u64(appCPU), UsageNanoCores: u64(0)},
		Memory: mem(50 << 20),
		WritableLayer: &runtimeapi.FilesystemUsage{Timestamp: now, UsedBytes: u64(4096), InodesUsed: u64(3),
			FsId: &runtimeapi.FilesystemIdentifier{Mountpoint: f.p.opts.RootDir}},
	}
	side := &runtimeapi.ContainerStats{
		Attributes: &runtimeapi.ContainerAttributes{Id: "c-side", Metadata: &runtimeapi.ContainerMetadata{Name: "sidecar"}},
	}
	exited := &runtimeapi.ContainerStats{
		Attributes: &runtimeapi.ContainerAttributes{Id: "c-app-0", Metadata: &runtimeapi.ContainerMetadata{Name: "app"}},
		Cpu:        &runtimeapi.CpuUsage{Timestamp: now, UsageCoreNanoSeconds: u64(1)},
	}
	f.rt.containerStats = []*runtimeapi.ContainerStats{exited, app, side}
	f.rt.sandboxStats = []*runtimeapi.PodSandboxStats{
		{Attributes: &runtimeapi.PodSandboxAttributes{Id: "sb-old"}, Linux: &runtimeapi.LinuxPodSandboxStats{
			Cpu: &runtimeapi.CpuUsage{Timestamp: now, UsageCoreNanoSeconds: u64(1)}}},
		{Attributes: &runtimeapi.PodSandboxAttributes{Id: "sb-web"}, Linux: &runtimeapi.LinuxPodSandboxStats{
			Cpu:    &runtimeapi.CpuUsage{Timestamp: now, UsageCoreNanoSeconds: u64(podCPU), UsageNanoCores: u64(0)},
			Memory: mem(120 << 20),
			// containerd 1.6: no timestamp, the default interface only.
			Network: &runtimeapi.NetworkUsage{DefaultInterface: &runtimeapi.NetworkInterfaceUsage{
				Name: "eth0", RxBytes: u64(1930), RxErrors: u64(0), TxBytes: u64(892), TxErrors: u64(1)}},
			Process:    &runtimeapi.ProcessUsage{Timestamp: now, ProcessCount: u64(3)},
			Containers: []*runtimeapi.ContainerStats{exited, app, side},
		}},
		{Attributes: &runtimeapi.PodSandboxAttributes{Id: "sb-job"}, Linux: &runtimeapi.LinuxPodSandboxStats{}},
	}
}

func podByName(t *testing.T, pods []statsapi.PodStats, name string) statsapi.PodStats {
	t.Helper()
	for _, p := range pods {
		if p.PodRef.Name == name {
			return p
		}
	}
	t.Fatalf("no pod %q in %d pods", name, len(pods))
	return statsapi.PodStats{}
}

func blocksOf(t *testing.T, path string) uint64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Lstat(path, &st); err != nil {
		t.Fatal(err)
	}
	return uint64(st.Blocks) * 512
}

// Without a pod cgroup root, pod figures come from ListPodSandboxStats.
func TestPodStatsFromSandboxStats(t *testing.T) {
	f := newPodFixture(t, procFixture(t, ""), cgroupV1Fixture(t), "")
	f.p.volumes.refresh(context.Background(), []*v1.Pod{f.web}, f.p.volumeSources(), f.clock.now)
	s, err := f.p.Get(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Pods) != 2 {
		t.Fatalf("%d pods, want web (its ready sandbox only) and job", len(s.Pods))
	}
	web := podByName(t, s.Pods, "web")
	if web.PodRef != (statsapi.PodReference{Name: "web", Namespace: "default", UID: "u1"}) ||
		!web.StartTime.Time.Equal(time.Unix(1790000000, 0)) {
		t.Errorf("web ref %+v start %v", web.PodRef, web.StartTime)
	}
	want(t, "pod cpu", web.CPU.UsageCoreNanoSeconds, 10e9)
	if web.CPU.UsageNanoCores != nil {
		t.Errorf("pod usageNanoCores %d on the first sample: containerd's 0 is no rate", *web.CPU.UsageNanoCores)
	}
	want(t, "pod working set", web.Memory.WorkingSetBytes, 120<<20)
	want(t, "pod processes", web.ProcessStats.ProcessCount, 3)
	if n := web.Network; n == nil || n.Name != "eth0" || len(n.Interfaces) != 1 || *n.TxErrors != 1 ||
		!n.Time.Time.Equal(f.clock.now()) {
		t.Errorf("pod network %+v: want eth0, listed too, stamped now", n)
	}
	if len(web.Containers) != 2 {
		t.Fatalf("%d containers, want the running app and sidecar", len(web.Containers))
	}
	app, side := web.Containers[0], web.Containers[1]
	if app.Name != "app" || !app.StartTime.Time.Equal(time.Unix(1790000002, 0)) {
		t.Errorf("app name %q start %v", app.Name, app.StartTime)
	}
	want(t, "app cpu", app.CPU.UsageCoreNanoSeconds, 6e9)
	want(t, "app working set", app.Memory.WorkingSetBytes, 50<<20)
	want(t, "app rootfs used", app.Rootfs.UsedBytes, 4096)
	want(t, "app rootfs inodes used", app.Rootfs.InodesUsed, 3)
	if app.Rootfs.CapacityBytes == nil || app.Rootfs.InodesFree == nil {
		t.Errorf("app rootfs %+v: want its mount point's size", app.Rootfs)
	}
	logDir := filepath.Join(f.p.opts.PodLogsDir, "default_web_u1")
	appLogs := blocksOf(t, filepath.Join(logDir, "app/0.log")) + blocksOf(t, filepath.Join(logDir, "app/1.log~"))
	want(t, "app logs used", app.Logs.UsedBytes, appLogs)
	want(t, "app logs inodes", app.Logs.InodesUsed, 2)
	want(t, "app swap (zero: the runtime gives none)", app.Swap.SwapUsageBytes, 0)
	// The runtime gave the sidecar nothing: zeros as upstream, no logs.
	want(t, "sidecar cpu", side.CPU.UsageCoreNanoSeconds, 0)
	want(t, "sidecar working set", side.Memory.WorkingSetBytes, 0)
	if side.Logs != nil || side.Rootfs == nil || side.Rootfs.UsedBytes != nil {
		t.Errorf("sidecar logs %+v rootfs %+v: want no logs, an empty rootfs", side.Logs, side.Rootfs)
	}

	// Volumes: emptyDir cache (ephemeral), memory emptyDir and secret
	// (not ephemeral storage); no hostPath, nothing for a missing directory.
	vols := map[string]statsapi.VolumeStats{}
	for _, v := range web.VolumeStats {
		vols[v.Name] = v
	}
	if len(vols) != 3 || vols["cache"].UsedBytes == nil || vols["creds"].UsedBytes == nil || vols["mem"].UsedBytes == nil {
		t.Fatalf("volume stats %+v, want cache, mem, creds", web.VolumeStats)
	}
	cacheDir := filepath.Join(f.p.opts.RootDir, "pods/u1/volumes/kubernetes.io~empty-dir/cache")
	want(t, "cache used", vols["cache"].UsedBytes, blocksOf(t, cacheDir)+blocksOf(t, filepath.Join(cacheDir, "data")))
	want(t, "cache inodes", vols["cache"].InodesUsed, 2)

	// Ephemeral storage: app's writable layer and logs, the cache volume, the
	// pod's own log file and its etc-hosts.
	eph := *app.Rootfs.UsedBytes + appLogs + *vols["cache"].UsedBytes +
		blocksOf(t, filepath.Join(logDir, "extra.log")) +
		blocksOf(t, filepath.Join(f.p.opts.RootDir, "pods/u1/etc-hosts"))
	want(t, "ephemeral storage used", web.EphemeralStorage.UsedBytes, eph)
	want(t, "ephemeral storage inodes", web.EphemeralStorage.InodesUsed, 3+2+2+1+1)
	if web.EphemeralStorage.CapacityBytes == nil || *web.EphemeralStorage.CapacityBytes != *s.Node.Fs.CapacityBytes {
		t.Errorf("ephemeral storage %+v: want the root filesystem's size", web.EphemeralStorage)
	}

	job := podByName(t, s.Pods, "job")
	if len(job.Containers) != 0 || job.CPU != nil || job.EphemeralStorage == nil {
		t.Errorf("job %+v: want no containers, no CPU, ephemeral storage of nothing", job)
	}

	// Two seconds later the rates exist: ours, not the runtime's 0.
	f.clock.step(2 * time.Second)
	f.setUsage(13e9, 8e9)
	s, err = f.p.Get(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	web = podByName(t, s.Pods, "web")
	want(t, "pod usageNanoCores", web.CPU.UsageNanoCores, 1_500_000_000)
	want(t, "app usageNanoCores", web.Containers[0].CPU.UsageNanoCores, 1_000_000_000)
	if n := f.rt.count("ListContainerStats"); n != 0 {
		t.Errorf("ListContainerStats called %d times: sandbox stats have everything", n)
	}
}

// A runtime without ListPodSandboxStats and no pod cgroups: pods are their
// containers' sums, and the unimplemented call is not tried again.
func TestPodStatsFromContainerStats(t *testing.T) {
	f := newPodFixture(t, procFixture(t, ""), cgroupV1Fixture(t), "")
	f.rt.noSandboxStats = true
	for range 2 {
		s, err := f.p.GetCPUAndMemoryStats(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if len(s.Pods) != 1 {
			t.Fatalf("%d pods, want web only (job has no running container)", len(s.Pods))
		}
		web := s.Pods[0]
		if len(web.Containers) != 2 {
			t.Fatalf("%d containers, want app and sidecar", len(web.Containers))
		}
		want(t, "pod cpu (sum)", web.CPU.UsageCoreNanoSeconds, 6e9)
		want(t, "pod working set (sum)", web.Memory.WorkingSetBytes, 50<<20)
		if web.Network != nil || web.Containers[0].Rootfs != nil {
			t.Errorf("cpu-and-memory summary with network %+v rootfs %+v", web.Network, web.Containers[0].Rootfs)
		}
	}
	if n := f.rt.count("ListPodSandboxStats"); n != 1 {
		t.Errorf("ListPodSandboxStats called %d times, want once", n)
	}
}

func TestCPUAndMemorySummaryLeavesOutFilesystems(t *testing.T) {
	f := newPodFixture(t, procFixture(t, ""), cgroupV1Fixture(t), "")
	s, err := f.p.GetCPUAndMemoryStats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if s.Node.Fs != nil || s.Node.Runtime != nil || s.Node.Network != nil || s.Node.Rlimit != nil || s.Node.IO != nil {
		t.Errorf("node %+v: want CPU, memory and swap only", s.Node)
	}
	web := podByName(t, s.Pods, "web")
	if web.EphemeralStorage != nil || web.VolumeStats != nil || web.Network != nil || web.Containers[0].Logs != nil {
		t.Errorf("pod %+v: want CPU, memory and swap only", web)
	}
	if f.rt.count("ImageFsInfo") != 0 {
		t.Error("ImageFsInfo called for a CPU-and-memory summary")
	}
	want(t, "pod swap (sum of containers)", web.Swap.SwapUsageBytes, 0)
}

func TestRuntimeErrorFailsSummary(t *testing.T) {
	f := newPodFixture(t, procFixture(t, ""), cgroupV1Fixture(t), "/kubepods")
	f.rt.listErr = os.ErrDeadlineExceeded
	if _, err := f.p.Get(context.Background()); err == nil || !strings.Contains(err.Error(), "failed to list pod stats") {
		t.Errorf("error %v, want failed to list pod stats", err)
	}
}

func TestDuCountsHardLinksOnce(t *testing.T) {
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{"a": strings.Repeat("a", 5000), "sub/b": "b"})
	if err := os.Link(filepath.Join(dir, "a"), filepath.Join(dir, "sub", "a-link")); err != nil {
		t.Fatal(err)
	}
	u, err := duPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	if u.inodes != 4 { // dir, a, sub, b
		t.Errorf("inodes %d, want 4", u.inodes)
	}
	wantBytes := blocksOf(t, dir) + blocksOf(t, filepath.Join(dir, "a")) + blocksOf(t, filepath.Join(dir, "sub")) +
		blocksOf(t, filepath.Join(dir, "sub", "b"))
	if u.bytes != wantBytes {
		t.Errorf("bytes %d, want %d", u.bytes, wantBytes)
	}
}

// With a pod cgroup root, pod figures come from the pod's cgroup and its
// network from its sandbox process's /proc/<pid>/net/dev, containers from
// ListContainerStats; ListPodSandboxStats is not called.
func TestPodStatsFromPodCgroup(t *testing.T) {
	netDev := "Inter-| Receive | Transmit\n face |bytes packets errs drop fifo frame compressed multicast|bytes packets errs drop fifo colls carrier compressed\n" +
		"    lo: 5 1 0 0 0 0 0 0 5 1 0 0 0 0 0 0\n  eth0: 1111 10 1 0 0 0 0 0 2222 20 2 0 0 0 0 0\n"
	v1 := cgroupV1Fixture(t)
	pod := "kubepods/besteffort/podu1"
	writeTree(t, v1, map[string]string{
		"cpuacct/" + pod + "/cpuacct.usage":        "9000000000\n",
		"memory/" + pod + "/memory.usage_in_bytes": "209715200\n",
		"memory/" + pod + "/memory.limit_in_bytes": "9223372036854771712\n",
		"memory/" + pod + "/memory.stat":           "total_rss 104857600\ntotal_inactive_file 52428800\ntotal_pgfault 77\ntotal_pgmajfault 7\n",
		"memory/" + pod + "/sb-web/cgroup.procs":   "4242\n",
		"memory/" + pod + "/c-app/cgroup.procs":    "4250\n4251\n",
		"memory/" + pod + "/c-side/cgroup.procs":   "4260\n",
		"cpuacct/" + pod + "/sb-web/cgroup.procs":  "4242\n",
	})
	v2 := cgroupV2Fixture(t)
	slice := "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-podu1.slice"
	writeTree(t, v2, map[string]string{
		slice + "/cpu.stat":                                 "usage_usec 9000000\n",
		slice + "/memory.current":                           "209715200\n",
		slice + "/memory.max":                               "268435456\n",
		slice + "/memory.stat":                              "anon 104857600\ninactive_file 52428800\npgfault 77\npgmajfault 7\n",
		slice + "/cri-containerd-sb-web.scope/cgroup.procs": "4242\n",
		slice + "/cri-containerd-c-app.scope/cgroup.procs":  "4250\n4251\n",
		slice + "/cri-containerd-c-side.scope/cgroup.procs": "4260\n",
	})
	for _, tc := range []struct {
		name, cgroups, root string
		available           *uint64
	}{
		{"v1 cgroupfs", v1, "/kubepods", nil},
		{"v2 systemd", v2, "/kubepods.slice", ptrTo[uint64](256<<20 - 150<<20)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			proc := procFixture(t, "")
			writeTree(t, proc, map[string]string{"4242/net/dev": netDev})
			f := newPodFixture(t, proc, tc.cgroups, tc.root)
			s, err := f.p.Get(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if len(s.Pods) != 1 {
				t.Fatalf("%d pods, want web only (job has no running container)", len(s.Pods))
			}
			web := s.Pods[0]
			want(t, "pod cpu", web.CPU.UsageCoreNanoSeconds, 9e9)
			want(t, "pod working set", web.Memory.WorkingSetBytes, 150<<20)
			want(t, "pod rss", web.Memory.RSSBytes, 100<<20)
			want(t, "pod page faults", web.Memory.PageFaults, 77)
			if tc.available == nil && web.Memory.AvailableBytes != nil {
				t.Errorf("pod available %d without a limit", *web.Memory.AvailableBytes)
			} else if tc.available != nil {
				want(t, "pod available", web.Memory.AvailableBytes, *tc.available)
			}
			want(t, "pod processes (containers', not the sandbox's)", web.ProcessStats.ProcessCount, 3)
			if n := web.Network; n == nil || n.Name != "eth0" || *n.RxBytes != 1111 || *n.TxErrors != 2 || len(n.Interfaces) != 1 {
				t.Errorf("pod network %+v: want the sandbox netns' eth0", n)
			}
			if len(web.Containers) != 2 || web.Containers[0].Name != "app" || *web.Containers[0].CPU.UsageCoreNanoSeconds != 6e9 {
				t.Errorf("containers %+v: want app and sidecar from ListContainerStats", web.Containers)
			}
			if web.EphemeralStorage == nil || web.EphemeralStorage.UsedBytes == nil {
				t.Errorf("ephemeral storage %+v", web.EphemeralStorage)
			}
			if n := f.rt.count("ListPodSandboxStats"); n != 0 {
				t.Errorf("ListPodSandboxStats called %d times", n)
			}

			// Two seconds and 2 core-seconds later: one core.
			f.clock.step(2 * time.Second)
			if tc.root == "/kubepods" {
				writeTree(t, tc.cgroups, map[string]string{"cpuacct/" + pod + "/cpuacct.usage": "11000000000\n"})
			} else {
				writeTree(t, tc.cgroups, map[string]string{slice + "/cpu.stat": "usage_usec 11000000\n"})
			}
			s, err = f.p.GetCPUAndMemoryStats(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			want(t, "pod usageNanoCores", s.Pods[0].CPU.UsageNanoCores, 1e9)
		})
	}
}

// A pod whose cgroup cannot be found is its containers' sum.
func TestPodStatsWithoutPodCgroup(t *testing.T) {
	f := newPodFixture(t, procFixture(t, ""), cgroupV1Fixture(t), "/kubepods")
	s, err := f.p.Get(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	web := s.Pods[0]
	want(t, "pod cpu (sum)", web.CPU.UsageCoreNanoSeconds, 6e9)
	if web.Network != nil || web.ProcessStats != nil {
		t.Errorf("network %+v processes %+v without a pod cgroup", web.Network, web.ProcessStats)
	}
}

func TestPodCgroupNames(t *testing.T) {
	got := newPodCgroups(cgroupFS{}, "/kubepods.slice").candidates("a-b")
	if got[1] != "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-poda_b.slice" {
		t.Errorf("systemd burstable name %q", got[1])
	}
	got = newPodCgroups(cgroupFS{}, "/node/kubepods").candidates("a-b")
	if got[0] != "/node/kubepods/poda-b" || got[2] != "/node/kubepods/besteffort/poda-b" {
		t.Errorf("cgroupfs names %q", got)
	}
}
