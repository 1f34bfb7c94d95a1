package cm

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	sdbus "github.com/coreos/go-systemd/v22/dbus"
	godbus "github.com/godbus/dbus/v5"
	v1 "k8s.io/api/core/v1"
)

const dbusDaemon = "/usr/bin/dbus-daemon"

// dbusConfig (with the address to listen on) lets every connection own any name and
// talk to anyone.
const dbusConfig = `<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>custom</type>
  <listen>%s</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/>
    <allow own="*"/>
    <allow send_destination="*" eavesdrop="true"/>
    <allow receive_sender="*"/>
    <allow eavesdrop="true"/>
  </policy>
</busconfig>
`

// privateBus is a dbus-daemon of the test's own, which can be restarted at the same
// address.
type privateBus struct {
	t       *testing.T
	dir     string
	address string
	cmd     *exec.Cmd
}

func startPrivateBus(t *testing.T) *privateBus {
	t.Helper()
	if _, err := os.Stat(dbusDaemon); err != nil {
		t.Skipf("%s is not installed (Debian's dbus-daemon package): the systemd D-Bus tests need a private bus", dbusDaemon)
	}
	dir := t.TempDir()
	b := &privateBus{t: t, dir: dir, address: "unix:path=" + filepath.Join(dir, "bus")}
	writeTestFile(t, filepath.Join(dir, "bus.conf"), fmt.Sprintf(dbusConfig, b.address))
	b.start()
	t.Cleanup(b.stop)
	return b
}

func (b *privateBus) start() {
	b.t.Helper()
	_ = os.Remove(filepath.Join(b.dir, "bus"))
	cmd := exec.Command(dbusDaemon, "--config-file="+filepath.Join(b.dir, "bus.conf"), "--address="+b.address, "--nofork", "--print-address")
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		b.t.Fatal(err)
	}
	// The daemon prints its address once it listens.
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "unix:path=") {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		b.t.Fatalf("dbus-daemon did not start: %q %v\n%s", line, err, stderr.String())
	}
	b.cmd = cmd
}

func (b *privateBus) stop() {
	if b.cmd == nil {
		return
	}
	_ = b.cmd.Process.Kill()
	_ = b.cmd.Wait()
	b.cmd = nil
}

// dial connects to the bus as a client.
func (b *privateBus) dial() *godbus.Conn {
	b.t.Helper()
	conn, err := godbus.Dial(b.address)
	if err == nil {
		err = conn.Auth(nil)
	}
	if err == nil {
		err = conn.Hello()
	}
	if err != nil {
		b.t.Fatalf("connecting to the private bus: %v", err)
	}
	return conn
}

// unitCall is one call systemd's manager received.
type unitCall struct {
	method, unit string
	props        map[string]any
}

// fakeSystemd plays systemd's manager (org.freedesktop.systemd1) on a bus: it keeps
// the transient units started, creates a slice's cgroup in the hierarchies it is
// given when the unit starts and removes it when the unit stops, and answers start and
// stop jobs with JobRemoved "done". Its units outlive a restart of the bus.
type fakeSystemd struct {
	t           *testing.T
	version     string
	hierarchies []string // where a slice's cgroup directory is made
	controllers string   // cgroup.controllers of a new cgroup (v2), "" on v1

	mu    sync.Mutex
	conn  *godbus.Conn
	calls []unitCall
	units map[string]map[string]any // started unit -> properties
	jobs  uint32
}

func newFakeSystemd(t *testing.T, b *privateBus, hierarchies []string, controllers string) *fakeSystemd {
	f := &fakeSystemd{t: t, version: "255.4-1ubuntu8", hierarchies: hierarchies, controllers: controllers, units: map[string]map[string]any{}}
	f.serve(b)
	return f
}

// serve owns systemd's name on the bus and exports the manager.
func (f *fakeSystemd) serve(b *privateBus) {
	t := f.t
	t.Helper()
	conn := b.dial()
	t.Cleanup(func() { conn.Close() })
	const path = godbus.ObjectPath("/org/freedesktop/systemd1")
	if err := conn.Export(fakeManager{f}, path, "org.freedesktop.systemd1.Manager"); err != nil {
		t.Fatal(err)
	}
	if err := conn.Export(fakeProperties{f}, path, "org.freedesktop.DBus.Properties"); err != nil {
		t.Fatal(err)
	}
	reply, err := conn.RequestName("org.freedesktop.systemd1", godbus.NameFlagDoNotQueue)
	if err != nil || reply != godbus.RequestNameReplyPrimaryOwner {
		t.Fatalf("owning org.freedesktop.systemd1: %v %v", reply, err)
	}
	f.mu.Lock()
	f.conn = conn
	f.mu.Unlock()
}

