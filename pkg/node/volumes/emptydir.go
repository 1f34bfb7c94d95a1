package volumes

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/klog/v2"

	"golang.org/x/sys/unix"

	"github.com/nodelet/nodelet/pkg/node/volumes/mountpoint"
	"github.com/nodelet/nodelet/pkg/node/volumes/ownership"
)

// emptyDirPerm lets every user in the pod's containers write the volume, as
// upstream does: containers may run as any UID.
const emptyDirPerm os.FileMode = 0o777

// setUpEmptyDir creates the volume's directory, on tmpfs for medium Memory.
// A new one gets the pod's fsGroup, as upstream sets it once, when the volume is made.
func (m *Manager) setUpEmptyDir(pod *v1.Pod, vol *v1.Volume) (err error) {
	dir := m.emptyDirPath(pod.UID, vol.Name)
	if fsGroup := podFSGroup(pod); fsGroup != nil && !pathExists(dir) {
		defer func() {
			if err == nil {
				err = ownership.Set(dir, fsGroup, nil, false)
			}
		}()
	}
	switch medium := vol.EmptyDir.Medium; {
	case medium == v1.StorageMediumDefault:
		return makeEmptyDir(dir)
	case medium == v1.StorageMediumMemory:
		return m.setUpTmpfs(dir, tmpfsSize(pod, vol.EmptyDir))
	case strings.HasPrefix(string(medium), string(v1.StorageMediumHugePages)):
		return m.setUpHugePages(pod, dir, medium)
	default:
		return fmt.Errorf("unknown storage medium %q", medium)
	}
}

// makeEmptyDir creates dir with emptyDirPerm. Its parents get dirPerm. The
// mode is set explicitly because the process umask would otherwise clear the
// group and other write bits.
func makeEmptyDir(dir string) error {
	if err := mkdirAll(filepath.Dir(dir)); err != nil {
		return err
	}
	if err := os.Mkdir(dir, emptyDirPerm); err != nil && !os.IsExist(err) {
		return err
	}
	info, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	if !info.IsDir() {
		return fmt.Errorf("%s exists and is not a directory", dir)
	}
	if info.Mode().Perm() != emptyDirPerm {
		return os.Chmod(dir, emptyDirPerm)
	}
	return nil
}

// setUpTmpfs mounts a tmpfs of sizeBytes (0: the kernel default, half of
// RAM) on dir, unless one is already mounted there.
func (m *Manager) setUpTmpfs(dir string, sizeBytes int64) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("emptyDir medium Memory needs a tmpfs mount, which needs root")
	}
	if err := makeEmptyDir(dir); err != nil {
		return err
	}
	mounted, err := m.isTmpfsMountPoint(dir)
	if err != nil || mounted {
		return err
	}
	var options string
	if sizeBytes > 0 {
		options = fmt.Sprintf("size=%d", sizeBytes)
	}
	klog.V(3).InfoS("Mounting tmpfs for emptyDir", "path", dir, "options", options)
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, options); err != nil {
		return fmt.Errorf("mounting tmpfs on %s: %w", dir, err)
	}
	// The fresh tmpfs root keeps its 1777 (drwxrwxrwt), as upstream's leaves it; fsGroup
	// then adds the setgid bit (drwxrwsrwt).
	return nil
}

// isTmpfsMountPoint reports whether a tmpfs is mounted exactly at dir. Every pod sync
// asks this of each projected volume, so the mount table is read only on kernels older
// than 5.8, which cannot say whether dir is a mount root.
func (m *Manager) isTmpfsMountPoint(dir string) (bool, error) {
	root, known, err := mountpoint.Root(dir, true)
	if err != nil {
		return false, err
	}
	if !known {
		fsType, err := m.mountedAt(dir)
		return fsType == "tmpfs", err
	}
	if !root {
		return false, nil
	}
	return mountpoint.IsTmpfs(dir)
}

