//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
)

func TestClusterNodeReadyWithLeaseAndTrueStatus(t *testing.T) {
	c := startClusterNode(t, clusterOptions{})
	took := eventually(t, 10*time.Second, "node Ready", func() error { return c.nodeReady(t) })
	readyAfter := time.Since(c.started)
	t.Logf("node Ready %v after nodelet started (%v after the test began waiting)", readyAfter, took)
	if readyAfter > 2*time.Second {
		t.Errorf("node Ready after %v, want within 2s", readyAfter)
	}
	var lease *coordinationv1.Lease
	leaseAfter := eventually(t, 2*time.Second, "node lease", func() (err error) {
		lease, err = c.admin.CoordinationV1().Leases("kube-node-lease").Get(context.Background(), c.name, metav1.GetOptions{})
		return err
	})
	t.Logf("lease %v after Ready", leaseAfter)
	node, _ := c.node(t)
	if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity != c.name || len(lease.OwnerReferences) != 1 ||
		lease.OwnerReferences[0].Kind != "Node" || lease.OwnerReferences[0].UID != node.UID {
		t.Errorf("lease %+v, want held by the node and owned by it", lease)
	}
	checkNodeObject(t, node, c.name, c.apiPort)
}

// checkNodeObject compares the Node's fields with what this machine really is.
func checkNodeObject(t *testing.T, node *v1.Node, name string, port int) {
	t.Helper()
	for k, want := range map[string]string{"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64", "beta.kubernetes.io/os": "linux"} {
		if node.Labels[k] != want {
			t.Errorf("label %s=%q, want %q", k, node.Labels[k], want)
		}
	}
	info := node.Status.NodeInfo
	bootID, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	kernel, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	if info.BootID != strings.TrimSpace(string(bootID)) || info.KernelVersion != strings.TrimSpace(string(kernel)) {
		t.Errorf("nodeInfo boot ID %q kernel %q, want %q %q", info.BootID, info.KernelVersion, bootID, kernel)
	}
	if info.KubeletVersion != "v1.37.2" || !strings.HasPrefix(info.ContainerRuntimeVersion, "containerd://1.") ||
		info.OperatingSystem != "linux" || info.Architecture != "amd64" || !strings.Contains(info.OSImage, "Debian") {
		t.Errorf("nodeInfo %+v", info)
	}
	cpu := node.Status.Capacity[v1.ResourceCPU]
	mem := node.Status.Capacity[v1.ResourceMemory]
	pods := node.Status.Capacity[v1.ResourcePods]
	if cpu.Value() < 1 || mem.Value() < 1<<30 || pods.Value() != 110 {
		t.Errorf("capacity %v", node.Status.Capacity)
	}
	allocMem := node.Status.Allocatable[v1.ResourceMemory]
	// evictionHard memory.available<100Mi by default.
	if diff := mem.Value() - allocMem.Value(); diff != 100<<20 {
		t.Errorf("allocatable memory %v = capacity %v - %d, want capacity - 100Mi", allocMem.String(), mem.String(), diff)
	}
	if _, ok := node.Status.Capacity[v1.ResourceEphemeralStorage]; !ok {
		t.Errorf("no ephemeral-storage capacity")
	}
	var internal, hostname bool
	for _, a := range node.Status.Addresses {
		internal = internal || (a.Type == v1.NodeInternalIP && a.Address != "")
		hostname = hostname || (a.Type == v1.NodeHostName && a.Address == name)
	}
	if !internal || !hostname {
		t.Errorf("addresses %v, want an InternalIP and the Hostname", node.Status.Addresses)
	}
	if node.Status.DaemonEndpoints.KubeletEndpoint.Port != int32(port) {
		t.Errorf("daemonEndpoints %+v", node.Status.DaemonEndpoints)
	}
	if len(node.Status.Images) == 0 {
		t.Errorf("no images in node status")
	}
	want := map[v1.NodeConditionType]string{
		v1.NodeReady: "KubeletReady", v1.NodeMemoryPressure: "KubeletHasSufficientMemory",
		v1.NodeDiskPressure: "KubeletHasNoDiskPressure", v1.NodePIDPressure: "KubeletHasSufficientPID",
	}
	for _, cond := range node.Status.Conditions {
		if r, ok := want[cond.Type]; ok && cond.Reason == r {
			delete(want, cond.Type)
		}
	}
	if len(want) > 0 {
		t.Errorf("conditions %v lack %v", node.Status.Conditions, want)
	}
}

