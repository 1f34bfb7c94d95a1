package csi

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	utilversion "k8s.io/apimachinery/pkg/util/version"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

// nodeInfo is a driver's NodeGetInfo answer.
type nodeInfo struct {
	nodeID     string
	maxVolumes int64
	topology   map[string]string
}

// ValidatePlugin accepts a driver speaking a CSI 1.x version newer than the one of a
// driver already registered under the same name.
func (m *Manager) ValidatePlugin(_ context.Context, name, endpoint string, versions []string) error {
	klog.InfoS(logf("Trying to validate a new CSI Driver"), "name", name, "endpoint", endpoint, "versions", strings.Join(versions, ","))
	if _, err := m.validateVersions("ValidatePlugin", name, versions); err != nil {
		return fmt.Errorf("validation failed for CSI Driver %s at endpoint %s: %v", name, endpoint, err)
	}
	return nil
}

// RegisterPlugin makes the driver usable, replacing a driver of the same name that
// speaks an older version, asks it for NodeGetInfo and records the answer in the Node
// and CSINode objects. On failure the driver is unregistered again (and its CSINode
// entry removed), as upstream. pluginClientTimeout bounds NodeGetInfo; nil means two
// minutes.
func (m *Manager) RegisterPlugin(ctx context.Context, name, endpoint string, versions []string, pluginClientTimeout *time.Duration) error {
	klog.InfoS(logf("Register new plugin"), "name", name, "endpoint", endpoint)
	version, err := m.validateVersions("RegisterPlugin", name, versions)
	if err != nil {
		return err
	}
	m.setDriver(name, registeredDriver{endpoint: endpoint, version: version})

	info, err := getNodeInfo(ctx, name, endpoint, ptr.Deref(pluginClientTimeout, csiTimeout))
	if err == nil {
		err = m.installDriver(ctx, name, info)
	}
	if err != nil {
		m.unregister(ctx, name)
		return err
	}
	return nil
}

// DeRegisterPlugin forgets a driver whose registration socket went away and removes it
// from the Node and CSINode objects (its topology labels stay, as upstream). Unlike
// upstream, the call is ignored when the driver has meanwhile been replaced by one at
// another endpoint: the old socket's removal must not unregister its successor.
func (m *Manager) DeRegisterPlugin(ctx context.Context, name, endpoint string) {
	klog.InfoS(logf("registrationHandler.DeRegisterPlugin request"), "name", name, "endpoint", endpoint)
	if d, ok := m.driver(name); ok && d.endpoint != endpoint {
		klog.InfoS(logf("Driver is registered at another endpoint now, keeping it"), "name", name, "current", d.endpoint)
		return
	}
	m.unregister(ctx, name)
}

// RefreshDriver asks a registered driver for NodeGetInfo again and updates its CSINode
// entry, upstream's updateCSIDriver: what the caller runs every
// CSIDriver.spec.nodeAllocatableUpdatePeriodSeconds, or when an attachment failed
// with ResourceExhausted, so that the allocatable count follows the driver's.
func (m *Manager) RefreshDriver(ctx context.Context, name string) error {
	endpoint, err := m.endpointOf(name)
	if err != nil {
		return fmt.Errorf("failed to create CSI client for driver %q: %w", name, err)
	}
	info, err := getNodeInfo(ctx, name, endpoint, csiTimeout)
	if err != nil {
		return fmt.Errorf("failed to get NodeGetInfo from driver %q: %w", name, err)
	}
	if m.client == nil {
		return nil
	}
	if err := m.updateCSINode(ctx, name, info); err != nil {
		return fmt.Errorf("failed to update driver %q: error updating CSINode object with CSI driver node info: %w", name, err)
	}
	return nil
}

// validateVersions returns the newest supported version the driver offers. CSI
// promises compatibility within a major version, so any 1.x works; 0.x is no longer
// supported and 2.x might not be compatible.
func (m *Manager) validateVersions(caller, name string, versions []string) (*utilversion.Version, error) {
	if len(versions) == 0 {
		return nil, errors.New(logf("%s for CSI driver %q failed. Plugin returned an empty list for supported versions", caller, name))
	}
	newest, err := utilversion.HighestSupportedVersion(versions)
	if err != nil {
		return nil, errors.New(logf("%s for CSI driver %q failed. None of the versions specified %q are supported. err=%v", caller, name, versions, err))
	}
	if existing, ok := m.driver(name); ok && !existing.version.LessThan(newest) {
		return nil, errors.New(logf("%s for CSI driver %q failed. Another driver with the same name is already registered with a higher supported version: %q", caller, name, existing.version))
	}
	return newest, nil
}

// unregister forgets the driver and removes it from the API objects, logging failures
// as upstream does.
func (m *Manager) unregister(ctx context.Context, name string) {
	m.deleteDriver(name)
	if err := m.uninstallDriver(ctx, name); err != nil {
		klog.ErrorS(err, logf("Error uninstalling CSI driver"), "name", name)
	}
}

// getNodeInfo asks the driver at endpoint who it is on this node.
func getNodeInfo(ctx context.Context, driver, endpoint string, timeout time.Duration) (nodeInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn, err := dialEndpoint(ctx, endpoint, timeout, grpc.WithChainUnaryInterceptor(timeCalls(driver)))
	if err != nil {
		return nodeInfo{}, fmt.Errorf("%s: %w", logf("failed to connect to CSI driver at %s", endpoint), err)
	}
	defer conn.Close()
	resp, err := csipb.NewNodeClient(conn).NodeGetInfo(ctx, &csipb.NodeGetInfoRequest{})
	if err != nil {
		klog.InfoS("Error calling CSI NodeGetInfo()", "err", err.Error())
		return nodeInfo{}, err
	}
	return nodeInfo{
		nodeID:     resp.GetNodeId(),
		maxVolumes: resp.GetMaxVolumesPerNode(),
		topology:   resp.GetAccessibleTopology().GetSegments(),
	}, nil
}
