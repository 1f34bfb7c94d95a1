package kubelet

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/pkg/metrics/podstartup"
	"github.com/nodelet/nodelet/pkg/pod/allocation"
	"github.com/nodelet/nodelet/pkg/pod/pleg"
	"github.com/nodelet/nodelet/pkg/pod/podcache"
	"github.com/nodelet/nodelet/pkg/pod/podmanager"
	"github.com/nodelet/nodelet/pkg/pod/podworkers"
	"github.com/nodelet/nodelet/pkg/pod/prober/results"
	"github.com/nodelet/nodelet/pkg/pod/status"
	"github.com/nodelet/nodelet/pkg/runtime/container"
)

// Volumes prepares and releases pod volumes and directories.
type Volumes interface {
	SetUpPod(ctx context.Context, pod *v1.Pod) error
	CleanupPod(uid types.UID) error
	// TearDownPod removes the volumes of a pod terminated but still in the API.
	TearDownPod(uid types.UID) error
	PodDirs() ([]types.UID, error)
}

// Cgroups creates, lists and removes pod cgroups (the container manager).
type Cgroups interface {
	// EnsurePod creates the pod's cgroup with its limits, before its sandbox exists.
	EnsurePod(pod *v1.Pod) error
	// UpdateQOSCgroups sets the QoS classes' cgroups for the pods that now hold resources.
	UpdateQOSCgroups() error
	Pods() map[types.UID]bool
	Remove(uid types.UID) error
	// The pod's cgroup read back, for the pod-level resources in its status.
	status.PodCgroupReader
}

// UserNamespaces remembers the user-namespace ID blocks of pods (hostUsers: false).
type UserNamespaces interface {
	Release(uid types.UID)
	CleanupOrphaned(inUse func(types.UID) bool) error
}

// Prober runs the pods' liveness, readiness and startup probes.
type Prober interface {
	AddPod(pod *v1.Pod)
	StopLivenessAndStartup(pod *v1.Pod)
	RemovePod(pod *v1.Pod)
	CleanupPods(desired map[types.UID]sets.Empty)
	TriggerReadinessProbes(pod *v1.Pod, status *v1.PodStatus)
}

// Admitter decides whether a new pod may run, given the pods already admitted and still
// active (upstream's admit handlers; pkg/pod/admission). A refused pod fails with the reason.
type Admitter interface {
	Admit(pod *v1.Pod, active []*v1.Pod) (ok bool, reason, message string)
	// AdmitResize decides whether an admitted pod's new resources fit next to the other
	// pods' allocated ones; a refused resize stays pending with the reason.
	AdmitResize(pod *v1.Pod, allocated []*v1.Pod) (ok bool, reason, message string)
}

// ResizeRuntime is what the loop needs of the runtime manager for in-place resizes
// (implemented by *kuberuntime.Manager).
type ResizeRuntime interface {
	// IsPodResizeInProgress says whether the pod's allocated resources differ from
	// those applied to its running containers.
	IsPodResizeInProgress(pod *v1.Pod, status *container.PodStatus) bool
	// ActuatedContainerResources returns the resources last applied to a container.
	ActuatedContainerResources(uid types.UID, name string) (v1.ResourceRequirements, bool)
}

// ResourceHealth is what the device plugins and DRA drivers say of the health of the
// devices allocated to containers (upstream's ResourceHealthStatus, beta and on by default).
type ResourceHealth interface {
	// UpdateAllocatedResourcesStatus fills the containers' allocatedResourcesStatus.
	UpdateAllocatedResourcesStatus(pod *v1.Pod, status *v1.PodStatus)
	// Updates names the pods whose devices' health changed.
	Updates() <-chan []types.UID
}

// ResourceReleaser releases what a pod holds once its containers have stopped: its DRA
// resource claims (preparing them is the runtime manager's, before the sandbox) and its
// NUMA affinities.
type ResourceReleaser interface {
	ReleaseResources(ctx context.Context, pod *v1.Pod) error
}

// MirrorClient creates and deletes the API server's mirror pods of static pods (cluster
// mode; nil standalone).
type MirrorClient interface {
	CreateMirrorPod(ctx context.Context, pod *v1.Pod) error
	DeleteMirrorPod(ctx context.Context, podFullName string, uid *types.UID) (bool, error)
}

// SourcesReady reports whether every pod source has delivered its first full list and is
// among seen, the sources whose updates the loop has handled (upstream's SourcesReadyFn;
// sources.Config.SeenAllSources fits). Before that, nothing unknown may be cleaned up: a
// source is marked ready when its list is merged, before its pods reach the loop.
type SourcesReady func(seen sets.Set[string]) bool

