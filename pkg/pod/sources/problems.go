package sources

import (
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
)

// problemLog reports each problem once: a relist meets every bad entry again, and
// upstream logs the same error every time. A problem is reported again only when its
// message changes, or after it went away and came back. Messages are bounded by their
// makers (see boundError), so what is kept here is small.
type problemLog struct {
	// logError defaults to klog.ErrorS; tests replace it.
	logError func(err error, msg string, keysAndValues ...interface{})
	reported map[string]string // key (usually a path) -> last reported error text
	current  sets.Set[string]  // keys reported or confirmed during this pass
}

func newProblemLog() *problemLog {
	return &problemLog{logError: klog.ErrorS, reported: make(map[string]string), current: sets.New[string]()}
}

// report logs err under msg unless the same error was already reported for key.
func (p *problemLog) report(key string, err error, msg string, keysAndValues ...interface{}) {
	p.current.Insert(key)
	text := msg
	if err != nil {
		text += ": " + err.Error()
	}
	if p.reported[key] == text {
		return
	}
	p.reported[key] = text
	p.logError(err, msg, keysAndValues...)
}

// resolve forgets the problem of key, so that it is reported again if it returns.
func (p *problemLog) resolve(key string) {
	delete(p.reported, key)
	p.current.Delete(key)
}

// startPass and endPass bracket a full relist: problems not seen again are resolved.
func (p *problemLog) startPass() {
	p.current = sets.New[string]()
}

func (p *problemLog) endPass() {
	for key := range p.reported {
		if !p.current.Has(key) {
			delete(p.reported, key)
		}
	}
}
