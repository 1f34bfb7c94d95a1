// Package nodestatus registers the node with the API server, keeps its status and renews
// its lease (upstream's kubelet_node_status.go, nodestatus/setters.go and node lease).
// It also builds the Node standalone mode and admission read before any API server.
package nodestatus

import (
	"context"
	"errors"
	goruntime "runtime"
	"sync"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/record"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	kubeletapis "k8s.io/kubelet/pkg/apis"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/pkg/metrics"
	"github.com/nodelet/nodelet/pkg/runtime/container"
)

const (
	// imageListTTL is how stale the image list may be (upstream's image cache refresh).
	imageListTTL = 30 * time.Second
	// leaseStartPoll is how often runLease checks whether the Node is known yet.
	leaseStartPoll = 20 * time.Millisecond
	// runtimeStatusTTL is how stale runtime handlers and features may be (upstream's
	// updateRuntimeUp period).
	runtimeStatusTTL = 5 * time.Second
)

// Controller owns this node's Node object: it builds it, registers it, keeps its status
// and lease, and answers Node() for admission.
type Controller struct {
	opts      Options
	client    kubernetes.Interface
	heartbeat kubernetes.Interface
	runtime   Runtime
	pressure  Pressure
	devices   func() (capacity, allocatable v1.ResourceList, removed []string)
	// resetExtended says whether registration zeroes an existing Node's extended resources.
	resetExtended func() bool
	// volumes reports status.volumesInUse; nil: none (standalone, or no volume manager).
	volumes     VolumesInUse
	readyChecks []func() error
	recorder    record.EventRecorder
	clock       clock.Clock
	onFailure   func()
	podCIDRHook func(context.Context, string) error
	startup     *metrics.NodeStartupTracker
	ips         ipResolver
	eviction    map[v1.ResourceName]threshold
	machine     func() (*MachineInfo, error)
	images      *refreshed[[]container.Image]
	criStatus   *refreshed[*runtimeapi.StatusResponse]

	// nodeLister is this node from a watch on it alone; nil until Run starts it.
	nodeLister atomic.Pointer[corelisters.NodeLister]

	rebootOnce        sync.Once
	schedMu           sync.Mutex
	lastUnschedulable bool

	// initialMu guards the node InitialNode keeps: each build starts from the last one's
	// conditions, so a condition's first state is recorded once, not on every build.
	initialMu   sync.Mutex
	lastInitial *v1.Node
	initialAt   time.Time

	// registered is cleared when the Node is found deleted; resync then asks the
	// status loop to register it again at once.
	registered atomic.Bool
	resync     chan struct{}

	// syncMu serialises status syncs and the fast start-up updates (upstream's
	// syncNodeStatusMux); the fields below it are only used with it held.
	syncMu           sync.Mutex
	lastStatusReport time.Time
	delayAfterChange time.Duration
	podCIDR          string
	watchMayBeStale  bool
	statusFailures   int
	forceReport      bool

	// apiFailure is when a heartbeat last failed (Unix ns; 0: never), set by the lease
	// loop and the status loop.
	apiFailure atomic.Int64

	// postedReady is the Ready status this kubelet last wrote; a watched Node showing
	// another one (written by the node controller) triggers a sync.
	postedReady atomic.Value
}

// New builds the controller. Nothing talks to the API server until Run.
func New(opts Options, deps Deps) (*Controller, error) {
	if deps.Runtime == nil {
		return nil, errors.New("nodestatus: a Runtime is required")
	}
	opts = opts.withDefaults()
	eviction, err := hardEvictionThresholds(opts.EvictionHard)
	if err != nil {
		return nil, err
	}
	c := &Controller{
		opts: opts, client: deps.Client, heartbeat: deps.HeartbeatClient, runtime: deps.Runtime,
		pressure: deps.Pressure, readyChecks: deps.ReadyChecks, recorder: deps.Recorder, devices: deps.DevicePlugins,
		resetExtended: deps.ResetExtendedResources, volumes: deps.Volumes,
		clock: deps.Clock, onFailure: deps.OnHeartbeatFailure, podCIDRHook: deps.UpdatePodCIDR,
		startup: deps.Startup, ips: hostResolver(), eviction: eviction, resync: make(chan struct{}, 1),
	}
	if c.startup == nil {
		c.startup = metrics.NodeStartup()
	}
	if c.heartbeat == nil {
		c.heartbeat = c.client
	}
	if c.recorder == nil {
		c.recorder = &record.FakeRecorder{}
	}
	if c.clock == nil {
		c.clock = clock.RealClock{}
	}
	c.machine = deps.Machine
	if c.machine == nil {
		c.machine = sync.OnceValues(func() (*MachineInfo, error) { return ReadMachineInfo(opts.RootDir) })
	}
	c.images = newRefreshed("image list", imageListTTL, c.clock, deps.Runtime.ListImages)
	c.criStatus = newRefreshed("runtime status", runtimeStatusTTL, c.clock, criStatusFetcher(deps.CRIStatus))
	return c, nil
}

