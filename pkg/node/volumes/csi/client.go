package csi

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/nodelet/nodelet/pkg/unixgrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
)

// driverClient is one connection to a driver, for one operation. Upstream dials anew
// for every call; one connection per operation keeps that isolation at less cost.
type driverClient struct {
	name string
	conn *grpc.ClientConn
	node csipb.NodeClient
	// caps are the node capabilities, asked once per operation.
	caps []csipb.NodeServiceCapability_RPC_Type
	// capsKnown is whether caps has been filled.
	capsKnown bool
}

// connect dials a registered driver. Nothing has reached the driver when it fails.
func (m *Manager) connect(ctx context.Context, driver string) (*driverClient, error) {
	endpoint, err := m.endpointOf(driver)
	if err != nil {
		return nil, err
	}
	conn, err := dialEndpoint(ctx, endpoint, csiTimeout, grpc.WithChainUnaryInterceptor(timeCalls(driver)))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", logf("failed to connect to CSI driver %s at %s", driver, endpoint), err)
	}
	return &driverClient{name: driver, conn: conn, node: csipb.NewNodeClient(conn)}, nil
}

func dialEndpoint(ctx context.Context, endpoint string, timeout time.Duration, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	return unixgrpc.DialReady(ctx, endpoint, timeout, opts...)
}

func (c *driverClient) close() {
	if err := c.conn.Close(); err != nil {
		klog.V(4).InfoS(logf("failed to close connection"), "driver", c.name, "err", err)
	}
}

// has reports whether the driver's node service has the capability.
func (c *driverClient) has(ctx context.Context, capability csipb.NodeServiceCapability_RPC_Type) (bool, error) {
	if !c.capsKnown {
		resp, err := c.node.NodeGetCapabilities(ctx, &csipb.NodeGetCapabilitiesRequest{})
		if err != nil {
			return false, fmt.Errorf("NodeGetCapabilities: %w", classify(err))
		}
		for _, cp := range resp.GetCapabilities() {
			if rpc := cp.GetRpc(); rpc != nil {
				c.caps = append(c.caps, rpc.GetType())
			}
		}
		c.capsKnown = true
	}
	return slices.Contains(c.caps, capability), nil
}

// accessMode maps a PersistentVolume's first access mode (ReadWriteOnce when it has
// none) to CSI's, as upstream's asCSIAccessModeV1 and, for drivers with the
// SINGLE_NODE_MULTI_WRITER capability, asSingleNodeMultiWriterCapableCSIAccessModeV1.
func accessMode(modes []v1.PersistentVolumeAccessMode, singleNodeMultiWriter bool) csipb.VolumeCapability_AccessMode_Mode {
	mode := v1.ReadWriteOnce
	if len(modes) > 0 {
		mode = modes[0]
	}
	switch mode {
	case v1.ReadWriteOnce:
		if singleNodeMultiWriter {
			return csipb.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER
		}
		return csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER
	case v1.ReadWriteOncePod:
		if singleNodeMultiWriter {
			return csipb.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER
		}
		return csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER
	case v1.ReadOnlyMany:
		return csipb.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY
	case v1.ReadWriteMany:
		return csipb.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER
	}
	return csipb.VolumeCapability_AccessMode_UNKNOWN
}

// accessModeFor asks the driver whether it distinguishes single-node writers and maps
// the access modes accordingly.
func (c *driverClient) accessModeFor(ctx context.Context, modes []v1.PersistentVolumeAccessMode) (csipb.VolumeCapability_AccessMode_Mode, error) {
	multiWriter, err := c.has(ctx, csipb.NodeServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER)
	if err != nil {
		return csipb.VolumeCapability_AccessMode_UNKNOWN, err
	}
	return accessMode(modes, multiWriter), nil
}

// volumeCapability builds the capability sent with stage, publish and expand: a mount
// with its filesystem type, flags and, when the driver applies it, the fsGroup; or a
// raw block device.
func volumeCapability(mode csipb.VolumeCapability_AccessMode_Mode, block bool, fsType string, flags []string, mountGroup *int64) *csipb.VolumeCapability {
	vc := &csipb.VolumeCapability{AccessMode: &csipb.VolumeCapability_AccessMode{Mode: mode}}
	if block {
		vc.AccessType = &csipb.VolumeCapability_Block{Block: &csipb.VolumeCapability_BlockVolume{}}
		return vc
	}
	mount := &csipb.VolumeCapability_MountVolume{FsType: fsType, MountFlags: flags}
	if mountGroup != nil {
		mount.VolumeMountGroup = strconv.FormatInt(*mountGroup, 10)
	}
	vc.AccessType = &csipb.VolumeCapability_Mount{Mount: mount}
	return vc
}

// classify marks err uncertain unless it is a gRPC error saying the call is over, as
// upstream's isFinalError: a cancelled, timed out, unavailable, exhausted or aborted
// call (or one that is no gRPC error at all) may still be in progress.
func classify(err error) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok {
		return &uncertainError{err: err}
	}
	switch st.Code() {
	case codes.Canceled, codes.DeadlineExceeded, codes.Unavailable, codes.ResourceExhausted, codes.Aborted:
		return &uncertainError{err: err}
	}
	return err
}

// isNotFound reports whether a driver answered NOT_FOUND: for unpublish and unstage,
// the volume is gone and there is nothing left to undo.
func isNotFound(err error) bool {
	return status.Code(err) == codes.NotFound
}
