package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodelet/nodelet/pkg/config"
	"github.com/nodelet/nodelet/pkg/node/cm"
	"github.com/nodelet/nodelet/pkg/node/eviction"
	"github.com/nodelet/nodelet/pkg/node/stats"
	"github.com/nodelet/nodelet/pkg/runtime/criconfig"
	"github.com/nodelet/nodelet/test/internal/host"
)

// evictionCost is the eviction manager's cost measured in this process: nodelet's
// pkg/node/stats Provider and pkg/node/eviction Manager, built as nodelet builds them with the
// default thresholds, checking the node's pods (nodelet is stopped meanwhile: its pods
// keep running) as fast as they can in turn, for syncs checks after a warm-up.
type evictionCost struct {
	syncs       int
	pods        int           // pods in the last summary
	wall        time.Duration // per check
	self        time.Duration // this process's CPU per check
	containerd  time.Duration // containerd's CPU per check
	shims       time.Duration // its shims' CPU per check
	conditions  []v1.NodeConditionType
	evictedPods int
}

// evictionPeriod is the manager's monitoring interval (upstream's evictionMonitoringPeriod).
const evictionPeriod = eviction.DefaultMonitoringInterval

func (e evictionCost) perMinute(d time.Duration) float64 {
	return d.Seconds() * float64(time.Minute/evictionPeriod)
}

func (n *node) measureEviction(ctx context.Context, syncs int) (evictionCost, error) {
	pods, err := n.podsFromRuntime(ctx)
	if err != nil {
		return evictionCost{}, err
	}
	podCgroupRoot := "/" + n.cgroupRoot + "/kubepods"
	provider := stats.NewProvider(n.rs, n.is, stats.PodListerFunc(func() []*v1.Pod { return pods }),
		stats.Options{NodeName: n.name, RootDir: n.rootDir(), PodLogsDir: n.logsDir(), PodCgroupRoot: podCgroupRoot})
	thresholds, err := eviction.ParseThresholds([]string{cm.EnforcePods}, config.DefaultEvictionHard(), nil, nil, nil)
	if err != nil {
		return evictionCost{}, err
	}
	shims, err := host.PIDsWithArgs(n.shimArgs...)
	if err != nil {
		return evictionCost{}, err
	}
	const warmUp = 3
	probe := &syncProbe{node: n, shims: shims, marks: map[int]mark{}, from: warmUp, to: warmUp + syncs, done: make(chan struct{})}
	probe.summary = provider.Get
	result := evictionCost{syncs: syncs}
	m, err := eviction.NewManager(eviction.Config{
		Thresholds: thresholds, PressureTransitionPeriod: 5 * time.Minute, PodCgroupRoot: podCgroupRoot,
		LocalStorageCapacityIsolation: true,
		// Back to back: the manager waits this long after each check.
		MonitoringInterval: time.Millisecond,
	}, eviction.Deps{
		Summary:    probe.get,
		ActivePods: func() []*v1.Pod { return pods },
		KillPod: func(*v1.Pod, func(*v1.PodStatus), int64) error {
			result.evictedPods++
			return errors.New("the bench evicts nothing")
		},
		HasDedicatedImageFs: eviction.ImageFsOnOwnDevice(n.is, n.rootDir()),
	})
	if err != nil {
		return evictionCost{}, err
	}
	loopCtx, stop := context.WithCancel(ctx)
	m.Start(loopCtx)
	select {
	case <-probe.done:
	case <-ctx.Done():
	}
	stop()
	if err := probe.result(&result); err != nil {
		return result, err
	}
	result.conditions = m.PressureConditions()
	if result.pods != len(pods) {
		return result, fmt.Errorf("the summary has %d pods, the node %d", result.pods, len(pods))
	}
	return result, ctx.Err()
}

// mark is the clock and the CPU times when a check began.
type mark struct {
	at                time.Time
	self              time.Duration
	containerd, shims float64
	err               error
}

// syncProbe stands between the manager and the stats provider: each check begins with
// one summary, so the marks taken there, from'th to to'th, bracket to−from checks.
type syncProbe struct {
	node     *node
	shims    []int
	summary  func(context.Context) (*statsapi.Summary, error)
	from, to int

	mu    sync.Mutex
	calls int
	marks map[int]mark
	pods  int
	errs  int
	done  chan struct{}
}

func (p *syncProbe) get(ctx context.Context) (*statsapi.Summary, error) {
	p.mu.Lock()
	p.calls++
	call := p.calls
	p.mu.Unlock()
	if call == p.from || call == p.to {
		c, err := p.node.cpuNow(p.shims)
		p.mu.Lock()
		p.marks[call] = mark{at: time.Now(), self: host.SelfCPU(), containerd: c.containerd, shims: c.shims, err: err}
		p.mu.Unlock()
		if call == p.to {
			close(p.done)
			return nil, errors.New("the bench has measured enough checks")
		}
	}
	s, err := p.summary(ctx)
	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil {
		p.errs++
	} else {
		p.pods = len(s.Pods)
	}
	return s, err
}

func (p *syncProbe) result(r *evictionCost) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	a, b := p.marks[p.from], p.marks[p.to]
	if err := errors.Join(a.err, b.err); err != nil {
		return err
	}
	if p.errs > 0 {
		return fmt.Errorf("%d of %d stats summaries failed", p.errs, p.calls)
	}
	n := time.Duration(r.syncs)
	r.pods = p.pods
	r.wall = b.at.Sub(a.at) / n
	r.self = (b.self - a.self) / n
	r.containerd = seconds(b.containerd-a.containerd) / n
	r.shims = seconds(b.shims-a.shims) / n
	return nil
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// podsFromRuntime rebuilds the node's pods from their sandboxes' labels (name,
// namespace, UID), as the active pods the manager ranks and the stats provider lists.
func (n *node) podsFromRuntime(ctx context.Context) ([]*v1.Pod, error) {
	sandboxes, err := n.rs.ListPodSandbox(ctx, nil)
	if err != nil {
		return nil, err
	}
	var pods []*v1.Pod
	for _, sb := range sandboxes {
		name := sb.Labels[criconfig.PodNameLabel]
		if !strings.HasSuffix(name, "-"+n.name) {
			continue
		}
		p := &v1.Pod{Spec: v1.PodSpec{Containers: []v1.Container{{Name: "app", Image: image}}}}
		p.Name, p.Namespace, p.UID = name, sb.Labels[criconfig.PodNamespaceLabel], types.UID(sb.Labels[criconfig.PodUIDLabel])
		pods = append(pods, p)
	}
	return pods, nil
}
