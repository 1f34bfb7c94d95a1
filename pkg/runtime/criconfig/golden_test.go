package criconfig

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/pkg/runtime/container"
)

// assertProto fails with both messages printed when got and want differ.
func assertProto(t *testing.T, got, want proto.Message) {
	t.Helper()
	if proto.Equal(got, want) {
		return
	}
	opts := prototext.MarshalOptions{Multiline: true}
	t.Errorf("config mismatch\n--- got:\n%s\n--- want:\n%s", opts.Format(got), opts.Format(want))
}

// fakeDNS hands back a fixed config and records the pod it was asked about.
type fakeDNS struct {
	config *runtimeapi.DNSConfig
	asked  *v1.Pod
}

func (f *fakeDNS) GetPodDNS(pod *v1.Pod) (*runtimeapi.DNSConfig, error) {
	f.asked = pod
	return f.config, nil
}

func testDNS() *fakeDNS {
	return &fakeDNS{config: &runtimeapi.DNSConfig{
		Servers: []string{"10.96.0.10"}, Searches: []string{"default.svc.cluster.local", "svc.cluster.local"}, Options: []string{"ndots:5"},
	}}
}

func sandboxOpts(dns DNSConfigurer) SandboxOptions {
	return SandboxOptions{DNS: dns, ClusterDomain: "cluster.local", PodLogsDir: "/var/log/pods", CgroupParent: "/kubepods/pod-u1", Resources: ResourceOptions{CPUCFSQuota: true}}
}

func containerOpts() ContainerOptions {
	return ContainerOptions{
		PodIP: "10.88.0.7", PodIPs: []string{"10.88.0.7"}, HostIPs: []string{"192.168.0.2"}, NodeName: "node-1",
		ImageRef:    "sha256:abc",
		CPUCFSQuota: true, MachineMemory: 8 << 30,
	}
}

func busyboxPod() *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: "bb", Namespace: "default", UID: "u1",
			Labels: map[string]string{"app": "bb"}, Annotations: map[string]string{"note": "x"},
		},
		Spec: v1.PodSpec{
			TerminationGracePeriodSeconds: ptrTo[int64](30),
			Containers: []v1.Container{{
				Name: "main", Image: "busybox:1.36",
				Command:                  []string{"sh", "-c", "echo hi"},
				TerminationMessagePath:   "/dev/termination-log",
				TerminationMessagePolicy: v1.TerminationMessageReadFile,
			}},
		},
	}
}

func defaultNamespaces() *runtimeapi.NamespaceOption {
	return &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_POD, Pid: runtimeapi.NamespaceMode_CONTAINER, Ipc: runtimeapi.NamespaceMode_POD}
}

func runtimeDefault() *runtimeapi.SecurityProfile {
	return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}
}

func wantAnnotations(c *v1.Container, restartCount int, extra map[string]string) map[string]string {
	a := map[string]string{
		ContainerHashLabel:                     strconv.FormatUint(container.HashContainer(c), 16),
		ContainerRestartCountLabel:             strconv.Itoa(restartCount),
		ContainerTerminationMessagePathLabel:   c.TerminationMessagePath,
		ContainerTerminationMessagePolicyLabel: string(c.TerminationMessagePolicy),
	}
	for k, v := range extra {
		a[k] = v
	}
	return a
}

