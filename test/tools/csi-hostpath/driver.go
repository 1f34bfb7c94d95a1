package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

const (
	vendorVersion = "0.1.0"
	blockSize     = 8 << 20 // size of the sparse file behind a block volume
	// ephemeralKey marks a CSI inline (ephemeral) volume: the kubelet never
	// stages those, even when the driver advertises STAGE_UNSTAGE_VOLUME.
	ephemeralKey = "csi.storage.k8s.io/ephemeral"
)

type driver struct {
	csi.UnimplementedIdentityServer
	csi.UnimplementedNodeServer
	csi.UnimplementedControllerServer
	cfg config
	log *log.Logger
	// mu serialises the node operations, so that "is it mounted? no: mount"
	// and the read-modify-write of the JSON records cannot interleave.
	mu sync.Mutex
}

// ---- Identity ----

func (d *driver) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: d.cfg.driverName, VendorVersion: vendorVersion}, nil
}

func (d *driver) GetPluginCapabilities(context.Context, *csi.GetPluginCapabilitiesRequest) (*csi.GetPluginCapabilitiesResponse, error) {
	svc := []csi.PluginCapability_Service_Type{csi.PluginCapability_Service_CONTROLLER_SERVICE}
	if len(d.cfg.topology) > 0 {
		svc = append(svc, csi.PluginCapability_Service_VOLUME_ACCESSIBILITY_CONSTRAINTS)
	}
	resp := &csi.GetPluginCapabilitiesResponse{}
	for _, t := range svc {
		resp.Capabilities = append(resp.Capabilities, &csi.PluginCapability{
			Type: &csi.PluginCapability_Service_{Service: &csi.PluginCapability_Service{Type: t}},
		})
	}
	return resp, nil
}

func (d *driver) Probe(context.Context, *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	return &csi.ProbeResponse{Ready: wrapperspb.Bool(true)}, nil
}

// ---- Controller: just enough for a provisioner / attacher ----

func (d *driver) CreateVolume(_ context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	// The name doubles as the volume ID, which makes CreateVolume idempotent.
	dir, err := d.volumeDir(req.GetName())
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	vol := &csi.Volume{
		VolumeId:      req.GetName(),
		CapacityBytes: req.GetCapacityRange().GetRequiredBytes(),
		VolumeContext: req.GetParameters(),
	}
	if len(d.cfg.topology) > 0 {
		vol.AccessibleTopology = []*csi.Topology{{Segments: d.cfg.topology}}
	}
	return &csi.CreateVolumeResponse{Volume: vol}, nil
}

func (d *driver) DeleteVolume(_ context.Context, req *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error) {
	dir, err := d.volumeDir(req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	for _, p := range []string{dir + ".img", dir + ".stage.json", dir + ".publish.json"} {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, status.Error(codes.Internal, err.Error())
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &csi.DeleteVolumeResponse{}, nil
}

func (d *driver) ControllerPublishVolume(_ context.Context, req *csi.ControllerPublishVolumeRequest) (*csi.ControllerPublishVolumeResponse, error) {
	if !d.cfg.attachRequired {
		return nil, status.Error(codes.Unimplemented, "PUBLISH_UNPUBLISH_VOLUME not advertised")
	}
	if _, err := d.volumeDir(req.GetVolumeId()); err != nil {
		return nil, err
	}
	if req.GetNodeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "node_id missing")
	}
	return &csi.ControllerPublishVolumeResponse{PublishContext: map[string]string{"attached": "true"}}, nil
}

func (d *driver) ControllerUnpublishVolume(_ context.Context, req *csi.ControllerUnpublishVolumeRequest) (*csi.ControllerUnpublishVolumeResponse, error) {
	if !d.cfg.attachRequired {
		return nil, status.Error(codes.Unimplemented, "PUBLISH_UNPUBLISH_VOLUME not advertised")
	}
	if _, err := d.volumeDir(req.GetVolumeId()); err != nil {
		return nil, err
	}
	return &csi.ControllerUnpublishVolumeResponse{}, nil
}

