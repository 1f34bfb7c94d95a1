package kubetypes

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The names are on the wire (pod annotations, read by other kubelets and tools): upstream's.
func TestWireNames(t *testing.T) {
	for got, want := range map[string]string{
		ConfigSourceAnnotationKey:    "kubernetes.io/config.source",
		ConfigMirrorAnnotationKey:    "kubernetes.io/config.mirror",
		ConfigFirstSeenAnnotationKey: "kubernetes.io/config.seen",
		ConfigHashAnnotationKey:      "kubernetes.io/config.hash",
		FileSource:                   "file",
		HTTPSource:                   "http",
		APIServerSource:              "api",
		AllSource:                    "*",
	} {
		if got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	}
}

func TestPodSourceAndStaticPods(t *testing.T) {
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "1", Name: "a"}}
	if _, err := GetPodSource(pod); err == nil {
		t.Error("GetPodSource found a source on an unannotated pod")
	}
	if IsStaticPod(pod) {
		t.Error("unannotated pod is static")
	}
	for _, source := range []string{FileSource, HTTPSource} {
		pod.Annotations = map[string]string{"kubernetes.io/config.source": source}
		if src, err := GetPodSource(pod); err != nil || src != source || !IsStaticPod(pod) {
			t.Errorf("%s pod: source %q err %v static %v", source, src, err, IsStaticPod(pod))
		}
	}
	pod.Annotations = map[string]string{"kubernetes.io/config.source": "api"}
	if IsStaticPod(pod) {
		t.Error("API server pod is static")
	}
}

func TestMirrorPods(t *testing.T) {
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "1", Name: "a"}}
	if IsMirrorPod(pod) {
		t.Error("pod without annotations is a mirror pod")
	}
	pod.Annotations = map[string]string{"kubernetes.io/config.source": "api"}
	if IsMirrorPod(pod) {
		t.Error("pod without mirror annotation is a mirror pod")
	}
	pod.Annotations["kubernetes.io/config.mirror"] = ""
	if !IsMirrorPod(pod) {
		t.Error("pod with an empty mirror annotation is not a mirror pod")
	}
}

func TestIsCriticalPod(t *testing.T) {
	api := map[string]string{ConfigSourceAnnotationKey: APIServerSource}
	high, low := int32(SystemCriticalPriority), int32(SystemCriticalPriority-1)
	for _, c := range []struct {
		name string
		pod  v1.Pod
		want bool
	}{
		{"api pod", v1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: api}}, false},
		{"static pod", v1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{ConfigSourceAnnotationKey: FileSource}}}, true},
		{"mirror pod", v1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{ConfigSourceAnnotationKey: APIServerSource, ConfigMirrorAnnotationKey: "h"}}}, true},
		{"system-critical priority", v1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: api}, Spec: v1.PodSpec{Priority: &high}}, true},
		{"just below it", v1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: api}, Spec: v1.PodSpec{Priority: &low}}, false},
	} {
		if got := IsCriticalPod(&c.pod); got != c.want {
			t.Errorf("%s: IsCriticalPod = %v, want %v", c.name, got, c.want)
		}
	}
}
