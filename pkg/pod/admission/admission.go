// Package admission decides whether a pod may start on this node, as upstream's kubelet
// does with its admit handlers before a pod's first sync (pkg/kubelet/lifecycle's
// predicate handler, pkg/kubelet/sysctl, the eviction and node-shutdown managers' Admit,
// the AppArmor and declared-features handlers). A rejected pod never runs: the kubelet
// marks it Failed with the Result's Reason and the message "Pod was rejected: "+Message,
// and records a Warning event with the same reason.
//
// The handlers run in upstream's order; the first rejection wins:
//
//  1. node pressure (eviction manager)  Evicted
//  2. sysctls                           SysctlForbidden
//  3. device plugins' allocation         UnexpectedAdmissionError (CPU, memory and
//     topology managers: not done, nodelet has none)
//  4. predicates                        InvalidNodeInfo, PodOSSelectorNodeLabelDoesNotMatch,
//     PodOSNotSupported, SupplementalGroupsPolicyNotSupported, then the first of
//     OutOf<resource>, NodeAffinity, NodeName, NodePorts, TaintToleration
//  5. AppArmor                          AppArmor
//  6. declared node features            PodFeatureUnsupported
//  7. node shutdown                     NodeShutdown
package admission

import (
	"errors"
	"fmt"
	"runtime"
	"slices"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/version"
	ndf "k8s.io/component-helpers/nodedeclaredfeatures"
	"k8s.io/klog/v2"

	nodeletversion "github.com/nodelet/nodelet/pkg/version"
)

// Result is the outcome of admitting one pod. Reason is a single CamelCase word and
// Message a sentence, both upstream's; they are empty when Admit is true.
type Result struct {
	Admit   bool
	Reason  string
	Message string
}

// Options are the parts of the kubelet's configuration and state the handlers need.
// Every field is optional.
type Options struct {
	// AllowedUnsafeSysctls is allowedUnsafeSysctls from the KubeletConfiguration: sysctl
	// names or patterns ending in '*' that pods may set on top of the safe set.
	AllowedUnsafeSysctls []string

	// DeclaredFeatures is the node's declared feature list, the one node status publishes
	// in status.declaredFeatures (upstream computes it once at start-up with
	// nodedeclaredfeatures.DefaultFramework.DiscoverNodeFeatures). A pod that needs a
	// feature missing from it is rejected; nil declares none.
	DeclaredFeatures []string

	// RefreshNode fetches the Node from the API server, bypassing any cache. Upstream
	// retries the predicates with a fresh Node when node affinity is the only failure,
	// since labels may have just changed. Nil disables the retry.
	RefreshNode func() (*v1.Node, error)

	// PressureConditions returns the node conditions the eviction manager observes now
	// (MemoryPressure, DiskPressure, PIDPressure). Nil means no eviction manager: no
	// pressure.
	PressureConditions func() []v1.NodeConditionType

	// ShuttingDown reports whether a graceful node shutdown is in progress. Nil means never.
	ShuttingDown func() bool

	// AllocateDevices allocates the device plugins' devices to one container of a new
	// pod (init containers first, as upstream); nil means no device plugins.
	AllocateDevices func(pod *v1.Pod, c *v1.Container) error
	// AllocateResources, when set, allocates a new pod's resources instead: upstream's
	// resource allocation handler, where the topology manager aligns and allocates the
	// CPUs, NUMA memory and devices of each container. It gives the refusal's reason
	// and message.
	AllocateResources func(pod *v1.Pod) (ok bool, reason, message string)
}

// Admitter runs the admit handlers. It is safe for concurrent use if the functions in
// Options and the node function are.
type Admitter struct {
	node func() (*v1.Node, error)
	opts Options

	sysctls  *sysctlAllowlist
	features ndf.FeatureSet
	version  *version.Version

	// Host facts, read once at start-up like upstream; tests replace them.
	goos            string
	appArmorHostErr error

	handlers []handler
}

// handler is one admit handler; others are the active pods other than pod.
type handler func(pod *v1.Pod, others []*v1.Pod) Result