func (d *driver) ControllerGetCapabilities(context.Context, *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	rpcs := []csi.ControllerServiceCapability_RPC_Type{csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME}
	if d.cfg.attachRequired {
		rpcs = append(rpcs, csi.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME)
	}
	resp := &csi.ControllerGetCapabilitiesResponse{}
	for _, t := range rpcs {
		resp.Capabilities = append(resp.Capabilities, &csi.ControllerServiceCapability{
			Type: &csi.ControllerServiceCapability_Rpc{Rpc: &csi.ControllerServiceCapability_RPC{Type: t}},
		})
	}
	return resp, nil
}

// ---- Node ----

func (d *driver) NodeGetInfo(context.Context, *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	resp := &csi.NodeGetInfoResponse{NodeId: d.cfg.nodeID, MaxVolumesPerNode: d.cfg.maxVolumes}
	if len(d.cfg.topology) > 0 {
		resp.AccessibleTopology = &csi.Topology{Segments: d.cfg.topology}
	}
	return resp, nil
}

func (d *driver) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	resp := &csi.NodeGetCapabilitiesResponse{}
	for _, c := range []struct {
		on bool
		t  csi.NodeServiceCapability_RPC_Type
	}{
		{d.cfg.stage, csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME},
		{d.cfg.expand, csi.NodeServiceCapability_RPC_EXPAND_VOLUME},
		{d.cfg.stats, csi.NodeServiceCapability_RPC_GET_VOLUME_STATS},
		{d.cfg.mountGroup, csi.NodeServiceCapability_RPC_VOLUME_MOUNT_GROUP},
	} {
		if c.on {
			resp.Capabilities = append(resp.Capabilities, &csi.NodeServiceCapability{
				Type: &csi.NodeServiceCapability_Rpc{Rpc: &csi.NodeServiceCapability_RPC{Type: c.t}},
			})
		}
	}
	return resp, nil
}

// stageRecord is <state-dir>/<id>.stage.json.
type stageRecord struct {
	StagingTargetPath string            `json:"stagingTargetPath"`
	Block             bool              `json:"block"`
	VolumeMountGroup  string            `json:"volumeMountGroup,omitempty"`
	PublishContext    map[string]string `json:"publishContext"`
	VolumeContext     map[string]string `json:"volumeContext"`
}

// publishRecord is one entry, keyed by target path, of <state-dir>/<id>.publish.json.
type publishRecord struct {
	StagingTargetPath string            `json:"stagingTargetPath,omitempty"`
	Readonly          bool              `json:"readonly"`
	Block             bool              `json:"block"`
	PublishContext    map[string]string `json:"publishContext"`
	VolumeContext     map[string]string `json:"volumeContext"`
}

