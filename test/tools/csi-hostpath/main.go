// Command csi-hostpath is a small but real CSI driver for nodelet's e2e
// tests. Volumes are directories <state-dir>/<volume-id>/ (block volumes are
// sparse files <state-dir>/<volume-id>.img), staged and published with bind
// mounts. It also registers itself with the kubelet the way
// node-driver-registrar does, by serving the pluginregistration v1
// Registration service on <registration-dir>/<driver-name>-reg.sock.
//
// Every CSI call is logged on stderr as one line, before it is handled (so a
// test can see a call that is still in progress, see --publish-delay):
//
//	CSI <Method> [volume=<id>] [target=<path>] [staging=<path>] [readonly=<bool>] [node=<id>] [name=<name>]
//
// and a failed call adds a line "ERROR <Method> volume=<id>: <grpc error>".
// Registration calls are logged as "REG <Method> ...".
//
// For tests to inspect, NodeStageVolume writes <state-dir>/<id>.stage.json and
// NodePublishVolume records each target in <state-dir>/<id>.publish.json; the
// entries are removed again on unstage / unpublish.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// config holds the command line; the driver advertises exactly what it says.
type config struct {
	driverName      string
	endpoint        string
	registrationDir string
	nodeID          string
	stateDir        string
	maxVolumes      int64
	topology        map[string]string
	stage           bool
	expand          bool
	stats           bool
	mountGroup      bool
	attachRequired  bool
	publishDelay    time.Duration
}

// topologyFlag collects repeated --topology key=value flags.
type topologyFlag map[string]string

func (t topologyFlag) String() string {
	var kv []string
	for k, v := range t {
		kv = append(kv, k+"="+v)
	}
	sort.Strings(kv)
	return strings.Join(kv, ",")
}

func (t topologyFlag) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("want key=value, got %q", s)
	}
	t[k] = v
	return nil
}

func main() {
	topo := topologyFlag{}
	var cfg config
	flag.StringVar(&cfg.driverName, "driver-name", "hostpath.csi.nodelet.test", "CSI driver name")
	flag.StringVar(&cfg.endpoint, "endpoint", "", "unix socket path (or unix:// URL) to serve the CSI services on")
	flag.StringVar(&cfg.registrationDir, "registration-dir", "", "the kubelet's plugins_registry directory; empty: do not register")
	flag.StringVar(&cfg.nodeID, "node-id", "", "node ID returned by NodeGetInfo (default: hostname)")
	flag.StringVar(&cfg.stateDir, "state-dir", "", "directory holding the volumes' data")
	flag.Int64Var(&cfg.maxVolumes, "max-volumes-per-node", 0, "max_volumes_per_node for NodeGetInfo (0 = unset)")
	flag.Var(topo, "topology", "key=value accessible topology segment for NodeGetInfo (repeatable)")
	flag.BoolVar(&cfg.stage, "stage", true, "advertise STAGE_UNSTAGE_VOLUME")
	flag.BoolVar(&cfg.expand, "expand", false, "advertise EXPAND_VOLUME")
	flag.BoolVar(&cfg.stats, "stats", false, "advertise GET_VOLUME_STATS")
	flag.BoolVar(&cfg.mountGroup, "volume-mount-group", false, "advertise VOLUME_MOUNT_GROUP")
	flag.BoolVar(&cfg.attachRequired, "attach-required", false, "advertise PUBLISH_UNPUBLISH_VOLUME (a no-op attach)")
	flag.DurationVar(&cfg.publishDelay, "publish-delay", 0, "how long NodePublishVolume sleeps before mounting")
	flag.Parse()
	cfg.topology = topo

	if cfg.endpoint == "" || cfg.stateDir == "" {
		fmt.Fprintln(os.Stderr, "csi-hostpath: --endpoint and --state-dir are required")
		os.Exit(2)
	}
	if cfg.nodeID == "" {
		cfg.nodeID, _ = os.Hostname()
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	d := &driver{cfg: cfg, log: log.New(os.Stderr, "", 0)}
	if err := d.run(ctx); err != nil {
		d.log.Printf("csi-hostpath: %v", err)
		stop()
		os.Exit(1)
	}
}

// csiSocket is the CSI endpoint as a file path.
func (c *config) csiSocket() string { return strings.TrimPrefix(c.endpoint, "unix://") }

// regSocket is where the kubelet's plugin watcher looks for us.
func (c *config) regSocket() string {
	return filepath.Join(c.registrationDir, c.driverName+"-reg.sock")
}

// run serves the CSI services and, with a registration dir, the
// Registration service, until ctx ends (nil) or the kubelet reports a failed
// registration (error). Both sockets are gone when it returns.
func (d *driver) run(ctx context.Context) error {
	if err := os.MkdirAll(d.cfg.stateDir, 0o750); err != nil {
		return err
	}
	errc := make(chan error, 3)

	// The CSI socket comes first: the kubelet dials it (NodeGetInfo) as soon
	// as it has seen the registration socket.
	csiSrv := grpc.NewServer(grpc.UnaryInterceptor(d.logRPC))
	csi.RegisterIdentityServer(csiSrv, d)
	csi.RegisterNodeServer(csiSrv, d)
	csi.RegisterControllerServer(csiSrv, d)
	if err := serveUnix(csiSrv, d.cfg.csiSocket(), errc); err != nil {
		return err
	}
	defer stopAndRemove(csiSrv, d.cfg.csiSocket())

	if d.cfg.registrationDir != "" {
		regSrv := grpc.NewServer()
		registerapi.RegisterRegistrationServer(regSrv, &registrar{cfg: &d.cfg, log: d.log, failed: errc})
		if err := serveUnix(regSrv, d.cfg.regSocket(), errc); err != nil {
			return err
		}
		defer stopAndRemove(regSrv, d.cfg.regSocket())
	}

	select {
	case <-ctx.Done():
		return nil
	case err := <-errc:
		return err
	}
}

// serveUnix listens on path, replacing a stale socket left by a previous run.
func serveUnix(srv *grpc.Server, path string, errc chan<- error) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return err
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	lis, err := net.Listen("unix", path)
	if err != nil {
		return err
	}
	go func() {
		if err := srv.Serve(lis); err != nil {
			errc <- fmt.Errorf("serving %s: %w", path, err)
		}
	}()
	return nil
}