func TestSandboxConfigBusybox(t *testing.T) {
	dns := testDNS()
	pod := busyboxPod()
	got, err := GeneratePodSandboxConfig(pod, 2, sandboxOpts(dns))
	if err != nil {
		t.Fatal(err)
	}
	want := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: "bb", Namespace: "default", Uid: "u1", Attempt: 2},
		Hostname:     "bb",
		LogDirectory: "/var/log/pods/default_bb_u1",
		DnsConfig:    dns.config,
		Labels: map[string]string{"app": "bb",
			"io.kubernetes.pod.name": "bb", "io.kubernetes.pod.namespace": "default", "io.kubernetes.pod.uid": "u1"},
		Annotations: map[string]string{"note": "x"},
		Linux: &runtimeapi.LinuxPodSandboxConfig{
			CgroupParent: "/kubepods/pod-u1",
			SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
				NamespaceOptions: defaultNamespaces(),
				Seccomp:          runtimeDefault(),
			},
			Resources: &runtimeapi.LinuxContainerResources{CpuShares: 2, CpuPeriod: 100000},
			Overhead:  &runtimeapi.LinuxContainerResources{},
		},
	}
	assertProto(t, got, want)
	if dns.asked != pod {
		t.Error("the DNS configurer was not asked about the pod")
	}

	got, err = GeneratePodSandboxConfig(pod, 0, SandboxOptions{PodLogsDir: "/logs"})
	if err != nil {
		t.Fatal(err)
	}
	if got.DnsConfig != nil || got.LogDirectory != "/logs/default_bb_u1" || got.Linux.CgroupParent != "" {
		t.Errorf("without DNS/cgroup: dns %v, log dir %q, cgroup %q", got.DnsConfig, got.LogDirectory, got.Linux.CgroupParent)
	}
}

func TestSandboxConfigHostNetworkAndPorts(t *testing.T) {
	dns := testDNS()
	pod := busyboxPod()
	pod.Spec.HostNetwork = true
	pod.Spec.HostPID = true
	pod.Spec.Containers[0].Ports = []v1.ContainerPort{
		{Name: "http", ContainerPort: 80, HostPort: 8080, Protocol: v1.ProtocolTCP},
		{Name: "http", ContainerPort: 81, HostPort: 8081, Protocol: v1.ProtocolTCP}, // same name: dropped
		{ContainerPort: 53, Protocol: v1.ProtocolUDP, HostIP: "127.0.0.1", HostPort: 5353},
		{ContainerPort: 9090, Protocol: v1.ProtocolSCTP},
	}
	pod.Spec.Containers = append(pod.Spec.Containers, v1.Container{Name: "side", Ports: []v1.ContainerPort{
		{Name: "http", ContainerPort: 8000, Protocol: v1.ProtocolTCP}, // names are per container
	}})
	got, err := GeneratePodSandboxConfig(pod, 0, sandboxOpts(dns))
	if err != nil {
		t.Fatal(err)
	}
	want := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: "bb", Namespace: "default", Uid: "u1"},
		LogDirectory: "/var/log/pods/default_bb_u1",
		DnsConfig:    dns.config, // the DNS configurer decides for host-network pods
		PortMappings: []*runtimeapi.PortMapping{
			{Protocol: runtimeapi.Protocol_TCP, ContainerPort: 80, HostPort: 8080},
			{Protocol: runtimeapi.Protocol_UDP, ContainerPort: 53, HostPort: 5353, HostIp: "127.0.0.1"},
			{Protocol: runtimeapi.Protocol_SCTP, ContainerPort: 9090},
			{Protocol: runtimeapi.Protocol_TCP, ContainerPort: 8000},
		},
		Labels:      NewPodLabels(pod),
		Annotations: map[string]string{"note": "x"},
		Linux: &runtimeapi.LinuxPodSandboxConfig{
			CgroupParent: "/kubepods/pod-u1",
			SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
				NamespaceOptions: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE, Pid: runtimeapi.NamespaceMode_NODE, Ipc: runtimeapi.NamespaceMode_POD},
				Seccomp:          runtimeDefault(),
			},
			Resources: &runtimeapi.LinuxContainerResources{CpuShares: 2, CpuPeriod: 100000},
			Overhead:  &runtimeapi.LinuxContainerResources{},
		},
	}
	assertProto(t, got, want)
}