func criStatusFetcher(s CRIStatus) func(context.Context) (*runtimeapi.StatusResponse, error) {
	return func(ctx context.Context) (*runtimeapi.StatusResponse, error) {
		if s == nil {
			return nil, nil
		}
		return s.Status(ctx, false)
	}
}

// NodeRef is the reference events about this node use: the Node's UID once the watch
// has seen it.
func (c *Controller) NodeRef() *v1.ObjectReference {
	ref := &v1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: c.opts.NodeName}
	if node, err := c.watchedNode(); err == nil {
		ref.UID = node.UID
	}
	return ref
}

// BirthCry records the "Starting" event upstream's kubelet sends when it starts.
func (c *Controller) BirthCry() {
	c.recorder.Eventf(c.NodeRef(), v1.EventTypeNormal, "Starting", "Starting kubelet.")
}

// Node is the latest Node for admission: the API server's copy as the watch last saw
// it, or InitialNode before the node is registered (and always in standalone mode).
func (c *Controller) Node(ctx context.Context) (*v1.Node, error) {
	if node, err := c.watchedNode(); err == nil {
		return node.DeepCopy(), nil
	}
	return c.initialNodeCached(ctx)
}

func (c *Controller) watchedNode() (*v1.Node, error) {
	lister := c.nodeLister.Load()
	if lister == nil {
		return nil, errors.New("node watch not started")
	}
	return (*lister).Get(c.opts.NodeName)
}

// initialNodeCached rebuilds InitialNode at most once per nodeStatusUpdateFrequency, so
// admitting a batch of pods does not list images for each.
func (c *Controller) initialNodeCached(ctx context.Context) (*v1.Node, error) {
	c.initialMu.Lock()
	fresh := c.lastInitial != nil && c.clock.Since(c.initialAt) < c.opts.NodeStatusUpdateFrequency
	var node *v1.Node
	if fresh {
		node = c.lastInitial.DeepCopy()
	}
	c.initialMu.Unlock()
	if fresh {
		return node, nil
	}
	return c.InitialNode(ctx)
}

// InitialNode builds the Node this kubelet registers: the well-known labels, node
// labels, taints, provider ID and the attach/detach annotation, with the status every
// setter fills (upstream's initialNode).
func (c *Controller) InitialNode(ctx context.Context) (*v1.Node, error) {
	logger := klog.FromContext(ctx)
	node := &v1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: c.opts.NodeName,
			Labels: map[string]string{
				v1.LabelHostname:      c.opts.Hostname,
				v1.LabelOSStable:      goruntime.GOOS,
				v1.LabelArchStable:    goruntime.GOARCH,
				kubeletapis.LabelOS:   goruntime.GOOS,
				kubeletapis.LabelArch: goruntime.GOARCH,
			},
		},
	}
	taints := append([]v1.Taint(nil), c.opts.RegisterWithTaints...)
	if c.opts.ExternalCloudProvider {
		taints = append(taints, v1.Taint{Key: taintExternalCloudProvider, Value: "true", Effect: v1.TaintEffectNoSchedule})
	}
	if len(taints) > 0 {
		node.Spec.Taints = taints
	}
	if c.opts.ControllerAttachDetach {
		node.Annotations = map[string]string{annotationControllerManagedAttach: "true"}
	}
	for k, v := range c.opts.NodeLabels {
		if old, ok := node.Labels[k]; ok {
			logger.Info("the node label will overwrite default setting", "labelKey", k, "labelValue", v, "default", old)
		}
		node.Labels[k] = v
	}
	node.Spec.ProviderID = c.opts.ProviderID

	c.initialMu.Lock()
	defer c.initialMu.Unlock()
	if c.lastInitial != nil {
		node.Status.Conditions = append([]v1.NodeCondition(nil), c.lastInitial.Status.Conditions...)
	}
	c.setNodeStatus(ctx, node)
	c.lastInitial, c.initialAt = node.DeepCopy(), c.clock.Now()
	return node, nil
}

// Run registers the node, keeps its status and lease, and watches it, until ctx ends.
// Without a client (standalone mode) it returns at once.
func (c *Controller) Run(ctx context.Context) {
	if c.client == nil {
		return
	}
	c.startWatch(ctx)
	go c.statusLoop(ctx)
	go c.fastStatusUpdateOnce(ctx)
	go c.runLease(ctx)
	<-ctx.Done()
}