func TestClusterDeploymentBecomesAvailableAndRolls(t *testing.T) {
	c := startClusterNode(t, clusterOptions{})
	eventually(t, 10*time.Second, "node Ready", func() error { return c.nodeReady(t) })
	ctx := context.Background()
	pod := c.testPod("web")
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: c.namespace},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](3),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Template: v1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: pod.Labels}, Spec: pod.Spec},
		},
	}
	dep.Spec.Template.Spec.Containers[0].ReadinessProbe = &v1.Probe{
		ProbeHandler:  v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"true"}}},
		PeriodSeconds: 1,
	}
	// Through the scheduler: the replicas are placed by its node selector.
	dep.Spec.Template.Spec.NodeName = ""
	dep.Spec.Template.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": c.name}
	if _, err := c.admin.AppsV1().Deployments(c.namespace).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	available := func(generation int64) func() error {
		return func() error {
			d, err := c.admin.AppsV1().Deployments(c.namespace).Get(ctx, "web", metav1.GetOptions{})
			if err != nil {
				return err
			}
			s := d.Status
			if s.ObservedGeneration < generation || s.UpdatedReplicas != 3 || s.AvailableReplicas != 3 || s.Replicas != 3 {
				return fmt.Errorf("status %+v", s)
			}
			return nil
		}
	}
	took := eventually(t, 60*time.Second, "deployment available", available(1))
	t.Logf("3 replicas available in %v", took)
	old := c.podUIDs(t, "app=web")

	patch := `{"spec":{"template":{"spec":{"containers":[{"name":"main","env":[{"name":"VERSION","value":"2"}]}]}}}}`
	if _, err := c.admin.AppsV1().Deployments(c.namespace).Patch(ctx, "web", types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	took = eventually(t, 90*time.Second, "rolling update complete", func() error {
		if err := available(2)(); err != nil {
			return err
		}
		now := c.podUIDs(t, "app=web")
		for uid := range now {
			if old[uid] {
				return fmt.Errorf("old pod %s still there", uid)
			}
		}
		if len(now) != 3 {
			return fmt.Errorf("%d pods", len(now))
		}
		return nil
	})
	t.Logf("rolling update done in %v", took)
}

// podUIDs lists the UIDs of the test namespace's pods matching selector.
func (c *clusterNode) podUIDs(t *testing.T, selector string) map[types.UID]bool {
	t.Helper()
	list, err := c.admin.CoreV1().Pods(c.namespace).List(context.Background(), metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		t.Fatal(err)
	}
	out := map[types.UID]bool{}
	for _, p := range list.Items {
		out[p.UID] = true
	}
	return out
}

func TestClusterDeletePodRunsPreStopThenRemovesTheObject(t *testing.T) {
	c := startClusterNode(t, clusterOptions{})
	eventually(t, 10*time.Second, "node Ready", func() error { return c.nodeReady(t) })
	hostDir := t.TempDir()
	pod := c.testPod("graceful", "sh", "-c", "trap 'echo term >> /host/log; exit 0' TERM; while true; do sleep 1; done")
	pod.Spec.Volumes = []v1.Volume{{Name: "host", VolumeSource: v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: hostDir}}}}
	pod.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "host", MountPath: "/host"}}
	pod.Spec.Containers[0].Lifecycle = &v1.Lifecycle{PreStop: &v1.LifecycleHandler{
		Exec: &v1.ExecAction{Command: []string{"sh", "-c", "echo prestop >> /host/log; sleep 1"}},
	}}
	c.createPod(t, pod)
	eventually(t, 20*time.Second, "pod Ready", func() error { return c.podReady("graceful") })

	start := time.Now()
	if err := c.admin.CoreV1().Pods(c.namespace).Delete(context.Background(), "graceful", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	took := eventually(t, 30*time.Second, "pod object gone", func() error { return c.podGone("graceful") })
	t.Logf("deleted pod gone from the API %v after the delete", took)
	log, _ := os.ReadFile(filepath.Join(hostDir, "log"))
	if string(log) != "prestop\nterm\n" {
		t.Errorf("container saw %q, want preStop then SIGTERM", log)
	}
	if time.Since(start) < time.Second {
		t.Errorf("pod gone in %v, before its 1 s preStop could finish", time.Since(start))
	}
	if n := c.runningContainers(t, "graceful"); n != 0 {
		t.Errorf("%d containers still running after the object is gone", n)
	}
}