func (f *fakeSystemd) record(method, unit string, props []sdbus.Property) map[string]any {
	m := map[string]any{}
	for _, p := range props {
		m[p.Name] = p.Value.Value()
	}
	f.calls = append(f.calls, unitCall{method, unit, m})
	return m
}

// sliceDir is a slice's cgroup path: test-a-b.slice is /test.slice/test-a.slice/test-a-b.slice.
func sliceDir(unit string) string {
	var dir, prefix string
	for _, c := range strings.Split(strings.TrimSuffix(unit, ".slice"), "-") {
		dir += "/" + prefix + c + ".slice"
		prefix += c + "-"
	}
	return dir
}

// jobDone answers a job as systemd does, once the job's path has been returned.
func (f *fakeSystemd) jobDone(unit string) godbus.ObjectPath {
	f.jobs++
	id := f.jobs
	job := godbus.ObjectPath(fmt.Sprintf("/org/freedesktop/systemd1/job/%d", id))
	conn := f.conn
	go func() {
		time.Sleep(time.Millisecond)
		_ = conn.Emit("/org/freedesktop/systemd1", "org.freedesktop.systemd1.Manager.JobRemoved", id, job, unit, "done")
	}()
	return job
}

func noSuchUnit(unit string) *godbus.Error {
	return godbus.NewError("org.freedesktop.systemd1.NoSuchUnit", []any{"Unit " + unit + " not loaded."})
}

type fakeManager struct{ f *fakeSystemd }

func (m fakeManager) StartTransientUnit(unit, mode string, props []sdbus.Property, _ []sdbus.PropertyCollection) (godbus.ObjectPath, *godbus.Error) {
	f := m.f
	f.mu.Lock()
	defer f.mu.Unlock()
	recorded := f.record("StartTransientUnit", unit, props)
	if _, ok := f.units[unit]; ok {
		return "", godbus.NewError("org.freedesktop.systemd1.UnitExists", []any{"Unit " + unit + " was already loaded or has a fragment file."})
	}
	if mode != "replace" || !strings.HasSuffix(unit, ".slice") {
		return "", godbus.NewError("org.freedesktop.DBus.Error.InvalidArgs", []any{"unexpected " + mode + " " + unit})
	}
	f.units[unit] = maps.Clone(recorded)
	for _, h := range f.hierarchies {
		dir := filepath.Join(h, sliceDir(unit))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return "", godbus.MakeFailedError(err)
		}
		if f.controllers != "" {
			if err := os.WriteFile(filepath.Join(dir, cgroupControllers), []byte(f.controllers), 0o644); err != nil {
				return "", godbus.MakeFailedError(err)
			}
		}
	}
	return f.jobDone(unit), nil
}

func (m fakeManager) SetUnitProperties(unit string, runtime bool, props []sdbus.Property) *godbus.Error {
	f := m.f
	f.mu.Lock()
	defer f.mu.Unlock()
	recorded := f.record("SetUnitProperties", unit, props)
	if !runtime {
		return godbus.NewError("org.freedesktop.DBus.Error.InvalidArgs", []any{"properties must be for this boot only"})
	}
	u, ok := f.units[unit]
	if !ok {
		return noSuchUnit(unit)
	}
	for k, v := range recorded {
		u[k] = v
	}
	return nil
}

func (m fakeManager) StopUnit(unit, mode string) (godbus.ObjectPath, *godbus.Error) {
	f := m.f
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record("StopUnit", unit, nil)
	if _, ok := f.units[unit]; !ok {
		return "", noSuchUnit(unit)
	}
	delete(f.units, unit)
	for _, h := range f.hierarchies {
		if err := os.RemoveAll(filepath.Join(h, sliceDir(unit))); err != nil {
			return "", godbus.MakeFailedError(err)
		}
	}
	return f.jobDone(unit), nil
}

func (m fakeManager) ResetFailedUnit(unit string) *godbus.Error {
	m.f.mu.Lock()
	defer m.f.mu.Unlock()
	m.f.record("ResetFailedUnit", unit, nil)
	return nil
}

type fakeProperties struct{ f *fakeSystemd }

