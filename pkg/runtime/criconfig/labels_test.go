package criconfig

import (
	"reflect"
	"strconv"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nodelet/nodelet/pkg/runtime/container"
)

func ptrTo[T any](v T) *T { return &v }

func TestPodLabelsRoundTrip(t *testing.T) {
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{
		Name: "web", Namespace: "prod", UID: "u-1",
		Labels:      map[string]string{"app": "web", "tier": "front"},
		Annotations: map[string]string{"a": "b"},
	}}
	labels := NewPodLabels(pod)
	want := map[string]string{"app": "web", "tier": "front",
		"io.kubernetes.pod.name": "web", "io.kubernetes.pod.namespace": "prod", "io.kubernetes.pod.uid": "u-1"}
	if !reflect.DeepEqual(labels, want) {
		t.Fatalf("NewPodLabels = %v, want %v", labels, want)
	}
	labels["extra"] = "x" // the pod's own labels must not be shared
	if _, ok := pod.Labels["extra"]; ok {
		t.Error("NewPodLabels aliases the pod's label map")
	}
	delete(labels, "extra")

	info := GetPodSandboxInfoFromLabels(labels)
	wantInfo := &LabeledPodSandboxInfo{Labels: pod.Labels, PodName: "web", PodNamespace: "prod", PodUID: "u-1"}
	if !reflect.DeepEqual(info, wantInfo) {
		t.Errorf("GetPodSandboxInfoFromLabels = %+v, want %+v", info, wantInfo)
	}
	if got := NewPodAnnotations(pod); !reflect.DeepEqual(got, pod.Annotations) {
		t.Errorf("NewPodAnnotations = %v", got)
	}
}

func TestContainerLabelsRoundTrip(t *testing.T) {
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "prod", UID: "u-1", Labels: map[string]string{"app": "web"}}}
	c := &v1.Container{Name: "nginx"}
	labels := NewContainerLabels(c, pod)
	if len(labels) != 4 || labels[ContainerNameLabel] != "nginx" || labels["app"] != "" {
		t.Errorf("NewContainerLabels = %v: want exactly the 4 identity keys", labels)
	}
	got := GetContainerInfoFromLabels(labels)
	want := &LabeledContainerInfo{ContainerName: "nginx", PodName: "web", PodNamespace: "prod", PodUID: "u-1"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("GetContainerInfoFromLabels = %+v, want %+v", got, want)
	}
	if got := GetContainerInfoFromLabels(map[string]string{}); *got != (LabeledContainerInfo{}) {
		t.Errorf("missing labels give %+v, want zero values", got)
	}
}

func TestContainerAnnotationsRoundTrip(t *testing.T) {
	preStop := &v1.LifecycleHandler{
		Exec:    &v1.ExecAction{Command: []string{"sh", "-c", "sleep 5"}},
		HTTPGet: nil,
	}
	tests := []struct {
		name string
		pod  *v1.Pod
		c    *v1.Container
		want AnnotatedContainerInfo
	}{
		{
			name: "minimal",
			pod:  &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}},
			c:    &v1.Container{Name: "c"},
			want: AnnotatedContainerInfo{RestartCount: 3},
		},
		{
			name: "everything",
			pod: &v1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: "p", DeletionGracePeriodSeconds: ptrTo[int64](10)},
				Spec:       v1.PodSpec{TerminationGracePeriodSeconds: ptrTo[int64](45)},
			},
			c: &v1.Container{
				Name:                     "c",
				TerminationMessagePath:   "/dev/termination-log",
				TerminationMessagePolicy: v1.TerminationMessageFallbackToLogsOnError,
				Lifecycle:                &v1.Lifecycle{PreStop: preStop},
				Ports: []v1.ContainerPort{
					{Name: "http", ContainerPort: 80, Protocol: v1.ProtocolTCP},
					{ContainerPort: 53, HostPort: 5353, Protocol: v1.ProtocolUDP, HostIP: "127.0.0.1"},
				},
			},
			want: AnnotatedContainerInfo{
				RestartCount:              3,
				PodDeletionGracePeriod:    ptrTo[int64](10),
				PodTerminationGracePeriod: ptrTo[int64](45),
				TerminationMessagePath:    "/dev/termination-log",
				TerminationMessagePolicy:  v1.TerminationMessageFallbackToLogsOnError,
				PreStopHandler:            preStop,
				ContainerPorts: []v1.ContainerPort{
					{Name: "http", ContainerPort: 80, Protocol: v1.ProtocolTCP},
					{ContainerPort: 53, HostPort: 5353, Protocol: v1.ProtocolUDP, HostIP: "127.0.0.1"},
				},
			},
		},
		{
			name: "http preStop",
			pod:  &v1.Pod{},
			c: &v1.Container{Name: "c", Lifecycle: &v1.Lifecycle{PreStop: &v1.LifecycleHandler{
				HTTPGet: &v1.HTTPGetAction{Path: "/quit", Port: intstr.FromString("http")},
			}}},
			want: AnnotatedContainerInfo{RestartCount: 3, PreStopHandler: &v1.LifecycleHandler{
				HTTPGet: &v1.HTTPGetAction{Path: "/quit", Port: intstr.FromString("http")},
			}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			annotations := NewContainerAnnotations(tt.c, tt.pod, 3)
			if want := strconv.FormatUint(container.HashContainer(tt.c), 16); annotations[ContainerHashLabel] != want {
				t.Errorf("hash annotation %q, want hex %q", annotations[ContainerHashLabel], want)
			}
			got := GetContainerInfoFromAnnotations(annotations)
			tt.want.Hash = container.HashContainer(tt.c)
			if !reflect.DeepEqual(*got, tt.want) {
				t.Errorf("round trip:\n got %+v\nwant %+v\nannotations %v", *got, tt.want, annotations)
			}
		})
	}
}

func TestContainerAnnotationsExactKeys(t *testing.T) {
	pod := &v1.Pod{Spec: v1.PodSpec{TerminationGracePeriodSeconds: ptrTo[int64](30)}}
	c := &v1.Container{Name: "c", TerminationMessagePath: "/dev/termination-log", TerminationMessagePolicy: v1.TerminationMessageReadFile,
		Ports: []v1.ContainerPort{{ContainerPort: 80, Protocol: v1.ProtocolTCP}}}
	got := NewContainerAnnotations(c, pod, 0)
	want := map[string]string{
		"io.kubernetes.container.hash":                     strconv.FormatUint(container.HashContainer(c), 16),
		"io.kubernetes.container.restartCount":             "0",
		"io.kubernetes.container.terminationMessagePath":   "/dev/termination-log",
		"io.kubernetes.container.terminationMessagePolicy": "File",
		"io.kubernetes.pod.terminationGracePeriod":         "30",
		"io.kubernetes.container.ports":                    `[{"containerPort":80,"protocol":"TCP"}]`,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("NewContainerAnnotations =\n%v\nwant\n%v", got, want)
	}
}

func TestContainerInfoFromBadAnnotations(t *testing.T) {
	got := GetContainerInfoFromAnnotations(map[string]string{
		ContainerHashLabel:                   "not-hex",
		ContainerRestartCountLabel:           "x",
		PodTerminationGracePeriodLabel:       "soon",
		ContainerPreStopHandlerLabel:         "{",
		ContainerPortsLabel:                  "[1]",
		ContainerTerminationMessagePathLabel: "/t",
	})
	want := AnnotatedContainerInfo{TerminationMessagePath: "/t"}
	if !reflect.DeepEqual(*got, want) {
		t.Errorf("bad annotations give %+v, want %+v (zero values, other fields kept)", *got, want)
	}
}
