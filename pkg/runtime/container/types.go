// Package container holds nodelet's runtime-neutral view of pods and containers (upstream's
// kubecontainer): what the kubelet loop, the status manager and the runtime manager share.
package container

import (
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ContainerID is a container's ID qualified by its runtime, printed "containerd://<id>".
type ContainerID struct {
	Type string // runtime name, e.g. "containerd"
	ID   string
}

// BuildContainerID makes an ID of the given runtime type.
func BuildContainerID(typ, id string) ContainerID { return ContainerID{Type: typ, ID: id} }

// ParseContainerID reads "type://id"; a bare string becomes an ID without type.
func ParseContainerID(s string) ContainerID {
	if typ, id, ok := strings.Cut(s, "://"); ok {
		return ContainerID{Type: typ, ID: id}
	}
	return ContainerID{ID: s}
}

func (c ContainerID) String() string {
	if c.Type == "" {
		return c.ID
	}
	return c.Type + "://" + c.ID
}

// IsEmpty reports whether the ID is unset.
func (c ContainerID) IsEmpty() bool { return c.ID == "" }

// State is a container's state as the runtime reports it.
type State string

const (
	ContainerStateCreated State = "created"
	ContainerStateRunning State = "running"
	ContainerStateExited  State = "exited"
	ContainerStateUnknown State = "unknown"
)

// StateFromCRI converts the CRI state.
func StateFromCRI(s runtimeapi.ContainerState) State {
	switch s {
	case runtimeapi.ContainerState_CONTAINER_CREATED:
		return ContainerStateCreated
	case runtimeapi.ContainerState_CONTAINER_RUNNING:
		return ContainerStateRunning
	case runtimeapi.ContainerState_CONTAINER_EXITED:
		return ContainerStateExited
	default:
		return ContainerStateUnknown
	}
}

// Container is one container (or sandbox) as listed by the runtime.
type Container struct {
	ID      ContainerID
	Name    string
	Image   string
	ImageID string
	// ImageRef is the image's digest-qualified reference where known.
	ImageRef string
	// Hash is the hash of the container spec it was created from (a label).
	Hash  uint64
	State State
	// CreatedAt is in nanoseconds since the epoch, as CRI reports it.
	CreatedAt int64
}

// Pod groups a pod's sandboxes and containers, as found in the runtime.
type Pod struct {
	ID        types.UID
	Name      string
	Namespace string
	// CreatedAt is the newest sandbox's creation time in nanoseconds.
	CreatedAt  int64
	Containers []*Container
	Sandboxes  []*Container
}

// FindContainerByName returns the pod's container with that name, or nil.
func (p *Pod) FindContainerByName(name string) *Container {
	for _, c := range p.Containers {
		if c.Name == name {
			return c
		}
	}
	return nil
}

// IsEmpty reports a pod with nothing in the runtime.
func (p *Pod) IsEmpty() bool { return len(p.Containers) == 0 && len(p.Sandboxes) == 0 }

// Status is one container's detailed status (upstream's kubecontainer.Status).
type Status struct {
	ID           ContainerID
	Name         string
	State        State
	CreatedAt    time.Time
	StartedAt    time.Time
	FinishedAt   time.Time
	ExitCode     int
	Image        string
	ImageID      string
	ImageRef     string
	Hash         uint64
	RestartCount int
	Reason       string
	Message      string
	// Resources are the limits the runtime applied, where it reports them.
	Resources *runtimeapi.ContainerResources
}

// PodStatus is the runtime's view of one pod: every sandbox and container it has, newest first.
type PodStatus struct {
	ID                types.UID
	Name              string
	Namespace         string
	IPs               []string
	ContainerStatuses []*Status
	SandboxStatuses   []*runtimeapi.PodSandboxStatus
	// TimeStamp is when the status was read, for the pod cache.
	TimeStamp time.Time
}

// FindContainerStatusByName returns the newest status of the named container, or nil.
func (s *PodStatus) FindContainerStatusByName(name string) *Status {
	for _, c := range s.ContainerStatuses {
		if c.Name == name {
			return c
		}
	}
	return nil
}

// RunningContainerStatuses lists the running containers.
func (s *PodStatus) RunningContainerStatuses() []*Status {
	var out []*Status
	for _, c := range s.ContainerStatuses {
		if c.State == ContainerStateRunning {
			out = append(out, c)
		}
	}
	return out
}

// ConvertPodStatusToRunningPod keeps only what is running (or not yet exited) in a Pod, so
// it can be killed.
func ConvertPodStatusToRunningPod(runtimeName string, s *PodStatus) Pod {
	pod := Pod{ID: s.ID, Name: s.Name, Namespace: s.Namespace}
	for _, c := range s.ContainerStatuses {
		if c.State != ContainerStateRunning && c.State != ContainerStateCreated && c.State != ContainerStateUnknown {
			continue
		}
		pod.Containers = append(pod.Containers, &Container{ID: c.ID, Name: c.Name, Image: c.Image, ImageID: c.ImageID, ImageRef: c.ImageRef, Hash: c.Hash, State: c.State})
	}
	for _, sb := range s.SandboxStatuses {
		state := ContainerStateExited
		if sb.State == runtimeapi.PodSandboxState_SANDBOX_READY {
			state = ContainerStateRunning
		}
		pod.Sandboxes = append(pod.Sandboxes, &Container{ID: BuildContainerID(runtimeName, sb.Id), State: state})
	}
	return pod
}

// GCPolicy is the container garbage collection policy (upstream's GCPolicy).
type GCPolicy struct {
	// MinAge is the minimum age at which a dead container can be collected.
	MinAge time.Duration
	// MaxPerPodContainer is how many dead instances of one container are kept; <0 means no limit.
	MaxPerPodContainer int
	// MaxContainers is how many dead containers are kept in all; <0 means no limit.
	MaxContainers int
}

// ImageSpec names an image for the runtime.
type ImageSpec struct {
	Image          string
	RuntimeHandler string
	Annotations    map[string]string
}

// Image is an image present on the node.
type Image struct {
	ID          string
	RepoTags    []string
	RepoDigests []string
	Size        int64
	Spec        ImageSpec
	Pinned      bool
}

// String prints a pod for logs.
func (p *Pod) String() string { return fmt.Sprintf("%s/%s(%s)", p.Namespace, p.Name, p.ID) }
