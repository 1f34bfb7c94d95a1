package sources

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodelet/nodelet/pkg/kubetypes"
)

const webYAML = `apiVersion: v1
kind: Pod
metadata:
  name: web
  labels:
    app: web
spec:
  containers:
  - name: web
    image: busybox:1.36
    ports:
    - containerPort: 80
`

const webJSON = `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web","labels":{"app":"web"}},
"spec":{"containers":[{"name":"web","image":"busybox:1.36","ports":[{"containerPort":80}]}]}}`

func fileDefaulter(path string, node types.NodeName) staticPodDefaulter {
	return func(pod *v1.Pod) error { return applyDefaults(pod, path, true, node) }
}

func mustDecode(t *testing.T, data, path string, node types.NodeName) *v1.Pod {
	t.Helper()
	parsed, pod, err := decodeSinglePod([]byte(data), fileDefaulter(path, node))
	if !parsed || err != nil {
		t.Fatalf("decode: parsed=%v err=%v", parsed, err)
	}
	return pod
}

func TestDecodeAppliesStaticPodDefaults(t *testing.T) {
	pod := mustDecode(t, webYAML, "/etc/manifests/web.yaml", "node-a")

	if pod.Name != "web-node-a" {
		t.Errorf("name %q, want web-node-a", pod.Name)
	}
	if got := generatePodName("web", "Node-A"); got != "web-node-a" {
		t.Errorf("generatePodName %q, want the node name lower-cased", got)
	}
	if pod.Namespace != "default" {
		t.Errorf("namespace %q, want default", pod.Namespace)
	}
	if pod.Spec.NodeName != "node-a" {
		t.Errorf("nodeName %q, want node-a", pod.Spec.NodeName)
	}
	if pod.UID == "" || pod.Annotations[kubetypes.ConfigHashAnnotationKey] != string(pod.UID) {
		t.Errorf("uid %q, hash annotation %q: want equal and set", pod.UID, pod.Annotations[kubetypes.ConfigHashAnnotationKey])
	}
	if pod.Status.Phase != v1.PodPending {
		t.Errorf("phase %q, want Pending", pod.Status.Phase)
	}
	want := v1.Toleration{Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoExecute}
	if len(pod.Spec.Tolerations) != 1 || pod.Spec.Tolerations[0] != want {
		t.Errorf("tolerations %+v, want [%+v]", pod.Spec.Tolerations, want)
	}
}

func TestDecodeAppliesAPIDefaults(t *testing.T) {
	pod := mustDecode(t, webYAML, "/m/web.yaml", "n")
	c := pod.Spec.Containers[0]
	checks := map[string]bool{
		"restartPolicy Always":            pod.Spec.RestartPolicy == v1.RestartPolicyAlways,
		"dnsPolicy ClusterFirst":          pod.Spec.DNSPolicy == v1.DNSClusterFirst,
		"grace period 30":                 *pod.Spec.TerminationGracePeriodSeconds == 30,
		"scheduler default":               pod.Spec.SchedulerName == "default-scheduler",
		"service links on":                *pod.Spec.EnableServiceLinks,
		"pull IfNotPresent for a tag":     c.ImagePullPolicy == v1.PullIfNotPresent,
		"termination message path":        c.TerminationMessagePath == "/dev/termination-log",
		"termination message policy":      c.TerminationMessagePolicy == v1.TerminationMessageReadFile,
		"port protocol TCP":               c.Ports[0].Protocol == v1.ProtocolTCP,
		"security context set":            pod.Spec.SecurityContext != nil,
		"no hostPort without hostNetwork": c.Ports[0].HostPort == 0,
	}
	for name, ok := range checks {
		if !ok {
			t.Errorf("default missing: %s", name)
		}
	}
}

func TestHostNetworkDefaultsHostPort(t *testing.T) {
	data := strings.Replace(webYAML, "spec:\n", "spec:\n  hostNetwork: true\n", 1)
	pod := mustDecode(t, data, "/m/web.yaml", "n")
	if got := pod.Spec.Containers[0].Ports[0].HostPort; got != 80 {
		t.Fatalf("hostPort %d, want 80", got)
	}
}

func TestJSONAndYAMLDecodeToTheSamePod(t *testing.T) {
	a := mustDecode(t, webYAML, "/m/web", "n")
	b := mustDecode(t, webJSON, "/m/web", "n")
	if a.UID != b.UID {
		t.Fatalf("same pod in YAML and JSON got different UIDs %s and %s", a.UID, b.UID)
	}
}