func (p fakeProperties) Get(iface, name string) (godbus.Variant, *godbus.Error) {
	if iface == "org.freedesktop.systemd1.Manager" && name == "Version" {
		return godbus.MakeVariant(p.f.version), nil
	}
	return godbus.Variant{}, godbus.NewError("org.freedesktop.DBus.Error.UnknownProperty", []any{name})
}

// take returns the calls since the last take, without ResetFailedUnit.
func (f *fakeSystemd) take() []unitCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []unitCall
	for _, c := range f.calls {
		if c.method != "ResetFailedUnit" {
			out = append(out, c)
		}
	}
	f.calls = nil
	return out
}

func (f *fakeSystemd) unit(name string) (map[string]any, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	u, ok := f.units[name]
	return maps.Clone(u), ok
}

// find returns the calls of a method on a unit.
func find(calls []unitCall, method, unit string) []unitCall {
	var out []unitCall
	for _, c := range calls {
		if c.method == method && c.unit == unit {
			out = append(out, c)
		}
	}
	return out
}

// expectCall checks that a method was called once on the unit with exactly want.
func expectCall(t *testing.T, calls []unitCall, method, unit string, want map[string]any) {
	t.Helper()
	got := find(calls, method, unit)
	if len(got) != 1 {
		t.Errorf("%s(%s) called %d times, want once; calls: %v", method, unit, len(got), calls)
		return
	}
	if !reflect.DeepEqual(got[0].props, want) {
		t.Errorf("%s(%s) properties:\n got %v\nwant %v", method, unit, got[0].props, want)
	}
}

// sliceProps are the properties every slice starts with (libcontainer's Apply(-1)).
func sliceProps(unit, parent, io string) map[string]any {
	return map[string]any{
		"Description": "libcontainer container " + unit, "Wants": []string{parent},
		"MemoryAccounting": true, "CPUAccounting": true, io: true, "TasksAccounting": true,
		"DefaultDependencies": false,
	}
}

