//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/pkg/runtime/cri"
	"github.com/nodelet/nodelet/test/internal/testpods"
)

// nodeSet is N nodelet nodes started by hack/nodes.sh, each on a containerd of its own,
// under a name prefix of their own.
type nodeSet struct {
	prefix, dir, bin string
	names            []string
	endpoints        []string
	// notReadyPods are the pods a failed wait found not Ready (describeNamespace).
	notReadyPods []string
}

// startNodeSet runs `hack/nodes.sh up n` and takes the nodes down when the test ends.
func startNodeSet(t *testing.T, n int) *nodeSet {
	t.Helper()
	id := string(uuid.NewUUID())[:6]
	s := &nodeSet{prefix: "e2e-mn-" + id, dir: t.TempDir(), bin: nodeletBin(t)}
	t.Cleanup(func() {
		if t.Failed() {
			s.dumpLogs(t, s.notReadyPods)
		}
		if out, err := s.script("down"); err != nil {
			t.Logf("hack/nodes.sh down: %v\n%s", err, out)
		}
	})
	out, err := s.script("up", fmt.Sprint(n))
	if err != nil {
		t.Fatalf("hack/nodes.sh up %d: %v\n%s", n, err, out)
	}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 {
			t.Fatalf("hack/nodes.sh up printed %q, not NAME PORT ENDPOINT", line)
		}
		s.names, s.endpoints = append(s.names, f[0]), append(s.endpoints, f[2])
	}
	if len(s.names) != n {
		t.Fatalf("hack/nodes.sh up %d printed %d nodes", n, len(s.names))
	}
	return s
}

// script runs hack/nodes.sh with the set's prefix and directories; stdout is returned,
// stderr too on failure.
func (s *nodeSet) script(args ...string) (string, error) {
	cmd := exec.Command(filepath.Join(repoRoot(), "hack", "nodes.sh"), args...)
	cmd.Env = append(os.Environ(), "NODELET_NODES_PREFIX="+s.prefix, "NODELET_NODES_DIR="+s.dir,
		"NODELET_NODES_RUN=/run/nodelet-e2e-mn", "NODELET_NODES_SUBNET=10.121", "NODELET_NODES_PORT=12500",
		"NODELET_BIN="+s.bin)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out) + stderr.String(), err
	}
	return string(out), nil
}

// dumpLogs logs the end of each node's log and, first, its lines about the pods named
// (the pods a failed wait was for), which the end alone rarely shows.
func (s *nodeSet) dumpLogs(t *testing.T, pods []string) {
	for _, name := range s.names {
		data, _ := os.ReadFile(filepath.Join(s.dir, name, "nodelet.log"))
		if about := linesAbout(string(data), pods, 60); about != "" {
			t.Logf("%s: nodelet.log about %v:\n%s", name, pods, about)
		}
		if len(data) > 8000 {
			data = data[len(data)-8000:]
		}
		t.Logf("%s: end of nodelet.log:\n%s", name, data)
	}
}

// linesAbout returns the last max lines of log that name one of pods.
func linesAbout(log string, pods []string, max int) string {
	var out []string
	for _, line := range strings.Split(log, "\n") {
		if slices.ContainsFunc(pods, func(p string) bool { return strings.Contains(line, p) }) {
			out = append(out, line)
		}
	}
	if len(out) > max {
		out = out[len(out)-max:]
	}
	return strings.Join(out, "\n")
}

