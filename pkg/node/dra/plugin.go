package dra

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
	drahealth "k8s.io/kubelet/pkg/apis/dra-health/v1"
	drahealthv1alpha1 "k8s.io/kubelet/pkg/apis/dra-health/v1alpha1"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
	drapbv1beta1 "k8s.io/kubelet/pkg/apis/dra/v1beta1"

	"github.com/prometheus/client_golang/prometheus"
)

// DefaultCallTimeout is how long a driver has to answer a call when its registration
// sets no timeout: half of the kubelet's pod sync retry period, as upstream's.
const DefaultCallTimeout = 45 * time.Second

// Services the kubelet can call, newest first. A plugin advertises the services it
// serves as its registration "versions" ("<gRPC package>.<service>").
var (
	supportedServices       = []string{drapb.DRAPluginService, drapbv1beta1.DRAPluginService}
	supportedHealthServices = []string{drahealth.DRAResourceHealthService, drahealthv1alpha1.DRAResourceHealthService}
)

// chooseService picks the DRAPlugin service to call: the first of the plugin's list
// that the kubelet supports, as upstream does (the plugin's order wins).
func chooseService(versions []string) (string, error) {
	if len(versions) == 0 {
		return "", errors.New("empty list of supported gRPC services (aka supported versions)")
	}
	for _, v := range versions {
		if slices.Contains(supportedServices, v) {
			return v, nil
		}
	}
	return "", fmt.Errorf("none of services supported by the plugin (%q) are supported by the kubelet (%q)", versions, supportedServices)
}

// chooseHealthService picks the newest optional DRAResourceHealth service both sides
// support, or "" when the plugin advertises none.
func chooseHealthService(versions []string) string {
	for _, s := range supportedHealthServices {
		if slices.Contains(versions, s) {
			return s
		}
	}
	return ""
}

// driverPlugin is one registered plugin of a DRA driver: during a rolling update a
// driver has several.
type driverPlugin struct {
	driverName    string
	endpoint      string
	service       string
	healthService string
	timeout       time.Duration
	conn          *grpc.ClientConn
	// connected is guarded by the registry's mutex.
	connected bool
	// stopHealth ends the plugin's health stream; nil when there is none.
	stopHealth context.CancelFunc
}

// draClient speaks the negotiated service; v1beta1 drivers are reached through the
// conversion wrapper so that the manager only deals with v1 messages.
func (p *driverPlugin) draClient() drapb.DRAPluginClient {
	if p.service == drapbv1beta1.DRAPluginService {
		return drapbv1beta1.V1Beta1ClientWrapper{DRAPluginClient: drapbv1beta1.NewDRAPluginClient(p.conn)}
	}
	return drapb.NewDRAPluginClient(p.conn)
}

func (p *driverPlugin) nodePrepareResources(ctx context.Context, claims []*drapb.Claim) (*drapb.NodePrepareResourcesResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	logger := klog.FromContext(ctx).WithValues("driverName", p.driverName, "endpoint", p.endpoint)
	req := &drapb.NodePrepareResourcesRequest{Claims: claims}
	logger.V(4).Info("Calling NodePrepareResources rpc", "request", req)
	resp, err := p.draClient().NodePrepareResources(ctx, req)
	logger.V(4).Info("Done calling NodePrepareResources rpc", "response", resp, "err", err)
	return resp, err
}

func (p *driverPlugin) nodeUnprepareResources(ctx context.Context, claims []*drapb.Claim) (*drapb.NodeUnprepareResourcesResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	logger := klog.FromContext(ctx).WithValues("driverName", p.driverName, "endpoint", p.endpoint)
	req := &drapb.NodeUnprepareResourcesRequest{Claims: claims}
	logger.V(4).Info("Calling NodeUnprepareResources rpc", "request", req)
	resp, err := p.draClient().NodeUnprepareResources(ctx, req)
	logger.V(4).Info("Done calling NodeUnprepareResources rpc", "response", resp, "err", err)
	return resp, err
}

// watchHealth opens the negotiated health stream; v1alpha1 streams are converted to v1.
func (p *driverPlugin) watchHealth(ctx context.Context) (drahealth.DRAResourceHealth_NodeWatchResourcesClient, error) {
	switch p.healthService {
	case drahealth.DRAResourceHealthService:
		return drahealth.NewDRAResourceHealthClient(p.conn).NodeWatchResources(ctx, &drahealth.NodeWatchResourcesRequest{})
	case drahealthv1alpha1.DRAResourceHealthService:
		client := drahealth.V1Alpha1ClientWrapper{Client: drahealthv1alpha1.NewDRAResourceHealthClient(p.conn)}
		return client.NodeWatchResources(ctx, &drahealth.NodeWatchResourcesRequest{})
	default:
		return nil, fmt.Errorf("internal error: unsupported chosen health service: %q", p.healthService)
	}
}

// grpcDurationInterceptor observes every unary call of a driver by method and status.
func grpcDurationInterceptor(driverName string, duration *prometheus.HistogramVec) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		start := time.Now()
		err := invoker(ctx, method, req, reply, cc, opts...)
		duration.WithLabelValues(driverName, method, status.Code(err).String()).Observe(time.Since(start).Seconds())
		return err
	}
}