func TestSystemdV2Slices(t *testing.T) {
	bus := startPrivateBus(t)
	root, huge := fakeV2(t)
	controllers := "cpuset cpu io memory hugetlb pids"
	sd := newFakeSystemd(t, bus, []string{root}, controllers)

	guaranteed := testPod("g", res("500m", "128Mi", "500m", "128Mi"))
	burstable := testPod("a-b", res("100m", "", "155m", "256Mi"))
	bestEffort := testPod("be", v1.ResourceRequirements{})
	o := v2Options(root, huge)
	o.CgroupDriver, o.Systemd, o.SystemdBus = DriverSystemd, true, bus.address
	m, err := NewContainerManager(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := m.Start(ctx, func() []*v1.Pod { return []*v1.Pod{burstable} }); err != nil {
		t.Fatal(err)
	}

	// kubepods and the QoS slices are transient units, in -.slice and kubepods.slice.
	calls := sd.take()
	expectCall(t, calls, "StartTransientUnit", "kubepods.slice", sliceProps("kubepods.slice", "-.slice", "IOAccounting"))
	expectCall(t, calls, "StartTransientUnit", "kubepods-burstable.slice", sliceProps("kubepods-burstable.slice", "kubepods.slice", "IOAccounting"))
	expectCall(t, calls, "StartTransientUnit", "kubepods-besteffort.slice", sliceProps("kubepods-besteffort.slice", "kubepods.slice", "IOAccounting"))
	// Their limits are unit properties: node allocatable on kubepods (with stale memory
	// protection reset), the burstable pods' requests and the minimum on the QoS slices.
	u, _ := sd.unit("kubepods.slice")
	for k, v := range map[string]any{"MemoryMax": uint64(6442450944), "CPUWeight": uint64(118), "TasksMax": uint64(4000), "MemoryMin": uint64(0), "MemoryLow": uint64(0)} {
		if !reflect.DeepEqual(u[k], v) {
			t.Errorf("kubepods.slice %s = %#v, want %#v", k, u[k], v)
		}
	}
	if got := find(calls, "SetUnitProperties", "kubepods-burstable.slice"); len(got) != 2 ||
		!reflect.DeepEqual(got[0].props, map[string]any{"MemoryLow": uint64(0)}) ||
		!reflect.DeepEqual(got[1].props, map[string]any{"CPUWeight": uint64(4)}) {
		t.Errorf("burstable slice updates: %v", got)
	}
	if got := find(calls, "SetUnitProperties", "kubepods-besteffort.slice"); len(got) != 2 || !reflect.DeepEqual(got[1].props, map[string]any{"CPUWeight": uint64(1)}) {
		t.Errorf("besteffort slice updates: %v", got)
	}
	// nodelet still writes the cgroup files, those systemd has no property for too.
	expectFiles(t, filepath.Join(root, "kubepods.slice"), map[string]string{"memory.max": "6442450944", "hugetlb.2MB.max": "1073741824", "hugetlb.1GB.max": "0"})
	expectFiles(t, filepath.Join(root, "kubepods.slice", "kubepods-burstable.slice"), map[string]string{"cpu.weight": "4", "hugetlb.2MB.max": "4611686018427387904"})

	// Pod slices: started in their QoS slice, then limited.
	for _, p := range []*v1.Pod{guaranteed, burstable, bestEffort} {
		if err := m.EnsurePod(p); err != nil {
			t.Fatal(err)
		}
	}
	calls = sd.take()
	expectCall(t, calls, "StartTransientUnit", "kubepods-podg.slice", sliceProps("kubepods-podg.slice", "kubepods.slice", "IOAccounting"))
	expectCall(t, calls, "SetUnitProperties", "kubepods-podg.slice", map[string]any{
		"MemoryMax": uint64(134217728), "CPUWeight": uint64(20), "CPUQuotaPeriodUSec": uint64(100000),
		"CPUQuotaPerSecUSec": uint64(500000), "TasksMax": uint64(100),
	})
	expectCall(t, calls, "StartTransientUnit", "kubepods-burstable-poda_b.slice", sliceProps("kubepods-burstable-poda_b.slice", "kubepods-burstable.slice", "IOAccounting"))
	// 155m is 15.5% of a CPU: systemd keeps whole percents, so the quota is rounded up
	// to 16% for systemd and cgroupfs alike.
	expectCall(t, calls, "SetUnitProperties", "kubepods-burstable-poda_b.slice", map[string]any{
		"MemoryMax": uint64(268435456), "CPUWeight": uint64(4), "CPUQuotaPeriodUSec": uint64(100000),
		"CPUQuotaPerSecUSec": uint64(160000), "TasksMax": uint64(100),
	})
	expectCall(t, calls, "StartTransientUnit", "kubepods-besteffort-podbe.slice", sliceProps("kubepods-besteffort-podbe.slice", "kubepods-besteffort.slice", "IOAccounting"))
	expectCall(t, calls, "SetUnitProperties", "kubepods-besteffort-podbe.slice", map[string]any{"CPUWeight": uint64(1), "TasksMax": uint64(100)})
	expectFiles(t, filepath.Join(root, m.Parent(guaranteed)), map[string]string{"cpu.max": "50000 100000", "memory.max": "134217728", "hugetlb.2MB.max": "0"})
	expectFiles(t, filepath.Join(root, m.Parent(burstable)), map[string]string{"cpu.max": "16000 100000", "cpu.weight": "4"})
	if got := m.Parent(burstable); got != "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-poda_b.slice" {
		t.Errorf("Parent = %q", got)
	}
	// An existing pod slice is left alone.
	if err := m.EnsurePod(guaranteed); err != nil {
		t.Fatal(err)
	}
	if calls := sd.take(); len(find(calls, "StartTransientUnit", "kubepods-podg.slice")) != 0 {
		t.Errorf("existing pod slice started again: %v", calls)
	}

	// A resize updates the pod slice's properties: memory first, then the CPU limit, then
	// the CPU request.
	guaranteed.Spec.Containers[0].Resources = res("1", "256Mi", "1", "256Mi")
	var updated []v1.ResourceName
	if err := m.ResizePod(guaranteed, func(r v1.ResourceName) error { updated = append(updated, r); return nil }); err != nil {
		t.Fatal(err)
	}
	calls = sd.take()
	if got := find(calls, "SetUnitProperties", "kubepods-podg.slice"); len(got) != 3 ||
		!reflect.DeepEqual(got[0].props, map[string]any{"MemoryMax": uint64(268435456)}) ||
		!reflect.DeepEqual(got[1].props, map[string]any{"CPUQuotaPeriodUSec": uint64(100000), "CPUQuotaPerSecUSec": uint64(1000000)}) ||
		!reflect.DeepEqual(got[2].props, map[string]any{"CPUWeight": uint64(39)}) {
		t.Errorf("resize updates: %v", got)
	}
	expectFiles(t, filepath.Join(root, m.Parent(guaranteed)), map[string]string{"cpu.max": "100000 100000", "memory.max": "268435456", "cpu.weight": "39"})

	// Removing a pod stops its slice (and only the slice that exists); systemd removes
	// the cgroup.
	if err := m.Remove("g"); err != nil {
		t.Fatal(err)
	}
	calls = sd.take()
	if len(calls) != 1 || calls[0].method != "StopUnit" || calls[0].unit != "kubepods-podg.slice" {
		t.Errorf("Remove: calls %v, want StopUnit(kubepods-podg.slice)", calls)
	}
	if _, ok := sd.unit("kubepods-podg.slice"); ok {
		t.Error("pod slice still started after Remove")
	}
	if got := m.Pods(); len(got) != 2 || got["g"] {
		t.Errorf("Pods() after Remove = %v", got)
	}

	// The bus restarts: the lost connection is dialled again.
	conn := m.units.conn
	bus.stop()
	bus.start()
	sd.serve(bus)
	for deadline := time.Now().Add(10 * time.Second); conn.Connected(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the client did not notice the bus restart")
		}
	}
	again := testPod("again", v1.ResourceRequirements{})
	if err := m.EnsurePod(again); err != nil {
		t.Fatal(err)
	}
	expectCall(t, sd.take(), "StartTransientUnit", "kubepods-besteffort-podagain.slice", sliceProps("kubepods-besteffort-podagain.slice", "kubepods-besteffort.slice", "IOAccounting"))
}