// securityPod has security settings at pod level and in two containers.
func securityPod() *v1.Pod {
	pod := busyboxPod()
	pod.Spec.ShareProcessNamespace = ptrTo(true)
	pod.Spec.SecurityContext = &v1.PodSecurityContext{
		RunAsUser: ptrTo[int64](1000), RunAsGroup: ptrTo[int64](3000), RunAsNonRoot: ptrTo(true),
		FSGroup: ptrTo[int64](2000), SupplementalGroups: []int64{4000, 4001},
		Sysctls:        []v1.Sysctl{{Name: "kernel.shm_rmid_forced", Value: "1"}, {Name: "net.ipv4.ip_unprivileged_port_start", Value: "0"}},
		SeccompProfile: &v1.SeccompProfile{Type: v1.SeccompProfileTypeRuntimeDefault},
	}
	pod.Spec.Containers[0].SecurityContext = &v1.SecurityContext{
		RunAsUser:                ptrTo[int64](1001),
		Capabilities:             &v1.Capabilities{Add: []v1.Capability{"NET_ADMIN"}, Drop: []v1.Capability{"ALL"}},
		ReadOnlyRootFilesystem:   ptrTo(true),
		AllowPrivilegeEscalation: ptrTo(false),
		SeccompProfile:           &v1.SeccompProfile{Type: v1.SeccompProfileTypeLocalhost, LocalhostProfile: ptrTo("profiles/audit.json")},
	}
	pod.Spec.Containers = append(pod.Spec.Containers, v1.Container{
		Name: "priv", Image: "busybox:1.36",
		SecurityContext: &v1.SecurityContext{Privileged: ptrTo(true), ProcMount: ptrTo(v1.UnmaskedProcMount)},
	})
	return pod
}

func TestSandboxConfigSecurityContext(t *testing.T) {
	pod := securityPod()
	got, err := GeneratePodSandboxConfig(pod, 0, sandboxOpts(nil))
	if err != nil {
		t.Fatal(err)
	}
	want := &runtimeapi.LinuxPodSandboxConfig{
		CgroupParent: "/kubepods/pod-u1",
		SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
			NamespaceOptions:   &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_POD, Pid: runtimeapi.NamespaceMode_POD, Ipc: runtimeapi.NamespaceMode_POD},
			RunAsUser:          &runtimeapi.Int64Value{Value: 1000},
			RunAsGroup:         &runtimeapi.Int64Value{Value: 3000},
			SupplementalGroups: []int64{2000, 4000, 4001},
			Privileged:         true,
			Seccomp:            runtimeDefault(),
		},
		Sysctls:   map[string]string{"kernel.shm_rmid_forced": "1", "net.ipv4.ip_unprivileged_port_start": "0"},
		Resources: &runtimeapi.LinuxContainerResources{CpuShares: 2, CpuPeriod: 100000},
		Overhead:  &runtimeapi.LinuxContainerResources{},
	}
	assertProto(t, got.Linux, want)
}

func TestContainerConfigSecurityContext(t *testing.T) {
	pod := securityPod()
	opts := containerOpts()
	opts.PodDir = t.TempDir() + "/pods/u1"

	got, cleanup, err := GenerateContainerConfig(context.Background(), &pod.Spec.Containers[0], pod, 0, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer cleanup()
	seccompRoot := strings.TrimSuffix(opts.PodDir, "/pods/u1") + "/seccomp"
	want := &runtimeapi.LinuxContainerSecurityContext{
		Capabilities:       &runtimeapi.Capability{AddCapabilities: []string{"NET_ADMIN"}, DropCapabilities: []string{"ALL"}},
		NamespaceOptions:   &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_POD, Pid: runtimeapi.NamespaceMode_POD, Ipc: runtimeapi.NamespaceMode_POD},
		RunAsUser:          &runtimeapi.Int64Value{Value: 1001},
		RunAsGroup:         &runtimeapi.Int64Value{Value: 3000},
		ReadonlyRootfs:     true,
		SupplementalGroups: []int64{2000, 4000, 4001},
		NoNewPrivs:         true,
		MaskedPaths:        defaultMaskedPaths,
		ReadonlyPaths:      defaultReadonlyPaths,
		Seccomp:            &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: seccompRoot + "/profiles/audit.json"},
	}
	assertProto(t, got.Linux.SecurityContext, want)

	// The privileged container inherits the pod's user, group and seccomp profile.
	got, _, err = GenerateContainerConfig(context.Background(), &pod.Spec.Containers[1], pod, 0, opts)
	if err != nil {
		t.Fatal(err)
	}
	want = &runtimeapi.LinuxContainerSecurityContext{
		Privileged:         true,
		NamespaceOptions:   &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_POD, Pid: runtimeapi.NamespaceMode_POD, Ipc: runtimeapi.NamespaceMode_POD},
		RunAsUser:          &runtimeapi.Int64Value{Value: 1000},
		RunAsGroup:         &runtimeapi.Int64Value{Value: 3000},
		SupplementalGroups: []int64{2000, 4000, 4001},
		MaskedPaths:        []string{},
		ReadonlyPaths:      []string{},
		Seccomp:            runtimeDefault(),
	}
	assertProto(t, got.Linux.SecurityContext, want)

	// runAsNonRoot with a root image user but no runAsUser anywhere fails.
	pod.Spec.SecurityContext.RunAsUser = nil
	opts.ImageUser = ptrTo[int64](0)
	_, cleanup, err = GenerateContainerConfig(context.Background(), &pod.Spec.Containers[1], pod, 0, opts)
	if err == nil || !strings.Contains(err.Error(), "image will run as root") {
		t.Errorf("error %v, want the runAsNonRoot refusal", err)
	}
	cleanup() // never nil
}

