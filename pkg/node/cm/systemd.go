package cm

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	sdbus "github.com/coreos/go-systemd/v22/dbus"
	godbus "github.com/godbus/dbus/v5"
	"k8s.io/klog/v2"
)

// With the systemd cgroup driver on a host where systemd is the init system, systemd owns
// the .slice cgroups: nodelet has it create, limit and remove them as transient slice
// units over its D-Bus API, as upstream's kubelet does through libcontainer's systemd
// cgroup manager (github.com/opencontainers/cgroups/systemd, v1.go and v2.go), and then
// writes to cgroupfs what systemd has no property for (huge pages) and everything again,
// as libcontainer does after SetUnitProperties.

const (
	// systemdJobTimeout is how long a start or stop job may take (libcontainer's).
	systemdJobTimeout = 30 * time.Second
	// defaultCPUQuotaPeriod is the kernel's CFS period in µs, assumed for a quota
	// without one.
	defaultCPUQuotaPeriod = uint64(100000)
	// systemdCPUQuotaPeriodVersion is the first systemd with CPUQuotaPeriodUSec.
	systemdCPUQuotaPeriodVersion = 242
	// rootSlice is the parent of a top-level slice.
	rootSlice = "-.slice"
)

// systemdUnits is a client of systemd's manager (org.freedesktop.systemd1) over one
// D-Bus connection, dialled when first needed and again when it is lost.
type systemdUnits struct {
	address string // "" is the system bus
	unified bool   // cgroup v2: v2's property names
	timeout time.Duration

	mu      sync.Mutex
	conn    *sdbus.Conn
	version int // systemd's version, 0 until known
}

func newSystemdUnits(address string, unified bool) *systemdUnits {
	return &systemdUnits{address: address, unified: unified, timeout: systemdJobTimeout}
}

// dial connects to systemd: on the system bus (DBUS_SYSTEM_BUS_ADDRESS, else
// /run/dbus/system_bus_socket; as root, systemd's private socket when the bus does not
// answer) or at the configured address. The connection is refused for a while when
// the bus has too many; that is retried with backoff, as libcontainer does.
func (s *systemdUnits) dial() (*sdbus.Conn, error) {
	dial := func() (*sdbus.Conn, error) {
		if s.address == "" {
			return sdbus.NewWithContext(context.TODO())
		}
		return sdbus.NewConnection(func() (*godbus.Conn, error) {
			conn, err := godbus.Dial(s.address)
			if err != nil {
				return nil, err
			}
			if err := conn.Auth([]godbus.Auth{godbus.AuthExternal(strconv.Itoa(os.Getuid()))}); err != nil {
				conn.Close()
				return nil, err
			}
			if err := conn.Hello(); err != nil {
				conn.Close()
				return nil, err
			}
			return conn, nil
		})
	}
	var err error
	for retry := range 7 {
		var conn *sdbus.Conn
		if conn, err = dial(); !errors.Is(err, syscall.EAGAIN) {
			return conn, err
		}
		delay := 100 * time.Millisecond << retry
		time.Sleep(delay + time.Duration(rand.Int64N(1+delay.Milliseconds()>>3))*time.Millisecond)
	}
	return nil, fmt.Errorf("dbus connection failed after several retries: %w", err)
}

// connection returns the connection, dialling it when there is none or it was lost.
func (s *systemdUnits) connection() (*sdbus.Conn, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn != nil && s.conn.Connected() {
		return s.conn, nil
	}
	if s.conn != nil {
		s.conn.Close()
		s.conn = nil
	}
	conn, err := s.dial()
	if err != nil {
		return nil, fmt.Errorf("failed to connect to dbus: %w", err)
	}
	s.conn = conn
	return conn, nil
}

// resetConnection drops a connection that was found closed, unless it was replaced.
func (s *systemdUnits) resetConnection(conn *sdbus.Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn == conn {
		s.conn.Close()
		s.conn = nil
	}
}

// retryOnDisconnect runs op, again on a new connection when the one it used was closed
// or lost on the way (the bus or systemd restarted).
func (s *systemdUnits) retryOnDisconnect(op func(*sdbus.Conn) error) error {
	for attempt := 0; ; attempt++ {
		conn, err := s.connection()
		if err != nil {
			return err
		}
		err = op(conn)
		if err == nil || attempt == 2 || (!errors.Is(err, godbus.ErrClosed) && conn.Connected()) {
			return err
		}
		s.resetConnection(conn)
	}
}

