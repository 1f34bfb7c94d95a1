package kuberuntime

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"
	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	crierrors "k8s.io/cri-api/pkg/errors"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/metrics"
	"github.com/nodelet/nodelet/pkg/runtime/container"
	"github.com/nodelet/nodelet/pkg/runtime/criconfig"
	"github.com/nodelet/nodelet/pkg/runtime/images"
)

// Image volumes (KEP-4639, pod.spec.volumes[].image) are mounted by the runtime, not the
// kubelet: the runtime manager pulls each one's image before the pod's containers start and
// hands the image to the runtime as a CRI mount without a host path. A runtime that does not
// know the mount's image field (containerd before 2.1) sees a mount with an empty host path
// and fails CreateContainer; that error reaches the container's status as upstream's does
// (CreateContainerError), so such a pod never runs without its volume.

// imageVolumePull is what pulling one image volume's image gave: the image its mounts
// carry, or why it could not be had (msg, and an images.Err* reason).
type imageVolumePull struct {
	spec *runtimeapi.ImageSpec
	msg  string
	err  error
}

// imageVolumes are the image volumes one container mounts, by volume name.
type imageVolumes map[string]*runtimeapi.ImageSpec

// pullImageVolumes pulls the image of each of the pod's image volumes, as upstream's
// getImageVolumes, through the image manager the container images go through: the same
// pull secrets, credential checks, back-off and events (about the pod: a volume has no
// field path). A failed pull is kept per volume: it fails only the containers that mount
// that volume. nil when the pod has no image volume.
func (m *Manager) pullImageVolumes(ctx context.Context, s *podStarter) map[string]imageVolumePull {
	var pulls map[string]imageVolumePull
	for i := range s.pod.Spec.Volumes {
		vol := &s.pod.Spec.Volumes[i]
		if vol.Image == nil {
			continue
		}
		if pulls == nil {
			pulls = map[string]imageVolumePull{}
		}
		pulls[vol.Name] = m.pullImageVolume(ctx, s, vol.Image)
	}
	return pulls
}

func (m *Manager) pullImageVolume(ctx context.Context, s *podStarter, src *v1.ImageVolumeSource) imageVolumePull {
	pod := s.pod
	ref, msg, err := m.imagePuller.EnsureImageExists(ctx, container.PodRef(pod), pod, src.Reference,
		podPullSecrets(pod, s.pullSecrets), s.sandboxConfig, imageRuntimeHandler, imageVolumePullPolicy(src))
	if err != nil {
		klog.ErrorS(err, "Failed to ensure image", "pod", klog.KObj(pod))
		return imageVolumePull{msg: msg, err: err}
	}
	klog.V(4).InfoS("Pulled image", "ref", ref, "pod", klog.KObj(pod))
	return imageVolumePull{spec: &runtimeapi.ImageSpec{
		Image:              ref,
		UserSpecifiedImage: src.Reference,
		RuntimeHandler:     imageRuntimeHandler,
		Annotations:        maps.Clone(pod.Annotations),
	}}
}

// imageVolumePullPolicy is the volume's pullPolicy, or the API server's default for it when
// a caller passed an undefaulted pod: Always for a :latest or untagged image, else
// IfNotPresent.
func imageVolumePullPolicy(src *v1.ImageVolumeSource) v1.PullPolicy {
	if src.PullPolicy != "" {
		return src.PullPolicy
	}
	return images.DefaultPullPolicy(src.Reference)
}

// imageVolumesFor picks, from the sync's pulls, the images of the volumes c mounts, as
// upstream's toKubeContainerImageVolumes. A failed pull fails the container with the
// pull's reason (ErrImagePull, ImagePullBackOff, ...) before its own image is pulled, with
// a Failed event per mount of a failed volume; the last failure is returned.
func (s *podStarter) imageVolumesFor(c *v1.Container) (imageVolumes, string, error) {
	if len(s.imagePulls) == 0 {
		return nil, "", nil
	}
	vols := imageVolumes{}
	var msg string
	var err error
	for _, vm := range c.VolumeMounts {
		pull, ok := s.imagePulls[vm.Name]
		switch {
		case !ok:
		case pull.err != nil:
			s.m.recordContainerEvent(s.pod, c, "", v1.EventTypeWarning, eventFailedToCreate, "Error: %v", grpcMessage(pull.err))
			msg, err = pull.msg, pull.err
		default:
			vols[vm.Name] = pull.spec
		}
	}
	if err != nil {
		return nil, msg, err
	}
	return vols, "", nil
}