// UIDs: stable for unchanged content; new for changed content, another file or node.
func TestStaticPodUID(t *testing.T) {
	base := mustDecode(t, webYAML, "/m/web.yaml", "n1").UID
	reformatted := "# a comment\n" + webYAML + "\n\n"
	if uid := mustDecode(t, reformatted, "/m/web.yaml", "n1").UID; uid != base {
		t.Errorf("comment-only change changed the UID")
	}
	changed := strings.Replace(webYAML, "busybox:1.36", "busybox:1.37", 1)
	if uid := mustDecode(t, changed, "/m/web.yaml", "n1").UID; uid == base {
		t.Errorf("image change kept the UID")
	}
	if uid := mustDecode(t, webYAML, "/m/other.yaml", "n1").UID; uid == base {
		t.Errorf("another file kept the UID")
	}
	if uid := mustDecode(t, webYAML, "/m/web.yaml", "n2").UID; uid == base {
		t.Errorf("another node kept the UID")
	}
	withUID := strings.Replace(webYAML, "  name: web\n", "  name: web\n  uid: fixed-uid\n", 1)
	if uid := mustDecode(t, withUID, "/m/web.yaml", "n1").UID; uid != "fixed-uid" {
		t.Errorf("manifest UID not kept: %s", uid)
	}
}

func TestDecodeErrors(t *testing.T) {
	cases := []struct {
		name       string
		data       string
		wantParsed bool
		wantErr    string
	}{
		{"not YAML", "a: [b", false, "yaml"},
		{"no kind", `{"apiVersion":"v1","metadata":{"name":"x"}}`, false, "Object 'Kind' is missing"},
		{"unknown version", strings.Replace(webYAML, "apiVersion: v1", "apiVersion: v2", 1), false, `no kind "Pod" is registered for version "v2"`},
		{"not a pod", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n", false, `invalid pod: kind "ConfigMap" of apiVersion "v1" is not a v1 Pod`},
		{"a workload", "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: x\n", false, `invalid pod: kind "Deployment" of apiVersion "apps/v1" is not a v1 Pod`},
		{"a list", "apiVersion: v1\nkind: PodList\nitems: []\n", false, `invalid pod: kind "PodList" of apiVersion "v1" is not a v1 Pod`},
		{"no name", strings.Replace(webYAML, "  name: web\n  labels", "  labels", 1), true, "invalid pod: name is needed for the pod"},
		{"invalid", strings.Replace(webYAML, "image: busybox:1.36", "image: \"\"", 1), true, "invalid pod: [spec.containers[0].image: Required value]"},
		{"bad quantity", strings.Replace(webYAML, "    ports:", "    resources:\n      limits:\n        cpu: lots\n    ports:", 1), false, "quantities must match"},
		{"secret reference", strings.Replace(webYAML, "spec:\n", "spec:\n  imagePullSecrets:\n  - name: regcred\n", 1), true, "static pods may not reference secrets"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			parsed, pod, err := decodeSinglePod([]byte(tc.data), fileDefaulter("/m/x", "n"))
			if parsed != tc.wantParsed || err == nil || pod != nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("parsed=%v pod=%v err=%v; want parsed=%v and an error containing %q", parsed, pod != nil, err, tc.wantParsed, tc.wantErr)
			}
		})
	}
}

func TestURLPodsHaveNoToleration(t *testing.T) {
	parsed, pod, err := decodeSinglePod([]byte(webYAML), func(pod *v1.Pod) error {
		return applyDefaults(pod, "http://x/pods", false, "n")
	})
	if !parsed || err != nil {
		t.Fatal(err)
	}
	if len(pod.Spec.Tolerations) != 0 {
		t.Fatalf("URL pod got tolerations %v", pod.Spec.Tolerations)
	}
}

func TestDecodePodList(t *testing.T) {
	list := `apiVersion: v1
kind: PodList
items:
- metadata: {name: a}
  spec: {containers: [{name: c, image: busybox}]}
- metadata: {name: b, namespace: kube-system}
  spec: {containers: [{name: c, image: busybox}]}
`
	defaulter := func(pod *v1.Pod) error { return applyDefaults(pod, "http://x", false, "n") }
	parsed, pods, err := decodePodList([]byte(list), defaulter)
	if !parsed || err != nil || len(pods) != 2 {
		t.Fatalf("parsed=%v err=%v pods=%d", parsed, err, len(pods))
	}
	if pods[0].Name != "a-n" || pods[1].Namespace != "kube-system" || pods[0].UID == pods[1].UID {
		t.Fatalf("unexpected pods %s/%s %s/%s", pods[0].Namespace, pods[0].Name, pods[1].Namespace, pods[1].Name)
	}
	bad := strings.Replace(list, "{name: b, namespace: kube-system}", "{namespace: kube-system}", 1)
	if parsed, _, err := decodePodList([]byte(bad), defaulter); !parsed || err == nil {
		t.Fatalf("a list with a nameless pod: parsed=%v err=%v, want parsed and an error", parsed, err)
	}
}