// close ends the connection, if any.
func (s *systemdUnits) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn != nil {
		s.conn.Close()
		s.conn = nil
	}
}

// systemdVersion is the manager's Version, as a number ("v252.22-1~deb12u1" is 252);
// -1 when it cannot be read.
func (s *systemdUnits) systemdVersion() int {
	s.mu.Lock()
	v := s.version
	s.mu.Unlock()
	if v != 0 {
		return v
	}
	var str string
	err := s.retryOnDisconnect(func(c *sdbus.Conn) (err error) {
		str, err = c.GetManagerProperty("Version")
		return err
	})
	if err == nil {
		if str, err = strconv.Unquote(str); err == nil {
			v, err = systemdVersionAtoi(str)
		}
	}
	if err != nil {
		klog.ErrorS(err, "Unable to get systemd version")
		return -1
	}
	s.mu.Lock()
	s.version = v
	s.mu.Unlock()
	return v
}

// systemdVersionAtoi reads the leading number of a version: "v245.4-1.fc32" is 245.
func systemdVersionAtoi(str string) (int, error) {
	str = strings.TrimLeft(str, `"v`)
	if i := strings.IndexFunc(str, func(r rune) bool { return r < '0' || r > '9' }); i >= 0 {
		str = str[:i]
	}
	v, err := strconv.Atoi(str)
	if err != nil {
		return -1, fmt.Errorf("can't parse version: %w", err)
	}
	return v, nil
}

func isDbusError(err error, name string) bool {
	var derr godbus.Error
	return errors.As(err, &derr) && strings.Contains(derr.Name, name)
}

// waitJob waits for a start or stop job's result.
func (s *systemdUnits) waitJob(ch <-chan string) (string, bool) {
	timer := time.NewTimer(s.timeout)
	defer timer.Stop()
	select {
	case result := <-ch:
		return result, true
	case <-timer.C:
		return "", false
	}
}

// startSlice starts a transient slice unit for an existing or new cgroup, with the
// properties libcontainer's Apply(-1) gives the slices the kubelet creates. A unit that
// exists already is fine: the kubelet only makes sure the slice exists.
func (s *systemdUnits) startSlice(unit, parent string) error {
	io := "BlockIOAccounting"
	if s.unified {
		io = "IOAccounting"
	}
	props := []sdbus.Property{
		sdbus.PropDescription("libcontainer container " + unit),
		sdbus.PropWants(parent),
		newProp("MemoryAccounting", true),
		newProp("CPUAccounting", true),
		newProp(io, true),
		newProp("TasksAccounting", true),
		newProp("DefaultDependencies", false),
	}
	ch := make(chan string, 1)
	err := s.retryOnDisconnect(func(c *sdbus.Conn) error {
		_, err := c.StartTransientUnitContext(context.TODO(), unit, "replace", props, ch)
		return err
	})
	if isDbusError(err, "org.freedesktop.systemd1.UnitExists") {
		return nil
	}
	if err == nil {
		switch result, ok := s.waitJob(ch); {
		case !ok:
			s.resetFailedUnit(unit)
			err = errors.New("Timeout waiting for systemd to create " + unit)
		case result != "done":
			s.resetFailedUnit(unit)
			err = fmt.Errorf("error creating systemd unit `%s`: got `%s`", unit, result)
		}
	}
	if err != nil && s.unified {
		return fmt.Errorf("unable to start unit %q (properties %+v): %w", unit, props, err)
	}
	return err
}

// stopUnit stops a unit and has systemd forget it if it failed. Like libcontainer it
// does not fail when systemd refuses the job (the unit is gone already), only when the
// job does not end in time.
func (s *systemdUnits) stopUnit(unit string) error {
	ch := make(chan string, 1)
	err := s.retryOnDisconnect(func(c *sdbus.Conn) error {
		_, err := c.StopUnitContext(context.TODO(), unit, "replace", ch)
		return err
	})
	if err != nil {
		klog.V(4).InfoS("Systemd did not stop unit", "unit", unit, "err", err)
	} else {
		switch result, ok := s.waitJob(ch); {
		case !ok:
			return errors.New("Timed out while waiting for systemd to remove " + unit)
		case result != "done":
			klog.InfoS("Warning: error removing unit, continuing", "unit", unit, "result", result)
		}
	}
	s.resetFailedUnit(unit)
	return nil
}

