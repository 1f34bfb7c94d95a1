// Package testpods makes the pods the e2e tests and benchmarks run by the dozen.
package testpods

import (
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// Image is the busybox every test rig has imported (hack/runtime.sh).
const Image = "docker.io/library/busybox:1.36"

// SleepScript sleeps without using CPU and exits at once on SIGTERM (a shell as PID 1
// would otherwise ignore it and wait out the grace period), so a deletion measures the
// kubelet rather than the grace period.
const SleepScript = `trap "exit 0" TERM; sleep 3600 & wait`

// Sleeper is a pod of one busybox container "app" running SleepScript, bound to node when
// one is given, with no service account token and DNS from the node (the project's
// control plane runs no cluster DNS), a 5 s grace period and the given labels.
func Sleeper(namespace, name, node string, labels map[string]string) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: labels},
		Spec: v1.PodSpec{
			NodeName:                      node,
			AutomountServiceAccountToken:  ptr.To(false),
			TerminationGracePeriodSeconds: ptr.To[int64](5),
			DNSPolicy:                     v1.DNSDefault,
			Containers: []v1.Container{{
				Name: "app", Image: Image, ImagePullPolicy: v1.PullIfNotPresent,
				Command: []string{"sh", "-c", SleepScript},
			}},
		},
	}
}
