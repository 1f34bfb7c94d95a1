package criconfig

import (
	"context"
	"errors"
	"fmt"
	goruntime "runtime"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func envString(envs []*runtimeapi.KeyValue) string {
	parts := make([]string, len(envs))
	for i, e := range envs {
		parts[i] = e.Key + "=" + string(e.Value)
	}
	return strings.Join(parts, " ")
}

func fieldEnv(name, path string) v1.EnvVar {
	return v1.EnvVar{Name: name, ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{APIVersion: "v1", FieldPath: path}}}
}

func resourceEnv(name, container, res, divisor string) v1.EnvVar {
	sel := &v1.ResourceFieldSelector{ContainerName: container, Resource: res}
	if divisor != "" {
		sel.Divisor = resource.MustParse(divisor)
	}
	return v1.EnvVar{Name: name, ValueFrom: &v1.EnvVarSource{ResourceFieldRef: sel}}
}

func envPod(env ...v1.EnvVar) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "prod", UID: "u-1",
			Labels:      map[string]string{"app": "web", "tier": "front"},
			Annotations: map[string]string{"note": `say "hi"`}},
		Spec: v1.PodSpec{
			NodeName: "node-1", ServiceAccountName: "sa",
			Containers: []v1.Container{
				{Name: "main", Env: env, Resources: v1.ResourceRequirements{
					Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("250m"), v1.ResourceMemory: resource.MustParse("64Mi")},
					Limits:   v1.ResourceList{v1.ResourceMemory: resource.MustParse("128Mi")},
				}},
				{Name: "other", Resources: v1.ResourceRequirements{
					Limits: v1.ResourceList{v1.ResourceCPU: resource.MustParse("1500m"), v1.ResourceEphemeralStorage: resource.MustParse("1Gi")},
				}},
			},
		},
	}
}

var envOpts = ContainerOptions{
	PodIP: "10.88.0.5", PodIPs: []string{"10.88.0.5", "fd00::5"},
	HostIPs: []string{"192.168.1.10", "fd00::10"}, MachineMemory: 8 << 30,
}

func TestMakeEnvironmentVariables(t *testing.T) {
	ncpu := goruntime.NumCPU()
	tests := []struct {
		name string
		env  []v1.EnvVar
		want string
	}{
		{"literal and expansion", []v1.EnvVar{
			{Name: "A", Value: "x"},
			{Name: "B", Value: "$(A)-y"},
			{Name: "C", Value: "$$(A)"},
			{Name: "D", Value: "$(LATER) $(UNKNOWN)"},
			{Name: "LATER", Value: "late"},
			{Name: "E"},
		}, "A=x B=x-y C=$(A) D=$(LATER) $(UNKNOWN) LATER=late E="},
		{"redeclared keeps first position, last value", []v1.EnvVar{
			{Name: "A", Value: "1"}, {Name: "B", Value: "$(A)"}, {Name: "A", Value: "2"}, {Name: "C", Value: "$(A)"},
		}, "A=2 B=1 C=2"},
		{"field refs", []v1.EnvVar{
			fieldEnv("NAME", "metadata.name"), fieldEnv("NS", "metadata.namespace"), fieldEnv("UID", "metadata.uid"),
			fieldEnv("APP", "metadata.labels['app']"), fieldEnv("NOTE", "metadata.annotations['note']"),
			fieldEnv("NOPE", "metadata.labels['missing']"),
			fieldEnv("NODE", "spec.nodeName"), fieldEnv("HOST", "spec.host"), fieldEnv("SA", "spec.serviceAccountName"),
			fieldEnv("HOSTIP", "status.hostIP"), fieldEnv("HOSTIPS", "status.hostIPs"),
			fieldEnv("PODIP", "status.podIP"), fieldEnv("PODIPS", "status.podIPs"),
		}, `NAME=web NS=prod UID=u-1 APP=web NOTE=say "hi" NOPE= NODE=node-1 HOST=node-1 SA=sa ` +
			`HOSTIP=192.168.1.10 HOSTIPS=192.168.1.10,fd00::10 PODIP=10.88.0.5 PODIPS=10.88.0.5,fd00::5`},
		{"whole label map", []v1.EnvVar{fieldEnv("L", "metadata.labels")}, "L=app=\"web\"\ntier=\"front\""},
		{"field ref then expansion", []v1.EnvVar{fieldEnv("NAME", "metadata.name"), {Name: "URL", Value: "http://$(NAME).$(NS)"}},
			"NAME=web URL=http://web.$(NS)"},
		{"resource refs", []v1.EnvVar{
			resourceEnv("CPU_REQ", "", "requests.cpu", "1m"),
			resourceEnv("CPU_REQ_CORES", "", "requests.cpu", ""), // rounded up
			resourceEnv("MEM_REQ", "", "requests.memory", "1Mi"),
			resourceEnv("MEM_LIM", "", "limits.memory", ""),
			resourceEnv("CPU_LIM", "", "limits.cpu", ""), // node's CPUs
			resourceEnv("OTHER_CPU_LIM", "other", "limits.cpu", "100m"),
			resourceEnv("OTHER_MEM_LIM", "other", "limits.memory", "1Gi"), // node's memory
			resourceEnv("OTHER_DISK", "other", "limits.ephemeral-storage", "1Mi"),
		}, fmt.Sprintf("CPU_REQ=250 CPU_REQ_CORES=1 MEM_REQ=64 MEM_LIM=134217728 CPU_LIM=%d OTHER_CPU_LIM=15 OTHER_MEM_LIM=8 OTHER_DISK=1024", ncpu)},
		{"optional secret and config map skipped", []v1.EnvVar{
			{Name: "S", ValueFrom: &v1.EnvVarSource{SecretKeyRef: &v1.SecretKeySelector{LocalObjectReference: v1.LocalObjectReference{Name: "s"}, Key: "k", Optional: ptrTo(true)}}},
			{Name: "CM", ValueFrom: &v1.EnvVarSource{ConfigMapKeyRef: &v1.ConfigMapKeySelector{LocalObjectReference: v1.LocalObjectReference{Name: "cm"}, Key: "k", Optional: ptrTo(true)}}},
			{Name: "A", Value: "$(S)"},
		}, "A=$(S)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := envPod(tt.env...)
			envs, err := MakeEnvironmentVariables(context.Background(), pod, &pod.Spec.Containers[0], envOpts)
			if err != nil {
				t.Fatal(err)
			}
			if got := envString(envs); got != tt.want {
				t.Errorf("env\n got %q\nwant %q", got, tt.want)
			}
		})
	}
}

