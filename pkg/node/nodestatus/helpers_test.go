package nodestatus

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/pkg/runtime/container"
)

// fakeRuntime is a Runtime whose answers tests set.
type fakeRuntime struct {
	mu         sync.Mutex
	runtimeErr error
	networkErr error
	version    string
	versionErr error
	images     []container.Image
	imagesErr  error
	imageCalls int
}

func (r *fakeRuntime) RuntimeErr() error { r.mu.Lock(); defer r.mu.Unlock(); return r.runtimeErr }
func (r *fakeRuntime) NetworkErr() error { r.mu.Lock(); defer r.mu.Unlock(); return r.networkErr }
func (r *fakeRuntime) Type() string      { return "containerd" }

func (r *fakeRuntime) Version(context.Context) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.version, r.versionErr
}

func (r *fakeRuntime) ListImages(context.Context) ([]container.Image, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.imageCalls++
	return append([]container.Image(nil), r.images...), r.imagesErr
}

func (r *fakeRuntime) setErrs(runtimeErr, networkErr error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.runtimeErr, r.networkErr = runtimeErr, networkErr
}

// event is one recorded event.
type event struct {
	ref                        v1.ObjectReference
	eventType, reason, message string
}

// eventLog is a record.EventRecorder that keeps what it is given.
type eventLog struct {
	mu     sync.Mutex
	events []event
}

var _ record.EventRecorder = (*eventLog)(nil)

func (l *eventLog) Event(obj runtime.Object, eventType, reason, message string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var ref v1.ObjectReference
	if r, ok := obj.(*v1.ObjectReference); ok {
		ref = *r
	}
	l.events = append(l.events, event{ref, eventType, reason, message})
}

func (l *eventLog) Eventf(obj runtime.Object, eventType, reason, format string, args ...any) {
	l.Event(obj, eventType, reason, fmt.Sprintf(format, args...))
}

func (l *eventLog) AnnotatedEventf(obj runtime.Object, _ map[string]string, eventType, reason, format string, args ...any) {
	l.Eventf(obj, eventType, reason, format, args...)
}

func (l *eventLog) reasons() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, e := range l.events {
		out = append(out, e.reason)
	}
	return out
}

func (l *eventLog) reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = nil
}

// fakePressure is a Pressure whose answers tests set.
type fakePressure struct{ memory, disk, pid bool }

func (p *fakePressure) MemoryPressure() bool { return p.memory }
func (p *fakePressure) DiskPressure() bool   { return p.disk }
func (p *fakePressure) PIDPressure() bool    { return p.pid }

const (
	testNode = "node-a"
	gi       = int64(1) << 30
	mi       = int64(1) << 20
)

func testMachine() *MachineInfo {
	storage := uint64(100_000_000_000)
	return &MachineInfo{
		NumCores: 4, MemoryCapacity: uint64(8 * gi), SwapCapacity: 0,
		HugePages:        []HugePages{{PageSizeKiB: 2048, NumPages: 256}, {PageSizeKiB: 1048576, NumPages: 0}},
		EphemeralStorage: &storage, MachineID: "machine-1", SystemUUID: "uuid-1", BootID: "boot-1",
		KernelVersion: "6.1.0-test", OSImage: "Debian GNU/Linux 12 (bookworm)",
	}
}

func testOptions() Options {
	return Options{
		NodeName: testNode, Hostname: testNode, RegisterNode: true, MaxPods: 110,
		NodeStatusUpdateFrequency: 10 * time.Second, NodeStatusReportFrequency: 5 * time.Minute,
		NodeStatusMaxImages: 50, NodeLeaseDurationSeconds: 40, KubeletPort: 10250, RootDir: "/var/lib/kubelet",
		KubeletVersion: "v1.37.2", LocalStorageCapacityIsolation: true, ControllerAttachDetach: true,
		EvictionHard: map[string]string{"memory.available": "100Mi", "nodefs.available": "10%"},
	}
}

// fakeResolver accepts every non-loopback address as local and resolves names to addrs.
func fakeResolver(addrs ...string) ipResolver {
	var ips []net.IP
	for _, a := range addrs {
		ips = append(ips, net.ParseIP(a))
	}
	return ipResolver{
		validate: func(ip net.IP) error {
			if ip.IsLoopback() {
				return errors.New("nodeIP can't be loopback address")
			}
			return nil
		},
		lookup:        func(string) ([]net.IP, error) { return ips, nil },
		hostInterface: func(net.IP) (net.IP, error) { return net.ParseIP("192.0.2.10"), nil },
	}
}

type testEnv struct {
	c        *Controller
	runtime  *fakeRuntime
	events   *eventLog
	clock    *testingclock.FakeClock
	pressure *fakePressure
}

// newTestController builds a controller on fakes; deps may set Client and clocks.
func newTestController(t *testing.T, opts Options, deps Deps) *testEnv {
	t.Helper()
	env := &testEnv{runtime: &fakeRuntime{version: "v1.7.24"}, events: &eventLog{}, pressure: &fakePressure{}}
	if deps.Runtime == nil {
		deps.Runtime = env.runtime
	}
	if deps.Clock == nil {
		env.clock = testingclock.NewFakeClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
		deps.Clock = env.clock
	}
	deps.Recorder = env.events
	deps.Pressure = env.pressure
	if deps.Machine == nil {
		deps.Machine = func() (*MachineInfo, error) { return testMachine(), nil }
	}
	c, err := New(opts, deps)
	if err != nil {
		t.Fatal(err)
	}
	c.ips = fakeResolver("192.0.2.10")
	env.c = c
	return env
}

var _ clock.Clock = (*testingclock.FakeClock)(nil)

func q(s string) resource.Quantity { return resource.MustParse(s) }

func condition(node *v1.Node, t v1.NodeConditionType) *v1.NodeCondition {
	if i := conditionIndex(node, t); i >= 0 {
		return &node.Status.Conditions[i]
	}
	return nil
}

func metaTime(t time.Time) metav1.Time { return metav1.NewTime(t) }
