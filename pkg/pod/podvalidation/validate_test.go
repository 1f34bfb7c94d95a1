package podvalidation

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// validPod is a pod as it looks after decoding and defaulting: it must pass.
func validPod() *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web-node1", Namespace: "default", Labels: map[string]string{"app": "web"}},
		Spec: v1.PodSpec{
			Containers: []v1.Container{{
				Name:                     "web",
				Image:                    "busybox:1.36",
				ImagePullPolicy:          v1.PullIfNotPresent,
				TerminationMessagePolicy: v1.TerminationMessageReadFile,
				Ports:                    []v1.ContainerPort{{Name: "http", ContainerPort: 80, Protocol: v1.ProtocolTCP}},
				VolumeMounts:             []v1.VolumeMount{{Name: "data", MountPath: "/data"}},
				Env:                      []v1.EnvVar{{Name: "MODE", Value: "x"}},
				Resources: v1.ResourceRequirements{
					Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("100m")},
					Limits:   v1.ResourceList{v1.ResourceCPU: resource.MustParse("200m")},
				},
				LivenessProbe: &v1.Probe{
					ProbeHandler:     v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{Path: "/", Port: intstr.FromInt32(80), Scheme: v1.URISchemeHTTP}},
					TimeoutSeconds:   1,
					PeriodSeconds:    10,
					SuccessThreshold: 1,
					FailureThreshold: 3,
				},
			}},
			Volumes:                       []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}},
			RestartPolicy:                 v1.RestartPolicyAlways,
			DNSPolicy:                     v1.DNSClusterFirst,
			TerminationGracePeriodSeconds: ptr.To[int64](30),
			NodeName:                      "node1",
			SecurityContext:               &v1.PodSecurityContext{},
		},
	}
}

func container(name string) v1.Container {
	return v1.Container{Name: name, Image: "busybox", ImagePullPolicy: v1.PullIfNotPresent, TerminationMessagePolicy: v1.TerminationMessageReadFile}
}

func TestValidPodPasses(t *testing.T) {
	withEnvFile := validPod()
	withEnvFile.Spec.Containers[0].Env = append(withEnvFile.Spec.Containers[0].Env, v1.EnvVar{Name: "TOKEN",
		ValueFrom: &v1.EnvVarSource{FileKeyRef: &v1.FileKeySelector{VolumeName: "data", Path: "app/env", Key: "TOKEN"}}})
	if errs := ValidatePod(withEnvFile); len(errs) != 0 {
		t.Errorf("a valid env file reference: %v", errs)
	}
	if errs := ValidatePod(validPod()); len(errs) != 0 {
		t.Fatalf("valid pod rejected: %v", errs)
	}
}