func TestClusterForceDeletionStopsThePod(t *testing.T) {
	c := startClusterNode(t, clusterOptions{})
	eventually(t, 10*time.Second, "node Ready", func() error { return c.nodeReady(t) })
	c.createPod(t, c.testPod("forced"))
	eventually(t, 20*time.Second, "pod Ready", func() error { return c.podReady("forced") })
	zero := int64(0)
	if err := c.admin.CoreV1().Pods(c.namespace).Delete(context.Background(), "forced", metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	took := eventually(t, 20*time.Second, "containers of the force-deleted pod stopped", func() error {
		if n := c.runningContainers(t, "forced"); n != 0 {
			return fmt.Errorf("%d running", n)
		}
		return nil
	})
	t.Logf("force-deleted pod stopped in %v", took)
}

// runningContainers counts the running containers of a pod of this node in containerd.
func (c *clusterNode) runningContainers(t *testing.T, pod string) int {
	t.Helper()
	list, err := c.rs.ListContainers(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, ctr := range list {
		if ctr.Labels["io.kubernetes.pod.name"] == pod && ctr.Labels["io.kubernetes.pod.namespace"] == c.namespace && ctr.State == 1 {
			n++
		}
	}
	return n
}

func TestClusterAdmissionDeadlineAndTerminalPhases(t *testing.T) {
	c := startClusterNode(t, clusterOptions{})
	eventually(t, 10*time.Second, "node Ready", func() error { return c.nodeReady(t) })
	node, _ := c.node(t)

	big := c.testPod("too-big")
	cpu := node.Status.Allocatable[v1.ResourceCPU]
	cpu.Add(resource.MustParse("1"))
	// Bound directly (testPod does so): the scheduler would never place it here.
	big.Spec.Containers[0].Resources.Requests = v1.ResourceList{v1.ResourceCPU: cpu}
	c.createPod(t, big)

	deadline := c.testPod("deadline")
	deadline.Spec.ActiveDeadlineSeconds = ptr.To[int64](2)
	c.createPod(t, deadline)

	done := c.testPod("done", "sh", "-c", "exit 0")
	done.Spec.RestartPolicy = v1.RestartPolicyNever
	c.createPod(t, done)

	failed := c.testPod("fails", "sh", "-c", "exit 3")
	failed.Spec.RestartPolicy = v1.RestartPolicyOnFailure
	failed.Spec.ActiveDeadlineSeconds = ptr.To[int64](4)
	c.createPod(t, failed)

	phase := func(name string, want v1.PodPhase, reason string) func() error {
		return func() error {
			p, err := c.getPod(name)
			if err != nil {
				return err
			}
			if p.Status.Phase != want || p.Status.Reason != reason {
				return fmt.Errorf("phase %s reason %q message %q", p.Status.Phase, p.Status.Reason, p.Status.Message)
			}
			return nil
		}
	}
	eventually(t, 20*time.Second, "too-big Failed/OutOfcpu", phase("too-big", v1.PodFailed, "OutOfcpu"))
	eventually(t, 20*time.Second, "deadline Failed/DeadlineExceeded", phase("deadline", v1.PodFailed, "DeadlineExceeded"))
	eventually(t, 20*time.Second, "done Succeeded", phase("done", v1.PodSucceeded, ""))
	eventually(t, 30*time.Second, "fails Failed/DeadlineExceeded", phase("fails", v1.PodFailed, "DeadlineExceeded"))
	if p, _ := c.getPod("too-big"); !strings.HasPrefix(p.Status.Message, "Pod was rejected: Node didn't have enough resource: cpu") {
		t.Errorf("rejection message %q", p.Status.Message)
	}
	// Terminal pods stay terminal, also across a nodelet restart.
	c.restart(t, false)
	time.Sleep(3 * time.Second)
	eventually(t, 5*time.Second, "done still Succeeded", phase("done", v1.PodSucceeded, ""))
	eventually(t, 5*time.Second, "deadline still Failed", phase("deadline", v1.PodFailed, "DeadlineExceeded"))
	if n := c.runningContainers(t, "done") + c.runningContainers(t, "deadline"); n != 0 {
		t.Errorf("%d containers of terminal pods run again after the restart", n)
	}
}

func TestClusterStaticPodHasMirrorPod(t *testing.T) {
	c := startClusterNode(t, clusterOptions{})
	eventually(t, 10*time.Second, "node Ready", func() error { return c.nodeReady(t) })
	manifest := func(version string) string {
		return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: static
  namespace: %s
  labels: {version: "%s"}
spec:
  containers:
  - name: main
    image: docker.io/library/busybox:1.36
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"]
`, c.namespace, version)
	}
	c.writeManifest(t, "static.yaml", manifest("1"))
	mirrorName := "static-" + c.name
	var first *v1.Pod
	eventually(t, 20*time.Second, "mirror pod running", func() error {
		p, err := c.getPod(mirrorName)
		if err != nil {
			return err
		}
		if p.Status.Phase != v1.PodRunning {
			return fmt.Errorf("mirror phase %q", p.Status.Phase)
		}
		first = p
		return nil
	})
	if first.Annotations["kubernetes.io/config.mirror"] == "" || first.Annotations["kubernetes.io/config.source"] != "file" ||
		len(first.OwnerReferences) != 1 || first.OwnerReferences[0].Kind != "Node" || first.OwnerReferences[0].Name != c.name {
		t.Errorf("mirror pod metadata: annotations %v owners %v", first.Annotations, first.OwnerReferences)
	}
	containerIDs := c.containerIDs(t, mirrorName)

	if err := c.admin.CoreV1().Pods(c.namespace).Delete(context.Background(), mirrorName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	took := eventually(t, 20*time.Second, "mirror pod re-created", func() error {
		p, err := c.getPod(mirrorName)
		if err != nil {
			return err
		}
		if p.UID == first.UID || p.DeletionTimestamp != nil {
			return fmt.Errorf("still the deleted mirror")
		}
		return nil
	})
	t.Logf("deleted mirror pod re-created in %v", took)
	if got := c.containerIDs(t, mirrorName); !sameIDs(got, containerIDs) {
		t.Errorf("deleting the mirror pod touched the static pod's containers: %v -> %v", containerIDs, got)
	}

	c.writeManifest(t, "static.yaml", manifest("2"))
	var second *v1.Pod
	eventually(t, 30*time.Second, "mirror pod replaced for the new manifest", func() error {
		p, err := c.getPod(mirrorName)
		if err != nil {
			return err
		}
		if p.Labels["version"] != "2" || p.Status.Phase != v1.PodRunning {
			return fmt.Errorf("mirror version %q phase %q", p.Labels["version"], p.Status.Phase)
		}
		second = p
		return nil
	})
	if second.Annotations["kubernetes.io/config.mirror"] == first.Annotations["kubernetes.io/config.mirror"] {
		t.Errorf("the edited manifest's mirror pod still names the first static pod %q", first.Annotations["kubernetes.io/config.mirror"])
	}
	if err := os.Remove(filepath.Join(c.manifests, "static.yaml")); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "mirror pod gone with its manifest", func() error { return c.podGone(mirrorName) })

	// The same manifest written again is the same static pod (its UID is a hash of the
	// content): upstream's kubelet restarts it under that UID and creates its mirror pod
	// again. The old container (or its log file) is still there, so the restart count
	// carries on from it, as upstream counts restarts.
	c.writeManifest(t, "static.yaml", manifest("2"))
	var back *v1.Pod
	eventually(t, 30*time.Second, "mirror pod back for the rewritten manifest", func() error {
		p, err := c.getPod(mirrorName)
		if err != nil {
			return err
		}
		if p.Status.Phase != v1.PodRunning || len(p.Status.ContainerStatuses) != 1 || p.Status.ContainerStatuses[0].State.Running == nil {
			return fmt.Errorf("mirror phase %q", p.Status.Phase)
		}
		back = p
		return nil
	})
	if got, want := back.Annotations["kubernetes.io/config.mirror"], second.Annotations["kubernetes.io/config.mirror"]; got != want {
		t.Errorf("the rewritten manifest's mirror pod names static pod %q, want %q (the same content, the same pod)", got, want)
	}
	if n := back.Status.ContainerStatuses[0].RestartCount; n != 1 {
		t.Errorf("restart count after the manifest came back: %d, want 1 (one more than the old container's)", n)
	}
}

// containerIDs lists the IDs of a pod's running containers.
func (c *clusterNode) containerIDs(t *testing.T, pod string) []string {
	t.Helper()
	list, err := c.rs.ListContainers(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, ctr := range list {
		if ctr.Labels["io.kubernetes.pod.name"] == pod && ctr.State == 1 {
			ids = append(ids, ctr.Id)
		}
	}
	return ids
}

func sameIDs(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	seen := map[string]bool{}
	for _, id := range a {
		seen[id] = true
	}
	for _, id := range b {
		if !seen[id] {
			return false
		}
	}
	return true
}

func TestClusterContainerEventsReachTheAPI(t *testing.T) {
	c := startClusterNode(t, clusterOptions{})
	eventually(t, 10*time.Second, "node Ready", func() error { return c.nodeReady(t) })
	pod := c.createPod(t, c.testPod("events"))
	eventually(t, 20*time.Second, "pod Ready", func() error { return c.podReady("events") })
	eventually(t, 20*time.Second, "Pulled, Created and Started events on the container", func() error {
		list, err := c.admin.CoreV1().Events(c.namespace).List(context.Background(), metav1.ListOptions{
			FieldSelector: "involvedObject.uid=" + string(pod.UID),
		})
		if err != nil {
			return err
		}
		want := map[string]bool{"Pulled": true, "Created": true, "Started": true}
		for _, e := range list.Items {
			if e.InvolvedObject.FieldPath == "spec.containers{main}" && e.Source.Component == "kubelet" && e.Source.Host == c.name {
				delete(want, e.Reason)
			}
		}
		if len(want) > 0 {
			return fmt.Errorf("missing %v among %d events", want, len(list.Items))
		}
		return nil
	})
	eventually(t, 10*time.Second, "node Starting event", func() error {
		list, err := c.admin.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{
			FieldSelector: "involvedObject.kind=Node,involvedObject.name=" + c.name + ",reason=Starting",
		})
		if err != nil {
			return err
		}
		if len(list.Items) == 0 {
			return fmt.Errorf("none")
		}
		return nil
	})
}

func TestClusterEnvFromSecretWaitsForTheKey(t *testing.T) {
	c := startClusterNode(t, clusterOptions{})
	eventually(t, 10*time.Second, "node Ready", func() error { return c.nodeReady(t) })
	ctx := context.Background()
	secret := &v1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "creds", Namespace: c.namespace}, StringData: map[string]string{"user": "admin"}}
	if _, err := c.admin.CoreV1().Secrets(c.namespace).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	config := &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings", Namespace: c.namespace}, Data: map[string]string{"MODE": "fast"}}
	if _, err := c.admin.CoreV1().ConfigMaps(c.namespace).Create(ctx, config, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := c.testPod("env")
	pod.Spec.Containers[0].Env = []v1.EnvVar{
		{Name: "PASSWORD", ValueFrom: &v1.EnvVarSource{SecretKeyRef: &v1.SecretKeySelector{
			LocalObjectReference: v1.LocalObjectReference{Name: "creds"}, Key: "password"}}},
		{Name: "NODE", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}},
		{Name: "OPTIONAL", ValueFrom: &v1.EnvVarSource{ConfigMapKeyRef: &v1.ConfigMapKeySelector{
			LocalObjectReference: v1.LocalObjectReference{Name: "absent"}, Key: "x", Optional: ptr.To(true)}}},
	}
	pod.Spec.Containers[0].EnvFrom = []v1.EnvFromSource{{Prefix: "CFG_", ConfigMapRef: &v1.ConfigMapEnvSource{
		LocalObjectReference: v1.LocalObjectReference{Name: "settings"}}}}
	c.createPod(t, pod)
	eventually(t, 20*time.Second, "CreateContainerConfigError naming the missing key", func() error {
		p, err := c.getPod("env")
		if err != nil {
			return err
		}
		for _, cs := range p.Status.ContainerStatuses {
			if w := cs.State.Waiting; w != nil && w.Reason == "CreateContainerConfigError" &&
				strings.Contains(w.Message, "couldn't find key password in Secret "+c.namespace+"/creds") {
				return nil
			}
		}
		return fmt.Errorf("container statuses %+v", p.Status.ContainerStatuses)
	})
	secret.StringData["password"] = "s3cret"
	if _, err := c.admin.CoreV1().Secrets(c.namespace).Update(ctx, secret, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	took := eventually(t, 60*time.Second, "pod Running once the key exists", func() error { return c.podReady("env") })
	t.Logf("running %v after the key was added", took)
	env := c.execIn(t, "env", "env")
	for _, want := range []string{"PASSWORD=s3cret", "NODE=" + c.name, "CFG_MODE=fast", "KUBERNETES_SERVICE_HOST=10.96.0.1", "KUBERNETES_SERVICE_PORT=443"} {
		if !strings.Contains(env, want+"\n") {
			t.Errorf("container environment lacks %s:\n%s", want, env)
		}
	}
	if strings.Contains(env, "OPTIONAL=") {
		t.Errorf("an optional variable from a missing config map was set:\n%s", env)
	}
}

// execIn runs a command in a pod's first running container through the CRI (the kubelet
// API on 10250 is not there yet) and returns its output.
func (c *clusterNode) execIn(t *testing.T, pod string, cmd ...string) string {
	t.Helper()
	ids := c.containerIDs(t, pod)
	if len(ids) == 0 {
		t.Fatalf("no running container in pod %s", pod)
	}
	stdout, stderr, err := c.rs.ExecSync(context.Background(), ids[0], cmd, 10*time.Second)
	if err != nil {
		t.Fatalf("exec %v: %v\n%s", cmd, err, stderr)
	}
	return string(stdout)
}

func TestClusterNodeReRegistersWhenDeleted(t *testing.T) {
	c := startClusterNode(t, clusterOptions{})
	eventually(t, 10*time.Second, "node Ready", func() error { return c.nodeReady(t) })
	old, _ := c.node(t)
	if err := c.admin.CoreV1().Nodes().Delete(context.Background(), c.name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	took := eventually(t, 30*time.Second, "node registered again and Ready", func() error {
		n, err := c.node(t)
		if err != nil {
			return err
		}
		if n.UID == old.UID {
			return fmt.Errorf("still the old node")
		}
		return c.nodeReady(t)
	})
	t.Logf("re-registered in %v", took)
}

func TestClusterBootstrapJoinWritesClientCertificate(t *testing.T) {
	c := startClusterNode(t, clusterOptions{bootstrap: true})
	took := eventually(t, 30*time.Second, "node Ready after TLS bootstrap", func() error { return c.nodeReady(t) })
	t.Logf("bootstrapped and Ready in %v", took)
	certDir := ""
	for _, a := range c.args {
		if strings.HasPrefix(a, "--cert-dir=") {
			certDir = strings.TrimPrefix(a, "--cert-dir=")
		}
	}
	current := filepath.Join(certDir, "kubelet-client-current.pem")
	target, err := os.Readlink(current)
	if err != nil || !strings.HasPrefix(filepath.Base(target), "kubelet-client-") {
		t.Errorf("%s -> %q (%v), want a symlink to kubelet-client-<time>.pem", current, target, err)
	}
	kubeconfig, err := os.ReadFile(c.kubeconfig)
	if err != nil || !strings.Contains(string(kubeconfig), current) {
		t.Errorf("kubeconfig %s does not point at %s: %v\n%s", c.kubeconfig, current, err, kubeconfig)
	}
	csrs, err := c.admin.CertificatesV1().CertificateSigningRequests().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	approved := false
	for _, csr := range csrs.Items {
		if csr.Spec.Username == "system:bootstrap:"+strings.Split(bootstrapTokenID(t), ".")[0] && len(csr.Status.Certificate) > 0 {
			approved = true
		}
	}
	if !approved {
		t.Errorf("no issued CSR from the bootstrap token")
	}
}

func bootstrapTokenID(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(cpDir(t), "bootstrap-token"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// controllerMarkedNotReady describes the node lifecycle controller's NodeNotReady event
// for c's node since since, or is "" when there is none within 20 s: the controller's
// event recorder may still be retrying events it could not write during an outage.
func controllerMarkedNotReady(t *testing.T, c *clusterNode, since time.Time) string {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(time.Second) {
		list, err := c.admin.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{
			FieldSelector: "involvedObject.kind=Node,involvedObject.name=" + c.name + ",reason=NodeNotReady",
		})
		if err != nil {
			continue
		}
		for _, e := range list.Items {
			if e.Source.Component == "node-controller" && !e.LastTimestamp.Time.Before(since.Truncate(time.Second)) {
				return fmt.Sprintf("%q at %v", e.Message, e.LastTimestamp.Time)
			}
		}
	}
	return ""
}

func nodeCondition(n *v1.Node, t v1.NodeConditionType) v1.NodeCondition {
	for _, c := range n.Status.Conditions {
		if c.Type == t {
			return c
		}
	}
	return v1.NodeCondition{}
}

// TestClusterBadKubeconfigIsOneClearLine: an untrusted server or rejected credentials stop
// nodelet at once with one error line naming the kubeconfig; an unreachable server is
// retried while nodelet keeps running.
func TestClusterBadKubeconfigIsOneClearLine(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.kubeconfig")
	controlPlane(t, "node-kubeconfig", "e2e-badcfg", good)
	body, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	otherCA, err := os.ReadFile(filepath.Join(cpDir(t), "pki", "front-proxy-ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.Load(body)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cfg.Clusters {
		c.CertificateAuthorityData, c.CertificateAuthority = otherCA, ""
	}
	wrongCA := filepath.Join(dir, "wrong-ca.kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, wrongCA); err != nil {
		t.Fatal(err)
	}
	for _, c := range cfg.Clusters {
		c.Server = "https://127.0.0.1:1" // nothing listens there
	}
	unreachable := filepath.Join(dir, "unreachable.kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, unreachable); err != nil {
		t.Fatal(err)
	}

	n := startNodelet(t, "--kubeconfig="+wrongCA, "--hostname-override=e2e-badcfg")
	code, err := n.waitExit(5 * time.Second)
	if err != nil || code != 1 {
		t.Fatalf("exit code %d (%v), want 1 at once", code, err)
	}
	out := n.out.String()
	want := "kubeconfig " + wrongCA + ": server https://127.0.0.1:6443: server certificate is not trusted"
	if !strings.Contains(out, want) {
		t.Errorf("output lacks %q:\n%s", want, out)
	}
	if n := strings.Count(out, "x509"); n != 1 {
		t.Errorf("x509 error reported %d times, want once:\n%s", n, out)
	}

	n = startNodelet(t, "--kubeconfig="+unreachable, "--hostname-override=e2e-badcfg")
	if err := n.waitLog(10*time.Second, "Unable to register node with API server"); err != nil {
		t.Fatal(err)
	}
	if _, err := n.waitExit(2 * time.Second); err == nil {
		t.Fatalf("nodelet exited with an unreachable API server:\n%s", n.out.String())
	}
	if code := n.healthz(); code != 200 {
		t.Errorf("/healthz %d while the API server is unreachable", code)
	}
}

// TestClusterReadinessGateTurnsReady: a pod with a readiness gate is Ready only once
// another controller sets the gate's condition, which the kubelet keeps.
func TestClusterReadinessGateTurnsReady(t *testing.T) {
	c := startClusterNode(t, clusterOptions{})
	eventually(t, 10*time.Second, "node Ready", func() error { return c.nodeReady(t) })
	pod := c.testPod("gated")
	pod.Spec.ReadinessGates = []v1.PodReadinessGate{{ConditionType: "example.com/ready"}}
	c.createPod(t, pod)
	eventually(t, 20*time.Second, "pod Running, gate unset", func() error {
		p, err := c.getPod("gated")
		if err != nil {
			return err
		}
		if p.Status.Phase != v1.PodRunning {
			return fmt.Errorf("phase %s", p.Status.Phase)
		}
		return nil
	})
	if err := c.podReady("gated"); err == nil {
		t.Fatal("pod Ready before its readiness gate is set")
	}
	patch := `{"status":{"conditions":[{"type":"example.com/ready","status":"True"}]}}`
	if _, err := c.admin.CoreV1().Pods(c.namespace).Patch(context.Background(), "gated", types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "status"); err != nil {
		t.Fatal(err)
	}
	took := eventually(t, 10*time.Second, "pod Ready after the gate", func() error { return c.podReady("gated") })
	t.Logf("Ready %v after the gate turned True", took)
	p, _ := c.getPod("gated")
	found := false
	for _, cond := range p.Status.Conditions {
		found = found || (cond.Type == "example.com/ready" && cond.Status == v1.ConditionTrue)
	}
	if !found {
		t.Errorf("the gate's condition was dropped: %+v", p.Status.Conditions)
	}
}

// TestClusterStatusOverwrittenIsReconciled: a status another client writes over the
// kubelet's is put back within the status manager's periodic pass (10 s), as upstream's
// reconcile does, though the kubelet's own status did not change meanwhile.
func TestClusterStatusOverwrittenIsReconciled(t *testing.T) {
	c := startClusterNode(t, clusterOptions{})
	eventually(t, 10*time.Second, "node Ready", func() error { return c.nodeReady(t) })
	c.createPod(t, c.testPod("overwritten"))
	eventually(t, 20*time.Second, "pod Ready", func() error { return c.podReady("overwritten") })
	time.Sleep(12 * time.Second) // past a periodic pass that found the status consistent
	patch := `{"status":{"conditions":[{"type":"Ready","status":"False","reason":"Overwritten"}]}}`
	if _, err := c.admin.CoreV1().Pods(c.namespace).Patch(context.Background(), "overwritten", types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "status"); err != nil {
		t.Fatal(err)
	}
	if err := c.podReady("overwritten"); err == nil {
		t.Fatal("the overwrite did not take")
	}
	took := eventually(t, 30*time.Second, "pod Ready again", func() error { return c.podReady("overwritten") })
	t.Logf("Ready again %v after the overwrite", took)
}

// TestClusterAPIServerOutage stops kube-apiserver for a minute while pods run: nothing
// restarts, and once it is back the node is Ready and statuses converge within 10 s.
func TestClusterAPIServerOutage(t *testing.T) {
	// The controller manager's informers can lag for a minute or more after the outage
	// (seen: its CSR approver, so a later test's TLS bootstrap timed out): the tests after
	// this one get a controller manager and scheduler with fresh caches.
	t.Cleanup(func() { controlPlane(t, "restart-controllers") })
	c := startClusterNode(t, clusterOptions{})
	eventually(t, 10*time.Second, "node Ready", func() error { return c.nodeReady(t) })
	c.createPod(t, c.testPod("steady"))
	flag := t.TempDir()
	exiter := c.testPod("exiter", "sh", "-c", "while [ ! -e /flag/exit ]; do sleep 0.2; done; exit 7")
	exiter.Spec.RestartPolicy = v1.RestartPolicyNever
	exiter.Spec.Volumes = []v1.Volume{{Name: "flag", VolumeSource: v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: flag}}}}
	exiter.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "flag", MountPath: "/flag"}}
	c.createPod(t, exiter)
	eventually(t, 20*time.Second, "pods Ready", func() error {
		if err := c.podReady("steady"); err != nil {
			return err
		}
		return c.podReady("exiter")
	})
	before := c.containerIDs(t, "steady")
	node, _ := c.node(t)
	readySince := nodeCondition(node, v1.NodeReady).LastTransitionTime

	controlPlane(t, "stop-apiserver")
	stopped := true
	defer func() {
		if stopped {
			controlPlane(t, "start-apiserver")
		}
	}()
	outage := 60 * time.Second
	if s := os.Getenv("NODELET_E2E_OUTAGE"); s != "" {
		outage, _ = time.ParseDuration(s)
	}
	time.Sleep(outage / 2)
	if err := os.WriteFile(filepath.Join(flag, "exit"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	time.Sleep(outage / 2)
	if c.healthz() != 200 {
		t.Errorf("nodelet unhealthy during the API outage")
	}
	controlPlane(t, "start-apiserver")
	stopped = false
	back := time.Now()

	took := eventually(t, 10*time.Second, "exited container's status in the API", func() error {
		p, err := c.getPod("exiter")
		if err != nil {
			return err
		}
		if p.Status.Phase != v1.PodFailed {
			return fmt.Errorf("phase %s", p.Status.Phase)
		}
		return nil
	})
	t.Logf("status converged %v after the API server came back", took)
	eventually(t, 10*time.Second, "node Ready", func() error { return c.nodeReady(t) })
	node, _ = c.node(t)
	if got := nodeCondition(node, v1.NodeReady); !got.LastTransitionTime.Equal(&readySince) {
		// The node lifecycle controller may judge the node from its own stale view of the
		// lease as the API server comes back, and mark it Unknown before it sees the
		// renewal (upstream's kubelet meets the same race); nodelet then posts Ready
		// again. Only a change without the controller's NodeNotReady is nodelet's doing.
		if by := controllerMarkedNotReady(t, c, back.Add(-outage)); by != "" {
			t.Logf("the node lifecycle controller marked the node not ready as the API server came back (%s); nodelet posted Ready again at %v", by, got.LastTransitionTime)
		} else {
			t.Errorf("Ready condition changed during the outage (transition at %v, reason %s, outage ended %v)", got.LastTransitionTime, got.Reason, back)
		}
	}
	if after := c.containerIDs(t, "steady"); !sameIDs(before, after) {
		t.Errorf("steady pod's containers changed across the outage: %v -> %v", before, after)
	}
	if p, _ := c.getPod("steady"); p.Status.ContainerStatuses[0].RestartCount != 0 {
		t.Errorf("steady pod restarted %d times", p.Status.ContainerStatuses[0].RestartCount)
	}
}
