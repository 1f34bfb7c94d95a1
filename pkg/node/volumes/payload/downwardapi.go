package payload

import (
	"fmt"
	"math"
	"path/filepath"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"

	"github.com/nodelet/nodelet/pkg/node/volumes/atomic"
	"github.com/nodelet/nodelet/pkg/runtime/criconfig"
)

// DownwardAPI returns the files of a downwardAPI volume. nodeAllocatable
// stands in for a container's unset CPU, memory and ephemeral-storage
// limits. Every item's error is reported, joined as upstream joins them.
func DownwardAPI(pod *v1.Pod, src *v1.DownwardAPIVolumeSource, nodeAllocatable v1.ResourceList) (Files, error) {
	return downwardAPIFiles(pod, src.Items, modeOr(src.DefaultMode, DefaultMode), nodeAllocatable)
}

func downwardAPIFiles(pod *v1.Pod, items []v1.DownwardAPIVolumeFile, defaultMode int32, nodeAllocatable v1.ResourceList) (Files, error) {
	files := make(Files, len(items))
	var errs []error
	for _, item := range items {
		value, err := downwardAPIValue(pod, item, nodeAllocatable)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		files[filepath.Clean(item.Path)] = atomic.FileProjection{Data: []byte(value), Mode: modeOr(item.Mode, defaultMode)}
	}
	if err := utilerrors.NewAggregate(errs); err != nil {
		return nil, err
	}
	return files, nil
}

// downwardAPIValue is one item's content; an item with neither reference
// is an empty file, as upstream writes it.
func downwardAPIValue(pod *v1.Pod, item v1.DownwardAPIVolumeFile, nodeAllocatable v1.ResourceList) (string, error) {
	switch {
	case item.FieldRef != nil:
		return criconfig.PodMetadataField(pod, item.FieldRef.FieldPath)
	case item.ResourceFieldRef != nil:
		return containerResourceValue(pod, item.ResourceFieldRef, nodeAllocatable)
	}
	return "", nil
}

// containerResourceValue reads a named container's limit or request,
// divided by the divisor (default 1) and rounded up. Unset or zero CPU,
// memory and ephemeral-storage limits read as the node's allocatable.
func containerResourceValue(pod *v1.Pod, fs *v1.ResourceFieldSelector, nodeAllocatable v1.ResourceList) (string, error) {
	c := findContainer(pod, fs.ContainerName)
	if c == nil {
		return "", fmt.Errorf("container %s not found", fs.ContainerName)
	}
	divisor := resource.MustParse("1")
	if !fs.Divisor.IsZero() {
		divisor = fs.Divisor
	}
	kind, name, _ := strings.Cut(fs.Resource, ".")
	var list v1.ResourceList
	switch kind {
	case "limits":
		list = limitsWithAllocatable(c.Resources.Limits, nodeAllocatable)
	case "requests":
		list = c.Resources.Requests
	default:
		return "", fmt.Errorf("unsupported container resource : %v", fs.Resource)
	}
	q := list[v1.ResourceName(name)]
	switch {
	case name == string(v1.ResourceCPU):
		return ceilDiv(q.MilliValue(), divisor.MilliValue()), nil
	case name == string(v1.ResourceMemory), name == string(v1.ResourceEphemeralStorage),
		strings.HasPrefix(name, v1.ResourceHugePagesPrefix):
		return ceilDiv(q.Value(), divisor.Value()), nil
	}
	return "", fmt.Errorf("unsupported container resource : %v", fs.Resource)
}

// findContainer looks among the regular, then the init containers, as
// upstream does for volumes.
func findContainer(pod *v1.Pod, name string) *v1.Container {
	for _, list := range [][]v1.Container{pod.Spec.Containers, pod.Spec.InitContainers} {
		for i := range list {
			if list[i].Name == name {
				return &list[i]
			}
		}
	}
	return nil
}

// limitsWithAllocatable fills unset or zero CPU, memory and
// ephemeral-storage limits from the node's allocatable. Hugepages always
// have a limit, so they are left alone.
func limitsWithAllocatable(limits, allocatable v1.ResourceList) v1.ResourceList {
	out := make(v1.ResourceList, len(limits)+3)
	for k, v := range limits {
		out[k] = v
	}
	for _, name := range []v1.ResourceName{v1.ResourceCPU, v1.ResourceMemory, v1.ResourceEphemeralStorage} {
		if q, ok := out[name]; ok && !q.IsZero() {
			continue
		}
		if a, ok := allocatable[name]; ok {
			out[name] = a
		}
	}
	return out
}

func ceilDiv(value, divisor int64) string {
	return strconv.FormatInt(int64(math.Ceil(float64(value)/float64(divisor))), 10)
}