// Each case breaks one rule and names the exact error upstream would give.
func TestValidationRules(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(*v1.Pod)
		want   string
	}{
		// metadata
		{"name required", func(p *v1.Pod) { p.Name = "" }, `metadata.name: Required value: name or generateName is required`},
		{"name DNS subdomain", func(p *v1.Pod) { p.Name = "Web_1" }, `metadata.name: Invalid value: "Web_1": a lowercase RFC 1123 subdomain`},
		{"namespace required", func(p *v1.Pod) { p.Namespace = "" }, `metadata.namespace: Required value`},
		{"namespace DNS label", func(p *v1.Pod) { p.Namespace = "kube.system" }, `metadata.namespace: Invalid value: "kube.system": must not contain dots`},
		{"label key syntax", func(p *v1.Pod) { p.Labels = map[string]string{"bad key": "v"} }, `metadata.labels: Invalid value: "bad key": name part must consist of alphanumeric characters`},
		{"label value syntax", func(p *v1.Pod) { p.Labels = map[string]string{"app": "a b"} }, `metadata.labels: Invalid value: "a b": a valid label must be an empty string or consist of alphanumeric characters`},
		{"annotation key syntax", func(p *v1.Pod) { p.Annotations = map[string]string{"-bad": "v"} }, `metadata.annotations: Invalid value: "-bad": name part must consist of alphanumeric characters`},

		// containers
		{"containers required", func(p *v1.Pod) { p.Spec.Containers = nil }, `spec.containers: Required value`},
		{"container name required", func(p *v1.Pod) { p.Spec.Containers[0].Name = "" }, `spec.containers[0].name: Required value`},
		{"container name DNS label", func(p *v1.Pod) { p.Spec.Containers[0].Name = "Web" }, `spec.containers[0].name: Invalid value: "Web": a lowercase RFC 1123 label`},
		{"duplicate container name", func(p *v1.Pod) {
			p.Spec.Containers = append(p.Spec.Containers, container("web"))
		}, `spec.containers[1].name: Duplicate value: "web"`},
		{"init container clashes with container", func(p *v1.Pod) {
			p.Spec.InitContainers = []v1.Container{container("web")}
		}, `spec.initContainers[0].name: Duplicate value: "web"`},
		{"ephemeral container clashes with init container", func(p *v1.Pod) {
			p.Spec.InitContainers = []v1.Container{container("setup")}
			p.Spec.EphemeralContainers = []v1.EphemeralContainer{{EphemeralContainerCommon: v1.EphemeralContainerCommon(container("setup"))}}
		}, `spec.ephemeralContainers[0].name: Duplicate value: "setup"`},
		{"ephemeral containers forbidden on create", func(p *v1.Pod) {
			p.Spec.EphemeralContainers = []v1.EphemeralContainer{{EphemeralContainerCommon: v1.EphemeralContainerCommon(container("debug"))}}
		}, `spec.ephemeralContainers: Forbidden: cannot be set on create`},
		{"image required", func(p *v1.Pod) { p.Spec.Containers[0].Image = "" }, `spec.containers[0].image: Required value`},
		{"image whitespace", func(p *v1.Pod) { p.Spec.Containers[0].Image = " busybox" }, `spec.containers[0].image: Invalid value: " busybox": must not have leading or trailing whitespace`},
		{"pull policy value", func(p *v1.Pod) { p.Spec.Containers[0].ImagePullPolicy = "Sometimes" }, `spec.containers[0].imagePullPolicy: Unsupported value: "Sometimes": supported values: "Always", "IfNotPresent", "Never"`},
		{"container restartPolicy value", func(p *v1.Pod) {
			p.Spec.Containers[0].RestartPolicy = ptr.To(v1.ContainerRestartPolicy("Sometimes"))
		}, `spec.containers[0].restartPolicy: Unsupported value: "Sometimes": supported values: "Always", "Never", "OnFailure"`},
		{"probe on plain init container", func(p *v1.Pod) {
			c := container("setup")
			c.LivenessProbe = p.Spec.Containers[0].LivenessProbe
			p.Spec.InitContainers = []v1.Container{c}
		}, `spec.initContainers[0].livenessProbe: Forbidden: may not be set for init containers without restartPolicy=Always`},

		// ports
		{"container port range", func(p *v1.Pod) { p.Spec.Containers[0].Ports[0].ContainerPort = 70000 }, `spec.containers[0].ports[0].containerPort: Invalid value: 70000: must be between 1 and 65535, inclusive`},
		{"container port required", func(p *v1.Pod) { p.Spec.Containers[0].Ports[0].ContainerPort = 0 }, `spec.containers[0].ports[0].containerPort: Required value`},
		{"host port range", func(p *v1.Pod) { p.Spec.Containers[0].Ports[0].HostPort = -1 }, `spec.containers[0].ports[0].hostPort: Invalid value: -1: must be between 1 and 65535, inclusive`},
		{"protocol value", func(p *v1.Pod) { p.Spec.Containers[0].Ports[0].Protocol = "ICMP" }, `spec.containers[0].ports[0].protocol: Unsupported value: "ICMP": supported values: "SCTP", "TCP", "UDP"`},
		{"protocol required", func(p *v1.Pod) { p.Spec.Containers[0].Ports[0].Protocol = "" }, `spec.containers[0].ports[0].protocol: Required value`},
		{"duplicate port name", func(p *v1.Pod) {
			p.Spec.Containers[0].Ports = append(p.Spec.Containers[0].Ports, v1.ContainerPort{Name: "http", ContainerPort: 81, Protocol: v1.ProtocolTCP})
		}, `spec.containers[0].ports[1].name: Duplicate value: "http"`},
		{"port name syntax", func(p *v1.Pod) { p.Spec.Containers[0].Ports[0].Name = "HTTP_PORT" }, `spec.containers[0].ports[0].name: Invalid value: "HTTP_PORT"`},
		{"host port conflict", func(p *v1.Pod) {
			c := container("side")
			c.Ports = []v1.ContainerPort{{ContainerPort: 90, HostPort: 8080, Protocol: v1.ProtocolTCP}}
			p.Spec.Containers[0].Ports[0].HostPort = 8080
			p.Spec.Containers = append(p.Spec.Containers, c)
		}, `spec.containers[1].ports[0].hostPort: Duplicate value: "TCP//8080"`},
		{"hostNetwork needs hostPort == containerPort", func(p *v1.Pod) {
			p.Spec.HostNetwork = true
			p.Spec.Containers[0].Ports[0].HostPort = 8080
		}, "spec.containers[0].ports[0].hostPort: Invalid value: 8080: must match `containerPort` when `hostNetwork` is true"},

		// resources
		{"request above limit", func(p *v1.Pod) {
			p.Spec.Containers[0].Resources.Requests[v1.ResourceCPU] = resource.MustParse("1")
		}, `spec.containers[0].resources.requests: Invalid value: "1": must be less than or equal to cpu limit of 200m`},
		{"negative quantity", func(p *v1.Pod) {
			p.Spec.Containers[0].Resources.Limits[v1.ResourceMemory] = resource.MustParse("-1Mi")
		}, `spec.containers[0].resources.limits[memory]: Invalid value: "-1Mi": must be greater than or equal to 0`},
		{"unknown resource name", func(p *v1.Pod) {
			p.Spec.Containers[0].Resources.Limits["gpu"] = resource.MustParse("1")
		}, `spec.containers[0].resources.limits[gpu]: Invalid value: "gpu": must be a standard resource type or fully qualified`},
		{"non-container standard resource", func(p *v1.Pod) {
			p.Spec.Containers[0].Resources.Limits["pods"] = resource.MustParse("1")
		}, `spec.containers[0].resources.limits[pods]: Invalid value: "pods": must be a standard resource for containers`},
		{"extended resource needs request == limit", func(p *v1.Pod) {
			p.Spec.Containers[0].Resources.Requests["example.com/gpu"] = resource.MustParse("1")
			p.Spec.Containers[0].Resources.Limits["example.com/gpu"] = resource.MustParse("2")
		}, `spec.containers[0].resources.requests: Invalid value: "1": must be equal to example.com/gpu limit of 2`},
		{"extended resource needs a limit", func(p *v1.Pod) {
			p.Spec.Containers[0].Resources.Requests["example.com/gpu"] = resource.MustParse("1")
		}, `spec.containers[0].resources.limits: Required value: Limit must be set for non overcommitable resources`},
		{"extended resource must be integer", func(p *v1.Pod) {
			p.Spec.Containers[0].Resources.Limits["example.com/gpu"] = resource.MustParse("500m")
		}, `spec.containers[0].resources.limits[example.com/gpu]: Invalid value: "500m": must be an integer`},

		// policies
		{"restartPolicy value", func(p *v1.Pod) { p.Spec.RestartPolicy = "Sometimes" }, `spec.restartPolicy: Unsupported value: "Sometimes": supported values: "Always", "OnFailure", "Never"`},
		{"restartPolicy required", func(p *v1.Pod) { p.Spec.RestartPolicy = "" }, `spec.restartPolicy: Required value`},
		{"dnsPolicy value", func(p *v1.Pod) { p.Spec.DNSPolicy = "Cluster" }, `spec.dnsPolicy: Unsupported value: "Cluster": supported values: "ClusterFirstWithHostNet", "ClusterFirst", "Default", "None"`},
		{"dnsPolicy None needs dnsConfig", func(p *v1.Pod) { p.Spec.DNSPolicy = v1.DNSNone }, "spec.dnsConfig: Required value: must provide `dnsConfig` when `dnsPolicy` is None"},
		{"dnsConfig nameserver IP", func(p *v1.Pod) { p.Spec.DNSConfig = &v1.PodDNSConfig{Nameservers: []string{"dns.local"}} }, `spec.dnsConfig.nameservers[0]: Invalid value: "dns.local"`},
		{"terminationGracePeriodSeconds non-negative", func(p *v1.Pod) { p.Spec.TerminationGracePeriodSeconds = ptr.To[int64](-1) }, `spec.terminationGracePeriodSeconds: Invalid value: -1: must be greater than or equal to 0`},
		{"terminationGracePeriodSeconds required", func(p *v1.Pod) { p.Spec.TerminationGracePeriodSeconds = nil }, `spec.terminationGracePeriodSeconds: Required value`},
		{"activeDeadlineSeconds range", func(p *v1.Pod) { p.Spec.ActiveDeadlineSeconds = ptr.To[int64](0) }, `spec.activeDeadlineSeconds: Invalid value: 0: must be between 1 and 2147483647, inclusive`},
		{"nodeName subdomain", func(p *v1.Pod) { p.Spec.NodeName = "Node_1" }, `spec.nodeName: Invalid value: "Node_1"`},
		{"toleration operator", func(p *v1.Pod) { p.Spec.Tolerations = []v1.Toleration{{Key: "k", Operator: "Maybe"}} }, `spec.tolerations[0].operator: Unsupported value: "Maybe"`},
		{"hostname label", func(p *v1.Pod) { p.Spec.Hostname = "a.b" }, `spec.hostname: Invalid value: "a.b"`},

		// env files (EnvFiles)
		{"fileKeyRef fields", func(p *v1.Pod) {
			p.Spec.Containers[0].Env[0] = v1.EnvVar{Name: "T", ValueFrom: &v1.EnvVarSource{FileKeyRef: &v1.FileKeySelector{VolumeName: "data", Path: "../env", Key: "a=b"}}}
		}, `spec.containers[0].env[0].valueFrom.fileKeyRef.key: Invalid value: "a=b"`},
		{"fileKeyRef path backsteps", func(p *v1.Pod) {
			p.Spec.Containers[0].Env[0] = v1.EnvVar{Name: "T", ValueFrom: &v1.EnvVarSource{FileKeyRef: &v1.FileKeySelector{VolumeName: "data", Path: "../env", Key: "T"}}}
		}, `spec.containers[0].env[0].valueFrom.fileKeyRef.path: Invalid value: "../env": must not contain '..'`},
		{"fileKeyRef volume must exist", func(p *v1.Pod) {
			p.Spec.Containers[0].Env[0] = v1.EnvVar{Name: "T", ValueFrom: &v1.EnvVarSource{FileKeyRef: &v1.FileKeySelector{VolumeName: "cache", Path: "env", Key: "T"}}}
		}, `spec.containers[0].env[0].valueFrom.fileKeyRef.volumeName: Not found: "cache"`},
		{"fileKeyRef volume is an emptyDir", func(p *v1.Pod) {
			p.Spec.Volumes[0].VolumeSource = v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: "/tmp"}}
			p.Spec.Containers[0].Env[0] = v1.EnvVar{Name: "T", ValueFrom: &v1.EnvVarSource{FileKeyRef: &v1.FileKeySelector{VolumeName: "data", Path: "env", Key: "T"}}}
		}, `spec.containers[0].env[0].valueFrom.fileKeyRef.volumeName: Invalid value: "data": referenced volume must be of type emptyDir`},

		// volumes
		{"volume name DNS label", func(p *v1.Pod) { p.Spec.Volumes[0].Name = "Data" }, `spec.volumes[0].name: Invalid value: "Data": a lowercase RFC 1123 label`},
		{"duplicate volume name", func(p *v1.Pod) {
			p.Spec.Volumes = append(p.Spec.Volumes, v1.Volume{Name: "data", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}})
		}, `spec.volumes[1].name: Duplicate value: "data"`},
		{"volume without source", func(p *v1.Pod) { p.Spec.Volumes[0].VolumeSource = v1.VolumeSource{} }, `spec.volumes[0]: Required value: must specify a volume type`},
		{"volume with two sources", func(p *v1.Pod) {
			p.Spec.Volumes[0].HostPath = &v1.HostPathVolumeSource{Path: "/tmp"}
		}, `spec.volumes[0].hostPath: Forbidden: may not specify more than 1 volume type`},
		{"hostPath path required", func(p *v1.Pod) {
			p.Spec.Volumes[0].VolumeSource = v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{}}
		}, `spec.volumes[0].hostPath.path: Required value`},
		{"hostPath backsteps", func(p *v1.Pod) {
			p.Spec.Volumes[0].VolumeSource = v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: "/etc/../root"}}
		}, `spec.volumes[0].hostPath.path: Invalid value: "/etc/../root": must not contain '..'`},
		{"mount references unknown volume", func(p *v1.Pod) { p.Spec.Containers[0].VolumeMounts[0].Name = "cache" }, `spec.containers[0].volumeMounts[0].name: Not found: "cache"`},
		{"mount path unique", func(p *v1.Pod) {
			p.Spec.Containers[0].VolumeMounts = append(p.Spec.Containers[0].VolumeMounts, v1.VolumeMount{Name: "data", MountPath: "/data"})
		}, `spec.containers[0].volumeMounts[1].mountPath: Invalid value: "/data": must be unique`},
		{"mount path required", func(p *v1.Pod) { p.Spec.Containers[0].VolumeMounts[0].MountPath = "" }, `spec.containers[0].volumeMounts[0].mountPath: Required value`},
		{"subPath stays inside", func(p *v1.Pod) { p.Spec.Containers[0].VolumeMounts[0].SubPath = "../x" }, `spec.containers[0].volumeMounts[0].subPath: Invalid value: "../x": must not contain '..'`},

		// probes
		{"probe without handler", func(p *v1.Pod) { p.Spec.Containers[0].LivenessProbe.ProbeHandler = v1.ProbeHandler{} }, `spec.containers[0].livenessProbe: Required value: must specify a handler type`},
		{"probe with two handlers", func(p *v1.Pod) {
			p.Spec.Containers[0].LivenessProbe.Exec = &v1.ExecAction{Command: []string{"true"}}
		}, `spec.containers[0].livenessProbe.httpGet: Forbidden: may not specify more than 1 handler type`},
		{"exec command required", func(p *v1.Pod) {
			p.Spec.Containers[0].LivenessProbe.ProbeHandler = v1.ProbeHandler{Exec: &v1.ExecAction{}}
		}, `spec.containers[0].livenessProbe.exec.command: Required value`},
		{"liveness successThreshold", func(p *v1.Pod) { p.Spec.Containers[0].LivenessProbe.SuccessThreshold = 2 }, `spec.containers[0].livenessProbe.successThreshold: Invalid value: 2: must be 1`},
		{"probe negative period", func(p *v1.Pod) { p.Spec.Containers[0].LivenessProbe.PeriodSeconds = -1 }, `spec.containers[0].livenessProbe.periodSeconds: Invalid value: -1: must be greater than or equal to 0`},
		{"httpGet port range", func(p *v1.Pod) {
			p.Spec.Containers[0].LivenessProbe.HTTPGet.Port = intstr.FromInt32(0)
		}, `spec.containers[0].livenessProbe.httpGet.port: Invalid value: 0: must be between 1 and 65535, inclusive`},
		{"preStop sleep within grace period", func(p *v1.Pod) {
			p.Spec.Containers[0].Lifecycle = &v1.Lifecycle{PreStop: &v1.LifecycleHandler{Sleep: &v1.SleepAction{Seconds: 60}}}
		}, `spec.containers[0].lifecycle.preStop.sleep: Invalid value: 60: must be non-negative and less than terminationGracePeriodSeconds (30)`},

		// env
		{"env name required", func(p *v1.Pod) { p.Spec.Containers[0].Env[0].Name = "" }, `spec.containers[0].env[0].name: Required value`},
		{"env name with '='", func(p *v1.Pod) { p.Spec.Containers[0].Env[0].Name = "A=B" }, `spec.containers[0].env[0].name: Invalid value: "A=B"`},
		{"env valueFrom and value", func(p *v1.Pod) {
			p.Spec.Containers[0].Env[0].ValueFrom = &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.name"}}
		}, "spec.containers[0].env[0].valueFrom: Invalid value: \"\": may not be specified when `value` is not empty"},
		{"env fieldRef path", func(p *v1.Pod) {
			p.Spec.Containers[0].Env[0] = v1.EnvVar{Name: "X", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "spec.host"}}}
		}, `spec.containers[0].env[0].valueFrom.fieldRef.fieldPath: Unsupported value: "spec.host"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pod := validPod()
			tc.mutate(pod)
			errs := ValidatePod(pod)
			for _, err := range errs {
				if strings.HasPrefix(err.Error(), tc.want) {
					return
				}
			}
			t.Fatalf("want an error starting with\n  %s\ngot %v", tc.want, errs)
		})
	}
}

func TestRelaxedEnvNamesAccepted(t *testing.T) {
	pod := validPod()
	pod.Spec.Containers[0].Env[0].Name = "my.var-1"
	if errs := ValidatePod(pod); len(errs) != 0 {
		t.Fatalf("relaxed env name rejected: %v", errs)
	}
}

func TestSidecarMayHaveProbes(t *testing.T) {
	pod := validPod()
	c := container("proxy")
	c.RestartPolicy = ptr.To(v1.ContainerRestartPolicyAlways)
	c.LivenessProbe = pod.Spec.Containers[0].LivenessProbe
	pod.Spec.InitContainers = []v1.Container{c}
	if errs := ValidatePod(pod); len(errs) != 0 {
		t.Fatalf("sidecar with probe rejected: %v", errs)
	}
}

func TestHostNetworkWithMatchingPortsPasses(t *testing.T) {
	pod := validPod()
	pod.Spec.HostNetwork = true
	pod.Spec.Containers[0].Ports[0].HostPort = 80
	if errs := ValidatePod(pod); len(errs) != 0 {
		t.Fatalf("hostNetwork pod rejected: %v", errs)
	}
}

func TestErrorListFormatsLikeUpstream(t *testing.T) {
	pod := validPod()
	pod.Spec.Containers = append(pod.Spec.Containers, container("web"))
	pod.Spec.Containers[1].Image = ""
	got := ValidatePod(pod).ToAggregate().Error()
	want := `[spec.containers[1].image: Required value, spec.containers[1].name: Duplicate value: "web"]`
	if got != want {
		t.Fatalf("got %s\nwant %s", got, want)
	}
}
