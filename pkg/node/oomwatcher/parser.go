package oomwatcher

import (
	"bytes"
	"fmt"
	"path"
	"regexp"
	"strconv"
	"time"
)

// OOM is one process the kernel's OOM killer killed.
type OOM struct {
	Pid         int
	ProcessName string
	// Time is when the kill was logged.
	Time time.Time
	// ContainerName is the cgroup of the killed task; VictimContainerName
	// the cgroup whose memory ran out: "/" for the whole machine (a system
	// OOM), a container's or pod's cgroup when it hit its own limit.
	ContainerName       string
	VictimContainerName string
	// Constraint is the kernel's CONSTRAINT_NONE, CONSTRAINT_MEMCG, ...
	// (kernels from 4.19 only).
	Constraint string
}

// System reports whether the machine ran out of memory, not a cgroup.
func (o *OOM) System() bool { return o.VictimContainerName == "/" }

// kmsgRecord is one /dev/kmsg record.
type kmsgRecord struct {
	time    time.Time
	message string
}

// parseRecord parses "PRIORITY,SEQUENCE,MICROSECONDS,FLAGS;MESSAGE", the
// time being microseconds since boot; continuation lines (" KEY=VALUE"
// after a newline) are dropped.
func parseRecord(b []byte, boot time.Time) (kmsgRecord, error) {
	header, message, ok := bytes.Cut(b, []byte(";"))
	if !ok {
		return kmsgRecord{}, fmt.Errorf("invalid kmsg record %q: no ';'", b)
	}
	fields := bytes.Split(header, []byte(","))
	if len(fields) < 3 {
		return kmsgRecord{}, fmt.Errorf("invalid kmsg record header %q", header)
	}
	usec, err := strconv.ParseInt(string(fields[2]), 10, 64)
	if err != nil {
		return kmsgRecord{}, fmt.Errorf("invalid kmsg record time %q: %w", fields[2], err)
	}
	message, _, _ = bytes.Cut(message, []byte("\n"))
	return kmsgRecord{time: boot.Add(time.Duration(usec) * time.Microsecond), message: string(message)}, nil
}

var (
	// startOfOOM opens an OOM report: "<comm> invoked oom-killer: gfp_mask=...".
	startOfOOM = regexp.MustCompile(`invoked oom-killer:`)
	// oomKill is the summary line of kernels from 4.19, either
	// "oom-kill:constraint=CONSTRAINT_MEMCG,...,oom_memcg=/kubepods/...,task_memcg=...,task=x,pid=1,uid=0"
	// or, when the machine ran out, "...,global_oom,task_memcg=...".
	oomKill = regexp.MustCompile(`oom-kill:constraint=([^,]*),.*?(?:,oom_memcg=(.*)|,global_oom),task_memcg=(.*),task=(.*),pid=([0-9]+),uid=`)
	// legacyTask names the cgroups on older kernels:
	// "Task in /kubepods/pod1/c1 killed as a result of limit of /kubepods/pod1".
	legacyTask = regexp.MustCompile(`Task in (.*) killed as a result of limit of (.*)`)
	// killedProcess ends the report on older kernels, and on any kernel
	// names the victim: "Out of memory: Killed process 1234 (stress) total-vm:...".
	killedProcess = regexp.MustCompile(`Killed process ([0-9]+) \((.+?)\)`)
)

// scanner turns kernel log records into OOMs, as cAdvisor's OOM parser
// does: a report starts at "invoked oom-killer:" and ends at the first
// line naming the killed process.
type scanner struct {
	current *OOM
}

// feed takes the next record and returns the OOM it completes, if any.
func (s *scanner) feed(r kmsgRecord) *OOM {
	if s.current == nil {
		if startOfOOM.MatchString(r.message) {
			s.current = &OOM{ContainerName: "/", VictimContainerName: "/", Time: r.time}
		}
		return nil
	}
	if !s.parseLine(r.message) {
		return nil
	}
	o := s.current
	o.Time = r.time
	s.current = nil
	return o
}

// parseLine reads one line of a report into the current OOM and reports
// whether it was the report's last.
func (s *scanner) parseLine(line string) bool {
	o := s.current
	if m := oomKill.FindStringSubmatch(line); m != nil {
		pid, err := strconv.Atoi(m[5])
		if err != nil {
			return false
		}
		o.Constraint, o.ContainerName, o.ProcessName, o.Pid = m[1], m[3], m[4], pid
		if m[2] != "" {
			o.VictimContainerName = m[2]
		}
		return true
	}
	if m := legacyTask.FindStringSubmatch(line); m != nil {
		o.ContainerName, o.VictimContainerName = path.Join("/", m[1]), path.Join("/", m[2])
		return false
	}
	if m := killedProcess.FindStringSubmatch(line); m != nil {
		pid, err := strconv.Atoi(m[1])
		if err != nil {
			return false
		}
		o.Pid, o.ProcessName = pid, m[2]
		return true
	}
	return false
}