func (s *systemdUnits) resetFailedUnit(unit string) {
	err := s.retryOnDisconnect(func(c *sdbus.Conn) error {
		return c.ResetFailedUnitContext(context.TODO(), unit)
	})
	if err != nil {
		klog.V(5).InfoS("Unable to reset failed unit", "unit", unit, "err", err)
	}
}

// setUnitProperties changes a unit's properties for this boot (runtime).
func (s *systemdUnits) setUnitProperties(unit string, props []sdbus.Property) error {
	err := s.retryOnDisconnect(func(c *sdbus.Conn) error {
		return c.SetUnitPropertiesContext(context.TODO(), unit, true, props...)
	})
	if err != nil && s.unified {
		return fmt.Errorf("unable to set unit properties: %w", err)
	}
	return err
}

func newProp(name string, value any) sdbus.Property {
	return sdbus.Property{Name: name, Value: godbus.MakeVariant(value)}
}

// resourceProperties are the unit properties for cfg, as libcontainer's
// genV1ResourcesProperties and genV2ResourcesProperties make them from the resources
// the kubelet sets, and the configuration to write to cgroupfs after them: cfg, with
// the CPU quota rounded up as systemd stores it (whole percents of a CPU).
func (s *systemdUnits) resourceProperties(cfg *ResourceConfig) ([]sdbus.Property, *ResourceConfig, error) {
	var props []sdbus.Property
	if cfg.Memory != nil && *cfg.Memory != 0 {
		name := "MemoryLimit"
		if s.unified {
			name = "MemoryMax"
		}
		props = append(props, newProp(name, uint64(*cfg.Memory))) // -1 is infinity
	}
	if cfg.CPUShares != nil {
		if s.unified {
			props = append(props, newProp("CPUWeight", CPUSharesToWeight(*cfg.CPUShares)))
		} else if *cfg.CPUShares != 0 {
			props = append(props, newProp("CPUShares", *cfg.CPUShares))
		}
	}
	out := cfg
	if quota, ok := s.addCPUQuota(&props, cfg.CPUQuota, cfg.CPUPeriod); ok {
		c := *cfg
		c.CPUQuota = &quota
		out = &c
	}
	if cfg.PidsLimit != nil {
		props = append(props, newProp("TasksMax", tasksMax(*cfg.PidsLimit)))
	}
	if s.unified {
		unified, err := unifiedProperties(cfg.Unified)
		if err != nil {
			return nil, nil, err
		}
		props = append(props, unified...)
	}
	return props, out, nil
}

// tasksMax is TasksMax for a PID limit: no limit at or below 0, as nodelet writes
// pids.max.
func tasksMax(limit int64) uint64 {
	if limit <= 0 {
		return math.MaxUint64 // infinity
	}
	return uint64(limit)
}

// addCPUQuota adds CPUQuotaPeriodUSec (systemd 242 and later) and CPUQuotaPerSecUSec.
// systemd keeps the quota in whole percents of a CPU, so a quota is rounded up to the
// next 10ms per second; the rounded quota is returned (ok) to be written to cgroupfs
// too, as libcontainer does.
func (s *systemdUnits) addCPUQuota(props *[]sdbus.Property, quotaP *int64, periodP *uint64) (int64, bool) {
	quota, period := int64(0), uint64(0)
	if quotaP != nil {
		quota = *quotaP
	}
	if periodP != nil {
		period = *periodP
	}
	if period != 0 {
		if v := s.systemdVersion(); v >= systemdCPUQuotaPeriodVersion {
			*props = append(*props, newProp("CPUQuotaPeriodUSec", period))
		} else {
			klog.V(4).InfoS("Systemd is too old for CPUQuotaPeriodUSec, the period is written to cgroupfs only", "version", v)
		}
	}
	if quota == 0 && period == 0 {
		return 0, false
	}
	perSec, rounded := uint64(math.MaxUint64), false // infinity
	if quota > 0 {
		if period == 0 {
			period = defaultCPUQuotaPeriod
		}
		perSec = uint64(quota*1000000) / period
		if perSec%10000 != 0 {
			perSec = (perSec/10000 + 1) * 10000
			quota, rounded = int64(perSec)*int64(period)/1000000, true
		}
	}
	*props = append(*props, newProp("CPUQuotaPerSecUSec", perSec))
	return quota, rounded
}

