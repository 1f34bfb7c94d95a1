package admission

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

const (
	affinityMessage = "Predicate NodeAffinity failed: node(s) didn't match Pod's node affinity/selector"
	taintMessage    = "Predicate TaintToleration failed: node(s) had taints that the pod didn't tolerate"
	portsMessage    = "Predicate NodePorts failed: node(s) didn't have free ports for the requested pod ports"
)

func nodeSelector(kv ...string) func(*v1.Pod) {
	return func(p *v1.Pod) {
		p.Spec.NodeSelector = map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			p.Spec.NodeSelector[kv[i]] = kv[i+1]
		}
	}
}

// required sets required node affinity terms (ORed); each term's expressions are ANDed.
func required(terms ...v1.NodeSelectorTerm) func(*v1.Pod) {
	return func(p *v1.Pod) {
		p.Spec.Affinity = &v1.Affinity{NodeAffinity: &v1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &v1.NodeSelector{NodeSelectorTerms: terms},
		}}
	}
}

func labelTerm(reqs ...v1.NodeSelectorRequirement) v1.NodeSelectorTerm {
	return v1.NodeSelectorTerm{MatchExpressions: reqs}
}

func expr(key string, op v1.NodeSelectorOperator, values ...string) v1.NodeSelectorRequirement {
	return v1.NodeSelectorRequirement{Key: key, Operator: op, Values: values}
}

func TestNodeAffinity(t *testing.T) {
	for _, tc := range []struct {
		name  string
		pod   *v1.Pod
		admit bool
	}{
		{"no selector", apiPod("p"), true},
		{"nodeSelector matches", apiPod("p", nodeSelector("zone", "z1", "disktype", "ssd")), true},
		{"nodeSelector value differs", apiPod("p", nodeSelector("zone", "z2")), false},
		{"nodeSelector label missing", apiPod("p", nodeSelector("rack", "r1")), false},
		{"nodeSelector on another OS", apiPod("p", nodeSelector(v1.LabelOSStable, "windows")), false},
		{"In", apiPod("p", required(labelTerm(expr("zone", v1.NodeSelectorOpIn, "z0", "z1")))), true},
		{"In without the value", apiPod("p", required(labelTerm(expr("zone", v1.NodeSelectorOpIn, "z2")))), false},
		{"NotIn", apiPod("p", required(labelTerm(expr("zone", v1.NodeSelectorOpNotIn, "z2")))), true},
		{"NotIn with the value", apiPod("p", required(labelTerm(expr("zone", v1.NodeSelectorOpNotIn, "z1")))), false},
		{"Exists", apiPod("p", required(labelTerm(expr("disktype", v1.NodeSelectorOpExists)))), true},
		{"Exists on a missing label", apiPod("p", required(labelTerm(expr("rack", v1.NodeSelectorOpExists)))), false},
		{"DoesNotExist", apiPod("p", required(labelTerm(expr("rack", v1.NodeSelectorOpDoesNotExist)))), true},
		{"DoesNotExist on a present label", apiPod("p", required(labelTerm(expr("zone", v1.NodeSelectorOpDoesNotExist)))), false},
		{"Gt", apiPod("p", required(labelTerm(expr("gpu-count", v1.NodeSelectorOpGt, "3")))), true},
		{"Gt not greater", apiPod("p", required(labelTerm(expr("gpu-count", v1.NodeSelectorOpGt, "4")))), false},
		{"Lt", apiPod("p", required(labelTerm(expr("gpu-count", v1.NodeSelectorOpLt, "5")))), true},
		{"Lt on a non-number label", apiPod("p", required(labelTerm(expr("zone", v1.NodeSelectorOpLt, "5")))), false},
		{"expressions of a term are ANDed", apiPod("p", required(labelTerm(
			expr("zone", v1.NodeSelectorOpIn, "z1"), expr("disktype", v1.NodeSelectorOpIn, "hdd")))), false},
		{"terms are ORed", apiPod("p", required(
			labelTerm(expr("zone", v1.NodeSelectorOpIn, "z2")), labelTerm(expr("disktype", v1.NodeSelectorOpIn, "ssd")))), true},
		{"matchFields on the node name", apiPod("p", required(v1.NodeSelectorTerm{MatchFields: []v1.NodeSelectorRequirement{
			expr("metadata.name", v1.NodeSelectorOpIn, "node-a")}})), true},
		{"matchFields on another node name", apiPod("p", required(v1.NodeSelectorTerm{MatchFields: []v1.NodeSelectorRequirement{
			expr("metadata.name", v1.NodeSelectorOpIn, "node-b")}})), false},
		{"nodeSelector and affinity must both match", apiPod("p", nodeSelector("zone", "z2"),
			required(labelTerm(expr("disktype", v1.NodeSelectorOpExists)))), false},
		{"preferred affinity is ignored", apiPod("p", func(p *v1.Pod) {
			p.Spec.Affinity = &v1.Affinity{NodeAffinity: &v1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []v1.PreferredSchedulingTerm{
				{Weight: 1, Preference: labelTerm(expr("zone", v1.NodeSelectorOpIn, "z9"))}}}}
		}), true},
		{"static pods are checked too", apiPod("p", static, nodeSelector("zone", "z2")), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newTestAdmitter(t, testNode(), Options{})
			if tc.admit {
				checkResult(t, a.Admit(tc.pod, nil), "", "")
			} else {
				checkResult(t, a.Admit(tc.pod, nil), "NodeAffinity", affinityMessage)
			}
		})
	}
}