// describeNamespace logs the namespace's pods (node, phase, readiness, why a container
// waits) and its latest events, and records the live pods not Ready for dumpLogs.
func (s *nodeSet) describeNamespace(t *testing.T, admin kubernetes.Interface, ns string) {
	ctx := context.Background()
	pods, err := admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Logf("listing pods: %v", err)
		return
	}
	for _, p := range pods.Items {
		t.Logf("pod %s on %q: %s", p.Name, p.Spec.NodeName, podSummary(&p))
		if p.DeletionTimestamp == nil && !podIsReady(&p) {
			s.notReadyPods = append(s.notReadyPods, p.Name)
		}
	}
	events, err := admin.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Logf("listing events: %v", err)
		return
	}
	// The pods' routine events (Pulled, Created, Started …) say nothing a failure needs.
	items := slices.DeleteFunc(events.Items, func(e v1.Event) bool { return e.Type == v1.EventTypeNormal && e.InvolvedObject.Kind == "Pod" })
	slices.SortFunc(items, func(a, b v1.Event) int { return a.LastTimestamp.Compare(b.LastTimestamp.Time) })
	if len(items) > 40 {
		items = items[len(items)-40:]
	}
	for _, e := range items {
		t.Logf("event %s %s/%s %s: %s (x%d)", e.LastTimestamp.Format(time.TimeOnly), e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Reason, e.Message, e.Count)
	}
	logNodes(t, admin)
}

// logNodes logs every Node of the cluster: its zone, Ready condition and taints, which
// decide where pods go and whether the node lifecycle controller evicts.
func logNodes(t *testing.T, admin kubernetes.Interface) {
	nodes, err := admin.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Logf("listing nodes: %v", err)
		return
	}
	for _, n := range nodes.Items {
		ready := "none"
		for _, c := range n.Status.Conditions {
			if c.Type == v1.NodeReady {
				ready = string(c.Status)
			}
		}
		var taints []string
		for _, taint := range n.Spec.Taints {
			taints = append(taints, taint.ToString())
		}
		t.Logf("node %s zone %q Ready %s taints %v", n.Name, n.Labels[v1.LabelTopologyZone], ready, taints)
	}
}

func podSummary(p *v1.Pod) string {
	var b strings.Builder
	fmt.Fprintf(&b, "phase %s, ready %v", p.Status.Phase, podIsReady(p))
	if p.DeletionTimestamp != nil {
		fmt.Fprintf(&b, ", deleting since %s", p.DeletionTimestamp.Format(time.TimeOnly))
	}
	for _, c := range p.Status.Conditions {
		if c.Status != v1.ConditionTrue {
			fmt.Fprintf(&b, ", %s=%s %s %s", c.Type, c.Status, c.Reason, c.Message)
		}
	}
	for _, c := range p.Status.ContainerStatuses {
		if w := c.State.Waiting; w != nil {
			fmt.Fprintf(&b, ", %s waiting: %s %s", c.Name, w.Reason, w.Message)
		}
	}
	return b.String()
}

