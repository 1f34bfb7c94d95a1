package criconfig

import (
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// DeviceOptions are what the device plugins' Allocate answers give a container
// (upstream's device manager run options): device nodes, CDI device names, mounts,
// environment variables and annotations.
type DeviceOptions struct {
	Envs        []*runtimeapi.KeyValue
	Mounts      []*runtimeapi.Mount
	Devices     []*runtimeapi.Device
	CDIDevices  []*runtimeapi.CDIDevice
	Annotations map[string]string
}

// applyDeviceOptions puts the devices into the config as upstream's kubelet does: the
// plugins' mounts come before the volume mounts, and the kubelet's own annotations win
// over the plugins'. (Their env vars come before the container's, in
// GenerateContainerConfig.)
func applyDeviceOptions(config *runtimeapi.ContainerConfig, d *DeviceOptions) {
	if d == nil {
		return
	}
	config.Devices = append(config.Devices, d.Devices...)
	config.CDIDevices = append(config.CDIDevices, d.CDIDevices...)
	config.Mounts = append(append([]*runtimeapi.Mount(nil), d.Mounts...), config.Mounts...)
	for k, v := range d.Annotations {
		if _, set := config.Annotations[k]; !set {
			config.Annotations[k] = v
		}
	}
}