// TestRefreshNode: upstream re-checks with a freshly fetched Node only when node affinity
// is the sole failure.
func TestRefreshNode(t *testing.T) {
	stale := testNode()
	fresh := testNode(func(n *v1.Node) { n.Labels["rack"] = "r1" })
	for _, tc := range []struct {
		name        string
		refresh     bool
		pod         *v1.Pod
		wantReason  string
		wantMessage string
		wantFetches int
	}{
		{"fresh labels admit", true, apiPod("p", nodeSelector("rack", "r1")), "", "", 1},
		{"no refresh function", false, apiPod("p", nodeSelector("rack", "r1")), "NodeAffinity", affinityMessage, 0},
		{"no refresh when another predicate fails", true, apiPod("p", nodeSelector("rack", "r1"), func(p *v1.Pod) { p.Spec.NodeName = "node-b" }),
			"NodeAffinity", affinityMessage, 0},
		{"no refresh when affinity matches", true, apiPod("p"), "", "", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fetches := 0
			opts := Options{}
			if tc.refresh {
				opts.RefreshNode = func() (*v1.Node, error) { fetches++; return fresh, nil }
			}
			a := newTestAdmitter(t, stale, opts)
			checkResult(t, a.Admit(tc.pod, nil), tc.wantReason, tc.wantMessage)
			if fetches != tc.wantFetches {
				t.Errorf("fetched the node %d times, want %d", fetches, tc.wantFetches)
			}
		})
	}
}

func TestNodeName(t *testing.T) {
	for _, tc := range []struct {
		nodeName string
		admit    bool
	}{{"", true}, {"node-a", true}, {"node-b", false}} {
		a := newTestAdmitter(t, testNode(), Options{})
		got := a.Admit(apiPod("p", func(p *v1.Pod) { p.Spec.NodeName = tc.nodeName }), nil)
		if tc.admit {
			checkResult(t, got, "", "")
		} else {
			checkResult(t, got, "NodeName", "Predicate NodeName failed: node(s) didn't match the requested node name")
		}
	}
}

