package imagegc

import (
	"context"
	"errors"
	"time"

	"golang.org/x/sys/unix"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// ImageFsInfoer is the CRI image service's ImageFsInfo.
type ImageFsInfoer interface {
	ImageFsInfo(ctx context.Context) (*runtimeapi.ImageFsInfoResponse, error)
}

// CRIImageFs is a FsStatsProvider over CRI, as upstream's CRI stats provider: the
// runtime's first image filesystem, its used bytes as the runtime reports them, and
// the capacity and available bytes of the filesystem holding the mount point it names
// (statfs(2), where upstream asks cAdvisor).
type CRIImageFs struct {
	Images ImageFsInfoer
}

// ImageFsStats implements FsStatsProvider. When the mount point cannot be read the
// sizes are left out, as upstream does; GC then reports an invalid capacity.
func (c CRIImageFs) ImageFsStats(ctx context.Context) (*statsapi.FsStats, error) {
	resp, err := c.Images.ImageFsInfo(ctx)
	if err != nil {
		return nil, err
	}
	if len(resp.GetImageFilesystems()) == 0 {
		return nil, errors.New("imageFs information is unavailable")
	}
	fs := resp.GetImageFilesystems()[0]
	out := &statsapi.FsStats{Time: metav1.NewTime(time.Unix(0, fs.Timestamp))}
	if fs.UsedBytes != nil {
		out.UsedBytes = ptrTo(fs.UsedBytes.Value)
	}
	if fs.InodesUsed != nil {
		out.InodesUsed = ptrTo(fs.InodesUsed.Value)
	}
	mountpoint := fs.GetFsId().GetMountpoint()
	var st unix.Statfs_t
	if err := unix.Statfs(mountpoint, &st); err != nil {
		klog.FromContext(ctx).V(2).Info("Failed to get the info of the filesystem with mountpoint", "mountpoint", mountpoint, "err", err)
		return out, nil
	}
	bsize := uint64(st.Bsize)
	out.CapacityBytes = ptrTo(st.Blocks * bsize)
	out.AvailableBytes = ptrTo(st.Bavail * bsize)
	out.Inodes = ptrTo(st.Files)
	out.InodesFree = ptrTo(st.Ffree)
	return out, nil
}

func ptrTo[T any](v T) *T { return &v }