// seenSources are the sources the loop has handled an update from (upstream's
// sourcesReady.AddSource); the garbage collector reads them from its own goroutine.
type seenSources struct {
	mu   sync.Mutex
	seen sets.Set[string]
}

func (s *seenSources) add(source string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seen.Insert(source)
}

func (s *seenSources) list() sets.Set[string] {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seen.Clone()
}

// Config is the loop's tuning, from the KubeletConfiguration.
type Config struct {
	NodeName           string
	HostIPs            []string
	SyncFrequency      time.Duration
	HousekeepingPeriod time.Duration
	MaxPods            int
	GCPolicy           container.GCPolicy
	// GCPeriod is how often container garbage collection runs (upstream: 1 minute).
	GCPeriod time.Duration
	// PodLevelResourcesResize is the InPlacePodLevelResourcesVerticalScaling gate: when
	// off, resizes of spec.resources are Infeasible.
	PodLevelResourcesResize bool
	// StaticCPUManager and StaticMemoryManager make a Guaranteed pod's CPU (memory)
	// resize Infeasible: the resource managers pin them.
	StaticCPUManager, StaticMemoryManager bool
}

// Deps are the components the loop drives; each is a small interface or a package of its own.
type Deps struct {
	Runtime    container.Runtime
	PLEG       pleg.PodLifecycleEventGenerator
	PLEGEvents chan *pleg.PodLifecycleEvent
	Cache      podcache.Cache
	Status     status.Manager
	Volumes    Volumes
	Cgroups    Cgroups
	// UserNamespaces may be nil (no pod gets its own user namespace).
	UserNamespaces UserNamespaces
	Recorder       record.EventRecorder
	RuntimeState   *RuntimeState
	Liveness       results.Manager
	Readiness      results.Manager
	Startup        results.Manager
	// SupportsRecursiveReadOnlyMounts says whether a pod's runtime handler makes
	// recursively read-only mounts, for its volume mount statuses; nil means none does.
	SupportsRecursiveReadOnlyMounts func(*v1.Pod) bool
	Prober                          Prober
	SourcesReady                    SourcesReady
	Clock                           clock.WithTicker
	// Admitter checks new pods; nil admits up to MaxPods.
	Admitter Admitter
	// Mirror is nil standalone: static pods then have no API object.
	Mirror MirrorClient
	// Pods is the pod manager; nil makes a new one. Cluster mode shares it with the API
	// status syncer, which reads the pods as last delivered and the mirror pods.
	Pods *podmanager.Manager
	// Allocations hold the resources admitted for each pod (the allocated_pods_state
	// checkpoint); nil keeps them in memory.
	Allocations *allocation.Store
	// Resize tracks in-place resizes in the runtime; nil reports none in progress.
	Resize ResizeRuntime
	// Releaser may be nil: pods hold nothing to release.
	Releaser ResourceReleaser
	// ResourceHealth may be nil: no container reports allocatedResourcesStatus.
	ResourceHealth ResourceHealth
	// Tracer starts the pod sync spans (syncPod, syncTerminatingPod, syncTerminatedPod);
	// nil traces nothing.
	Tracer trace.Tracer
}

// Kubelet is the loop: it turns pod updates, runtime events and timers into pod-worker work.
type Kubelet struct {
	cfg         Config
	deps        Deps
	pods        *podmanager.Manager
	workers     *podworkers.PodWorkers
	workQueue   *podworkers.WorkQueue
	reasons     *status.ReasonCache
	backOff     *flowcontrol.Backoff
	rejected    *uidSet
	housekeeper *housekeeper
	sourcesSeen seenSources
	deadlines   *activeDeadlines
	// loopEntered is when the sync loop last began or ended an iteration (Unix ns; 0
	// before the first), for /healthz/syncloop.
	loopEntered atomic.Int64
	// startup traces the pods that are starting (pkg/metrics/podstartup).
	startup *podstartup.Tracker
	// allocation admits pods and their resizes; the workers run allocated pods.
	allocation *allocation.Manager
	// resizes are the pods' PodResizePending and PodResizeInProgress conditions.
	resizes *status.ResizeConditions
	// created is when the loop was made: containers running before then were started by
	// an earlier kubelet process (a restart, or a switch from another kubelet).
	created time.Time
}