func TestContainerConfigBusybox(t *testing.T) {
	pod := busyboxPod()
	c := &pod.Spec.Containers[0]
	c.Stdin, c.StdinOnce, c.TTY = true, true, true
	c.WorkingDir = "/work"
	c.Lifecycle = &v1.Lifecycle{PreStop: &v1.LifecycleHandler{Exec: &v1.ExecAction{Command: []string{"true"}}}}
	opts := containerOpts()
	podDir := t.TempDir()
	opts.PodDir = podDir
	opts.PodLogsDir = t.TempDir()
	opts.Mounts = []*runtimeapi.Mount{{HostPath: "/data", ContainerPath: "/data", Readonly: true}}

	got, cleanup, err := GenerateContainerConfig(context.Background(), c, pod, 3, opts)
	if err != nil {
		t.Fatal(err)
	}
	termFile := checkTerminationMount(t, got, podDir+"/containers/main/", "/dev/termination-log")
	want := &runtimeapi.ContainerConfig{
		Metadata:   &runtimeapi.ContainerMetadata{Name: "main", Attempt: 3},
		Image:      &runtimeapi.ImageSpec{Image: "sha256:abc", UserSpecifiedImage: "busybox:1.36"},
		Command:    []string{"sh", "-c", "echo hi"},
		WorkingDir: "/work",
		Mounts: []*runtimeapi.Mount{
			{HostPath: "/data", ContainerPath: "/data", Readonly: true},
			{HostPath: termFile, ContainerPath: "/dev/termination-log"},
		},
		Labels: map[string]string{"io.kubernetes.pod.name": "bb", "io.kubernetes.pod.namespace": "default",
			"io.kubernetes.pod.uid": "u1", "io.kubernetes.container.name": "main"},
		Annotations: wantAnnotations(c, 3, map[string]string{
			PodTerminationGracePeriodLabel: "30",
			ContainerPreStopHandlerLabel:   `{"exec":{"command":["true"]}}`,
		}),
		LogPath: "main/3.log",
		Stdin:   true, StdinOnce: true, Tty: true,
		Linux: &runtimeapi.LinuxContainerConfig{
			Resources: &runtimeapi.LinuxContainerResources{CpuShares: 2, CpuPeriod: 100000, OomScoreAdj: 1000},
			SecurityContext: &runtimeapi.LinuxContainerSecurityContext{
				NamespaceOptions: defaultNamespaces(),
				RunAsUser:        &runtimeapi.Int64Value{Value: 0}, // image without a user: root
				MaskedPaths:      defaultMaskedPaths,
				ReadonlyPaths:    defaultReadonlyPaths,
				Seccomp:          &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Unconfined},
			},
		},
	}
	assertProto(t, got, want)
	if fi, err := os.Stat(opts.PodLogsDir + "/default_bb_u1/main"); err != nil || !fi.IsDir() {
		t.Errorf("container log dir not created: %v", err)
	}
	cleanup()
	if _, err := os.Stat(termFile); !os.IsNotExist(err) {
		t.Errorf("cleanup left the termination-message file: %v", err)
	}
}

