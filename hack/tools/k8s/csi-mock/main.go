// Command csi-mock serves upstream's e2e mock CSI driver (k8s.io/kubernetes
// test/e2e/storage/drivers/csi-test: mock/service behind driver.CSIDriver) on a
// unix socket, and registers it with the kubelet as node-driver-registrar
// would: it serves the pluginregistration v1 Registration service on
// <registration-dir>/<driver-name>-reg.sock.
//
// Upstream's default interceptor logs every CSI call on stderr as a klog line
// at V(3), which this command enables by default (-v=3):
//
//	I0102 15:04:05.000000  123 driver.go:245] gRPCCall: {"Method":"/csi.v1.Node/NodeStageVolume","Request":{...},"Response":{},"Error":"","FullError":null}
//
// The mock keeps its state (three volumes with IDs "1", "2", "3", what is
// staged and published) in memory; it creates and removes the publish target
// directory but mounts nothing. Both sockets are removed on SIGTERM or SIGINT.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"google.golang.org/grpc"
	"k8s.io/klog/v2"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	"k8s.io/kubernetes/test/e2e/storage/drivers/csi-test/driver"
	"k8s.io/kubernetes/test/e2e/storage/drivers/csi-test/mock/service"
)

func main() {
	var cfg service.Config
	var endpoint, registrationDir string
	flag.StringVar(&cfg.DriverName, "driver-name", service.Name, "CSI driver name (also the node ID NodeGetInfo returns)")
	flag.StringVar(&endpoint, "endpoint", "", "unix socket path (or unix:// URL) to serve the CSI services on")
	flag.StringVar(&registrationDir, "registration-dir", "", "the kubelet's plugins_registry directory; empty: do not register")
	flag.BoolVar(&cfg.NodeExpansionRequired, "node-expand", false, "advertise the node EXPAND_VOLUME capability")
	flag.BoolVar(&cfg.VolumeMountGroupRequired, "volume-mount-group", false, "advertise the node VOLUME_MOUNT_GROUP capability")
	flag.Int64Var(&cfg.AttachLimit, "attach-limit", 0, "max_volumes_per_node for NodeGetInfo (0 = unset)")
	flag.BoolVar(&cfg.EnableTopology, "enable-topology", false, "report the mock's topology segment in NodeGetInfo")
	klog.InitFlags(nil)
	_ = flag.Set("v", "3") // upstream's interceptor logs the calls at V(3)
	flag.Parse()
	cfg.DisableAttach = true

	endpoint = strings.TrimPrefix(endpoint, "unix://")
	if endpoint == "" {
		fmt.Fprintln(os.Stderr, "csi-mock: --endpoint is required")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := run(ctx, cfg, endpoint, registrationDir); err != nil {
		klog.ErrorS(err, "csi-mock failed")
		klog.Flush()
		stop()
		os.Exit(1)
	}
	klog.Flush()
}

// run serves the mock driver and the registration service until ctx ends or
// the kubelet reports a failed registration. Both sockets are gone when it returns.
func run(ctx context.Context, cfg service.Config, endpoint, registrationDir string) error {
	// The CSI socket comes first: the kubelet dials it as soon as it sees the
	// registration socket.
	lis, err := listenUnix(endpoint)
	if err != nil {
		return err
	}
	s := service.New(cfg)
	d := driver.NewCSIDriver(&driver.CSIDriverServers{Controller: s, Identity: s, Node: s})
	if err := d.Start(lis, nil); err != nil {
		return err
	}
	defer func() { d.Stop(); _ = os.Remove(endpoint) }()
	klog.InfoS("Serving the mock CSI driver", "driver", cfg.DriverName, "endpoint", endpoint)

	failed := make(chan error, 2)
	if registrationDir != "" {
		regSock := filepath.Join(registrationDir, cfg.DriverName+"-reg.sock")
		regLis, err := listenUnix(regSock)
		if err != nil {
			return err
		}
		srv := grpc.NewServer()
		registerapi.RegisterRegistrationServer(srv, &registrar{name: cfg.DriverName, endpoint: endpoint, failed: failed})
		go func() {
			if err := srv.Serve(regLis); err != nil {
				failed <- fmt.Errorf("serving %s: %w", regSock, err)
			}
		}()
		defer func() { srv.Stop(); _ = os.Remove(regSock) }()
		klog.InfoS("Serving the registration service", "socket", regSock)
	}
	select {
	case <-ctx.Done():
		klog.InfoS("Stopping on signal")
		return nil
	case err := <-failed:
		return err
	}
}

// listenUnix listens on path, replacing a stale socket.
func listenUnix(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, err
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	return net.Listen("unix", path)
}

// registrar is the node-driver-registrar half.
type registrar struct {
	registerapi.UnimplementedRegistrationServer
	name, endpoint string
	failed         chan<- error
}

func (r *registrar) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	klog.InfoS("Registration GetInfo", "name", r.name, "endpoint", r.endpoint)
	return &registerapi.PluginInfo{Type: registerapi.CSIPlugin, Name: r.name, Endpoint: r.endpoint,
		SupportedVersions: []string{"1.0.0"}}, nil
}

// NotifyRegistrationStatus makes a failed registration fatal, as node-driver-registrar does.
func (r *registrar) NotifyRegistrationStatus(_ context.Context, s *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	klog.InfoS("Registration status", "registered", s.PluginRegistered, "error", s.Error)
	if !s.PluginRegistered {
		select {
		case r.failed <- fmt.Errorf("registration failed: %s", s.Error):
		default:
		}
	}
	return &registerapi.RegistrationStatusResponse{}, nil
}
