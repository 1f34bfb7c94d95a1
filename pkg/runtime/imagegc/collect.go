package imagegc

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"time"

	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
)

// Reasons of the kubelet_image_garbage_collected_total metric.
const (
	reasonAge   = "age"
	reasonSpace = "space"
)

// GarbageCollect applies the policy once, as upstream's GarbageCollect: first it
// removes images unused for longer than MaxAge (once MaxAge has passed since beganGC,
// when collection started, so a restarted node does not take every image for old), then,
// if the image filesystem's usage is at or above the high threshold, it removes images
// until usage is down to the low threshold. Not finding enough to remove is an error
// and a FreeDiskSpaceFailed event on the node.
func (m *Manager) GarbageCollect(ctx context.Context, beganGC time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	logger := klog.FromContext(ctx)
	now := m.clock.Now()
	images, err := m.candidates(ctx, now)
	if err != nil {
		return err
	}
	defer m.runPostGCHooks(ctx, now)
	if images, err = m.freeOldImages(ctx, images, now, beganGC); err != nil {
		return err
	}

	capacity, available, err := m.imageFsSpace(ctx)
	if err != nil {
		return err
	}
	usagePercent := 100 - int(available*100/capacity)
	if usagePercent < m.policy.HighThresholdPercent {
		return nil
	}
	amountToFree := capacity*int64(100-m.policy.LowThresholdPercent)/100 - available
	logger.Info("Disk usage on image filesystem is over the high threshold, trying to free bytes down to the low threshold",
		"usage", usagePercent, "highThreshold", m.policy.HighThresholdPercent, "amountToFree", amountToFree, "lowThreshold", m.policy.LowThresholdPercent)
	freed, err := m.freeSpace(ctx, amountToFree, now, images)
	if err != nil {
		return err
	}
	if freed < amountToFree {
		// Usually the disk is full of something other than images (logs, volumes), or
		// of images in use.
		msg := fmt.Sprintf("Insufficient free disk space on the node's image filesystem (%d%% of %s used). "+
			"Failed to free sufficient space by deleting unused images (freed %d bytes). "+
			"Investigate disk usage, as it could be used by active images, logs, volumes, or other data.",
			usagePercent, formatSize(capacity), freed)
		m.event(EventFreeDiskSpaceFailed, msg)
		return errors.New(msg)
	}
	return nil
}

// DeleteUnusedImages removes every image GC may remove and that is older than MinAge,
// whatever the usage: the eviction manager's reclaim under disk pressure.
func (m *Manager) DeleteUnusedImages(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	klog.FromContext(ctx).Info("Attempting to delete unused images")
	now := m.clock.Now()
	images, err := m.candidates(ctx, now)
	if err != nil {
		return err
	}
	defer m.runPostGCHooks(ctx, now)
	_, err = m.freeSpace(ctx, math.MaxInt64, now, images)
	return err
}

// runPostGCHooks tells the hooks which images are left: every image the collection's
// listing found and did not remove (removeImage forgets those it removes). The caller
// holds m.mu.
func (m *Manager) runPostGCHooks(ctx context.Context, gcStart time.Time) {
	if len(m.postGCHooks) == 0 {
		return
	}
	remaining := slices.Sorted(maps.Keys(m.records))
	for _, hook := range m.postGCHooks {
		hook(ctx, remaining, gcStart)
	}
}

// imageFsSpace returns the image filesystem's capacity and available bytes; a capacity
// of 0 (unknown) is an error and an InvalidDiskCapacity event, as upstream.
func (m *Manager) imageFsSpace(ctx context.Context) (capacity, available int64, err error) {
	fs, err := m.fs.ImageFsStats(ctx)
	if err != nil {
		return 0, 0, err
	}
	if fs.CapacityBytes != nil {
		capacity = int64(*fs.CapacityBytes)
	}
	if fs.AvailableBytes != nil {
		available = int64(*fs.AvailableBytes)
	}
	if available > capacity {
		klog.FromContext(ctx).Info("Availability is larger than capacity", "available", available, "capacity", capacity)
		available = capacity
	}
	if capacity == 0 {
		err := errors.New("invalid capacity 0 on image filesystem")
		m.event(EventInvalidDiskCapacity, err.Error())
		return 0, 0, err
	}
	return capacity, available, nil
}

// freeOldImages removes the images unused for longer than MaxAge and returns the rest.
// MinAge does not protect them: MaxAge is meant to be the longer of the two.
func (m *Manager) freeOldImages(ctx context.Context, images []candidate, now, beganGC time.Time) ([]candidate, error) {
	if m.policy.MaxAge == 0 || now.Sub(beganGC) <= m.policy.MaxAge {
		return images, nil
	}
	var remaining []candidate
	var errs []error
	for _, img := range images {
		if now.Sub(img.lastUsed) <= m.policy.MaxAge {
			remaining = append(remaining, img)
			continue
		}
		if err := m.removeImage(ctx, img, reasonAge); err != nil {
			errs = append(errs, err)
			remaining = append(remaining, img)
		}
	}
	if len(errs) > 0 {
		return remaining, fmt.Errorf("wanted to free images older than %v, encountered errors in image deletion: %w", m.policy.MaxAge, utilerrors.NewAggregate(errs))
	}
	return remaining, nil
}

// freeSpace removes images in the given (LRU) order, skipping those detected less than
// MinAge ago, until bytesToFree bytes are freed. It returns the bytes freed, also on error.
func (m *Manager) freeSpace(ctx context.Context, bytesToFree int64, now time.Time, images []candidate) (int64, error) {
	logger := klog.FromContext(ctx)
	var freed int64
	var errs []error
	for _, img := range images {
		// A young image may have just been pulled for a container about to start.
		if age := now.Sub(img.firstDetected); age < m.policy.MinAge {
			logger.V(5).Info("Image ID's age is less than the policy's minAge, not eligible for garbage collection", "imageID", img.id, "age", age, "minAge", m.policy.MinAge)
			continue
		}
		if err := m.removeImage(ctx, img, reasonSpace); err != nil {
			errs = append(errs, err)
			continue
		}
		freed += img.size
		if freed >= bytesToFree {
			break
		}
	}
	if len(errs) > 0 {
		return freed, fmt.Errorf("wanted to free %d bytes, but freed %d bytes space with errors in image deletion: %w", bytesToFree, freed, utilerrors.NewAggregate(errs))
	}
	return freed, nil
}

// removeImage removes the image by ID, which removes all its tags.
func (m *Manager) removeImage(ctx context.Context, img candidate, reason string) error {
	klog.FromContext(ctx).Info("Removing image to free bytes", "imageID", img.id, "size", img.size, "reason", reason)
	if err := m.images.RemoveImage(ctx, &runtimeapi.ImageSpec{Image: img.id}); err != nil {
		return err
	}
	delete(m.records, img.id)
	ImageGarbageCollectedTotal.WithLabelValues(reason).Inc()
	return nil
}

// formatSize is a size as upstream's GC message writes it ("1.5 GiB").
func formatSize(size int64) string {
	const unit = 1024
	if size < unit {
		return fmt.Sprintf("%d B", size)
	}
	value, suffix := float64(size)/unit, "KiB"
	for _, next := range []string{"MiB", "GiB", "TiB"} {
		if value < unit {
			break
		}
		value, suffix = value/unit, next
	}
	return fmt.Sprintf("%.1f %s", value, suffix)
}