func TestMakeEnvironmentVariablesErrors(t *testing.T) {
	secret := v1.EnvVar{Name: "S", ValueFrom: &v1.EnvVarSource{SecretKeyRef: &v1.SecretKeySelector{LocalObjectReference: v1.LocalObjectReference{Name: "creds"}, Key: "k"}}}
	configMap := v1.EnvVar{Name: "CM", ValueFrom: &v1.EnvVarSource{ConfigMapKeyRef: &v1.ConfigMapKeySelector{LocalObjectReference: v1.LocalObjectReference{Name: "conf"}, Key: "k"}}}
	tests := []struct {
		name    string
		env     []v1.EnvVar
		envFrom []v1.EnvFromSource
		opts    ContainerOptions
		want    string
		cluster bool
	}{
		{name: "secret", env: []v1.EnvVar{secret}, want: `couldn't get secret prod/creds for env var "S": secret/configmap env sources need cluster mode`, cluster: true},
		{name: "config map", env: []v1.EnvVar{configMap}, want: `couldn't get configMap prod/conf for env var "CM"`, cluster: true},
		{name: "envFrom secret", envFrom: []v1.EnvFromSource{{SecretRef: &v1.SecretEnvSource{LocalObjectReference: v1.LocalObjectReference{Name: "all"}}}},
			want: "couldn't get secret prod/all", cluster: true},
		{name: "envFrom config map", envFrom: []v1.EnvFromSource{{ConfigMapRef: &v1.ConfigMapEnvSource{LocalObjectReference: v1.LocalObjectReference{Name: "all"}}}},
			want: "couldn't get configMap prod/all", cluster: true},
		{name: "unsupported field", env: []v1.EnvVar{fieldEnv("P", "status.phase")}, want: "unsupported fieldPath: status.phase"},
		{name: "subscript on name", env: []v1.EnvVar{fieldEnv("P", "metadata.name['x']")}, want: `fieldPath "metadata.name['x']" does not support subscript`},
		{name: "bad label key", env: []v1.EnvVar{fieldEnv("P", "metadata.labels['a b']")}, want: "invalid key subscript in metadata.labels['a b']"},
		{name: "api version", env: []v1.EnvVar{{Name: "P", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{APIVersion: "v2", FieldPath: "metadata.name"}}}},
			want: "unsupported pod version: v2"},
		{name: "host IP unknown", env: []v1.EnvVar{fieldEnv("H", "status.hostIP")}, opts: ContainerOptions{}, want: "status.hostIP: the node's IP is not known"},
		{name: "unknown container", env: []v1.EnvVar{resourceEnv("R", "ghost", "limits.cpu", "")}, want: "container ghost not found"},
		{name: "unknown resource", env: []v1.EnvVar{resourceEnv("R", "", "limits.gpu", "")}, want: "unsupported container resource : limits.gpu"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := envPod(tt.env...)
			pod.Spec.Containers[0].EnvFrom = tt.envFrom
			_, err := MakeEnvironmentVariables(context.Background(), pod, &pod.Spec.Containers[0], tt.opts)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want one containing %q", err, tt.want)
			}
			if errors.Is(err, ErrNeedsClusterMode) != tt.cluster {
				t.Errorf("errors.Is(err, ErrNeedsClusterMode) = %v, want %v", !tt.cluster, tt.cluster)
			}
		})
	}
}

func TestOptionalEnvFromIsSkipped(t *testing.T) {
	pod := envPod(v1.EnvVar{Name: "A", Value: "1"})
	pod.Spec.Containers[0].EnvFrom = []v1.EnvFromSource{
		{SecretRef: &v1.SecretEnvSource{LocalObjectReference: v1.LocalObjectReference{Name: "s"}, Optional: ptrTo(true)}},
		{ConfigMapRef: &v1.ConfigMapEnvSource{LocalObjectReference: v1.LocalObjectReference{Name: "c"}, Optional: ptrTo(true)}},
	}
	envs, err := MakeEnvironmentVariables(context.Background(), pod, &pod.Spec.Containers[0], envOpts)
	if err != nil || envString(envs) != "A=1" {
		t.Errorf("got %q, %v; want A=1", envString(envs), err)
	}
}

func TestNodeNameFallsBackToOptions(t *testing.T) {
	pod := envPod(fieldEnv("NODE", "spec.nodeName"))
	pod.Spec.NodeName = ""
	opts := envOpts
	opts.NodeName = "from-options"
	envs, err := MakeEnvironmentVariables(context.Background(), pod, &pod.Spec.Containers[0], opts)
	if err != nil || envString(envs) != "NODE=from-options" {
		t.Errorf("got %q, %v; want the options' node name", envString(envs), err)
	}
}
