// Package imagegc removes unused container images, as upstream's image garbage collector
// (pkg/kubelet/images/image_gc_manager.go) does: when the image filesystem's usage reaches
// imageGCHighThresholdPercent it removes images, least recently used first, until usage
// is down to imageGCLowThresholdPercent; images unused for longer than imageMaximumGCAge
// go whatever the usage. Images in use by a container (running or not), pinned images,
// the sandbox image and images detected less than imageMinimumGCAge ago are never removed.
//
// It talks to the runtime through CRI only; usage comes from ImageFsInfo and statfs(2)
// of the filesystem the runtime names (CRIImageFs).
package imagegc

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"k8s.io/utils/clock"
)

// Periods, as upstream's.
const (
	// ImageGCPeriod is how often StartGarbageCollection collects (upstream's ImageGCPeriod).
	ImageGCPeriod = 5 * time.Minute
	// DetectPeriod is how often Start refreshes the image records between collections,
	// so that an image's last use is seen even when it is used only briefly.
	DetectPeriod = 5 * time.Minute
)

// Event reasons, as upstream's pkg/kubelet/events.
const (
	EventImageGCFailed       = "ImageGCFailed"
	EventInvalidDiskCapacity = "InvalidDiskCapacity"
	EventFreeDiskSpaceFailed = "FreeDiskSpaceFailed"
)

// Policy is upstream's ImageGCPolicy: the band of image filesystem usage GC keeps to.
type Policy struct {
	// HighThresholdPercent: usage at or above it starts a collection (imageGCHighThresholdPercent).
	HighThresholdPercent int
	// LowThresholdPercent: a collection frees down to it (imageGCLowThresholdPercent).
	LowThresholdPercent int
	// MinAge: an image detected more recently is never removed (imageMinimumGCAge).
	MinAge time.Duration
	// MaxAge: an image unused for longer is removed whatever the usage
	// (imageMaximumGCAge); 0 turns this off.
	MaxAge time.Duration
}

// Validate checks the thresholds as upstream's NewImageGCManager does.
func (p Policy) Validate() error {
	if p.HighThresholdPercent < 0 || p.HighThresholdPercent > 100 {
		return fmt.Errorf("invalid HighThresholdPercent %d, must be in range [0-100]", p.HighThresholdPercent)
	}
	if p.LowThresholdPercent < 0 || p.LowThresholdPercent > 100 {
		return fmt.Errorf("invalid LowThresholdPercent %d, must be in range [0-100]", p.LowThresholdPercent)
	}
	if p.LowThresholdPercent > p.HighThresholdPercent {
		return fmt.Errorf("LowThresholdPercent %d can not be higher than HighThresholdPercent %d", p.LowThresholdPercent, p.HighThresholdPercent)
	}
	return nil
}

// Disabled says whether periodic collection is off, as upstream's StartGarbageCollection
// decides: a high threshold of 100 and no maximum age. DeleteUnusedImages still works.
func (p Policy) Disabled() bool {
	return p.HighThresholdPercent == 100 && p.MaxAge == 0
}

// ImageService is the part of the CRI image service GC uses
// (k8s.io/cri-api's ImageManagerService has it).
type ImageService interface {
	ListImages(ctx context.Context, filter *runtimeapi.ImageFilter) ([]*runtimeapi.Image, error)
	ImageStatus(ctx context.Context, image *runtimeapi.ImageSpec, verbose bool) (*runtimeapi.ImageStatusResponse, error)
	RemoveImage(ctx context.Context, image *runtimeapi.ImageSpec) error
}

// ContainerLister is the part of the CRI runtime service GC uses: every container the
// runtime has, running or not, keeps its image and the images it mounts (image volumes).
type ContainerLister interface {
	ListContainers(ctx context.Context, filter *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error)
	ContainerStatus(ctx context.Context, containerID string, verbose bool) (*runtimeapi.ContainerStatusResponse, error)
}

// FsStatsProvider reports the image filesystem; GC reads its CapacityBytes and
// AvailableBytes (upstream's StatsProvider.ImageFsStats).
type FsStatsProvider interface {
	ImageFsStats(ctx context.Context) (*statsapi.FsStats, error)
}

// PostGCHook is told, after a collection, the IDs of the images still on the node and
// when the collection started (before it listed the images): upstream's PostImageGCHook,
// with which the image manager prunes the pulled records of removed images
// (images.ImagePullManager.PruneUnknownRecords).
//
// Upstream passes only the unused images its collection left; here every image still on
// the node is passed, images in use and pinned ones included, so that a hook never takes
// an image that is still there for a removed one.
type PostGCHook func(ctx context.Context, remainingImageIDs []string, gcStart time.Time)

