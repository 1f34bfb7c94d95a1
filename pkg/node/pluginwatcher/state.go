package pluginwatcher

import "sync"

// desiredState is upstream's desired state of the world: the plugin sockets the watcher
// has seen, each with the generation of its last creation. Upstream stamps a fresh UUID
// on every (re-)creation; a counter does the same job: a socket re-created at the same
// path gets a new generation, which tells the reconciler to register it again.
type desiredState struct {
	mu      sync.Mutex
	last    uint64
	sockets map[string]uint64
}

func newDesiredState() *desiredState {
	return &desiredState{sockets: map[string]uint64{}}
}

// add records socket, or gives it a new generation when it is already known: it may have
// been deleted and re-created before the deletion was noticed.
func (d *desiredState) add(socket string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.last++
	d.sockets[socket] = d.last
}

func (d *desiredState) remove(socket string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.sockets, socket)
}

// snapshot returns a copy of the sockets and their generations.
func (d *desiredState) snapshot() map[string]uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make(map[string]uint64, len(d.sockets))
	for socket, generation := range d.sockets {
		out[socket] = generation
	}
	return out
}

// registeredPlugin is what the actual state keeps of a plugin: enough to deregister it
// and to tell whether its socket was re-created since.
type registeredPlugin struct {
	socket     string
	generation uint64
	name       string
	endpoint   string
	handler    Handler
}

// actualState is upstream's actual state of the world: the plugins registered with
// their handler, by socket path.
type actualState struct {
	mu      sync.Mutex
	plugins map[string]registeredPlugin
}

func newActualState() *actualState {
	return &actualState{plugins: map[string]registeredPlugin{}}
}

func (a *actualState) add(p registeredPlugin) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.plugins[p.socket] = p
}

func (a *actualState) remove(socket string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.plugins, socket)
}

// isRegistered reports whether the plugin at socket is registered from the given
// creation of the socket.
func (a *actualState) isRegistered(socket string, generation uint64) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	p, ok := a.plugins[socket]
	return ok && p.generation == generation
}

func (a *actualState) snapshot() []registeredPlugin {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]registeredPlugin, 0, len(a.plugins))
	for _, p := range a.plugins {
		out = append(out, p)
	}
	return out
}