// checkTerminationMount finds the termination-message mount, checks its
// file, and returns the file's path.
func checkTerminationMount(t *testing.T, config *runtimeapi.ContainerConfig, dir, containerPath string) string {
	t.Helper()
	for _, m := range config.Mounts {
		if m.ContainerPath != containerPath {
			continue
		}
		if !strings.HasPrefix(m.HostPath, dir) || len(strings.TrimPrefix(m.HostPath, dir)) != 8 {
			t.Errorf("termination file %q, want %s<8 hex digits>", m.HostPath, dir)
		}
		fi, err := os.Stat(m.HostPath)
		if err != nil {
			t.Fatalf("termination file: %v", err)
		}
		if fi.Mode().Perm() != 0o666 || fi.Size() != 0 {
			t.Errorf("termination file mode %v size %d, want empty 0666", fi.Mode().Perm(), fi.Size())
		}
		return m.HostPath
	}
	t.Fatalf("no mount at %s in %v", containerPath, config.Mounts)
	return ""
}

func TestContainerConfigImageUser(t *testing.T) {
	pod := busyboxPod()
	pod.Spec.Containers[0].TerminationMessagePath = ""
	opts := containerOpts()
	opts.SeccompDefault = true
	opts.ImageUserName = "nobody"
	got, _, err := GenerateContainerConfig(context.Background(), &pod.Spec.Containers[0], pod, 0, opts)
	if err != nil {
		t.Fatal(err)
	}
	sc := got.Linux.SecurityContext
	if sc.RunAsUser != nil || sc.RunAsUsername != "nobody" {
		t.Errorf("user %v / %q, want the image's user name", sc.RunAsUser, sc.RunAsUsername)
	}
	assertProto(t, sc.Seccomp, runtimeDefault())
	if len(got.Mounts) != 0 {
		t.Errorf("mounts %v, want none without a termination message path", got.Mounts)
	}
	opts.ImageUser, opts.ImageUserName = ptrTo[int64](65534), ""
	got, _, _ = GenerateContainerConfig(context.Background(), &pod.Spec.Containers[0], pod, 0, opts)
	if got.Linux.SecurityContext.RunAsUser.GetValue() != 65534 {
		t.Errorf("user %v, want the image's uid", got.Linux.SecurityContext.RunAsUser)
	}
}

func TestEphemeralContainerTargetsPIDNamespace(t *testing.T) {
	pod := busyboxPod()
	opts := containerOpts()
	opts.TargetContainerID = "abc123"
	got, _, err := GenerateContainerConfig(context.Background(), &pod.Spec.Containers[0], pod, 0, opts)
	if err != nil {
		t.Fatal(err)
	}
	want := &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_POD, Pid: runtimeapi.NamespaceMode_TARGET, Ipc: runtimeapi.NamespaceMode_POD, TargetId: "abc123"}
	assertProto(t, got.Linux.SecurityContext.NamespaceOptions, want)
	// A shared PID namespace is joined as it is.
	pod.Spec.ShareProcessNamespace = ptrTo(true)
	got, _, _ = GenerateContainerConfig(context.Background(), &pod.Spec.Containers[0], pod, 0, opts)
	if ns := got.Linux.SecurityContext.NamespaceOptions; ns.Pid != runtimeapi.NamespaceMode_POD || ns.TargetId != "" {
		t.Errorf("shared PID namespace: %v", ns)
	}
}

func resources(req, lim map[v1.ResourceName]string) v1.ResourceRequirements {
	r := v1.ResourceRequirements{Requests: v1.ResourceList{}, Limits: v1.ResourceList{}}
	for n, q := range req {
		r.Requests[n] = resource.MustParse(q)
	}
	for n, q := range lim {
		r.Limits[n] = resource.MustParse(q)
	}
	return r
}