func TestSystemdV1Slices(t *testing.T) {
	bus := startPrivateBus(t)
	root, huge := fakeV1(t)
	// systemd makes a slice's cgroup in its own hierarchy and in those it accounts in.
	var hierarchies []string
	for _, h := range []string{"systemd", "cpu,cpuacct", "memory", "pids"} {
		hierarchies = append(hierarchies, filepath.Join(root, h))
	}
	sd := newFakeSystemd(t, bus, hierarchies, "")
	sd.version = "241"

	o := v1Options(root, huge)
	o.CgroupRoot, o.CgroupDriver, o.Systemd, o.SystemdBus = "/", DriverSystemd, true, bus.address
	m, err := NewContainerManager(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := m.Start(ctx, func() []*v1.Pod { return nil }); err != nil {
		t.Fatal(err)
	}
	calls := sd.take()
	expectCall(t, calls, "StartTransientUnit", "kubepods.slice", sliceProps("kubepods.slice", "-.slice", "BlockIOAccounting"))
	expectCall(t, calls, "StartTransientUnit", "kubepods-burstable.slice", sliceProps("kubepods-burstable.slice", "kubepods.slice", "BlockIOAccounting"))
	expectCall(t, calls, "SetUnitProperties", "kubepods.slice", map[string]any{"MemoryLimit": uint64(6442450944), "CPUShares": uint64(3072), "TasksMax": uint64(4000)})
	if u, _ := sd.unit("kubepods-besteffort.slice"); u["CPUShares"] != uint64(2) {
		t.Errorf("besteffort slice: %v", u)
	}
	// Controllers systemd does not account in are made by nodelet.
	expectFiles(t, filepath.Join(root, "cpuset", "kubepods.slice", "kubepods-burstable.slice"), map[string]string{"cpuset.cpus": "0-3"})
	expectFiles(t, filepath.Join(root, "hugetlb", "kubepods.slice"), map[string]string{"hugetlb.2MB.limit_in_bytes": "1073741824"})

	guaranteed := testPod("g", res("500m", "128Mi", "500m", "128Mi"))
	if err := m.EnsurePod(guaranteed); err != nil {
		t.Fatal(err)
	}
	// systemd 241 has no CPUQuotaPeriodUSec: the period goes to cgroupfs only.
	calls = sd.take()
	expectCall(t, calls, "StartTransientUnit", "kubepods-podg.slice", sliceProps("kubepods-podg.slice", "kubepods.slice", "BlockIOAccounting"))
	expectCall(t, calls, "SetUnitProperties", "kubepods-podg.slice", map[string]any{
		"MemoryLimit": uint64(134217728), "CPUShares": uint64(512), "CPUQuotaPerSecUSec": uint64(500000), "TasksMax": uint64(100),
	})
	expectFiles(t, filepath.Join(root, "cpu,cpuacct", "kubepods.slice", "kubepods-podg.slice"), map[string]string{"cpu.cfs_period_us": "100000", "cpu.cfs_quota_us": "50000"})

	if err := m.Remove("g"); err != nil {
		t.Fatal(err)
	}
	if calls := sd.take(); len(calls) != 1 || calls[0].method != "StopUnit" || calls[0].unit != "kubepods-podg.slice" {
		t.Errorf("Remove: calls %v", calls)
	}
	for _, h := range []string{"systemd", "cpu,cpuacct", "cpuset", "hugetlb"} {
		if _, err := os.Stat(filepath.Join(root, h, "kubepods.slice", "kubepods-podg.slice")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("pod cgroup left in %s: %v", h, err)
		}
	}
}

// Without the systemd mode, or with the cgroupfs driver, systemd is never called.
func TestSystemdNotCalled(t *testing.T) {
	bus := startPrivateBus(t)
	for _, tc := range []struct {
		name    string
		driver  string
		systemd bool
	}{
		{"cgroupfs driver", DriverCgroupfs, true},
		{"systemd not running", DriverSystemd, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root, huge := fakeV2(t)
			sd := newFakeSystemd(t, bus, []string{root}, "cpuset cpu io memory hugetlb pids")
			o := v2Options(root, huge)
			o.CgroupDriver, o.Systemd, o.SystemdBus = tc.driver, tc.systemd, bus.address
			m, err := NewContainerManager(o)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			pod := testPod("g", res("500m", "128Mi", "500m", "128Mi"))
			if err := m.Start(ctx, func() []*v1.Pod { return []*v1.Pod{pod} }); err != nil {
				t.Fatal(err)
			}
			if err := m.EnsurePod(pod); err != nil {
				t.Fatal(err)
			}
			expectFiles(t, filepath.Join(root, m.Parent(pod)), map[string]string{"cpu.max": "50000 100000"})
			if err := m.Remove("g"); err != nil {
				t.Fatal(err)
			}
			if calls := sd.take(); len(calls) != 0 {
				t.Errorf("D-Bus calls: %v", calls)
			}
			if m.units != nil {
				t.Error("a systemd client was made")
			}
		})
	}
}