// stopAndRemove lets in-flight calls finish (the kubelet should get its
// answer to NotifyRegistrationStatus) but only for a second, so a delayed
// publish cannot hold up shutdown; then it makes sure the socket file is
// gone, so the kubelet's plugin watcher sees the driver leave.
func stopAndRemove(srv *grpc.Server, path string) {
	stopped := make(chan struct{})
	go func() { srv.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(time.Second):
		srv.Stop()
	}
	_ = os.Remove(path)
}

// registrar is the node-driver-registrar half.
type registrar struct {
	registerapi.UnimplementedRegistrationServer
	cfg    *config
	log    *log.Logger
	failed chan<- error
}

func (r *registrar) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	r.log.Printf("REG GetInfo name=%s endpoint=%s", r.cfg.driverName, r.cfg.csiSocket())
	return &registerapi.PluginInfo{
		Type:              registerapi.CSIPlugin,
		Name:              r.cfg.driverName,
		Endpoint:          r.cfg.csiSocket(),
		SupportedVersions: []string{"1.0.0"},
	}, nil
}

// NotifyRegistrationStatus makes a failed registration fatal, as
// node-driver-registrar does, so a test sees the driver exit.
func (r *registrar) NotifyRegistrationStatus(_ context.Context, s *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	r.log.Printf("REG NotifyRegistrationStatus registered=%t error=%q", s.PluginRegistered, s.Error)
	if !s.PluginRegistered {
		select {
		case r.failed <- fmt.Errorf("registration failed: %s", s.Error):
		default:
		}
	}
	return &registerapi.RegistrationStatusResponse{}, nil
}

// logRPC writes the one-line-per-call log described in the package comment.
func (d *driver) logRPC(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	method := info.FullMethod[strings.LastIndex(info.FullMethod, "/")+1:]
	var b strings.Builder
	b.WriteString("CSI " + method)
	vol, hasVol := req.(interface{ GetVolumeId() string })
	if hasVol {
		fmt.Fprintf(&b, " volume=%s", vol.GetVolumeId())
	}
	target, hasTarget := req.(interface{ GetTargetPath() string })
	volPath, hasVolPath := req.(interface{ GetVolumePath() string })
	staging, hasStaging := req.(interface{ GetStagingTargetPath() string })
	switch {
	case hasTarget:
		fmt.Fprintf(&b, " target=%s", target.GetTargetPath())
	case hasVolPath:
		fmt.Fprintf(&b, " target=%s", volPath.GetVolumePath())
	case hasStaging:
		fmt.Fprintf(&b, " target=%s", staging.GetStagingTargetPath())
	}
	if hasStaging && (hasTarget || hasVolPath) && staging.GetStagingTargetPath() != "" {
		fmt.Fprintf(&b, " staging=%s", staging.GetStagingTargetPath())
	}
	if r, ok := req.(interface{ GetReadonly() bool }); ok {
		fmt.Fprintf(&b, " readonly=%t", r.GetReadonly())
	}
	if r, ok := req.(interface{ GetNodeId() string }); ok {
		fmt.Fprintf(&b, " node=%s", r.GetNodeId())
	}
	if r, ok := req.(interface{ GetName() string }); ok {
		fmt.Fprintf(&b, " name=%s", r.GetName())
	}
	d.log.Print(b.String())

	resp, err := handler(ctx, req)
	if err != nil {
		id := ""
		if hasVol {
			id = vol.GetVolumeId()
		}
		d.log.Printf("ERROR %s volume=%s: %v", method, id, err)
	}
	return resp, err
}