func (d *driver) NodeStageVolume(_ context.Context, req *csi.NodeStageVolumeRequest) (*csi.NodeStageVolumeResponse, error) {
	if !d.cfg.stage {
		return nil, status.Error(codes.Unimplemented, "STAGE_UNSTAGE_VOLUME not advertised")
	}
	dir, err := d.volumeDir(req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	staging := req.GetStagingTargetPath()
	if staging == "" {
		return nil, status.Error(codes.InvalidArgument, "staging_target_path missing")
	}
	block, err := accessType(req.GetVolumeCapability())
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()

	group := req.GetVolumeCapability().GetMount().GetVolumeMountGroup()
	if block {
		// Nothing to mount at the staging path: publish binds the image
		// itself, and the stage record is what marks the volume staged.
		if err := ensureImage(dir + ".img"); err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
		if err := os.MkdirAll(staging, 0o750); err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
	} else {
		if err := d.prepareDir(dir, group); err != nil {
			return nil, err
		}
		if err := mountOnce(dir, staging, false, false); err != nil {
			return nil, err
		}
	}
	rec := stageRecord{StagingTargetPath: staging, Block: block, VolumeMountGroup: group,
		PublishContext: req.GetPublishContext(), VolumeContext: req.GetVolumeContext()}
	if err := writeJSON(dir+".stage.json", rec); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &csi.NodeStageVolumeResponse{}, nil
}

func (d *driver) NodeUnstageVolume(_ context.Context, req *csi.NodeUnstageVolumeRequest) (*csi.NodeUnstageVolumeResponse, error) {
	if !d.cfg.stage {
		return nil, status.Error(codes.Unimplemented, "STAGE_UNSTAGE_VOLUME not advertised")
	}
	dir, err := d.volumeDir(req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	staging := req.GetStagingTargetPath()
	if staging == "" {
		return nil, status.Error(codes.InvalidArgument, "staging_target_path missing")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := unmountAndRemove(staging); err != nil {
		return nil, err
	}
	if err := detachLoop(dir + ".img"); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	if err := os.Remove(dir + ".stage.json"); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &csi.NodeUnstageVolumeResponse{}, nil
}

func (d *driver) NodePublishVolume(_ context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	dir, err := d.volumeDir(req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	target := req.GetTargetPath()
	if target == "" {
		return nil, status.Error(codes.InvalidArgument, "target_path missing")
	}
	block, err := accessType(req.GetVolumeCapability())
	if err != nil {
		return nil, err
	}
	staged := d.cfg.stage && req.GetVolumeContext()[ephemeralKey] != "true"
	staging := req.GetStagingTargetPath()
	if staged && staging == "" {
		return nil, status.Error(codes.FailedPrecondition, "staging_target_path missing, but STAGE_UNSTAGE_VOLUME is advertised")
	}
	// Sleep outside the lock and deliberately ignore the caller's context:
	// like a real driver, finish the mount even if the kubelet died meanwhile.
	if d.cfg.publishDelay > 0 {
		time.Sleep(d.cfg.publishDelay)
	}
	d.mu.Lock()
	defer d.mu.Unlock()

	var src string
	switch {
	case block:
		if staged {
			if _, err := os.Stat(dir + ".stage.json"); err != nil {
				return nil, status.Errorf(codes.FailedPrecondition, "volume not staged: %v", err)
			}
		}
		if err := ensureImage(dir + ".img"); err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
		// A real driver publishes a device node: the image goes behind a loop device.
		if src, err = loopDevice(dir + ".img"); err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
	case staged:
		if ok, err := isMountPoint(staging); err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		} else if !ok {
			return nil, status.Errorf(codes.FailedPrecondition, "volume not staged at %s", staging)
		}
		src = staging
	default:
		if err := d.prepareDir(dir, req.GetVolumeCapability().GetMount().GetVolumeMountGroup()); err != nil {
			return nil, err
		}
		src = dir
	}
	if err := mountOnce(src, target, block, req.GetReadonly()); err != nil {
		return nil, err
	}
	rec := publishRecord{Readonly: req.GetReadonly(), Block: block, PublishContext: req.GetPublishContext(), VolumeContext: req.GetVolumeContext()}
	if staged {
		rec.StagingTargetPath = staging
	}
	if err := updatePublished(dir+".publish.json", target, &rec); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &csi.NodePublishVolumeResponse{}, nil
}

func (d *driver) NodeUnpublishVolume(_ context.Context, req *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	dir, err := d.volumeDir(req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	target := req.GetTargetPath()
	if target == "" {
		return nil, status.Error(codes.InvalidArgument, "target_path missing")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := unmountAndRemove(target); err != nil {
		return nil, err
	}
	if err := updatePublished(dir+".publish.json", target, nil); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &csi.NodeUnpublishVolumeResponse{}, nil
}

func (d *driver) NodeGetVolumeStats(_ context.Context, req *csi.NodeGetVolumeStatsRequest) (*csi.NodeGetVolumeStatsResponse, error) {
	dir, err := d.volumeDir(req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	path := req.GetVolumePath()
	if path == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_path missing")
	}
	fi, err := os.Stat(path)
	if err != nil {
		return nil, statError(err)
	}
	if !fi.IsDir() { // a published block volume: only its size (the image's) means anything
		img, err := os.Stat(dir + ".img")
		if err != nil {
			return nil, statError(err)
		}
		return &csi.NodeGetVolumeStatsResponse{Usage: []*csi.VolumeUsage{
			{Unit: csi.VolumeUsage_BYTES, Total: img.Size()},
		}}, nil
	}
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return nil, statError(err)
	}
	bs := st.Bsize
	return &csi.NodeGetVolumeStatsResponse{Usage: []*csi.VolumeUsage{
		{Unit: csi.VolumeUsage_BYTES, Total: int64(st.Blocks) * bs, Available: int64(st.Bavail) * bs, Used: int64(st.Blocks-st.Bfree) * bs},
		{Unit: csi.VolumeUsage_INODES, Total: int64(st.Files), Available: int64(st.Ffree), Used: int64(st.Files - st.Ffree)},
	}}, nil
}

func (d *driver) NodeExpandVolume(_ context.Context, req *csi.NodeExpandVolumeRequest) (*csi.NodeExpandVolumeResponse, error) {
	if _, err := d.volumeDir(req.GetVolumeId()); err != nil {
		return nil, err
	}
	if req.GetVolumePath() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_path missing")
	}
	if _, err := os.Stat(req.GetVolumePath()); err != nil {
		return nil, statError(err)
	}
	return &csi.NodeExpandVolumeResponse{CapacityBytes: req.GetCapacityRange().GetRequiredBytes()}, nil
}

// ---- helpers ----

// volumeDir validates a volume ID and returns its data directory. IDs become
// path components, so anything that could escape the state dir is refused.
func (d *driver) volumeDir(id string) (string, error) {
	if id == "" {
		return "", status.Error(codes.InvalidArgument, "volume_id missing")
	}
	if id == "." || id == ".." || strings.ContainsAny(id, "/\x00") {
		return "", status.Errorf(codes.InvalidArgument, "volume_id %q is not a valid file name", id)
	}
	return filepath.Join(d.cfg.stateDir, id), nil
}

// accessType checks the capability and reports whether it is a block volume.
func accessType(c *csi.VolumeCapability) (block bool, err error) {
	switch {
	case c == nil:
		return false, status.Error(codes.InvalidArgument, "volume_capability missing")
	case c.GetBlock() != nil:
		return true, nil
	case c.GetMount() != nil:
		return false, nil
	}
	return false, status.Error(codes.InvalidArgument, "volume_capability has no access type")
}

// prepareDir creates the volume's data directory and, when VOLUME_MOUNT_GROUP
// is advertised, hands it to the requested group the way fsGroup would.
func (d *driver) prepareDir(dir, group string) error {
	// 0777 (less umask), as upstream's hostpath driver does.
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	if !d.cfg.mountGroup || group == "" {
		return nil
	}
	gid, err := strconv.Atoi(group)
	if err != nil {
		return status.Errorf(codes.InvalidArgument, "volume_mount_group %q is not a GID", group)
	}
	if err := os.Chown(dir, -1, gid); err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	if err := os.Chmod(dir, 0o775|os.ModeSetgid); err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	return nil
}

// ensureImage creates the sparse file backing a block volume.
func ensureImage(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || fi.Size() >= blockSize {
		return err
	}
	return f.Truncate(blockSize)
}

// loopDevice is the loop device backing the image file, attached if none is.
func loopDevice(img string) (string, error) {
	if dev, err := attachedLoop(img); err != nil || dev != "" {
		return dev, err
	}
	out, err := exec.Command("losetup", "--find", "--show", img).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("losetup %s: %v: %s", img, err, out)
	}
	return strings.TrimSpace(string(out)), nil
}

// attachedLoop is the loop device the image is attached to, "" when none.
func attachedLoop(img string) (string, error) {
	out, err := exec.Command("losetup", "--associated", img).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("losetup --associated %s: %v: %s", img, err, out)
	}
	dev, _, _ := strings.Cut(string(out), ":")
	return strings.TrimSpace(dev), nil
}

// detachLoop detaches the image's loop device, if it has one (a block volume unstaged).
func detachLoop(img string) error {
	dev, err := attachedLoop(img)
	if err != nil || dev == "" {
		return err
	}
	if out, err := exec.Command("losetup", "--detach", dev).CombinedOutput(); err != nil {
		return fmt.Errorf("losetup --detach %s: %v: %s", dev, err, out)
	}
	return nil
}

// mountOnce bind-mounts src onto target (a directory, or for block a file),
// creating target first; an existing mount there counts as success.
func mountOnce(src, target string, file, readonly bool) error {
	if file {
		if err := os.MkdirAll(filepath.Dir(target), 0o750); err != nil {
			return status.Error(codes.Internal, err.Error())
		}
		f, err := os.OpenFile(target, os.O_CREATE|os.O_RDONLY, 0o600)
		if err != nil {
			return status.Error(codes.Internal, err.Error())
		}
		f.Close()
	} else if err := os.MkdirAll(target, 0o750); err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	if ok, err := isMountPoint(target); err != nil {
		return status.Error(codes.Internal, err.Error())
	} else if ok {
		return nil
	}
	if err := unix.Mount(src, target, "", unix.MS_BIND, ""); err != nil {
		return status.Errorf(codes.Internal, "bind mount %s on %s: %v", src, target, err)
	}
	if readonly {
		// A bind mount ignores MS_RDONLY on creation; it takes a remount.
		if err := unix.Mount("", target, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
			_ = unix.Unmount(target, 0)
			return status.Errorf(codes.Internal, "remount %s read-only: %v", target, err)
		}
	}
	return nil
}

// unmountAndRemove unmounts path (every layer, should mounts have stacked)
// and removes it. A path that is missing or not mounted is fine. os.Remove,
// not RemoveAll: a directory that is still full was not ours to delete.
func unmountAndRemove(path string) error {
	for i := 0; i < 16; i++ {
		err := unix.Unmount(path, 0)
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
			break
		}
		if err != nil {
			return status.Errorf(codes.Internal, "unmount %s: %v", path, err)
		}
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return status.Error(codes.Internal, err.Error())
	}
	return nil
}