// New wires the loop.
func New(cfg Config, deps Deps) *Kubelet {
	if deps.Clock == nil {
		deps.Clock = clock.RealClock{}
	}
	if deps.Pods == nil {
		deps.Pods = podmanager.New()
	}
	k := &Kubelet{
		cfg:       cfg,
		deps:      deps,
		created:   deps.Clock.Now(),
		pods:      deps.Pods,
		workQueue: podworkers.NewWorkQueue(deps.Clock),
		reasons:   status.NewReasonCache(),
		// CrashLoopBackOff: 10 s doubling to 5 min, as upstream.
		backOff:     flowcontrol.NewBackOff(10*time.Second, 300*time.Second),
		rejected:    &uidSet{set: sets.New[types.UID]()},
		sourcesSeen: seenSources{seen: sets.New[string]()},
		startup:     podstartup.NewTracker(deps.Clock),
	}
	k.resizes = status.NewResizeConditions(deps.Clock.Now)
	k.resizes.SetPodLookup(k.pods.GetPodByUID)
	k.allocation = allocation.NewManager(allocation.Options{
		Store: deps.Allocations, Admit: k.admitAgainst, Conditions: k.resizes, Recorder: deps.Recorder,
		ActivePods: k.ActivePods, PodByUID: k.pods.GetPodByUID, SourcesReady: k.sourcesReady,
		TriggerSync:    func(pod *v1.Pod) { k.dispatch(pod, podworkers.SyncPodSync) },
		PodLevelResize: cfg.PodLevelResourcesResize, Now: deps.Clock.Now,
		StaticCPUManager: cfg.StaticCPUManager, StaticMemoryManager: cfg.StaticMemoryManager,
	})
	k.workers = podworkers.New(newTracedSyncer(k, deps.Tracer), deps.Cache, k.workQueue, deps.Clock, cfg.SyncFrequency)
	k.housekeeper = newHousekeeper(k)
	k.deadlines = &activeDeadlines{status: deps.Status, recorder: deps.Recorder, clock: deps.Clock}
	return k
}

// sourcesReady reports whether every source's first full list has been handled.
func (k *Kubelet) sourcesReady() bool {
	return k.deps.SourcesReady(k.sourcesSeen.list())
}

// AllSourcesReady is upstream's sourcesReady.AllReady: every source's first full list
// has been handled by the loop (not merely received), so the pods of that first list are
// admitted while it is still false. The device plugin manager relies on this to leave the
// devices of containers already running at a restart alone.
func (k *Kubelet) AllSourcesReady() bool { return k.sourcesReady() }

// Pods lists the desired pods (for the local API and CLI).
func (k *Kubelet) Pods() []*v1.Pod { return k.pods.GetPods() }

// PodByName finds a desired pod.
func (k *Kubelet) PodByName(namespace, name string) (*v1.Pod, bool) {
	return k.pods.GetPodByName(namespace, name)
}

// CouldHaveRunningContainers is false once a pod's containers are known to be stopped for
// good; the API status syncer holds back a terminal phase until then.
func (k *Kubelet) CouldHaveRunningContainers(uid types.UID) bool {
	return k.workers.CouldHaveRunningContainers(uid)
}

// PodStatus returns the status the kubelet last computed for a pod.
func (k *Kubelet) PodStatus(uid types.UID) (v1.PodStatus, bool) {
	return k.deps.Status.GetPodStatus(uid)
}

// Run starts the PLEG, the status manager and garbage collection, then runs the sync loop
// until ctx ends.
func (k *Kubelet) Run(ctx context.Context, updates <-chan podUpdate) {
	k.deps.Status.Start(ctx)
	k.deps.PLEG.Start()
	defer k.deps.PLEG.Stop()
	go k.runContainerGC(ctx)
	k.syncLoop(ctx, updates)
}

func (k *Kubelet) runContainerGC(ctx context.Context) {
	t := k.deps.Clock.NewTicker(k.cfg.GCPeriod)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			k.garbageCollect(ctx)
		}
	}
}

// uidSet is a set of pod UIDs safe for concurrent use: the loop writes it, and
// ActivePods reads it from the resource managers' and servers' goroutines.
type uidSet struct {
	mu  sync.RWMutex
	set sets.Set[types.UID]
}

func (u *uidSet) Has(uid types.UID) bool {
	u.mu.RLock()
	defer u.mu.RUnlock()
	return u.set.Has(uid)
}

func (u *uidSet) Insert(uid types.UID) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.set.Insert(uid)
}

func (u *uidSet) Delete(uid types.UID) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.set.Delete(uid)
}
