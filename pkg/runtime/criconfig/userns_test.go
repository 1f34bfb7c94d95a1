package criconfig

import (
	"context"
	"errors"
	"testing"

	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func podUserNamespace() *runtimeapi.UserNamespace {
	return &runtimeapi.UserNamespace{
		Mode: runtimeapi.NamespaceMode_POD,
		Uids: []*runtimeapi.IDMapping{{HostId: 196608, ContainerId: 0, Length: 65536}},
		Gids: []*runtimeapi.IDMapping{{HostId: 196608, ContainerId: 0, Length: 65536}},
	}
}

func TestHostUsersFalseNeedsAPodUserNamespace(t *testing.T) {
	pod := busyboxPod()
	pod.Spec.HostUsers = ptrTo(false)
	for name, u := range map[string]*runtimeapi.UserNamespace{
		"none":     nil,
		"node":     {Mode: runtimeapi.NamespaceMode_NODE},
		"no uids":  {Mode: runtimeapi.NamespaceMode_POD, Gids: podUserNamespace().Gids},
		"no gids":  {Mode: runtimeapi.NamespaceMode_POD, Uids: podUserNamespace().Uids},
		"pod mode": podUserNamespace(),
	} {
		wantErr := name != "pod mode"
		sbOpts := sandboxOpts(nil)
		sbOpts.UserNamespace = u
		if _, err := GeneratePodSandboxConfig(pod, 0, sbOpts); errors.Is(err, ErrUserNamespacesNotSupported) != wantErr {
			t.Errorf("sandbox, %s: err %v, want refusal %v", name, err, wantErr)
		}
		cOpts := containerOpts()
		cOpts.UserNamespace = u
		if _, _, err := GenerateContainerConfig(context.Background(), &pod.Spec.Containers[0], pod, 0, cOpts); errors.Is(err, ErrUserNamespacesNotSupported) != wantErr {
			t.Errorf("container, %s: err %v, want refusal %v", name, err, wantErr)
		}
	}
}

func TestPodUserNamespaceReachesSandboxContainerAndMounts(t *testing.T) {
	pod := busyboxPod()
	pod.Spec.HostUsers = ptrTo(false)
	u := podUserNamespace()

	sbOpts := sandboxOpts(nil)
	sbOpts.UserNamespace = u
	sb, err := GeneratePodSandboxConfig(pod, 0, sbOpts)
	if err != nil {
		t.Fatal(err)
	}
	want := proto.Clone(defaultNamespaces()).(*runtimeapi.NamespaceOption)
	want.UsernsOptions = u
	assertProto(t, sb.Linux.SecurityContext.NamespaceOptions, want)

	volume := &runtimeapi.Mount{HostPath: "/var/lib/kubelet/pods/u1/volumes/kubernetes.io~empty-dir/data", ContainerPath: "/data"}
	cOpts := containerOpts()
	cOpts.UserNamespace = u
	cOpts.PodDir = t.TempDir()
	cOpts.Mounts = []*runtimeapi.Mount{volume}
	cc, cleanup, err := GenerateContainerConfig(context.Background(), &pod.Spec.Containers[0], pod, 0, cOpts)
	if err != nil {
		t.Fatal(err)
	}
	defer cleanup()
	assertProto(t, cc.Linux.SecurityContext.NamespaceOptions, want)
	if len(cc.Mounts) != 2 {
		t.Fatalf("mounts %v: want the volume and the termination message", cc.Mounts)
	}
	for _, m := range cc.Mounts {
		if !proto.Equal(&runtimeapi.Mount{UidMappings: m.UidMappings, GidMappings: m.GidMappings},
			&runtimeapi.Mount{UidMappings: u.Uids, GidMappings: u.Gids}) {
			t.Errorf("mount %s: mappings %v / %v, want the pod's", m.ContainerPath, m.UidMappings, m.GidMappings)
		}
	}
	if len(volume.UidMappings)+len(volume.GidMappings) != 0 {
		t.Error("the caller's mount was changed in place")
	}
}

func TestHostUsersPodsCarryTheNodeUserNamespace(t *testing.T) {
	node := &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_NODE}
	for name, hostUsers := range map[string]*bool{"unset": nil, "true": ptrTo(true)} {
		pod := busyboxPod()
		pod.Spec.HostUsers = hostUsers
		sbOpts := sandboxOpts(nil)
		sbOpts.UserNamespace = node
		sb, err := GeneratePodSandboxConfig(pod, 0, sbOpts)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got := sb.Linux.SecurityContext.NamespaceOptions.UsernsOptions; !proto.Equal(got, node) {
			t.Errorf("%s: sandbox userns %v, want NODE", name, got)
		}
		cOpts := containerOpts()
		cOpts.UserNamespace = node
		cOpts.PodDir = t.TempDir()
		cc, cleanup, err := GenerateContainerConfig(context.Background(), &pod.Spec.Containers[0], pod, 0, cOpts)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		cleanup()
		for _, m := range cc.Mounts {
			if len(m.UidMappings)+len(m.GidMappings) != 0 {
				t.Errorf("%s: mount %s got ID mappings in the node's user namespace", name, m.ContainerPath)
			}
		}
		// Without a manager (nil) nothing is sent, as before user namespaces.
		sb, err = GeneratePodSandboxConfig(pod, 0, sandboxOpts(nil))
		if err != nil || sb.Linux.SecurityContext.NamespaceOptions.UsernsOptions != nil {
			t.Errorf("%s without a user namespace: %v, %v", name, err, sb.GetLinux().GetSecurityContext().GetNamespaceOptions())
		}
	}
}