func TestResourcesGuaranteedAndBurstable(t *testing.T) {
	guaranteed := busyboxPod()
	guaranteed.Spec.Containers[0].Resources = resources(
		map[v1.ResourceName]string{v1.ResourceCPU: "500m", v1.ResourceMemory: "128Mi"},
		map[v1.ResourceName]string{v1.ResourceCPU: "500m", v1.ResourceMemory: "128Mi"})
	guaranteed.Spec.Overhead = v1.ResourceList{v1.ResourceCPU: resource.MustParse("100m"), v1.ResourceMemory: resource.MustParse("32Mi")}

	burstable := busyboxPod()
	burstable.Spec.Containers[0].Resources = resources(
		map[v1.ResourceName]string{v1.ResourceCPU: "250m", v1.ResourceMemory: "1Gi"},
		map[v1.ResourceName]string{v1.ResourceCPU: "1", v1.ResourceMemory: "2Gi"})
	burstable.Spec.Containers = append(burstable.Spec.Containers, v1.Container{Name: "side", Resources: resources(
		map[v1.ResourceName]string{v1.ResourceCPU: "10m"}, map[v1.ResourceName]string{v1.ResourceCPU: "5m"})})
	burstable.Spec.InitContainers = []v1.Container{{Name: "init", Resources: resources(
		map[v1.ResourceName]string{v1.ResourceCPU: "2"}, map[v1.ResourceName]string{v1.ResourceMemory: "4Gi"})}}

	tests := []struct {
		name          string
		pod           *v1.Pod
		container     *runtimeapi.LinuxContainerResources
		sandbox       *runtimeapi.LinuxContainerResources
		overhead      *runtimeapi.LinuxContainerResources
		sideContainer *runtimeapi.LinuxContainerResources
	}{
		{
			name:      "guaranteed",
			pod:       guaranteed,
			container: &runtimeapi.LinuxContainerResources{CpuShares: 512, CpuPeriod: 100000, CpuQuota: 50000, MemoryLimitInBytes: 128 << 20, OomScoreAdj: -997},
			sandbox:   &runtimeapi.LinuxContainerResources{CpuShares: 512, CpuPeriod: 100000, CpuQuota: 50000, MemoryLimitInBytes: 128 << 20},
			overhead:  &runtimeapi.LinuxContainerResources{CpuShares: 102, CpuPeriod: 100000, CpuQuota: 10000, MemoryLimitInBytes: 32 << 20},
		},
		{
			name:      "burstable",
			pod:       burstable,
			container: &runtimeapi.LinuxContainerResources{CpuShares: 256, CpuPeriod: 100000, CpuQuota: 100000, MemoryLimitInBytes: 2 << 30, OomScoreAdj: 875},
			// Requests: the init container's 2 CPUs beat 260m; limits: its 4Gi beats 2Gi, CPU sums to 1005m.
			sandbox:  &runtimeapi.LinuxContainerResources{CpuShares: 2048, CpuPeriod: 100000, CpuQuota: 100500, MemoryLimitInBytes: 4 << 30},
			overhead: &runtimeapi.LinuxContainerResources{},
			// 5m is below the 1ms minimum quota; no memory request: 999.
			sideContainer: &runtimeapi.LinuxContainerResources{CpuShares: 10, CpuPeriod: 100000, CpuQuota: 1000, OomScoreAdj: 999},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, _, err := GenerateContainerConfig(context.Background(), &tt.pod.Spec.Containers[0], tt.pod, 0, containerOpts())
			if err != nil {
				t.Fatal(err)
			}
			assertProto(t, c.Linux.Resources, tt.container)
			s, err := GeneratePodSandboxConfig(tt.pod, 0, sandboxOpts(nil))
			if err != nil {
				t.Fatal(err)
			}
			assertProto(t, s.Linux.Resources, tt.sandbox)
			assertProto(t, s.Linux.Overhead, tt.overhead)
			if tt.sideContainer != nil {
				c, _, _ := GenerateContainerConfig(context.Background(), &tt.pod.Spec.Containers[1], tt.pod, 0, containerOpts())
				assertProto(t, c.Linux.Resources, tt.sideContainer)
			}
		})
	}
}

