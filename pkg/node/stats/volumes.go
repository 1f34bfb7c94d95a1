package stats

import (
	"context"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// podVolumeStats is one pod's volume usage, split as upstream splits it:
// local ephemeral volumes count toward the pod's ephemeral storage.
type podVolumeStats struct {
	ephemeral, persistent []statsapi.VolumeStats
}

// volumeCache holds the latest volume stats of every pod. Like upstream's
// fsResourceAnalyzer it is filled in the background, every
// volumeStatsAggPeriod, and never computed on a request: walking volumes
// can take long.
type volumeCache struct {
	latest atomic.Pointer[map[types.UID]podVolumeStats]
}

func (c *volumeCache) get(uid types.UID) (podVolumeStats, bool) {
	m := c.latest.Load()
	if m == nil {
		return podVolumeStats{}, false
	}
	vs, ok := (*m)[uid]
	return vs, ok
}

// volumeSources say where pods' volumes are: under the kubelet's root
// directory, and, for claims and inline CSI volumes, where the volume manager
// mounted them; csi asks CSI drivers about the volumes they published.
type volumeSources struct {
	rootDir   string
	claimPath func(pod *v1.Pod, volumeName string) (string, bool)
	csi       CSIVolumes
}

// run recomputes all pods' volume stats every period (with upstream's
// jitter) until ctx is done.
func (c *volumeCache) run(ctx context.Context, period time.Duration, pods PodLister, src volumeSources, now func() time.Time) {
	klog.InfoS("Starting volume stats collection", "period", period)
	wait.JitterUntilWithContext(ctx, func(ctx context.Context) {
		c.refresh(ctx, pods.GetPods(), src, now)
	}, period, 1.0, true)
}

func (c *volumeCache) refresh(ctx context.Context, pods []*v1.Pod, src volumeSources, now func() time.Time) {
	csiStats := measureCSI(ctx, pods, src, now)
	m := make(map[types.UID]podVolumeStats, len(pods))
	for _, pod := range pods {
		if ctx.Err() != nil {
			return
		}
		m[pod.UID] = podVolumes(pod, src, csiStats, now)
	}
	c.latest.Store(&m)
}

// volumePluginDirs maps the volume types whose usage upstream reports
// (their plugins measure it with du) to the plugin's directory under
// <rootDir>/pods/<uid>/volumes. hostPath reports none; claims are measured
// by claimStats and CSI volumes by their drivers (measureCSI); other network
// volumes are not set up by nodelet.
func volumePluginDir(v *v1.Volume) string {
	switch {
	case v.EmptyDir != nil:
		return "kubernetes.io~empty-dir"
	case v.ConfigMap != nil:
		return "kubernetes.io~configmap"
	case v.Secret != nil:
		return "kubernetes.io~secret"
	case v.Projected != nil:
		return "kubernetes.io~projected"
	case v.DownwardAPI != nil:
		return "kubernetes.io~downward-api"
	case v.GitRepo != nil:
		return "kubernetes.io~git-repo"
	}
	return ""
}

// isLocalEphemeral is upstream's IsLocalEphemeralVolume: volumes whose usage
// is the pod's ephemeral storage (memory-backed ones are not on disk).
func isLocalEphemeral(v *v1.Volume) bool {
	return v.GitRepo != nil ||
		(v.EmptyDir != nil && v.EmptyDir.Medium == v1.StorageMediumDefault) ||
		v.ConfigMap != nil
}

// podVolumes is the pod's volume stats; csiStats are its CSI volumes' figures,
// as their drivers reported them (measureCSI).
func podVolumes(pod *v1.Pod, src volumeSources, csiStats map[podVolumeKey]*statsapi.VolumeStats, now func() time.Time) podVolumeStats {
	var out podVolumeStats
	base := filepath.Join(src.rootDir, "pods", string(pod.UID), "volumes")
	for i := range pod.Spec.Volumes {
		v := &pod.Spec.Volumes[i]
		// No CSI volume is a local ephemeral one: all count as persistent. One
		// whose driver gave no figures has none, as upstream.
		if vs, ok := csiStats[podVolumeKey{pod.UID, v.Name}]; ok {
			if vs != nil {
				out.persistent = append(out.persistent, *vs)
			}
			continue
		}
		if v.PersistentVolumeClaim != nil || v.Ephemeral != nil {
			if vs, ok := claimStats(pod, v, base, src.claimPath, now()); ok {
				out.persistent = append(out.persistent, vs)
			}
			continue
		}
		plugin := volumePluginDir(v)
		if plugin == "" {
			continue
		}
		dir := filepath.Join(base, plugin, v.Name)
		vs, err := volumeStats(v.Name, dir, now())
		if err != nil {
			if !os.IsNotExist(err) {
				klog.V(4).InfoS("Failed to calculate volume metrics", "pod", klog.KObj(pod), "podUID", pod.UID, "volumeName", v.Name, "err", err)
			}
			continue
		}
		if isLocalEphemeral(v) {
			out.ephemeral = append(out.ephemeral, vs)
		} else {
			out.persistent = append(out.persistent, vs)
		}
	}
	return out
}

// localVolumePluginDir is where the volume manager bind-mounts local
// persistent volumes, under the pod's volumes directory (upstream's
// kubernetes.io/local-volume plugin).
const localVolumePluginDir = "kubernetes.io~local-volume"

// claimStats measures a persistentVolumeClaim or generic ephemeral volume
// and names its claim (the summary's pvcRef). As upstream's volume plugins
// measure them, a local volume reports its filesystem's statfs(2) figures;
// a hostPath one, used in place, reports nothing.
func claimStats(pod *v1.Pod, v *v1.Volume, podVolumesDir string, claimPath func(*v1.Pod, string) (string, bool), now time.Time) (statsapi.VolumeStats, bool) {
	if claimPath == nil {
		return statsapi.VolumeStats{}, false
	}
	path, ok := claimPath(pod, v.Name)
	if !ok || filepath.Dir(path) != filepath.Join(podVolumesDir, localVolumePluginDir) {
		return statsapi.VolumeStats{}, false
	}
	fs, err := statFS(path, now)
	if err != nil {
		klog.V(4).InfoS("Failed to calculate volume metrics", "pod", klog.KObj(pod), "podUID", pod.UID, "volumeName", v.Name, "err", err)
		return statsapi.VolumeStats{}, false
	}
	vs := statsapi.VolumeStats{
		Name:    v.Name,
		PVCRef:  claimRef(pod, v),
		FsStats: *fs.fullStats(),
	}
	vs.Time = metaTime(now)
	return vs, true
}

// volumeStats measures a volume directory: usage by walking it, size by
// statfs of its filesystem.
func volumeStats(name, dir string, now time.Time) (statsapi.VolumeStats, error) {
	u, err := duPath(dir)
	if err != nil {
		return statsapi.VolumeStats{}, err
	}
	fs, err := statFS(dir, now)
	if err != nil {
		return statsapi.VolumeStats{}, err
	}
	return statsapi.VolumeStats{
		Name: name,
		FsStats: statsapi.FsStats{
			Time:           metaTime(now),
			AvailableBytes: ptrTo(fs.available),
			CapacityBytes:  ptrTo(fs.capacity),
			UsedBytes:      ptrTo(u.bytes),
			Inodes:         ptrTo(fs.inodes),
			InodesFree:     ptrTo(fs.ifree),
			InodesUsed:     ptrTo(u.inodes),
		},
	}, nil
}
