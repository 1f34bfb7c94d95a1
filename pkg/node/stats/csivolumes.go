package stats

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodelet/nodelet/pkg/node/volumes/csi"
)

// CSIVolumes is what the volume stats need of the node's CSI drivers; the csi
// package's Manager has it. ListPublished says which driver and volume handle a
// published target path has (from vol_data.json, so it holds across restarts);
// VolumeStats asks the driver (NodeGetVolumeStats, bounded by the CSI call
// timeout) and fails with csi.ErrNotSupported when it lacks GET_VOLUME_STATS.
type CSIVolumes interface {
	ListPublished() ([]csi.PublishedVolume, error)
	VolumeStats(ctx context.Context, driver, volumeHandle, volumePath string) (csi.VolumeStats, error)
}

// podVolumeKey names one volume of one pod.
type podVolumeKey struct {
	pod    types.UID
	volume string
}

// csiTarget is a pod's CSI volume to ask its driver about.
type csiTarget struct {
	pod       *v1.Pod
	volume    *v1.Volume
	published csi.PublishedVolume
}

// measureCSI asks the drivers for the usage of every pod's mounted CSI volume
// (a claim bound to a CSI persistent volume, or an inline CSI volume), as
// upstream's metricsCsi. Every such volume has an entry; nil when its driver gave
// no figures, which leaves the volume out of the stats (it is not measured some
// other way). The calls run side by side: upstream measures every
// pod in its own goroutine, so one slow driver delays a refresh by one call
// timeout at most, not by one per volume.
func measureCSI(ctx context.Context, pods []*v1.Pod, src volumeSources, now func() time.Time) map[podVolumeKey]*statsapi.VolumeStats {
	targets := csiTargets(pods, src)
	if len(targets) == 0 {
		return nil
	}
	var (
		mu  sync.Mutex
		wg  sync.WaitGroup
		out = make(map[podVolumeKey]*statsapi.VolumeStats, len(targets))
	)
	for _, t := range targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var found *statsapi.VolumeStats
			if vs, ok := csiVolumeStats(ctx, src.csi, t, now()); ok {
				found = &vs
			}
			mu.Lock()
			out[podVolumeKey{t.pod.UID, t.volume.Name}] = found
			mu.Unlock()
		}()
	}
	wg.Wait()
	return out
}

// csiTargets finds the pods' CSI volumes the volume manager has mounted: the
// path it mounted a volume at is a published CSI target path. Upstream, too,
// measures only the volumes its volume manager has mounted.
func csiTargets(pods []*v1.Pod, src volumeSources) []csiTarget {
	if src.csi == nil || src.claimPath == nil {
		return nil
	}
	published, err := src.csi.ListPublished()
	if err != nil {
		klog.ErrorS(err, "Failed to list published CSI volumes; their volume stats are left out")
		return nil
	}
	byPath := make(map[string]csi.PublishedVolume, len(published))
	for _, p := range published {
		// Without vol_data.json there is no driver or volume handle to ask.
		if p.DataErr == nil {
			byPath[filepath.Clean(p.TargetPath)] = p
		}
	}
	if len(byPath) == 0 {
		return nil
	}
	var out []csiTarget
	for _, pod := range pods {
		for i := range pod.Spec.Volumes {
			v := &pod.Spec.Volumes[i]
			if v.PersistentVolumeClaim == nil && v.Ephemeral == nil && v.CSI == nil {
				continue
			}
			path, ok := src.claimPath(pod, v.Name)
			if !ok {
				continue
			}
			if p, ok := byPath[filepath.Clean(path)]; ok {
				out = append(out, csiTarget{pod: pod, volume: v, published: p})
			}
		}
	}
	return out
}

// csiVolumeStats asks the volume's driver for its usage. A driver without
// GET_VOLUME_STATS reports none, silently, as upstream; other failures are
// logged as upstream's volume stat calculator logs them.
func csiVolumeStats(ctx context.Context, drivers CSIVolumes, t csiTarget, now time.Time) (statsapi.VolumeStats, bool) {
	s, err := drivers.VolumeStats(ctx, t.published.Data.DriverName, t.published.Data.VolumeHandle, t.published.TargetPath)
	if err != nil {
		if !errors.Is(err, csi.ErrNotSupported) {
			klog.V(4).InfoS("Failed to calculate volume metrics", "pod", klog.KObj(t.pod), "podUID", t.pod.UID, "volumeName", t.volume.Name, "err", err)
		}
		return statsapi.VolumeStats{}, false
	}
	// Upstream converts the driver's int64 figures with uint64(), and reports
	// zero for what the driver leaves out; so does csi.VolumeStats.
	return statsapi.VolumeStats{
		Name:   t.volume.Name,
		PVCRef: claimRef(t.pod, t.volume),
		FsStats: statsapi.FsStats{
			Time:           metaTime(now),
			AvailableBytes: ptrTo(uint64(s.AvailableBytes)),
			CapacityBytes:  ptrTo(uint64(s.CapacityBytes)),
			UsedBytes:      ptrTo(uint64(s.UsedBytes)),
			Inodes:         ptrTo(uint64(s.Inodes)),
			InodesFree:     ptrTo(uint64(s.InodesFree)),
			InodesUsed:     ptrTo(uint64(s.InodesUsed)),
		},
	}, true
}

// claimRef is the summary's pvcRef: the claim a persistentVolumeClaim or
// generic ephemeral volume uses, nil for any other volume (an inline CSI one).
func claimRef(pod *v1.Pod, v *v1.Volume) *statsapi.PVCReference {
	switch {
	case v.PersistentVolumeClaim != nil:
		return &statsapi.PVCReference{Name: v.PersistentVolumeClaim.ClaimName, Namespace: pod.Namespace}
	case v.Ephemeral != nil:
		// The ephemeral volume controller's name for the claim.
		return &statsapi.PVCReference{Name: pod.Name + "-" + v.Name, Namespace: pod.Namespace}
	}
	return nil
}