// By default the manager talks to systemd on the system bus, wherever
// DBUS_SYSTEM_BUS_ADDRESS points. A slice systemd has already (UnitExists) is fine.
func TestSystemdSystemBus(t *testing.T) {
	bus := startPrivateBus(t)
	root, huge := fakeV2(t)
	sd := newFakeSystemd(t, bus, []string{root}, "cpuset cpu io memory hugetlb pids")
	t.Setenv("DBUS_SYSTEM_BUS_ADDRESS", bus.address)
	o := v2Options(root, huge)
	o.CgroupDriver, o.Systemd = DriverSystemd, true
	m, err := NewContainerManager(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := m.Start(ctx, func() []*v1.Pod { return nil }); err != nil {
		t.Fatal(err)
	}
	if _, ok := sd.unit("kubepods.slice"); !ok {
		t.Errorf("kubepods.slice not started on the system bus; calls %v", sd.take())
	}
	sd.take()

	// nodelet restarts: the slices systemd has already are fine, and limited again.
	m, err = NewContainerManager(o)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(ctx, func() []*v1.Pod { return nil }); err != nil {
		t.Fatal(err)
	}
	calls := sd.take()
	if len(find(calls, "StartTransientUnit", "kubepods.slice")) != 1 || len(find(calls, "SetUnitProperties", "kubepods.slice")) == 0 {
		t.Errorf("restart: %v", calls)
	}
}

// A failed start job is reported as libcontainer words it.
func TestSystemdStartFails(t *testing.T) {
	bus := startPrivateBus(t)
	root, huge := fakeV2(t)
	o := v2Options(root, huge)
	o.CgroupDriver, o.Systemd, o.SystemdBus = DriverSystemd, true, bus.address
	m, err := NewContainerManager(o)
	if err != nil {
		t.Fatal(err)
	}
	// No one owns systemd's name on this bus.
	err = m.EnsurePod(testPod("x", v1.ResourceRequirements{}))
	if err == nil || !strings.Contains(err.Error(), `failed to create container for [kubepods besteffort podx] : unable to start unit "kubepods-besteffort-podx.slice"`) ||
		!strings.Contains(err.Error(), "org.freedesktop.systemd1") {
		t.Errorf("EnsurePod without systemd: %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, "kubepods.slice", "kubepods-besteffort.slice", "kubepods-besteffort-podx.slice")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("pod cgroup made although systemd refused the slice: %v", err)
	}
}
