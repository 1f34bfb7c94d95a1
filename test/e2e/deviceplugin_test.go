//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/uuid"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// testDevicePlugin is a device plugin (deviceplugin/v1beta1) with two devices whose
// Allocate gives the container an env var naming them and a read-only mount of a host
// file, as real plugins hand out device files and driver libraries.
type testDevicePlugin struct {
	pluginapi.UnimplementedDevicePluginServer
	resource, socket, hostFile string
	server                     *grpc.Server
	stop                       chan struct{}
	// lists carries device lists to send on the open ListAndWatch streams.
	lists chan []*pluginapi.Device
}

func startTestDevicePlugin(t *testing.T) *testDevicePlugin {
	t.Helper()
	id := string(uuid.NewUUID())[:8]
	p := &testDevicePlugin{
		resource: "example.com/e2e-" + id,
		socket:   filepath.Join(pluginapi.DevicePluginPath, "e2e-"+id+".sock"),
		hostFile: filepath.Join(t.TempDir(), "driver"),
		stop:     make(chan struct{}),
		lists:    make(chan []*pluginapi.Device, 1),
	}
	if err := os.WriteFile(p.hostFile, []byte("driver of "+p.resource+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p.serve(t)
	t.Cleanup(p.shutdown)
	return p
}

// serve listens on the plugin's socket. A kubelet removes the sockets in the directory when
// it starts, so a plugin serves again, on a new socket, when it sees the kubelet's socket
// re-created (as upstream's sample plugin does), then registers.
func (p *testDevicePlugin) serve(t *testing.T) {
	t.Helper()
	if p.server != nil {
		p.server.Stop()
	}
	_ = os.Remove(p.socket)
	ln, err := net.Listen("unix", p.socket)
	if err != nil {
		t.Fatal(err)
	}
	p.server = grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(p.server, p)
	go func() { _ = p.server.Serve(ln) }()
}

// register announces the plugin on the kubelet's registration socket, trying again while
// nobody listens there yet (a restarted kubelet re-creates it), as plugins do.
func (p *testDevicePlugin) register(t *testing.T) {
	t.Helper()
	eventually(t, 20*time.Second, "registering "+p.resource, func() error {
		conn, err := grpc.NewClient("unix://"+pluginapi.KubeletSocket, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return err
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
			Version: pluginapi.Version, Endpoint: filepath.Base(p.socket), ResourceName: p.resource})
		return err
	})
}

func (p *testDevicePlugin) shutdown() {
	select {
	case <-p.stop:
	default:
		close(p.stop)
		p.server.Stop()
		_ = os.Remove(p.socket)
	}
}

func (p *testDevicePlugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

func (p *testDevicePlugin) ListAndWatch(_ *pluginapi.Empty, s pluginapi.DevicePlugin_ListAndWatchServer) error {
	devs := []*pluginapi.Device{{ID: "dev-1", Health: pluginapi.Healthy}, {ID: "dev-2", Health: pluginapi.Healthy}}
	for {
		if err := s.Send(&pluginapi.ListAndWatchResponse{Devices: devs}); err != nil {
			return err
		}
		select {
		case devs = <-p.lists:
		case <-p.stop:
			return nil
		case <-s.Context().Done():
			return nil
		}
	}
}

// setHealth sends the device list again with one device's health changed.
func (p *testDevicePlugin) setHealth(id, health string) {
	devs := []*pluginapi.Device{{ID: "dev-1", Health: pluginapi.Healthy}, {ID: "dev-2", Health: pluginapi.Healthy}}
	for _, d := range devs {
		if d.ID == id {
			d.Health = health
		}
	}
	p.lists <- devs
}

func (p *testDevicePlugin) Allocate(_ context.Context, r *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	out := &pluginapi.AllocateResponse{}
	for _, c := range r.ContainerRequests {
		out.ContainerResponses = append(out.ContainerResponses, &pluginapi.ContainerAllocateResponse{
			Envs:   map[string]string{"E2E_DEVICES": strings.Join(c.DevicesIds, ",")},
			Mounts: []*pluginapi.Mount{{ContainerPath: "/driver", HostPath: p.hostFile, ReadOnly: true}},
		})
	}
	return out, nil
}

// TestClusterDevicePlugin: a device plugin registers with nodelet
// (/var/lib/kubelet/device-plugins/kubelet.sock, as with upstream's kubelet): its resource
// shows in the node's capacity and allocatable at once; a pod asking for one device gets
// the plugin's env var and mount; the pod-resources API lists the pod's device; after a
// kill -9 and restart of nodelet the pod keeps its device and a new pod gets the other one;
// a pod asking for a device when none is free is refused; and when the plugin goes, its
// devices stop being allocatable while the pods using them run on.
func TestClusterDevicePlugin(t *testing.T) {
	c := startClusterNode(t, clusterOptions{})
	eventually(t, 20*time.Second, "node Ready", func() error { return c.nodeReady(t) })
	p := startTestDevicePlugin(t)
	p.register(t)
	name := v1.ResourceName(p.resource)
	took := eventually(t, 10*time.Second, "the plugin's devices in the node status", func() error {
		n, err := c.node(t)
		if err != nil {
			return err
		}
		if capacity, alloc := n.Status.Capacity[name], n.Status.Allocatable[name]; capacity.Value() != 2 || alloc.Value() != 2 {
			return fmt.Errorf("capacity %s allocatable %s", capacity.String(), alloc.String())
		}
		return nil
	})
	t.Logf("devices in the node status %v after registration", took.Round(10*time.Millisecond))

	pod := c.testPod("gpu")
	pod.Spec.Containers[0].Resources.Limits = v1.ResourceList{name: resource.MustParse("1")}
	c.createPod(t, pod)
	eventually(t, 60*time.Second, "the device pod Ready", func() error { return c.podReady("gpu") })
	env := c.execIn(t, "gpu", "sh", "-c", "echo $E2E_DEVICES; cat /driver")
	if !strings.Contains(env, "dev-") || !strings.Contains(env, "driver of "+p.resource) {
		t.Errorf("the container sees %q: want its device in E2E_DEVICES and the plugin's mount", env)
	}
	listed := podResourcesDevices(t, filepath.Join(c.rootDir, "pod-resources", "kubelet.sock"), c.namespace, "gpu")
	if len(listed) != 1 || listed[0].ResourceName != p.resource || len(listed[0].DeviceIds) != 1 ||
		!strings.Contains(env, listed[0].DeviceIds[0]) {
		t.Fatalf("pod-resources lists %v for the pod, want the device it got (%q)", listed, env)
	}
	checkDeviceHealth(t, c, p, listed[0].DeviceIds[0])

	// kill -9 and a new nodelet: the running pod keeps its device (the checkpoint), the
	// plugin registers again on the new socket, and the other device goes to a new pod.
	before := c.containerIDs(t, "gpu")
	c.restart(t, true)
	eventually(t, 20*time.Second, "the restarted kubelet's socket", func() error {
		conn, err := net.Dial("unix", pluginapi.KubeletSocket)
		if err == nil {
			conn.Close()
		}
		return err
	})
	p.serve(t)
	p.register(t)
	second := c.testPod("second")
	second.Spec.Containers[0].Resources.Limits = v1.ResourceList{name: resource.MustParse("1")}
	c.createPod(t, second)
	eventually(t, 60*time.Second, "a second device pod Ready after the restart", func() error { return c.podReady("second") })
	if after := c.containerIDs(t, "gpu"); !sameIDs(after, before) {
		t.Errorf("the device pod's containers changed across the restart: %v -> %v", before, after)
	}
	secondEnv := c.execIn(t, "second", "sh", "-c", "echo $E2E_DEVICES")
	if strings.TrimSpace(secondEnv) == "" || strings.Contains(env, strings.TrimSpace(secondEnv)) {
		t.Errorf("second pod got %q, first %q: want the other device", secondEnv, env)
	}

	greedy := c.testPod("greedy")
	greedy.Spec.Containers[0].Resources.Limits = v1.ResourceList{name: resource.MustParse("1")}
	c.createPod(t, greedy)
	eventually(t, 30*time.Second, "a pod asking for a device when none is free refused", func() error {
		g, err := c.getPod("greedy")
		if err != nil {
			return err
		}
		if g.Status.Phase != v1.PodFailed || !strings.HasPrefix(g.Status.Reason, "OutOf") && g.Status.Reason != "UnexpectedAdmissionError" {
			return fmt.Errorf("phase %s reason %q message %q", g.Status.Phase, g.Status.Reason, g.Status.Message)
		}
		return nil
	})

	p.shutdown()
	eventually(t, 20*time.Second, "the gone plugin's devices not allocatable", func() error {
		n, err := c.node(t)
		if err != nil {
			return err
		}
		if alloc := n.Status.Allocatable[name]; alloc.Value() != 0 {
			return fmt.Errorf("allocatable %s", alloc.String())
		}
		return nil
	})
	for _, pod := range []string{"gpu", "second"} {
		if err := c.podReady(pod); err != nil {
			t.Errorf("device pod %s after its plugin went: %v", pod, err)
		}
	}
}

// checkDeviceHealth: the pod's container status reports its device's health
// (allocatedResourcesStatus, upstream's ResourceHealthStatus), Unhealthy soon after the
// plugin says so, with the node's allocatable one lower, and Healthy again after.
func checkDeviceHealth(t *testing.T, c *clusterNode, p *testDevicePlugin, device string) {
	t.Helper()
	for _, health := range []string{pluginapi.Unhealthy, pluginapi.Healthy} {
		p.setHealth(device, health)
		took := eventually(t, 20*time.Second, "the device "+health+" in the pod's status", func() error {
			pod, err := c.getPod("gpu")
			if err != nil {
				return err
			}
			want := v1.ResourceStatus{Name: v1.ResourceName(p.resource), Resources: []v1.ResourceHealth{
				{ResourceID: v1.ResourceID(device), Health: v1.ResourceHealthStatus(health)}}}
			if cs := pod.Status.ContainerStatuses; len(cs) != 1 || !reflect.DeepEqual(cs[0].AllocatedResourcesStatus, []v1.ResourceStatus{want}) {
				return fmt.Errorf("container statuses %+v", cs)
			}
			return nil
		})
		t.Logf("device %s in the pod's status after %v", health, took.Round(10*time.Millisecond))
		want := int64(2)
		if health == pluginapi.Unhealthy {
			want = 1
		}
		eventually(t, 10*time.Second, "allocatable follows the health", func() error {
			n, err := c.node(t)
			if err != nil {
				return err
			}
			if a := n.Status.Allocatable[v1.ResourceName(p.resource)]; a.Value() != want {
				return fmt.Errorf("allocatable %s, want %d", a.String(), want)
			}
			return nil
		})
	}
}

// podResourcesClient dials the pod-resources API; the connection closes with the test.
func podResourcesClient(t *testing.T, socket string) podresourcesv1.PodResourcesListerClient {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return podresourcesv1.NewPodResourcesListerClient(conn)
}

// podResourcesListed is one pod as the pod-resources API's v1 List reports it (nil when
// it is not listed).
func podResourcesListed(t *testing.T, socket, namespace, pod string) *podresourcesv1.PodResources {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := podResourcesClient(t, socket).List(ctx, &podresourcesv1.ListPodResourcesRequest{})
	if err != nil {
		t.Fatalf("pod-resources List: %v", err)
	}
	for _, p := range resp.PodResources {
		if p.Namespace == namespace && p.Name == pod {
			return p
		}
	}
	return nil
}

// podResourcesDevices asks the pod-resources API (v1 List) for one pod's devices.
func podResourcesDevices(t *testing.T, socket, namespace, pod string) []*podresourcesv1.ContainerDevices {
	t.Helper()
	p := podResourcesListed(t, socket, namespace, pod)
	if p == nil {
		t.Errorf("pod-resources List has no %s/%s", namespace, pod)
		return nil
	}
	var out []*podresourcesv1.ContainerDevices
	for _, c := range p.Containers {
		out = append(out, c.Devices...)
	}
	return out
}
