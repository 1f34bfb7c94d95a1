package app

import (
	"context"
	"errors"
	"path"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
	internalapi "k8s.io/cri-api/pkg/apis"
	"k8s.io/klog/v2"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodelet/nodelet/pkg/config"
	"github.com/nodelet/nodelet/pkg/node/eviction"
	"github.com/nodelet/nodelet/pkg/node/oomwatcher"
	"github.com/nodelet/nodelet/pkg/node/stats"
	"github.com/nodelet/nodelet/pkg/pod/kubelet"
	"github.com/nodelet/nodelet/pkg/runtime/imagegc"
)

// errNotReady answers the eviction manager before the loop and stats exist.
var errNotReady = errors.New("the pod loop is not started yet")

// lateBound holds what the eviction manager needs but is built after it: the node status
// and admission need the manager first, and the loop needs both.
type lateBound struct {
	loop    *kubelet.Kubelet
	summary *stats.Provider
	images  *imagegc.Manager
}

func (l *lateBound) summaryOf(ctx context.Context) (*statsapi.Summary, error) {
	if l.summary == nil {
		return nil, errNotReady
	}
	return l.summary.Get(ctx)
}

func (l *lateBound) nodeSummaryOf(ctx context.Context) (*statsapi.Summary, error) {
	if l.summary == nil {
		return nil, errNotReady
	}
	return l.summary.GetNode(ctx)
}

func (l *lateBound) activePods() []*v1.Pod {
	if l.loop == nil {
		return nil
	}
	return l.loop.ActivePods()
}

func (l *lateBound) killPod(pod *v1.Pod, statusFn func(*v1.PodStatus), grace int64) error {
	if l.loop == nil {
		return errNotReady
	}
	return l.loop.KillPodNow(pod, statusFn, grace)
}

func (l *lateBound) podCleanedUp(pod *v1.Pod) bool {
	return l.loop != nil && l.loop.PodResourcesReclaimed(pod)
}

// deleteUnusedContainers logs as upstream's container GC does, so that the log shows the
// dead containers reclaimed before the images.
func (l *lateBound) deleteUnusedContainers(ctx context.Context) error {
	if l.loop == nil {
		return errNotReady
	}
	klog.FromContext(ctx).Info("Attempting to delete unused containers")
	return l.loop.DeleteAllUnusedContainers(ctx)
}

func (l *lateBound) deleteUnusedImages(ctx context.Context) error {
	if l.images == nil {
		return errNotReady
	}
	return l.images.DeleteUnusedImages(ctx)
}

// podCgroupRoot is the cgroup holding every pod, for stats and eviction.
func podCgroupRoot(cfg *config.Options) string {
	return path.Join(cfg.Config.CgroupRoot, "kubepods")
}

// newEvictionManager builds the eviction manager from the eviction settings; it acts once
// late is filled in and Start runs.
func newEvictionManager(opts *config.Options, nodeName string, recorder record.EventRecorder, images internalapi.ImageManagerService, late *lateBound) (*eviction.Manager, error) {
	cfg, err := eviction.ConfigFromKubelet(opts.Config, podCgroupRoot(opts))
	if err != nil {
		return nil, err
	}
	return eviction.NewManager(cfg, eviction.Deps{
		Summary: late.summaryOf, NodeSummary: late.nodeSummaryOf, ActivePods: late.activePods, KillPod: late.killPod,
		PodCleanedUp: late.podCleanedUp, DeleteAllUnusedContainers: late.deleteUnusedContainers,
		DeleteUnusedImages:  late.deleteUnusedImages,
		HasDedicatedImageFs: eviction.ImageFsOnOwnDevice(images, opts.RootDirectory),
		Recorder:            recorder, NodeRef: nodeRef(nodeName),
	})
}

// nodeRef is the reference of node events recorded before the Node's UID is known.
func nodeRef(nodeName string) *v1.ObjectReference {
	return &v1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: nodeName}
}

// startOOMWatcher reports system OOM kills as node events; a kernel log nodelet cannot
// read (an unprivileged container) costs only those events.
func startOOMWatcher(ctx context.Context, recorder record.EventRecorder, nodeName string) {
	if err := oomwatcher.Start(ctx, recorder, nodeRef(nodeName)); err != nil {
		klog.InfoS("Not watching for system OOM kills", "err", err)
	}
}

// startImageGC collects unused images by the imageGC* settings (every 5 minutes), keeping
// the runtime's sandbox image.
func startImageGC(ctx context.Context, opts *config.Options, rs internalapi.RuntimeService, is internalapi.ImageManagerService, recorder record.EventRecorder, nodeName string) (*imagegc.Manager, error) {
	cfg := opts.Config
	var sandboxImage string
	if st, err := rs.Status(ctx, true); err == nil {
		sandboxImage = imagegc.SandboxImageFromStatus(st)
	}
	gc, err := imagegc.New(imagegc.Options{
		Images: is, Containers: rs, FsStats: imagegc.CRIImageFs{Images: is},
		Policy: imagegc.Policy{
			HighThresholdPercent: int(*cfg.ImageGCHighThresholdPercent), LowThresholdPercent: int(*cfg.ImageGCLowThresholdPercent),
			MinAge: cfg.ImageMinimumGCAge.Duration, MaxAge: cfg.ImageMaximumGCAge.Duration,
		},
		SandboxImage: sandboxImage, Recorder: recorder, NodeRef: nodeRef(nodeName),
	})
	if err != nil {
		return nil, err
	}
	gc.Start(ctx)
	gc.StartGarbageCollection(ctx)
	return gc, nil
}