// isMountPoint looks for path among the mount points in
// /proc/self/mountinfo; unlike comparing st_dev, this sees bind mounts.
func isMountPoint(path string) (bool, error) {
	real, err := filepath.EvalSymlinks(path)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	} else if err != nil {
		return false, err
	}
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) > 4 && unescapeOctal(f[4]) == real {
			return true, nil
		}
	}
	return false, nil
}

// unescapeOctal undoes mountinfo's \NNN escaping of spaces and the like.
func unescapeOctal(s string) string {
	var b []byte
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b = append(b, byte(n))
				i += 3
				continue
			}
		}
		b = append(b, s[i])
	}
	return string(b)
}

func statError(err error) error {
	if errors.Is(err, os.ErrNotExist) {
		return status.Error(codes.NotFound, err.Error())
	}
	return status.Error(codes.Internal, err.Error())
}

// writeJSON replaces path atomically, so a test never reads half a file.
func writeJSON(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(data, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// updatePublished sets (rec != nil) or deletes the entry for target in the
// publish record file, removing the file when no target is left.
func updatePublished(path, target string, rec *publishRecord) error {
	recs := map[string]*publishRecord{}
	if data, err := os.ReadFile(path); err == nil {
		if err := json.Unmarshal(data, &recs); err != nil {
			return err
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if rec != nil {
		recs[target] = rec
	} else {
		delete(recs, target)
	}
	if len(recs) == 0 {
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		return nil
	}
	return writeJSON(path, recs)
}
