package app

import (
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"

	"github.com/nodelet/nodelet/pkg/config"
	"github.com/nodelet/nodelet/pkg/node/nodeshutdown"
)

// newShutdownManager builds the graceful node shutdown manager from shutdownGracePeriod,
// shutdownGracePeriodCriticalPods and shutdownGracePeriodByPodPriority (off when they are
// zero): it holds a logind delay inhibitor and, when the node shuts down, makes it not
// ready, refuses new pods and kills the running ones group by group.
func newShutdownManager(opts *config.Options, nodeName string, recorder record.EventRecorder, late *lateBound) (*nodeshutdown.Manager, error) {
	cfg := opts.Config
	return nodeshutdown.New(nodeshutdown.Config{
		ShutdownGracePeriod:              cfg.ShutdownGracePeriod.Duration,
		ShutdownGracePeriodCriticalPods:  cfg.ShutdownGracePeriodCriticalPods.Duration,
		ShutdownGracePeriodByPodPriority: cfg.ShutdownGracePeriodByPodPriority,
		StateDir:                         opts.RootDirectory,
	}, nodeshutdown.Deps{
		ActivePods:     late.activePods,
		KillPod:        late.killPod,
		SyncNodeStatus: late.syncNodeStatus,
		Recorder:       recorder,
		// Upstream's node reference: the node's name as its UID.
		NodeRef: &v1.ObjectReference{Kind: "Node", Name: nodeName, UID: types.UID(nodeName)},
	})
}