// TestClusterThreeNodes: a Deployment spread over three nodelet nodes; one node's nodelet
// stops, the node lifecycle controller marks the node unreachable and its pods (with a
// 5 s toleration of that) are recreated on the other two, though the cluster also holds
// dead nodes of no set; the nodelet comes back, the
// node is Ready again, its evicted pods are cleaned up, and a pod that tolerates the
// outage keeps its container, never restarted.
func TestClusterThreeNodes(t *testing.T) {
	admin := adminClient(t)
	ctx := context.Background()
	s := startNodeSet(t, 3)
	ns := s.prefix
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			s.describeNamespace(t, admin, ns)
		}
		_ = admin.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
	})
	eventually(t, time.Minute, "default service account", func() error {
		_, err := admin.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		return err
	})
	addNotReadyNodes(t, admin, s.prefix+"-gone", 3)
	down := s.names[1]

	survivor := multiNodePod(ns, "survivor", down)
	if _, err := admin.CoreV1().Pods(ns).Create(ctx, survivor, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	took := createSpreadDeployment(t, admin, ns, s.prefix, 30)
	t.Logf("30 replicas available on 3 nodes in %v", took)
	perNode := podsPerNode(t, admin, ns, "app=spread")
	for _, name := range s.names {
		if len(perNode[name]) != 10 {
			t.Fatalf("replicas per node %v: want 10 on each", counts(perNode))
		}
	}
	before := survivorContainer(t, admin, ns)

	stopped := time.Now()
	if out, err := s.script("stop", "2"); err != nil {
		t.Fatalf("hack/nodes.sh stop 2: %v\n%s", err, out)
	}
	notReady := eventually(t, 2*time.Minute, down+" not Ready", func() error { return nodeReadyIs(admin, down, v1.ConditionUnknown) })
	t.Logf("%s marked not Ready %v after its nodelet stopped", down, notReady)
	evicted := perNode[down]
	eventually(t, 2*time.Minute, "30 replicas Ready on the other nodes", func() error {
		return spreadRecovered(admin, ns, down)
	})
	t.Logf("30 replicas Ready again on the other two nodes %v after the stop", time.Since(stopped))

	restarted := time.Now()
	if out, err := s.script("start", "2"); err != nil {
		t.Fatalf("hack/nodes.sh start 2: %v\n%s", err, out)
	}
	t.Logf("%s Ready again %v after its nodelet started", down, time.Since(restarted))
	eventually(t, time.Minute, "the evicted pods gone from the API", func() error {
		for _, name := range evicted {
			if _, err := admin.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{}); err == nil {
				return fmt.Errorf("pod %s still there", name)
			}
		}
		return nil
	})
	eventually(t, time.Minute, "unreachable taint removed", func() error { return noUnreachableTaint(admin, down) })
	after := survivorContainer(t, admin, ns)
	if after.ContainerID != before.ContainerID || after.RestartCount != 0 {
		t.Errorf("survivor's container was %s (restarts %d), is %s (restarts %d): want it kept",
			before.ContainerID, before.RestartCount, after.ContainerID, after.RestartCount)
	}
	eventually(t, 30*time.Second, "only the survivor runs on "+down, func() error {
		return onlyContainer(s.endpoints[1], strings.TrimPrefix(before.ContainerID, "containerd://"))
	})
}

// addNotReadyNodes adds n Nodes that no kubelet runs (NotReady once the node lifecycle
// controller sees them), as a killed test run or a dead machine leaves, for the length
// of the test. The controller stops evicting in a zone where more than 2 nodes and over
// 55 % are not Ready: these would tip the set's zone with one node stopped, unless the set
// is a zone of its own, as hack/nodes.sh makes it.
func addNotReadyNodes(t *testing.T, admin kubernetes.Interface, prefix string, n int) {
	t.Helper()
	ctx := context.Background()
	for i := range n {
		node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", prefix, i)}}
		if _, err := admin.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = admin.CoreV1().Nodes().Delete(context.Background(), node.Name, metav1.DeleteOptions{}) })
	}
}

// multiNodePod is a pod that sleeps and exits at once on SIGTERM; bound to node when one
// is given. It gets the API server's default 300 s tolerations of not-ready and unreachable.
func multiNodePod(ns, name, node string) *v1.Pod {
	return testpods.Sleeper(ns, name, node, map[string]string{"app": name})
}

// createSpreadDeployment creates a Deployment of n replicas kept to the set's nodes, one
// more than another at most (a tainted node not counted), that tolerates a not-ready or
// unreachable node for only 5 s; it returns how long until all were available.
func createSpreadDeployment(t *testing.T, admin kubernetes.Interface, ns, prefix string, n int32) time.Duration {
	t.Helper()
	pod := multiNodePod(ns, "spread", "")
	spec := pod.Spec
	spec.NodeSelector = map[string]string{"nodelet.dev/nodes": prefix}
	spec.TopologySpreadConstraints = []v1.TopologySpreadConstraint{{
		MaxSkew: 1, TopologyKey: v1.LabelHostname, WhenUnsatisfiable: v1.DoNotSchedule,
		LabelSelector:    &metav1.LabelSelector{MatchLabels: pod.Labels},
		NodeTaintsPolicy: ptr.To(v1.NodeInclusionPolicyHonor),
	}}
	for _, key := range []string{v1.TaintNodeNotReady, v1.TaintNodeUnreachable} {
		spec.Tolerations = append(spec.Tolerations, v1.Toleration{Key: key, Operator: v1.TolerationOpExists,
			Effect: v1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](5)})
	}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "spread", Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(n),
			Selector: &metav1.LabelSelector{MatchLabels: pod.Labels},
			Template: v1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: pod.Labels}, Spec: spec},
		},
	}
	if _, err := admin.AppsV1().Deployments(ns).Create(context.Background(), dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return eventually(t, 3*time.Minute, "deployment available", func() error {
		d, err := admin.AppsV1().Deployments(ns).Get(context.Background(), "spread", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if d.Status.AvailableReplicas != n || d.Status.Replicas != n {
			return fmt.Errorf("status %+v", d.Status)
		}
		return nil
	})
}

// podsPerNode maps node names to the names of the live (not terminating) pods there.
func podsPerNode(t *testing.T, admin kubernetes.Interface, ns, selector string) map[string][]string {
	t.Helper()
	list, err := admin.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil {
			out[p.Spec.NodeName] = append(out[p.Spec.NodeName], p.Name)
		}
	}
	return out
}

