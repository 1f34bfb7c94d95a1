package podworkers

import (
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/kubetypes"
)

// Static pods of one full name run one at a time, in the order they arrived, as upstream's
// pod workers start them: an edited manifest gives the pod a new UID, and the new pod waits
// until the old one has terminated — its containers had their whole grace period and its
// resources are cleaned up — before it starts (and its mirror pod follows).
type staticPods struct {
	// started is the UID allowed to run, by full name.
	started map[string]types.UID
	// waiting are the UIDs waiting to start, in arrival order, by full name.
	waiting map[string][]types.UID
}

func newStaticPods() staticPods {
	return staticPods{started: map[string]types.UID{}, waiting: map[string][]types.UID{}}
}

// staticFullName is a static pod's full name ("name_namespace"), "" for other pods.
func staticFullName(pod *v1.Pod) string {
	if pod == nil || !kubetypes.IsStaticPod(pod) {
		return ""
	}
	return pod.Name + "_" + pod.Namespace
}

// queueStaticLocked puts a new static pod in line to start.
func (p *PodWorkers) queueStaticLocked(uid types.UID, s *podState) {
	if s.staticName == "" {
		return
	}
	p.static.waiting[s.staticName] = append(p.static.waiting[s.staticName], uid)
}

// staticMayStartLocked reports whether the pod may run its first sync now: it is not a
// static pod, or no other pod of its full name runs and it is the first live one in line.
func (p *PodWorkers) staticMayStartLocked(uid types.UID, s *podState) bool {
	name := s.staticName
	if name == "" || s.staticStarted {
		return true
	}
	if started, ok := p.static.started[name]; ok {
		return started == uid
	}
	queue := p.static.waiting[name]
	for i, waiting := range queue {
		if w, ok := p.pods[waiting]; !ok || w.terminating || w.finished {
			continue // gone or going before it ever started
		}
		if waiting != uid {
			p.static.waiting[name] = queue[i:]
			return false
		}
		queue = queue[i+1:]
		break
	}
	if len(queue) == 0 {
		delete(p.static.waiting, name)
	} else {
		p.static.waiting[name] = queue
	}
	p.static.started[name], s.staticStarted = uid, true
	return true
}

// releaseStaticLocked frees a finished static pod's full name and wakes the next pod in
// line, which need not wait for a retry.
func (p *PodWorkers) releaseStaticLocked(uid types.UID, s *podState) {
	name := s.staticName
	if name == "" || p.static.started[name] != uid {
		return
	}
	delete(p.static.started, name)
	for _, waiting := range p.static.waiting[name] {
		if w, ok := p.pods[waiting]; ok && !w.terminating && !w.finished {
			klog.V(4).InfoS("Static pod may start: the previous pod of its name has terminated", "podUID", waiting, "previousUID", uid)
			p.notifyLocked(w)
			return
		}
	}
}
