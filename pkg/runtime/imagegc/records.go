package imagegc

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/util/sets"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
)

// imageRecord is what GC knows of one image (upstream's imageRecord).
type imageRecord struct {
	// firstDetected is when a detection pass first saw the image; MinAge counts from it.
	firstDetected time.Time
	// lastUsed is the last detection pass that saw a container of the image (zero if
	// none has): LRU order and MaxAge count from it.
	lastUsed time.Time
	size     int64
	// pinned (by the runtime) and sandbox images are never removed.
	pinned, sandbox bool
}

// candidate is an image GC may remove.
type candidate struct {
	id string
	imageRecord
}

// detectImages lists the images and containers, adds new images to the records (first
// detected now), marks those in use as used now, and forgets images that are gone. It
// returns the IDs of the images in use. The caller holds m.mu.
func (m *Manager) detectImages(ctx context.Context, now time.Time) (sets.Set[string], error) {
	logger := klog.FromContext(ctx)
	images, err := m.images.ListImages(ctx, nil)
	if err != nil {
		return nil, err
	}
	containers, err := m.containers.ListContainers(ctx, nil)
	if err != nil {
		return nil, err
	}
	sandboxID, err := m.sandboxImageID(ctx)
	if err != nil {
		return nil, err
	}
	refs := containerImageRefs(containers)
	if err := m.addMountedImages(ctx, containers, refs); err != nil {
		return nil, err
	}
	inUse := sets.New[string]()
	present := sets.New[string]()
	for _, img := range images {
		present.Insert(img.Id)
		r, known := m.records[img.Id]
		if !known {
			logger.V(5).Info("Image ID is new", "imageID", img.Id)
			r = &imageRecord{firstDetected: now}
			m.records[img.Id] = r
		}
		if usedBy(img, refs) {
			logger.V(5).Info("Setting Image ID lastUsed", "imageID", img.Id, "lastUsed", now)
			inUse.Insert(img.Id)
			r.lastUsed = now
		}
		r.size = int64(img.Size)
		r.pinned = img.Pinned
		r.sandbox = img.Id == sandboxID
	}
	for id := range m.records {
		if !present.Has(id) {
			logger.V(5).Info("Image ID is no longer present; removing from imageRecords", "imageID", id)
			delete(m.records, id)
		}
	}
	return inUse, nil
}

// containerImageRefs are the image IDs and references of all containers. Runtimes
// before CRI's Container.ImageId put the ID in ImageRef; some put a repo digest there.
func containerImageRefs(containers []*runtimeapi.Container) sets.Set[string] {
	refs := sets.New[string]()
	for _, c := range containers {
		for _, ref := range []string{c.ImageId, c.ImageRef} {
			if ref != "" {
				refs.Insert(ref)
			}
		}
	}
	return refs
}

// addMountedImages adds to refs the images the containers mount as image volumes, which
// only their status shows (upstream's handleImageVolumes asks every container too). A
// container gone meanwhile mounts nothing; any other failure stops the collection rather
// than risk removing a mounted image.
func (m *Manager) addMountedImages(ctx context.Context, containers []*runtimeapi.Container, refs sets.Set[string]) error {
	for _, c := range containers {
		resp, err := m.containers.ContainerStatus(ctx, c.Id, false)
		if status.Code(err) == codes.NotFound {
			continue
		}
		if err != nil {
			return fmt.Errorf("get container status: %w", err)
		}
		for _, mount := range resp.GetStatus().GetMounts() {
			if id := mount.GetImage().GetImage(); id != "" {
				refs.Insert(id)
			}
		}
	}
	return nil
}

// usedBy says whether a container runs the image: its ID, or one of its repo digests,
// is a container's image reference.
func usedBy(img *runtimeapi.Image, refs sets.Set[string]) bool {
	return refs.Has(img.Id) || slices.ContainsFunc(img.RepoDigests, refs.Has)
}

// sandboxImageID resolves the sandbox image to its ID through the runtime, which
// knows how it names short references; "" when none is configured or present. An error
// stops the collection rather than risk removing the image.
func (m *Manager) sandboxImageID(ctx context.Context) (string, error) {
	if m.sandboxImage == "" {
		return "", nil
	}
	resp, err := m.images.ImageStatus(ctx, &runtimeapi.ImageSpec{Image: m.sandboxImage}, false)
	if err != nil {
		return "", err
	}
	return resp.GetImage().GetId(), nil
}

// candidates detects the images and returns those GC may remove, least recently used
// first and, among equals, first detected first: not in use, not pinned, not the
// sandbox image. The caller holds m.mu.
func (m *Manager) candidates(ctx context.Context, now time.Time) ([]candidate, error) {
	inUse, err := m.detectImages(ctx, now)
	if err != nil {
		return nil, err
	}
	logger := klog.FromContext(ctx)
	var out []candidate
	for id, r := range m.records {
		switch {
		case inUse.Has(id):
			logger.V(5).Info("Image ID is being used", "imageID", id)
		case r.pinned:
			logger.V(5).Info("Image is pinned, skipping garbage collection", "imageID", id)
		case r.sandbox:
			logger.V(5).Info("Image is the sandbox image, skipping garbage collection", "imageID", id)
		default:
			out = append(out, candidate{id: id, imageRecord: *r})
		}
	}
	slices.SortFunc(out, func(a, b candidate) int {
		return cmp.Or(a.lastUsed.Compare(b.lastUsed), a.firstDetected.Compare(b.firstDetected), cmp.Compare(a.id, b.id))
	})
	return out, nil
}
