package csi

import (
	"context"
	"errors"
	"fmt"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"k8s.io/klog/v2"
)

// VolumeStats is a volume's usage as its driver reports it; what the driver leaves out
// is zero.
type VolumeStats struct {
	CapacityBytes, AvailableBytes, UsedBytes int64
	Inodes, InodesFree, InodesUsed           int64
}

// VolumeStats asks the driver for the usage of a published volume (volumePath is its
// target path), as upstream's metricsCsi. A driver without the GET_VOLUME_STATS
// capability gives ErrNotSupported.
func (m *Manager) VolumeStats(ctx context.Context, driver, volumeHandle, volumePath string) (VolumeStats, error) {
	if volumeHandle == "" || volumePath == "" {
		return VolumeStats{}, errors.New("missing volume id or target path")
	}
	ctx, cancel := context.WithTimeout(ctx, csiTimeout)
	defer cancel()
	c, err := m.connect(ctx, driver)
	if err != nil {
		return VolumeStats{}, err
	}
	defer c.close()
	if err := c.require(ctx, csipb.NodeServiceCapability_RPC_GET_VOLUME_STATS); err != nil {
		return VolumeStats{}, err
	}
	resp, err := c.node.NodeGetVolumeStats(ctx, &csipb.NodeGetVolumeStatsRequest{VolumeId: volumeHandle, VolumePath: volumePath})
	if err != nil {
		return VolumeStats{}, fmt.Errorf("NodeGetVolumeStats: %w", err)
	}
	if len(resp.GetUsage()) == 0 {
		return VolumeStats{}, errors.New("failed to get usage from response. usage is nil")
	}
	return statsFrom(resp.GetUsage()), nil
}

func statsFrom(usages []*csipb.VolumeUsage) VolumeStats {
	var s VolumeStats
	for _, u := range usages {
		switch u.GetUnit() {
		case csipb.VolumeUsage_BYTES:
			s.CapacityBytes, s.AvailableBytes, s.UsedBytes = u.GetTotal(), u.GetAvailable(), u.GetUsed()
		case csipb.VolumeUsage_INODES:
			s.Inodes, s.InodesFree, s.InodesUsed = u.GetTotal(), u.GetAvailable(), u.GetUsed()
		default:
			if u != nil {
				klog.ErrorS(nil, "Unknown unit in VolumeUsage", "unit", u.GetUnit().String())
			}
		}
	}
	return s
}

// ExpandRequest asks a driver to grow a volume's filesystem on the node.
type ExpandRequest struct {
	Driver       string
	VolumeHandle string
	// VolumePath is the pod's target path (for a block volume, its device path).
	VolumePath string
	// StagingPath is the staging path when the volume is staged, else empty.
	StagingPath   string
	RequiredBytes int64
	Capability    VolumeCapability
	// Secrets are the contents of the PV's csi.nodeExpandSecretRef.
	Secrets map[string]string
}

// Expand asks the driver to expand a volume on the node and returns the capacity it
// reports (zero when it does not say), as upstream's NodeExpand. A driver without the
// EXPAND_VOLUME capability gives ErrNotSupported; a failure that may still be in
// progress is uncertain (IsUncertain). Other failures keep their gRPC status:
// FAILED_PRECONDITION means the driver cannot expand a volume in use.
func (m *Manager) Expand(ctx context.Context, req ExpandRequest) (int64, error) {
	if req.VolumeHandle == "" || req.VolumePath == "" || req.RequiredBytes < 0 {
		return 0, errors.New("missing volume id or volume path, or negative size")
	}
	ctx, cancel := context.WithTimeout(ctx, csiTimeout)
	defer cancel()
	c, err := m.connect(ctx, req.Driver)
	if err != nil {
		return 0, err
	}
	defer c.close()
	if err := c.require(ctx, csipb.NodeServiceCapability_RPC_EXPAND_VOLUME); err != nil {
		return 0, err
	}
	mode, err := c.accessModeFor(ctx, req.Capability.AccessModes)
	if err != nil {
		return 0, err
	}
	resp, err := c.node.NodeExpandVolume(ctx, &csipb.NodeExpandVolumeRequest{
		VolumeId:          req.VolumeHandle,
		VolumePath:        req.VolumePath,
		StagingTargetPath: req.StagingPath,
		CapacityRange:     &csipb.CapacityRange{RequiredBytes: req.RequiredBytes},
		VolumeCapability:  volumeCapability(mode, req.Capability.Block, req.Capability.FSType, req.Capability.MountFlags, nil),
		Secrets:           req.Secrets,
	})
	if err != nil {
		return 0, fmt.Errorf("Expander.NodeExpand failed to expand the volume: %w", classify(err))
	}
	return resp.GetCapacityBytes(), nil
}

// require fails with ErrNotSupported when the driver lacks the capability.
func (c *driverClient) require(ctx context.Context, capability csipb.NodeServiceCapability_RPC_Type) error {
	ok, err := c.has(ctx, capability)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%s of CSI driver %s: %w", capability, c.name, ErrNotSupported)
	}
	return nil
}
