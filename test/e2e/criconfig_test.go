//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/pkg/runtime/cri"
	"github.com/nodelet/nodelet/pkg/runtime/criconfig"
)

const criconfigBusybox = "docker.io/library/busybox:1.36"

// TestCRIConfigRunsBusybox runs a sandbox and a container built by
// pkg/runtime/criconfig straight through pkg/runtime/cri, and checks that the container sees
// the generated env and hostname, logs where the config says, and gets its
// termination-message file.
func TestCRIConfigRunsBusybox(t *testing.T) {
	pod := criconfigTestPod(fmt.Sprintf("%08x", rand.Uint32()))
	pod.Spec.Containers[0].Args = []string{`echo "greeting=$GREETING ip=$POD_IP host=$(hostname) node=$(NODE)"; ` +
		`echo -n bye > /dev/termination-log; exec sleep 3600`}
	r := criconfigStart(t, pod)

	logFile := filepath.Join(r.sandbox.LogDirectory, r.container.LogPath)
	wantLine := fmt.Sprintf("greeting=hello %s ip=%s host=%s node=e2e-node", pod.Name, r.podIP, pod.Name)
	criconfigWaitForFile(t, logFile, "stdout F "+wantLine, 20*time.Second)

	out := r.exec(t, `echo "$GREETING|$POD_IP|$(id -u)"`)
	if want := "hello " + pod.Name + "|" + r.podIP + "|0\n"; out != want {
		t.Errorf("env in the container: %q, want %q", out, want)
	}
	// The termination-message file is the host side of /dev/termination-log.
	criconfigWaitForFile(t, criconfigTerminationPath(t, r.container), "bye", 10*time.Second)
}

// TestCRIConfigSecurityAndResources checks that the runtime applies the
// generated user, groups, privileges, sysctls, limits and OOM score.
func TestCRIConfigSecurityAndResources(t *testing.T) {
	pod := criconfigTestPod(fmt.Sprintf("%08x", rand.Uint32()))
	pod.Spec.SecurityContext = &v1.PodSecurityContext{
		RunAsUser: ptrInt64(1000), RunAsGroup: ptrInt64(3000), FSGroup: ptrInt64(2000), RunAsNonRoot: ptrBool(true),
		Sysctls: []v1.Sysctl{{Name: "net.ipv4.ip_unprivileged_port_start", Value: "80"}},
	}
	c := &pod.Spec.Containers[0]
	c.Args = []string{"exec sleep 3600"}
	c.TerminationMessagePath = ""
	c.SecurityContext = &v1.SecurityContext{
		AllowPrivilegeEscalation: ptrBool(false), ReadOnlyRootFilesystem: ptrBool(true),
		Capabilities:   &v1.Capabilities{Drop: []v1.Capability{"ALL"}},
		SeccompProfile: &v1.SeccompProfile{Type: v1.SeccompProfileTypeRuntimeDefault},
	}
	// Burstable: this containerd may not lower scores below its own (restrict_oom_score_adj),
	// so a Guaranteed -997 would show as 0.
	c.Resources = v1.ResourceRequirements{
		Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("250m"), v1.ResourceMemory: resource.MustParse("64Mi")},
		Limits:   v1.ResourceList{v1.ResourceCPU: resource.MustParse("500m"), v1.ResourceMemory: resource.MustParse("128Mi")},
	}
	r := criconfigStart(t, pod)

	checks := []struct{ cmd, want string }{
		{"id -u; id -g; id -G", "1000\n3000\n3000 2000\n"},
		{"grep -E '^(NoNewPrivs|Seccomp|CapEff):' /proc/self/status | tr -s '\t' ' '", "CapEff: 0000000000000000\nNoNewPrivs: 1\nSeccomp: 2\n"},
		{"cat /proc/1/oom_score_adj", "938\n"}, // 1000 - 1000*64Mi/1Gi
		{"cat /proc/sys/net/ipv4/ip_unprivileged_port_start", "80\n"},
		// cgroup v2 or v1
		{"cat /sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes", "134217728\n"},
		{"cat /sys/fs/cgroup/cpu.max 2>/dev/null || echo $(cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us /sys/fs/cgroup/cpu/cpu.cfs_period_us)", "50000 100000\n"},
		{"touch /x 2>/dev/null && echo writable || echo read-only", "read-only\n"},
	}
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err != nil { // v1: shares as given
		checks = append(checks, struct{ cmd, want string }{"cat /sys/fs/cgroup/cpu/cpu.shares", "256\n"})
	}
	for _, check := range checks {
		if got := r.exec(t, check.cmd); got != check.want {
			t.Errorf("%s: %q, want %q", check.cmd, got, check.want)
		}
	}
}

// criconfigRun is a started pod with one container.
type criconfigRun struct {
	rs          internalapi.RuntimeService
	sandbox     *runtimeapi.PodSandboxConfig
	container   *runtimeapi.ContainerConfig
	containerID string
	podIP       string
}

