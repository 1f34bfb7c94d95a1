package eviction

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"
)

// kernelNotifiers arms thresholds with cgroup v1's cgroup.event_control.
// cgroup v2 has no such notification (upstream's kubelet does not notify
// there either): its notifiers never fire and the periodic check does all.
type kernelNotifiers struct{}

var memoryMount = sync.OnceValues(func() (string, error) { return memoryCgroupMount("/proc/self/mountinfo") })

func (kernelNotifiers) NewCgroupNotifier(cgroup, attribute string, threshold int64) (CgroupNotifier, error) {
	mount, err := memoryMount()
	if err != nil {
		return nil, err
	}
	if mount == "" {
		return disabledNotifier{}, nil
	}
	return newEventfdNotifier(filepath.Join(mount, cgroup), attribute, threshold)
}

// memoryCgroupMount finds where cgroup v1's memory controller is mounted;
// "" when it is not (cgroup v2).
func memoryCgroupMount(mountinfo string) (string, error) {
	f, err := os.Open(mountinfo)
	if err != nil {
		return "", err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		// "36 25 0:31 / /sys/fs/cgroup/memory rw,relatime shared:14 - cgroup cgroup rw,memory"
		pre, post, ok := strings.Cut(s.Text(), " - ")
		fields, tail := strings.Fields(pre), strings.Fields(post)
		if !ok || len(fields) < 5 || len(tail) < 3 || tail[0] != "cgroup" {
			continue
		}
		if slices.Contains(strings.Split(tail[2], ","), "memory") {
			return fields[4], nil
		}
	}
	return "", s.Err()
}

// disabledNotifier never fires.
type disabledNotifier struct{}

func (disabledNotifier) Start(context.Context, chan<- struct{}) {}
func (disabledNotifier) Stop()                                  {}

// eventfdNotifier is one threshold registered with cgroup.event_control:
// the kernel signals its eventfd each time the attribute crosses the
// threshold, in either direction.
type eventfdNotifier struct {
	eventfd *os.File // non-blocking, so Close interrupts a pending Read
	stop    chan struct{}
	once    sync.Once
}

func newEventfdNotifier(cgroupDir, attribute string, threshold int64) (*eventfdNotifier, error) {
	watched, err := os.Open(filepath.Join(cgroupDir, attribute))
	if err != nil {
		return nil, err
	}
	defer watched.Close()
	control, err := os.OpenFile(filepath.Join(cgroupDir, "cgroup.event_control"), os.O_WRONLY, 0)
	if err != nil {
		return nil, err
	}
	defer control.Close()
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("eventfd: %w", err)
	}
	eventfd := os.NewFile(uintptr(efd), "memcg-threshold")
	if _, err := fmt.Fprintf(control, "%d %d %d", efd, watched.Fd(), threshold); err != nil {
		eventfd.Close()
		return nil, fmt.Errorf("arming %s at %d in %s: %w", attribute, threshold, cgroupDir, err)
	}
	return &eventfdNotifier{eventfd: eventfd, stop: make(chan struct{})}, nil
}

func (n *eventfdNotifier) Start(ctx context.Context, events chan<- struct{}) {
	go func() {
		select {
		case <-ctx.Done():
			n.Stop()
		case <-n.stop:
		}
	}()
	buf := make([]byte, 8) // the eventfd's counter
	for {
		if _, err := n.eventfd.Read(buf); err != nil {
			if !errors.Is(err, os.ErrClosed) {
				klog.FromContext(ctx).Info("Eviction manager: error reading memcg events", "err", err)
			}
			return
		}
		select {
		case events <- struct{}{}:
		case <-n.stop:
			return
		}
	}
}

func (n *eventfdNotifier) Stop() {
	n.once.Do(func() {
		close(n.stop)
		n.eventfd.Close()
	})
}