// New builds the admit chain. node returns the current Node: the registered one from the
// API server, or the kubelet's initial Node (labels, taints, capacity and allocatable as
// node status would set them) before registration and in standalone mode. It must
// include status.allocatable: a node without allocatable pods admits no pod (OutOfpods),
// as upstream. New fails on an invalid or non-namespaced allowedUnsafeSysctls entry or
// an unknown declared feature; the kubelet should refuse to start then, as upstream.
func New(node func() (*v1.Node, error), opts Options) (*Admitter, error) {
	if node == nil {
		return nil, errors.New("admission needs a node function")
	}
	// Safe sysctls may also be listed as unsafe, so one allowlist holds both.
	allowed := append(safeSysctls(hostKernelVersion()), opts.AllowedUnsafeSysctls...)
	sysctls, err := newSysctlAllowlist(allowed)
	if err != nil {
		return nil, err
	}
	declared := slices.Sorted(slices.Values(opts.DeclaredFeatures))
	features, err := ndf.DefaultFramework.MapSorted(declared)
	if err != nil {
		return nil, fmt.Errorf("declared features: %w", err)
	}
	a := &Admitter{
		node:            node,
		opts:            opts,
		sysctls:         sysctls,
		features:        features,
		version:         version.MustParseSemantic(nodeletversion.KubeletVersion),
		goos:            runtime.GOOS,
		appArmorHostErr: appArmorHostError(),
	}
	a.handlers = []handler{
		a.admitNodePressure,
		a.admitSysctls,
		resourcesHandler: a.admitResources,
		a.admitPredicates,
		a.admitAppArmor,
		a.admitDeclaredFeatures,
		a.admitShutdown,
	}
	return a, nil
}

// resourcesHandler is admitResources' place in the handlers, after node pressure and
// sysctls and before the predicates, as upstream orders them.
const resourcesHandler = 2

// Admit checks pod against the node and the pods already admitted and still active.
//
// active is upstream's GetActivePods: every pod the pod manager holds (not mirror pods)
// except those that are inactive, i.e. whose worker has fully terminated them, or that
// are terminal (Succeeded or Failed in the source's status or in the status manager,
// which includes pods rejected here) and not still being terminated. A pod that is
// terminating still holds its resources and counts. pod itself may be in the list; it
// is left out by UID. Call Admit for new pods only, oldest first, so that each admitted
// pod is in the active list of the next; upstream does not admit mirror pods (they only
// update their static pod), pods whose termination was requested, nor pods already
// terminal.
func (a *Admitter) Admit(pod *v1.Pod, active []*v1.Pod) Result {
	return a.admit(pod, active, "add")
}

// AdmitResize checks an in-place resize of an admitted pod: pod carries the desired
// resources and allocated the other pods with their allocated resources (upstream runs
// the same handlers with the resize operation). A refusal leaves the pod running as it
// is; the kubelet reports the resize pending with the Result's reason and message.
func (a *Admitter) AdmitResize(pod *v1.Pod, allocated []*v1.Pod) Result {
	return a.admit(pod, allocated, "resize")
}

func (a *Admitter) admit(pod *v1.Pod, active []*v1.Pod, operation string) Result {
	others := make([]*v1.Pod, 0, len(active))
	for _, p := range active {
		if p.UID != pod.UID {
			others = append(others, p)
		}
	}
	for i, admit := range a.handlers {
		// A resize allocates nothing more: the resource managers keep a container's
		// CPUs, memory and devices as admitted (upstream's static policies skip resizes).
		if operation == "resize" && i == resourcesHandler {
			continue
		}
		if r := admit(pod, others); !r.Admit {
			klog.InfoS("Pod admission denied", "podUID", pod.UID, "pod", klog.KObj(pod),
				"reason", r.Reason, "message", r.Message, "operation", operation)
			return r
		}
	}
	return admitted()
}

func admitted() Result { return Result{Admit: true} }

func reject(reason, message string) Result {
	return Result{Reason: reason, Message: message}
}