// Options are what New needs.
type Options struct {
	Images     ImageService
	Containers ContainerLister
	// FsStats is usually CRIImageFs{Images: <the CRI image service>}.
	FsStats FsStatsProvider
	Policy  Policy
	// SandboxImage is the runtime's pause image (see SandboxImageFromStatus); it is kept
	// even when the runtime does not pin it (containerd 1.6 does not). Empty: none.
	SandboxImage string
	// Recorder and NodeRef receive the node's GC events; a nil Recorder only logs.
	Recorder record.EventRecorder
	NodeRef  *v1.ObjectReference
	// Clock defaults to the real clock.
	Clock clock.WithTicker
	// PostGCHooks run after each collection that listed the images (GarbageCollect,
	// DeleteUnusedImages), whether or not it removed any.
	PostGCHooks []PostGCHook
}

// Manager is the image garbage collector. It is safe for concurrent use; collections
// (GarbageCollect, DeleteUnusedImages) run one at a time.
type Manager struct {
	images       ImageService
	containers   ContainerLister
	fs           FsStatsProvider
	policy       Policy
	sandboxImage string
	recorder     record.EventRecorder
	nodeRef      *v1.ObjectReference
	clock        clock.WithTicker
	postGCHooks  []PostGCHook

	// mu serializes detection and collections and guards records.
	mu sync.Mutex
	// records are upstream's imageRecords, by image ID. They live in memory only: after
	// a restart every image counts as first detected then.
	records map[string]*imageRecord
}

// New validates the policy and builds a Manager.
func New(opts Options) (*Manager, error) {
	if err := opts.Policy.Validate(); err != nil {
		return nil, err
	}
	if opts.Images == nil || opts.Containers == nil || opts.FsStats == nil {
		return nil, errors.New("imagegc: Images, Containers and FsStats are required")
	}
	c := opts.Clock
	if c == nil {
		c = clock.RealClock{}
	}
	return &Manager{
		images:       opts.Images,
		containers:   opts.Containers,
		fs:           opts.FsStats,
		policy:       opts.Policy,
		sandboxImage: opts.SandboxImage,
		recorder:     opts.Recorder,
		nodeRef:      opts.NodeRef,
		clock:        c,
		postGCHooks:  opts.PostGCHooks,
		records:      map[string]*imageRecord{},
	}, nil
}

// Start refreshes the image records now and every DetectPeriod until ctx ends, as
// upstream's Start. It returns at once.
func (m *Manager) Start(ctx context.Context) {
	logger := klog.FromContext(ctx)
	go m.every(ctx, DetectPeriod, func(ctx context.Context) {
		m.mu.Lock()
		defer m.mu.Unlock()
		if _, err := m.detectImages(ctx, m.clock.Now()); err != nil {
			logger.Info("Failed to monitor images", "err", err)
		}
	})
}

// StartGarbageCollection runs GarbageCollect now and every ImageGCPeriod until ctx
// ends, unless the policy is Disabled (upstream's Kubelet.StartGarbageCollection, image
// half). A failure right after another is reported as an ImageGCFailed event on the
// node. It returns at once.
func (m *Manager) StartGarbageCollection(ctx context.Context) {
	logger := klog.FromContext(ctx)
	if m.policy.Disabled() {
		logger.V(2).Info("ImageGCHighThresholdPercent is set 100 and ImageMaximumGCAge is 0, Disable image GC")
		return
	}
	beganGC := m.clock.Now()
	prevFailed := false
	go m.every(ctx, ImageGCPeriod, func(ctx context.Context) {
		err := m.GarbageCollect(ctx, beganGC)
		switch {
		case err != nil && prevFailed:
			logger.Error(err, "Image garbage collection failed multiple times in a row")
			m.event(EventImageGCFailed, err.Error())
		case err != nil:
			logger.Error(err, "Image garbage collection failed once. Stats initialization may not have completed yet")
		case prevFailed:
			logger.V(1).Info("Image garbage collection succeeded")
		default:
			logger.V(4).Info("Image garbage collection succeeded")
		}
		prevFailed = err != nil
	})
}

// every calls f now and then once per period until ctx ends.
func (m *Manager) every(ctx context.Context, period time.Duration, f func(context.Context)) {
	t := m.clock.NewTicker(period)
	defer t.Stop()
	for {
		f(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
	}
}

// event records a Warning on the node, or only logs without a recorder.
func (m *Manager) event(reason, message string) {
	if m.recorder == nil || m.nodeRef == nil {
		klog.InfoS("Image GC event", "reason", reason, "message", message)
		return
	}
	m.recorder.Event(m.nodeRef, v1.EventTypeWarning, reason, message)
}