// tmpfsSize is the size of a memory-backed emptyDir as upstream sizes it:
// the smaller of the volume's sizeLimit and the pod's memory limit, so that
// the volume cannot outgrow what the pod may use anyway. Upstream also caps
// it at the node's allocatable memory, which this package does not know.
func tmpfsSize(pod *v1.Pod, src *v1.EmptyDirVolumeSource) int64 {
	size, _ := podMemoryLimit(pod)
	if src.SizeLimit != nil && src.SizeLimit.Value() > 0 && (size == 0 || src.SizeLimit.Value() < size) {
		size = src.SizeLimit.Value()
	}
	return size
}

// podMemoryLimit is the most memory the pod's containers may use together,
// and false when some container has no memory limit. Sidecars (restartable
// init containers) keep running next to later init containers and the app
// containers; other init containers run one at a time.
func podMemoryLimit(pod *v1.Pod) (int64, bool) {
	if pod.Spec.Resources != nil {
		if q, ok := pod.Spec.Resources.Limits[v1.ResourceMemory]; ok {
			return q.Value() + overheadMemory(pod), true
		}
	}
	var sidecars, initPeak int64
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		limit, ok := memoryLimit(c)
		if !ok {
			return 0, false
		}
		if c.RestartPolicy != nil && *c.RestartPolicy == v1.ContainerRestartPolicyAlways {
			sidecars += limit
			initPeak = max(initPeak, sidecars)
		} else {
			initPeak = max(initPeak, sidecars+limit)
		}
	}
	apps := sidecars
	for i := range pod.Spec.Containers {
		limit, ok := memoryLimit(&pod.Spec.Containers[i])
		if !ok {
			return 0, false
		}
		apps += limit
	}
	return max(apps, initPeak) + overheadMemory(pod), true
}

func memoryLimit(c *v1.Container) (int64, bool) {
	q, ok := c.Resources.Limits[v1.ResourceMemory]
	return q.Value(), ok
}

func overheadMemory(pod *v1.Pod) int64 {
	q := pod.Spec.Overhead[v1.ResourceMemory]
	return q.Value()
}

// setUpHugePages mounts a hugetlbfs on dir with the page size of the medium
// ("HugePages-2Mi") or, for plain "HugePages", of the one huge page size the
// pod's containers request, unless it is mounted already.
func (m *Manager) setUpHugePages(pod *v1.Pod, dir string, medium v1.StorageMedium) error {
	size, err := hugePageSize(pod, medium)
	if err != nil {
		return err
	}
	if err := makeEmptyDir(dir); err != nil {
		return err
	}
	mounted, err := m.isMountPoint(dir)
	if err != nil || mounted {
		return err
	}
	options := "pagesize=" + size.String()
	klog.V(3).InfoS("Mounting hugetlbfs for emptyDir", "path", dir, "options", options)
	if err := unix.Mount("nodev", dir, "hugetlbfs", 0, options); err != nil {
		return fmt.Errorf("mounting hugetlbfs (%s) on %s: %w", options, dir, err)
	}
	return nil
}

// hugePageSize is the page size of a huge pages emptyDir, as upstream picks it.
func hugePageSize(pod *v1.Pod, medium v1.StorageMedium) (resource.Quantity, error) {
	if sz, ok := strings.CutPrefix(string(medium), string(v1.StorageMediumHugePages)+"-"); ok {
		q, err := resource.ParseQuantity(sz)
		if err != nil {
			return q, fmt.Errorf("invalid huge page size in medium %s: %w", medium, err)
		}
		return q, nil
	}
	sizes := map[string]resource.Quantity{}
	for _, c := range append(append([]v1.Container(nil), pod.Spec.InitContainers...), pod.Spec.Containers...) {
		for name := range c.Resources.Requests {
			if sz, ok := strings.CutPrefix(string(name), v1.ResourceHugePagesPrefix); ok {
				q, err := resource.ParseQuantity(sz)
				if err != nil {
					return q, fmt.Errorf("invalid huge page resource %s: %w", name, err)
				}
				sizes[q.String()] = q
			}
		}
	}
	if len(sizes) != 1 {
		return resource.Quantity{}, fmt.Errorf("medium %s needs exactly one huge page size among the containers' requests, found %d", medium, len(sizes))
	}
	for _, q := range sizes {
		return q, nil
	}
	panic("unreachable")
}
