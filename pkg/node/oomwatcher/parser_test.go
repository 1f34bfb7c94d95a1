package oomwatcher

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
)

var boot = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func TestParseRecord(t *testing.T) {
	r, err := parseRecord([]byte("6,1234,5000000,-;Out of memory: Killed process 1 (init)\n SUBSYSTEM=memory\n"), boot)
	if err != nil {
		t.Fatal(err)
	}
	if want := (kmsgRecord{time: boot.Add(5 * time.Second), message: "Out of memory: Killed process 1 (init)"}); r != want {
		t.Errorf("record %+v, want %+v", r, want)
	}
	for _, bad := range []string{"no separator", "6,1;message", "6,1,soon,-;message"} {
		if _, err := parseRecord([]byte(bad), boot); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// kmsg turns "MICROSECONDS;message" lines into records.
func kmsg(t *testing.T, lines string) []kmsgRecord {
	t.Helper()
	var out []kmsgRecord
	for i, line := range strings.Split(strings.TrimSpace(lines), "\n") {
		usec, msg, _ := strings.Cut(strings.TrimSpace(line), ";")
		r, err := parseRecord(fmt.Appendf(nil, "4,%d,%s,-;%s\n", i, usec, msg), boot)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

func scan(records []kmsgRecord) []OOM {
	var s scanner
	var out []OOM
	for _, r := range records {
		if o := s.feed(r); o != nil {
			out = append(out, *o)
		}
	}
	return out
}

func TestScannerKernelReports(t *testing.T) {
	for name, c := range map[string]struct {
		log  string
		want []OOM
	}{
		"container over its limit (kernel 6)": {
			log: `
				100;memhog invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=1000
				101;CPU: 1 PID: 5555 Comm: memhog Not tainted 6.1.0 #1
				102;memory: usage 102400kB, limit 102400kB, failcnt 42
				103;oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=cri-abc,mems_allowed=0,oom_memcg=/kubepods/besteffort/pod12/abc,task_memcg=/kubepods/besteffort/pod12/abc,task=memhog,pid=5555,uid=0
				104;Memory cgroup out of memory: Killed process 5555 (memhog) total-vm:110000kB, anon-rss:102000kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:300kB oom_score_adj:1000`,
			want: []OOM{{Pid: 5555, ProcessName: "memhog", Time: boot.Add(103 * time.Microsecond), Constraint: "CONSTRAINT_MEMCG",
				ContainerName: "/kubepods/besteffort/pod12/abc", VictimContainerName: "/kubepods/besteffort/pod12/abc"}},
		},
		"machine out of memory (kernel 6)": {
			log: `
				200;stress invoked oom-killer: gfp_mask=0x140cca(GFP_HIGHUSER_MOVABLE|__GFP_COMP), order=0, oom_score_adj=0
				201;Mem-Info:
				202;oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0,global_oom,task_memcg=/user.slice/session-1.scope,task=stress,pid=4321,uid=1000
				203;Out of memory: Killed process 4321 (stress) total-vm:1060148kB, anon-rss:1040000kB, file-rss:4kB, shmem-rss:0kB, UID:1000 pgtables:2100kB oom_score_adj:0`,
			want: []OOM{{Pid: 4321, ProcessName: "stress", Time: boot.Add(202 * time.Microsecond), Constraint: "CONSTRAINT_NONE",
				ContainerName: "/user.slice/session-1.scope", VictimContainerName: "/"}},
		},
		"container over its limit (kernel 4)": {
			log: `
				300;memhog invoked oom-killer: gfp_mask=0x24000c0, order=0, oom_score_adj=1000
				301;Task in /kubepods/burstable/pod34/def killed as a result of limit of /kubepods/burstable/pod34
				302;Memory cgroup out of memory: Kill process 777 (memhog) score 1990 or sacrifice child
				303;Killed process 777 (memhog) total-vm:5000kB, anon-rss:4000kB, file-rss:0kB`,
			want: []OOM{{Pid: 777, ProcessName: "memhog", Time: boot.Add(303 * time.Microsecond),
				ContainerName: "/kubepods/burstable/pod34/def", VictimContainerName: "/kubepods/burstable/pod34"}},
		},
		"machine out of memory (kernel 4), then noise, then another": {
			log: `
				400;java invoked oom-killer: gfp_mask=0x24201ca, order=0, oom_score_adj=0
				401;Out of memory: Kill process 888 (java) score 900 or sacrifice child
				402;Killed process 888 (java) total-vm:9000000kB, anon-rss:8000000kB, file-rss:0kB
				403;eth0: link up
				404;Killed process 999 (ignored) outside a report
				405;sh invoked oom-killer: gfp_mask=0x24201ca, order=0, oom_score_adj=0
				406;Killed process 42 (sh) total-vm:100kB`,
			want: []OOM{
				{Pid: 888, ProcessName: "java", Time: boot.Add(402 * time.Microsecond), ContainerName: "/", VictimContainerName: "/"},
				{Pid: 42, ProcessName: "sh", Time: boot.Add(406 * time.Microsecond), ContainerName: "/", VictimContainerName: "/"},
			},
		},
		"no OOM": {log: `500;usb 1-1: new high-speed USB device`},
	} {
		if got := scan(kmsg(t, c.log)); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s:\n got %+v\nwant %+v", name, got, c.want)
		}
	}
}