func TestTaints(t *testing.T) {
	noExecute := v1.Taint{Key: "dedicated", Value: "db", Effect: v1.TaintEffectNoExecute}
	noSchedule := v1.Taint{Key: "dedicated", Value: "db", Effect: v1.TaintEffectNoSchedule}
	preferNoSchedule := v1.Taint{Key: "dedicated", Value: "db", Effect: v1.TaintEffectPreferNoSchedule}
	numeric := v1.Taint{Key: "level", Value: "5", Effect: v1.TaintEffectNoExecute}
	tolerating := func(ts ...v1.Toleration) func(*v1.Pod) {
		return func(p *v1.Pod) { p.Spec.Tolerations = ts }
	}
	for _, tc := range []struct {
		name  string
		taint v1.Taint
		pod   *v1.Pod
		admit bool
	}{
		{"NoSchedule is the scheduler's", noSchedule, apiPod("p"), true},
		{"PreferNoSchedule is the scheduler's", preferNoSchedule, apiPod("p"), true},
		{"NoExecute not tolerated", noExecute, apiPod("p"), false},
		{"Equal with key, value and effect", noExecute, apiPod("p", tolerating(
			v1.Toleration{Key: "dedicated", Operator: v1.TolerationOpEqual, Value: "db", Effect: v1.TaintEffectNoExecute})), true},
		{"empty operator means Equal", noExecute, apiPod("p", tolerating(
			v1.Toleration{Key: "dedicated", Value: "db"})), true},
		{"Equal with another value", noExecute, apiPod("p", tolerating(
			v1.Toleration{Key: "dedicated", Operator: v1.TolerationOpEqual, Value: "web"})), false},
		{"Exists on the key", noExecute, apiPod("p", tolerating(
			v1.Toleration{Key: "dedicated", Operator: v1.TolerationOpExists})), true},
		{"Exists on another key", noExecute, apiPod("p", tolerating(
			v1.Toleration{Key: "other", Operator: v1.TolerationOpExists})), false},
		{"Exists without a key tolerates everything", noExecute, apiPod("p", tolerating(
			v1.Toleration{Operator: v1.TolerationOpExists})), true},
		{"toleration for another effect", noExecute, apiPod("p", tolerating(
			v1.Toleration{Key: "dedicated", Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoSchedule})), false},
		{"tolerationSeconds still tolerates at admission", noExecute, apiPod("p", tolerating(
			v1.Toleration{Key: "dedicated", Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoExecute, TolerationSeconds: ptr.To(int64(0))})), true},
		{"one of several tolerations", noExecute, apiPod("p", tolerating(
			v1.Toleration{Key: "other", Operator: v1.TolerationOpExists},
			v1.Toleration{Key: "dedicated", Operator: v1.TolerationOpExists})), true},
		{"Gt is behind an alpha gate", numeric, apiPod("p", tolerating(
			v1.Toleration{Key: "level", Operator: v1.TolerationOpGt, Value: "3"})), false},
		{"static pods ignore taints", noExecute, apiPod("p", static), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			node := testNode(func(n *v1.Node) { n.Spec.Taints = []v1.Taint{tc.taint} })
			a := newTestAdmitter(t, node, Options{})
			if tc.admit {
				checkResult(t, a.Admit(tc.pod, nil), "", "")
			} else {
				checkResult(t, a.Admit(tc.pod, nil), "TaintToleration", taintMessage)
			}
		})
	}
}

func TestSecondUntoleratedTaint(t *testing.T) {
	node := testNode(func(n *v1.Node) {
		n.Spec.Taints = []v1.Taint{
			{Key: "a", Effect: v1.TaintEffectNoExecute},
			{Key: "b", Effect: v1.TaintEffectNoExecute},
		}
	})
	pod := apiPod("p", func(p *v1.Pod) { p.Spec.Tolerations = []v1.Toleration{{Key: "a", Operator: v1.TolerationOpExists}} })
	checkResult(t, newTestAdmitter(t, node, Options{}).Admit(pod, nil), "TaintToleration", taintMessage)
}

func TestPodOS(t *testing.T) {
	podOS := func(os v1.OSName) func(*v1.Pod) { return func(p *v1.Pod) { p.Spec.OS = &v1.PodOS{Name: os} } }
	osLabel := func(os string) func(*v1.Pod) {
		return func(p *v1.Pod) { p.Labels = map[string]string{v1.LabelOSStable: os} }
	}
	const (
		labelMessage = "Failed to admit pod as the `kubernetes.io/os` label doesn't match node label"
		fieldMessage = "Failed to admit pod as the OS field doesn't match node OS"
	)
	for _, tc := range []struct {
		name        string
		nodeLabel   string
		pod         *v1.Pod
		wantReason  string
		wantMessage string
	}{
		{"no OS", "linux", apiPod("p"), "", ""},
		{"OS field linux", "linux", apiPod("p", podOS(v1.Linux)), "", ""},
		{"OS field windows", "linux", apiPod("p", podOS(v1.Windows)), "PodOSNotSupported", fieldMessage},
		{"OS label linux", "linux", apiPod("p", osLabel("linux")), "", ""},
		{"OS label windows", "linux", apiPod("p", osLabel("windows")), "PodOSSelectorNodeLabelDoesNotMatch", labelMessage},
		{"label checked before field", "linux", apiPod("p", osLabel("windows"), podOS(v1.Windows)),
			"PodOSSelectorNodeLabelDoesNotMatch", labelMessage},
		{"a wrong node label is taken as the kubelet's OS", "windows", apiPod("p", osLabel("linux")), "", ""},
		{"a missing node label is taken as the kubelet's OS", "", apiPod("p", osLabel("windows")),
			"PodOSSelectorNodeLabelDoesNotMatch", labelMessage},
	} {
		t.Run(tc.name, func(t *testing.T) {
			node := testNode(func(n *v1.Node) {
				n.Labels[v1.LabelOSStable] = tc.nodeLabel
				if tc.nodeLabel == "" {
					delete(n.Labels, v1.LabelOSStable)
				}
			})
			checkResult(t, newTestAdmitter(t, node, Options{}).Admit(tc.pod, nil), tc.wantReason, tc.wantMessage)
		})
	}
}