func counts(m map[string][]string) map[string]int {
	out := map[string]int{}
	for k, v := range m {
		out[k] = len(v)
	}
	return out
}

func nodeReadyIs(admin kubernetes.Interface, name string, want v1.ConditionStatus) error {
	n, err := admin.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	for _, c := range n.Status.Conditions {
		if c.Type == v1.NodeReady && c.Status == want {
			return nil
		}
	}
	return fmt.Errorf("node %s: Ready is not %s: %v", name, want, n.Status.Conditions)
}

func noUnreachableTaint(admin kubernetes.Interface, name string) error {
	n, err := admin.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	for _, taint := range n.Spec.Taints {
		if taint.Key == v1.TaintNodeUnreachable || taint.Key == v1.TaintNodeNotReady {
			return fmt.Errorf("node %s still has taint %s", name, taint.Key)
		}
	}
	return nil
}

// spreadRecovered: the Deployment has 30 Ready pods again, none of them on node down.
func spreadRecovered(admin kubernetes.Interface, ns, down string) error {
	list, err := admin.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "app=spread"})
	if err != nil {
		return err
	}
	ready := 0
	for _, p := range list.Items {
		if p.DeletionTimestamp != nil || !podIsReady(&p) {
			continue
		}
		if p.Spec.NodeName == down {
			return fmt.Errorf("pod %s on %s is still live", p.Name, down)
		}
		ready++
	}
	if ready != 30 {
		return fmt.Errorf("%d of 30 replicas Ready elsewhere", ready)
	}
	return nil
}

func podIsReady(p *v1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == v1.PodReady {
			return c.Status == v1.ConditionTrue
		}
	}
	return false
}

func survivorContainer(t *testing.T, admin kubernetes.Interface, ns string) v1.ContainerStatus {
	t.Helper()
	var st v1.ContainerStatus
	eventually(t, time.Minute, "survivor running", func() error {
		p, err := admin.CoreV1().Pods(ns).Get(context.Background(), "survivor", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if !podIsReady(p) || len(p.Status.ContainerStatuses) != 1 {
			return fmt.Errorf("survivor not Ready: %+v", p.Status)
		}
		st = p.Status.ContainerStatuses[0]
		return nil
	})
	return st
}

// onlyContainer: the runtime at endpoint runs no container but id.
func onlyContainer(endpoint, id string) error {
	ctx := context.Background()
	rs, err := cri.NewRemoteRuntimeService(ctx, endpoint, 3*time.Second, time.Minute)
	if err != nil {
		return err
	}
	defer rs.Close(ctx)
	list, err := rs.ListContainers(ctx, &runtimeapi.ContainerFilter{State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING}})
	if err != nil {
		return err
	}
	var running []string
	for _, c := range list {
		running = append(running, c.Id)
	}
	if len(running) != 1 || !slices.Contains(running, id) {
		return fmt.Errorf("running containers %v, want only %s", running, id)
	}
	return nil
}
