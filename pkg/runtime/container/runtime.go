package container

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"net/url"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/flowcontrol"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/dump"
)

// Runtime is what the kubelet loop needs from the runtime manager (upstream's
// kubecontainer.Runtime): read state, converge a pod, kill a pod, collect garbage.
type Runtime interface {
	// Type is the runtime's name, e.g. "containerd"; it prefixes container IDs.
	Type() string
	Version(ctx context.Context) (string, error)
	APIVersion(ctx context.Context) (string, error)
	Status(ctx context.Context) (*runtimeapi.RuntimeStatus, error)
	// GetPods lists pods found in the runtime; all=false keeps only running containers
	// and ready sandboxes.
	GetPods(ctx context.Context, all bool) ([]*Pod, error)
	// GetPod lists one pod's sandboxes and containers, in every state; nil when the
	// runtime has none.
	GetPod(ctx context.Context, uid types.UID) (*Pod, error)
	GetPodStatus(ctx context.Context, uid types.UID, name, namespace string) (*PodStatus, error)
	// GetPodStatusOf is GetPodStatus of the sandboxes and containers a listing (GetPods,
	// GetPod) found for the pod, without listing them again.
	GetPodStatusOf(ctx context.Context, pod *Pod) (*PodStatus, error)
	// SyncPod makes the runtime match pod; backOff rate-limits restarts (CrashLoopBackOff).
	SyncPod(ctx context.Context, pod *v1.Pod, status *PodStatus, pullSecrets []v1.Secret, backOff *flowcontrol.Backoff) PodSyncResult
	// KillPod stops every container and sandbox of runningPod; pod may be nil when only
	// the runtime's labels are known. gracePeriodOverride wins over the pod's own.
	KillPod(ctx context.Context, pod *v1.Pod, runningPod Pod, gracePeriodOverride *int64) error
	GarbageCollect(ctx context.Context, policy GCPolicy, allSourcesReady, evictNonDeletedPods bool) error
	DeleteContainer(ctx context.Context, id ContainerID) error
	GetContainerLogs(ctx context.Context, pod *v1.Pod, id ContainerID, opts *v1.PodLogOptions, stdout, stderr io.Writer) error
	UpdatePodCIDR(ctx context.Context, cidr string) error
	CheckpointContainer(ctx context.Context, req *runtimeapi.CheckpointContainerRequest) error
	ListMetricDescriptors(ctx context.Context) ([]*runtimeapi.MetricDescriptor, error)
	ListPodSandboxMetrics(ctx context.Context) ([]*runtimeapi.PodSandboxMetrics, error)
	ImageService
}

// ImageService is the image half of the runtime manager.
type ImageService interface {
	PullImage(ctx context.Context, image ImageSpec, pullSecrets []v1.Secret, sandboxConfig *runtimeapi.PodSandboxConfig) (string, error)
	// GetImageRef returns the image's ID if present, "" if not.
	GetImageRef(ctx context.Context, image ImageSpec) (string, error)
	ListImages(ctx context.Context) ([]Image, error)
	RemoveImage(ctx context.Context, image ImageSpec) error
	ImageStats(ctx context.Context) (*ImageStats, error)
}

// ImageStats sums the images on the node.
type ImageStats struct {
	TotalStorageBytes uint64
}

// StreamingRuntime hands out the runtime's streaming URLs for exec, attach and port-forward.
type StreamingRuntime interface {
	GetExec(ctx context.Context, id ContainerID, cmd []string, stdin, stdout, stderr, tty bool) (*url.URL, error)
	GetAttach(ctx context.Context, id ContainerID, stdin, stdout, stderr, tty bool) (*url.URL, error)
	GetPortForward(ctx context.Context, podName, podNamespace string, podUID types.UID, ports []int32) (*url.URL, error)
}

// CommandRunner runs a command in a container and returns its combined output.
type CommandRunner interface {
	RunInContainer(ctx context.Context, id ContainerID, cmd []string, timeout time.Duration) ([]byte, error)
}

// HashContainer is upstream's container hash, so that a container started by either
// kubelet is kept by the other: FNV-32a over the hash dump of the JSON of the container's
// name and image. Only these two are hashed because they are the only fields of a running
// container whose change requires a new container (the image may be updated in place;
// resources are resized in place; everything else in a pod's spec is immutable, and a
// static pod whose manifest changes gets a new UID). The value is written to the
// io.kubernetes.container.hash annotation in hexadecimal.
func HashContainer(c *v1.Container) uint64 {
	fields, _ := json.Marshal(map[string]string{"name": c.Name, "image": c.Image})
	h := fnv.New32a()
	fmt.Fprintf(h, "%v", dump.ForHash(fields))
	return uint64(h.Sum32())
}

// GetContainerSpec finds the named container among the pod's containers, init containers
// and ephemeral containers.
func GetContainerSpec(pod *v1.Pod, name string) *v1.Container {
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name == name {
			return &pod.Spec.Containers[i]
		}
	}
	for i := range pod.Spec.InitContainers {
		if pod.Spec.InitContainers[i].Name == name {
			return &pod.Spec.InitContainers[i]
		}
	}
	for i := range pod.Spec.EphemeralContainers {
		if pod.Spec.EphemeralContainers[i].Name == name {
			c := v1.Container(pod.Spec.EphemeralContainers[i].EphemeralContainerCommon)
			return &c
		}
	}
	return nil
}