// unifiedProperties converts the cgroup v2 files nodelet writes as they are into the
// properties systemd has for them; the others are only written to cgroupfs.
func unifiedProperties(unified map[string]string) ([]sdbus.Property, error) {
	names := map[string]string{
		memoryHigh:        "MemoryHigh",
		memoryLow:         "MemoryLow",
		memoryMin:         "MemoryMin",
		"memory.max":      "MemoryMax",
		"memory.swap.max": "MemorySwapMax",
	}
	var props []sdbus.Property
	for _, k := range slices.Sorted(maps.Keys(unified)) {
		v := strings.TrimSpace(unified[k])
		name, ok := names[k]
		if !ok {
			klog.V(5).InfoS("No systemd unit property for a cgroup file, writing it to cgroupfs only", "file", k, "value", v)
			continue
		}
		num := uint64(math.MaxUint64)
		if v != "max" {
			var err error
			if num, err = strconv.ParseUint(v, 10, 64); err != nil {
				return nil, fmt.Errorf("unified resource %q value conversion error: %w", k, err)
			}
		}
		props = append(props, newProp(name, num))
	}
	return props, nil
}

// sliceUnit is a cgroup's slice unit and the slice it is in, as upstream splits the
// expanded name: kubepods-burstable.slice is in kubepods.slice, a top-level slice in
// -.slice. The root cgroup has no unit ("").
func sliceUnit(n cgroupName) (unit, parent string) {
	if len(n) == 0 {
		return "", ""
	}
	dir, base := path.Split(n.systemd())
	if dir == "/" {
		return base, rootSlice
	}
	return base, path.Base(dir)
}

// makeCgroup creates a cgroup in every hierarchy; with systemd, as a transient slice
// started first.
func (m *ContainerManager) makeCgroup(name cgroupName) error {
	if unit, parent := sliceUnit(name); m.units != nil && unit != "" {
		if err := m.units.startSlice(unit, parent); err != nil {
			return err
		}
	}
	return m.fs.create(m.names.path(name))
}

// setCgroup writes cfg's non-nil values to a cgroup; with systemd, the values it has
// properties for are set on the slice first (SetUnitProperties), so that systemd
// keeps them.
func (m *ContainerManager) setCgroup(name cgroupName, cfg *ResourceConfig) error {
	if unit, _ := sliceUnit(name); m.units != nil && unit != "" {
		props, out, err := m.units.resourceProperties(cfg)
		if err != nil {
			return err
		}
		if len(props) > 0 {
			if err := m.units.setUnitProperties(unit, props); err != nil {
				return err
			}
		}
		cfg = out
	}
	return m.fs.set(m.names.path(name), cfg)
}

// destroyCgroup kills what runs in a cgroup and removes it; with systemd, an existing
// cgroup's slice is stopped after the kill (as upstream kills a pod's processes before
// Destroy) and what systemd leaves is removed.
func (m *ContainerManager) destroyCgroup(name cgroupName) error {
	p := m.names.path(name)
	var stopErr error
	if unit, _ := sliceUnit(name); m.units != nil && unit != "" && m.fs.exists(p) {
		m.fs.kill(p)
		stopErr = m.units.stopUnit(unit)
	}
	return errors.Join(stopErr, m.fs.destroy(p))
}

// exists says whether the cgroup's directory is in any hierarchy.
func (c *cgroupFS) exists(cgroup string) bool {
	for _, h := range c.hierarchies {
		if _, err := os.Stat(filepath.Join(h, cgroup)); err == nil {
			return true
		}
	}
	return false
}

// kill sends SIGKILL to every process in the cgroup tree, in every hierarchy.
func (c *cgroupFS) kill(cgroup string) {
	for _, h := range c.hierarchies {
		killProcesses(filepath.Join(h, cgroup))
	}
}