func TestResourcesWithoutCFSQuota(t *testing.T) {
	pod := busyboxPod()
	pod.Spec.Containers[0].Resources = resources(nil, map[v1.ResourceName]string{v1.ResourceCPU: "2"})
	opts := containerOpts()
	opts.CPUCFSQuota = false
	c, _, err := GenerateContainerConfig(context.Background(), &pod.Spec.Containers[0], pod, 0, opts)
	if err != nil {
		t.Fatal(err)
	}
	// No request: shares follow the limit. No quota, no period.
	assertProto(t, c.Linux.Resources, &runtimeapi.LinuxContainerResources{CpuShares: 2048, OomScoreAdj: 999})
	opts.CPUCFSQuota, opts.CPUCFSQuotaPeriod = true, 50*time.Millisecond
	c, _, _ = GenerateContainerConfig(context.Background(), &pod.Spec.Containers[0], pod, 0, opts)
	assertProto(t, c.Linux.Resources, &runtimeapi.LinuxContainerResources{CpuShares: 2048, CpuPeriod: 50000, CpuQuota: 100000, OomScoreAdj: 999})
}

func TestContainerConfigEnvExpansion(t *testing.T) {
	pod := busyboxPod()
	c := &pod.Spec.Containers[0]
	c.TerminationMessagePath = ""
	c.Command = []string{"sh", "-c", "echo $(GREETING) from $(POD_NAME) at $(POD_IP) $$(ESCAPED)"}
	c.Args = []string{"$(UNDEFINED)", "$(APP)"}
	c.Env = []v1.EnvVar{
		{Name: "POD_NAME", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
		{Name: "POD_IP", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
		{Name: "APP", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.labels['app']"}}},
		{Name: "GREETING", Value: "hello $(POD_NAME)"},
	}
	got, _, err := GenerateContainerConfig(context.Background(), c, pod, 0, containerOpts())
	if err != nil {
		t.Fatal(err)
	}
	want := &runtimeapi.ContainerConfig{
		Command: []string{"sh", "-c", "echo hello bb from bb at 10.88.0.7 $(ESCAPED)"},
		Args:    []string{"$(UNDEFINED)", "bb"},
		Envs: []*runtimeapi.KeyValue{
			{Key: "POD_NAME", Value: []byte("bb")},
			{Key: "POD_IP", Value: []byte("10.88.0.7")},
			{Key: "APP", Value: []byte("bb")},
			{Key: "GREETING", Value: []byte("hello bb")},
		},
	}
	assertProto(t, &runtimeapi.ContainerConfig{Command: got.Command, Args: got.Args, Envs: got.Envs}, want)
}

func TestContainerConfigEnvError(t *testing.T) {
	pod := busyboxPod()
	pod.Spec.Containers[0].Env = []v1.EnvVar{{Name: "S", ValueFrom: &v1.EnvVarSource{SecretKeyRef: &v1.SecretKeySelector{
		LocalObjectReference: v1.LocalObjectReference{Name: "s"}, Key: "k"}}}}
	opts := containerOpts()
	opts.PodDir = t.TempDir()
	_, cleanup, err := GenerateContainerConfig(context.Background(), &pod.Spec.Containers[0], pod, 0, opts)
	if !errors.Is(err, ErrNeedsClusterMode) {
		t.Fatalf("error %v, want ErrNeedsClusterMode", err)
	}
	cleanup()
	if entries, _ := os.ReadDir(opts.PodDir + "/containers/main"); len(entries) != 0 {
		t.Errorf("a failed config left files: %v", entries)
	}
}

func TestContainerLogPath(t *testing.T) {
	if got := ContainerLogPath("app", 12); got != "app/12.log" {
		t.Errorf("ContainerLogPath = %q", got)
	}
	if got := PodLogDir("/var/log/pods", "ns", "name", "uid"); got != "/var/log/pods/ns_name_uid" {
		t.Errorf("PodLogDir = %q", got)
	}
}