func (r *criconfigRun) exec(t *testing.T, script string) string {
	t.Helper()
	stdout, stderr, err := r.rs.ExecSync(context.Background(), r.containerID, []string{"sh", "-c", script}, 10*time.Second)
	if err != nil {
		t.Errorf("exec %q: %v (%s)", script, err, stderr)
	}
	return string(stdout)
}

// criconfigStart generates the configs of the pod and its first container,
// runs them, and removes them when the test ends.
func criconfigStart(t *testing.T, pod *v1.Pod) *criconfigRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rs, err := cri.NewRemoteRuntimeService(ctx, endpoint(t), 10*time.Second, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	is, err := cri.NewRemoteImageService(ctx, endpoint(t), 10*time.Second, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	image, err := is.ImageStatus(ctx, &runtimeapi.ImageSpec{Image: criconfigBusybox}, false)
	if err != nil || image.GetImage() == nil {
		t.Fatalf("%s is not present: %v", criconfigBusybox, err)
	}
	logsDir, podDir := t.TempDir(), filepath.Join(t.TempDir(), "pods", string(pod.UID))

	r := &criconfigRun{rs: rs}
	r.sandbox, err = criconfig.GeneratePodSandboxConfig(pod, 0, criconfig.SandboxOptions{PodLogsDir: logsDir, Resources: criconfig.ResourceOptions{CPUCFSQuota: true}})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(r.sandbox.LogDirectory, 0o755); err != nil {
		t.Fatal(err)
	}
	sandboxID, err := rs.RunPodSandbox(ctx, r.sandbox, "")
	if err != nil {
		t.Fatalf("RunPodSandbox: %v", err)
	}
	t.Cleanup(func() { criconfigRemoveSandbox(t, rs, sandboxID) })
	status, err := rs.PodSandboxStatus(ctx, sandboxID, false)
	if err != nil {
		t.Fatal(err)
	}
	if r.podIP = status.GetStatus().GetNetwork().GetIp(); r.podIP == "" {
		t.Fatal("the sandbox has no IP")
	}

	var cleanup func()
	r.container, cleanup, err = criconfig.GenerateContainerConfig(ctx, &pod.Spec.Containers[0], pod, 0, criconfig.ContainerOptions{
		PodIP: r.podIP, PodIPs: []string{r.podIP}, HostIPs: []string{"127.0.0.1"}, NodeName: "e2e-node",
		ImageRef: image.GetImage().GetId(), ImageUser: criconfigImageUser(image.GetImage()), ImageUserName: image.GetImage().GetUsername(),
		PodDir: podDir, PodLogsDir: logsDir, CPUCFSQuota: true, MachineMemory: 1 << 30,
	})
	if err != nil {
		t.Fatal(err)
	}
	if r.containerID, err = rs.CreateContainer(ctx, sandboxID, r.container, r.sandbox); err != nil {
		cleanup()
		t.Fatalf("CreateContainer: %v", err)
	}
	if err := rs.StartContainer(ctx, r.containerID); err != nil {
		t.Fatalf("StartContainer: %v", err)
	}
	return r
}

func ptrInt64(v int64) *int64 { return &v }
func ptrBool(v bool) *bool    { return &v }

func criconfigTestPod(suffix string) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: "criconfig-" + suffix, Namespace: "nodelet-e2e-criconfig-" + suffix, UID: types.UID("e2e-criconfig-" + suffix),
			Labels: map[string]string{"test": "criconfig"},
		},
		Spec: v1.PodSpec{
			TerminationGracePeriodSeconds: new(int64),
			Containers: []v1.Container{{
				Name:    "main",
				Image:   criconfigBusybox,
				Command: []string{"sh", "-c"},
				Env: []v1.EnvVar{
					{Name: "POD_NAME", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
					{Name: "POD_IP", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
					{Name: "NODE", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}},
					{Name: "GREETING", Value: "hello $(POD_NAME)"},
				},
				TerminationMessagePath:   "/dev/termination-log",
				TerminationMessagePolicy: v1.TerminationMessageReadFile,
			}},
		},
	}
}

func criconfigImageUser(image *runtimeapi.Image) *int64 {
	if image.GetUid() == nil {
		return nil
	}
	uid := image.GetUid().GetValue()
	return &uid
}

func criconfigTerminationPath(t *testing.T, config *runtimeapi.ContainerConfig) string {
	t.Helper()
	for _, m := range config.Mounts {
		if m.ContainerPath == "/dev/termination-log" {
			return m.HostPath
		}
	}
	t.Fatal("no termination-message mount")
	return ""
}

// criconfigWaitForFile polls path until it contains want.
func criconfigWaitForFile(t *testing.T, path, want string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		data, err := os.ReadFile(path)
		if err == nil && strings.Contains(string(data), want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: no %q after %v (content %q, %v)", path, want, d, data, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// criconfigRemoveSandbox stops and removes the sandbox, which takes its containers with it.
func criconfigRemoveSandbox(t *testing.T, rs internalapi.RuntimeService, id string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := rs.StopPodSandbox(ctx, id); err != nil {
		t.Errorf("StopPodSandbox: %v", err)
	}
	if err := rs.RemovePodSandbox(ctx, id); err != nil {
		t.Errorf("RemovePodSandbox: %v", err)
	}
}