func TestSupplementalGroupsPolicy(t *testing.T) {
	policy := func(pol v1.SupplementalGroupsPolicy) func(*v1.Pod) {
		return func(p *v1.Pod) {
			p.Spec.SecurityContext = &v1.PodSecurityContext{SupplementalGroupsPolicy: &pol}
		}
	}
	supports := func(ok *bool) func(*v1.Node) {
		return func(n *v1.Node) { n.Status.Features = &v1.NodeFeatures{SupplementalGroupsPolicy: ok} }
	}
	const message = "SupplementalGroupsPolicy=Strict is not supported in this node"
	for _, tc := range []struct {
		name       string
		node       *v1.Node
		pod        *v1.Pod
		wantReject bool
	}{
		{"no policy", testNode(), apiPod("p"), false},
		{"Merge", testNode(), apiPod("p", policy(v1.SupplementalGroupsPolicyMerge)), false},
		{"Strict, node reports no features", testNode(), apiPod("p", policy(v1.SupplementalGroupsPolicyStrict)), true},
		{"Strict, node does not support it", testNode(supports(ptr.To(false))), apiPod("p", policy(v1.SupplementalGroupsPolicyStrict)), true},
		{"Strict, node supports it", testNode(supports(ptr.To(true))), apiPod("p", policy(v1.SupplementalGroupsPolicyStrict)), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := newTestAdmitter(t, tc.node, Options{}).Admit(tc.pod, nil)
			if tc.wantReject {
				checkResult(t, got, "SupplementalGroupsPolicyNotSupported", message)
			} else {
				checkResult(t, got, "", "")
			}
		})
	}
}

func TestHostPorts(t *testing.T) {
	port := func(hostIP string, proto v1.Protocol, hostPort int32) v1.ContainerPort {
		return v1.ContainerPort{ContainerPort: 80, HostIP: hostIP, Protocol: proto, HostPort: hostPort}
	}
	withPorts := func(name string, ps ...v1.ContainerPort) *v1.Pod {
		c := ctr("app", nil)
		c.Ports = ps
		return apiPod(name, containers(c))
	}
	withInitPorts := func(name string, restartable bool, ps ...v1.ContainerPort) *v1.Pod {
		c := ctr("init", nil)
		if restartable {
			c = sidecar("init", nil)
		}
		c.Ports = ps
		return apiPod(name, initContainers(c))
	}
	for _, tc := range []struct {
		name  string
		other *v1.Pod
		pod   *v1.Pod
		admit bool
	}{
		{"same port", withPorts("o", port("", "", 8080)), withPorts("p", port("", v1.ProtocolTCP, 8080)), false},
		{"another port", withPorts("o", port("", "", 8080)), withPorts("p", port("", "", 8081)), true},
		{"another protocol", withPorts("o", port("", v1.ProtocolTCP, 8080)), withPorts("p", port("", v1.ProtocolUDP, 8080)), true},
		{"container ports without host ports", withPorts("o", port("", "", 0)), withPorts("p", port("", "", 0)), true},
		{"different host IPs", withPorts("o", port("10.0.0.1", "", 8080)), withPorts("p", port("10.0.0.2", "", 8080)), true},
		{"same host IP", withPorts("o", port("10.0.0.1", "", 8080)), withPorts("p", port("10.0.0.1", "", 8080)), false},
		{"every address against one", withPorts("o", port("10.0.0.1", "", 8080)), withPorts("p", port("0.0.0.0", "", 8080)), false},
		{"one address against every", withPorts("o", port("", "", 8080)), withPorts("p", port("10.0.0.1", "", 8080)), false},
		{"a finished init container holds no port", withInitPorts("o", false, port("", "", 8080)), withPorts("p", port("", "", 8080)), true},
		{"a sidecar holds its port", withInitPorts("o", true, port("", "", 8080)), withPorts("p", port("", "", 8080)), false},
		{"the pod's sidecar wants its port", withPorts("o", port("", "", 8080)), withInitPorts("p", true, port("", "", 8080)), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := newTestAdmitter(t, testNode(), Options{}).Admit(tc.pod, []*v1.Pod{tc.other})
			if tc.admit {
				checkResult(t, got, "", "")
			} else {
				checkResult(t, got, "NodePorts", portsMessage)
			}
		})
	}
}
