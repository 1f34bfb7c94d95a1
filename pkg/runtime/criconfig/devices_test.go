package criconfig

import (
	"context"
	"testing"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The device plugins' devices, CDI names and mounts reach the container config; their env
// vars come before the container's own (which win), their mounts before the volumes, and
// the kubelet's annotations win over theirs.
func TestGenerateContainerConfigCarriesDevices(t *testing.T) {
	pod := busyboxPod()
	c := &pod.Spec.Containers[0]
	c.Env = []v1.EnvVar{{Name: "SHARED", Value: "from-spec"}}
	opts := containerOpts()
	opts.PodDir = t.TempDir()
	volume := &runtimeapi.Mount{HostPath: "/var/lib/kubelet/pods/u1/volumes/x", ContainerPath: "/data"}
	opts.Mounts = []*runtimeapi.Mount{volume}
	opts.Devices = &DeviceOptions{
		Envs:        []*runtimeapi.KeyValue{{Key: "DEVICE", Value: []byte("dev-1")}, {Key: "SHARED", Value: []byte("from-plugin")}},
		Mounts:      []*runtimeapi.Mount{{HostPath: "/opt/dev-1", ContainerPath: "/dev-data", Readonly: true}},
		Devices:     []*runtimeapi.Device{{HostPath: "/dev/null", ContainerPath: "/dev/example0", Permissions: "rw"}},
		CDIDevices:  []*runtimeapi.CDIDevice{{Name: "example.com/device=dev-1"}},
		Annotations: map[string]string{"example.com/device": "dev-1", "io.kubernetes.container.hash": "plugin"},
	}
	cc, cleanup, err := GenerateContainerConfig(context.Background(), c, pod, 0, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer cleanup()
	var envs []string
	for _, e := range cc.Envs {
		envs = append(envs, e.Key+"="+string(e.Value))
	}
	if len(envs) < 3 || envs[0] != "DEVICE=dev-1" || envs[1] != "SHARED=from-plugin" || envs[2] != "SHARED=from-spec" {
		t.Errorf("envs %q: want the plugin's first, then the container's", envs)
	}
	if len(cc.Mounts) < 2 || cc.Mounts[0].ContainerPath != "/dev-data" || cc.Mounts[1].ContainerPath != "/data" {
		t.Errorf("mounts %v: want the plugin's, then the volume", cc.Mounts)
	}
	if len(cc.Devices) != 1 || cc.Devices[0].ContainerPath != "/dev/example0" || len(cc.CDIDevices) != 1 {
		t.Errorf("devices %v, CDI %v", cc.Devices, cc.CDIDevices)
	}
	if cc.Annotations["example.com/device"] != "dev-1" || cc.Annotations["io.kubernetes.container.hash"] == "plugin" {
		t.Errorf("annotations %v: want the plugin's, with the kubelet's hash kept", cc.Annotations)
	}
}
