// Package oomwatcher reports the kernel's system OOM kills as node events,
// as upstream's kubelet OOM watcher (pkg/kubelet/oom, with cAdvisor's OOM
// parser) does: it follows the kernel log in /dev/kmsg and records a
// Warning "SystemOOM" event on the Node for each process killed because the
// machine ran out of memory. Kills inside a cgroup that hit its own limit
// are left to the container status (OOMKilled).
package oomwatcher

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"golang.org/x/sys/unix"
)

// SystemOOMEvent is the node event's reason.
const SystemOOMEvent = "SystemOOM"

// kmsgPath is the kernel log device; each read returns one record.
const kmsgPath = "/dev/kmsg"

// Start opens the kernel log and, until ctx ends, records a SystemOOM
// event on nodeRef for each system OOM kill in it. Like upstream it reads
// the kernel's buffer from its start, so kills logged before nodelet
// started are reported too. It fails only when /dev/kmsg cannot be opened
// (in a user namespace, say).
func Start(ctx context.Context, recorder record.EventRecorder, nodeRef *v1.ObjectReference) error {
	kmsg, err := os.Open(kmsgPath)
	if err != nil {
		return err
	}
	go watch(ctx, kmsg, bootTime(), func(o *OOM) { recordOOM(ctx, recorder, nodeRef, o) })
	return nil
}

// watch reads records from kmsg until ctx ends or reading fails, and calls
// report for every OOM. It closes kmsg.
func watch(ctx context.Context, kmsg io.ReadCloser, boot time.Time, report func(*OOM)) {
	logger := klog.FromContext(ctx)
	// Closing kmsg is what interrupts a pending Read when ctx ends.
	stop := context.AfterFunc(ctx, func() { _ = kmsg.Close() })
	defer func() {
		if stop() {
			_ = kmsg.Close()
		}
	}()
	var s scanner
	buf := make([]byte, 8192) // a record is at most about 1 KiB
	for {
		n, err := kmsg.Read(buf)
		switch {
		case errors.Is(err, syscall.EPIPE):
			// Records were overwritten before we read them; go on.
			logger.V(2).Info("OOM watcher: kernel log records were lost")
			continue
		case err != nil:
			if ctx.Err() == nil {
				logger.Error(err, "Unexpectedly stopped receiving OOM notifications")
			}
			return
		}
		r, err := parseRecord(buf[:n], boot)
		if err != nil {
			logger.V(2).Info("OOM watcher: skipping a kernel log record", "err", err)
			continue
		}
		if o := s.feed(r); o != nil {
			report(o)
		}
	}
}

// recordOOM records a system OOM as a node event, with the victim when
// the kernel named it.
func recordOOM(ctx context.Context, recorder record.EventRecorder, nodeRef *v1.ObjectReference, o *OOM) {
	if !o.System() {
		klog.FromContext(ctx).V(2).Info("Got cgroup oom event", "victimCgroup", o.VictimContainerName, "pid", o.Pid, "process", o.ProcessName)
		return
	}
	klog.FromContext(ctx).V(1).Info("Got sys oom event", "event", o)
	message := "System OOM encountered"
	if o.ProcessName != "" && o.Pid != 0 {
		message = fmt.Sprintf("%s, victim process: %s, pid: %d", message, o.ProcessName, o.Pid)
	}
	recorder.Eventf(nodeRef, v1.EventTypeWarning, SystemOOMEvent, "%s", message)
}

// bootTime is when the kernel's log clock started: now less the monotonic
// clock, which is what kmsg record times count from.
func bootTime() time.Time {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return time.Now()
	}
	return time.Now().Add(-time.Duration(ts.Nano()))
}