func TestAddOrUpdateTolerationKeepsOthers(t *testing.T) {
	pod := &v1.Pod{Spec: v1.PodSpec{Tolerations: []v1.Toleration{
		{Key: "k", Operator: v1.TolerationOpEqual, Value: "v"},
		{Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoExecute, TolerationSeconds: new(int64)},
	}}}
	addOrUpdateToleration(pod, v1.Toleration{Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoExecute})
	if len(pod.Spec.Tolerations) != 2 || pod.Spec.Tolerations[1].TolerationSeconds != nil || pod.Spec.Tolerations[0].Key != "k" {
		t.Fatalf("tolerations %+v", pod.Spec.Tolerations)
	}
}

// A manifest as kubeadm writes it must be accepted as it is.
const kubeadmEtcd = `apiVersion: v1
kind: Pod
metadata:
  annotations:
    kubeadm.kubernetes.io/etcd.advertise-client-urls: https://10.0.0.1:2379
  creationTimestamp: null
  labels:
    component: etcd
    tier: control-plane
  name: etcd
  namespace: kube-system
spec:
  containers:
  - command:
    - etcd
    - --data-dir=/var/lib/etcd
    image: registry.k8s.io/etcd:3.5.21-0
    imagePullPolicy: IfNotPresent
    livenessProbe:
      failureThreshold: 8
      httpGet:
        host: 127.0.0.1
        path: /livez
        port: probe-port
        scheme: HTTP
      initialDelaySeconds: 10
      periodSeconds: 10
      timeoutSeconds: 15
    name: etcd
    ports:
    - containerPort: 2381
      name: probe-port
      protocol: TCP
    resources:
      requests:
        cpu: 100m
        memory: 100Mi
    volumeMounts:
    - mountPath: /var/lib/etcd
      name: etcd-data
  hostNetwork: true
  priority: 2000001000
  priorityClassName: system-node-critical
  securityContext:
    seccompProfile:
      type: RuntimeDefault
  volumes:
  - hostPath:
      path: /var/lib/etcd
      type: DirectoryOrCreate
    name: etcd-data
status: {}
`

func TestKubeadmManifestIsAccepted(t *testing.T) {
	pod := mustDecode(t, kubeadmEtcd, "/etc/kubernetes/manifests/etcd.yaml", "cp-1")
	if pod.Name != "etcd-cp-1" || pod.Namespace != "kube-system" {
		t.Fatalf("pod %s/%s", pod.Namespace, pod.Name)
	}
	if hp := pod.Spec.Containers[0].Ports[0].HostPort; hp != 2381 {
		t.Fatalf("hostPort %d, want the container port under hostNetwork", hp)
	}
}

// The control plane manifests kubeadm writes (testdata/kubeadm, as kubeadm v1.33
// generates them) must all run, read from a manifest directory as they are.
func TestKubeadmControlPlaneManifestsAreAccepted(t *testing.T) {
	ft := startFileSource(t, "testdata/kubeadm", longPeriod, false)
	pods := ft.nextSet()
	want := "etcd-node1,kube-apiserver-node1,kube-controller-manager-node1,kube-scheduler-node1"
	if got := strings.Join(podNames(pods), ","); got != want {
		t.Fatalf("pods %s, want %s; reports: %v", got, want, ft.reports.lines)
	}
	if len(ft.reports.lines) != 0 {
		t.Fatalf("reports: %v", ft.reports.lines)
	}
	for _, pod := range pods {
		c := pod.Spec.Containers[0]
		if c.Ports[0].HostPort != c.Ports[0].ContainerPort {
			t.Errorf("%s: hostPort %d, want the container port under hostNetwork", pod.Name, c.Ports[0].HostPort)
		}
		if pod.Spec.SecurityContext.SeccompProfile.Type != v1.SeccompProfileTypeRuntimeDefault {
			t.Errorf("%s: seccomp profile lost", pod.Name)
		}
	}
}