// withImageMounts puts the mounts of c's image volumes among the host mounts the volume
// manager made for its other volumeMounts (one each, in order), so that the mounts keep the
// volumeMounts' order, as upstream's. A volumeMount of an image volume that was not pulled
// is an error: the container must not run without it.
func withImageMounts(pod *v1.Pod, c *v1.Container, hostMounts []*runtimeapi.Mount, vols imageVolumes, env map[string]string, supportsRRO bool) ([]*runtimeapi.Mount, error) {
	isImage := map[string]bool{}
	for _, vol := range pod.Spec.Volumes {
		isImage[vol.Name] = vol.Image != nil
	}
	out := make([]*runtimeapi.Mount, 0, len(hostMounts)+len(vols))
	next := 0
	for i := range c.VolumeMounts {
		vm := &c.VolumeMounts[i]
		if !isImage[vm.Name] {
			if next < len(hostMounts) {
				out = append(out, hostMounts[next])
				next++
			}
			continue
		}
		image, ok := vols[vm.Name]
		if !ok {
			return nil, fmt.Errorf("image volume %q to mount into container %q was not pulled", vm.Name, c.Name)
		}
		mount, err := imageMount(vm, image, env, supportsRRO)
		if err != nil {
			return nil, err
		}
		out = append(out, mount)
	}
	return append(out, hostMounts[next:]...), nil
}

// imageMount is the CRI mount of volumeMount vm of an image volume, as upstream's makeMounts
// makes it: the runtime mounts the image (no host path), always read-only (upstream's image
// volume plugin says so whatever the volumeMount asks) and never relabeled (the plugin is
// not SELinux-managed); the subPath, or the expanded subPathExpr, is the directory of the
// image to mount instead of its root.
func imageMount(vm *v1.VolumeMount, image *runtimeapi.ImageSpec, env map[string]string, supportsRRO bool) (*runtimeapi.Mount, error) {
	subPath, err := imageSubPath(vm, env)
	if err != nil {
		return nil, err
	}
	propagation, err := criconfig.MountPropagation(vm.MountPropagation)
	if err != nil {
		return nil, err
	}
	rro, err := criconfig.RecursiveReadOnly(vm, supportsRRO)
	if err != nil {
		return nil, fmt.Errorf("failed to resolve recursive read-only mode: %w", err)
	}
	path := vm.MountPath
	if !filepath.IsAbs(path) {
		path = filepath.Clean("/" + path)
	}
	return &runtimeapi.Mount{
		ContainerPath:     path,
		Image:             proto.Clone(image).(*runtimeapi.ImageSpec),
		ImageSubPath:      subPath,
		Readonly:          true,
		Propagation:       propagation,
		RecursiveReadOnly: rro,
	}, nil
}

// imageSubPath is the mount's subPath (subPathExpr expanded from env), checked as upstream
// checks every subPath: relative and without "..". The runtime resolves it inside the image.
func imageSubPath(vm *v1.VolumeMount, env map[string]string) (string, error) {
	subPath := vm.SubPath
	if vm.SubPathExpr != "" {
		var err error
		if subPath, err = criconfig.ExpandSubPathExpr(vm.SubPathExpr, env); err != nil {
			return "", err
		}
	}
	if subPath == "" {
		return "", nil
	}
	if filepath.IsAbs(subPath) {
		return "", fmt.Errorf("error SubPath `%s` must not be an absolute path", subPath)
	}
	if slices.Contains(strings.Split(filepath.ToSlash(subPath), "/"), "..") {
		return "", fmt.Errorf("unable to provision SubPath `%s`: must not contain '..'", subPath)
	}
	return subPath, nil
}

// supportsRecursiveReadOnly says whether the pod's runtime handler can make recursively
// read-only mounts; without Options.SupportsRecursiveReadOnly none can.
func (m *Manager) supportsRecursiveReadOnly(pod *v1.Pod) bool {
	return m.opts.SupportsRecursiveReadOnly != nil && m.opts.SupportsRecursiveReadOnly(pod)
}

// countImageVolumes counts a container's image volumes once its start was tried, as
// upstream's incrementImageVolumeMetrics: each volume as requested, and each mount of one
// as failed when the runtime's message starts with ImageVolumeMountFailed, as succeeded
// otherwise. Like upstream, a start that failed for another reason counts as a successful
// mount, and so does containerd 2.x's own failure, which it words "failed to mount image
// volume: ImageVolumeMountFailed: ...".
func countImageVolumes(err error, msg string, c *v1.Container, vols imageVolumes) {
	metrics.ImageVolumeRequestedTotal.Add(float64(len(vols)))
	failed := errors.Is(err, container.ErrCreateContainer) && strings.HasPrefix(msg, crierrors.ErrImageVolumeMountFailed.Error())
	for _, vm := range c.VolumeMounts {
		if _, ok := vols[vm.Name]; !ok {
			continue
		}
		if failed {
			metrics.ImageVolumeMountedErrorsTotal.Inc()
		} else {
			metrics.ImageVolumeMountedSucceedTotal.Inc()
		}
	}
}
