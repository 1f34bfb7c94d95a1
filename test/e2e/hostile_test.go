//go:build e2e

package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nodelet/nodelet/test/hostile"
)

// TestHostileManifestDirectory writes issue 14's bad-input mix (1,000 entries) next to
// five valid pods and measures nodelet before and after: the valid pods keep their
// containers, every bad entry is named in exactly one log line, and memory, idle CPU and
// log stay within the bounds. It takes about two and a half minutes: a 30 s
// baseline, 10 s of writing, 10 s to settle, and a quiet minute (three relists).
func TestHostileManifestDirectory(t *testing.T) {
	s := startStandalone(t)
	var valid []string
	for i := range 5 {
		name := fmt.Sprintf("valid-%d", i)
		valid = append(valid, name)
		s.writeManifest(t, name+".yaml", busyboxPod(name, "Always", "sleep 3600"))
	}
	waitFor(t, 30*time.Second, "the valid pods running", func() bool {
		for _, name := range valid {
			if len(s.containers(t, name, false)) != 1 {
				return false
			}
		}
		return true
	})
	before := map[string][]string{}
	for _, name := range valid {
		before[name] = ids(s.containers(t, name, true))
	}
	time.Sleep(5 * time.Second) // start-up done: the baseline is the steady state

	res, err := hostile.Run{
		PID:      s.cmd.Process.Pid,
		LogBytes: func() int64 { return int64(len(s.out.String())) },
		Mix:      hostile.Options{Dir: s.manifests, Count: 1000, ValidNames: valid, Image: busybox, Over: 10 * time.Second},
		Baseline: 30 * time.Second,
		Settle:   10 * time.Second,
		Quiet:    time.Minute,
	}.Measure()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", res)

	select {
	case <-s.done:
		t.Fatalf("nodelet exited: %v", s.exitErr)
	default:
	}
	for _, name := range valid {
		if after := ids(s.containers(t, name, true)); strings.Join(after, ",") != strings.Join(before[name], ",") {
			t.Errorf("%s: the bad entries changed its containers:\nbefore %v\nafter  %v", name, before[name], after)
		}
		if len(s.containers(t, name, false)) != 1 {
			t.Errorf("%s is not running", name)
		}
	}
	checkBadEntriesNamedOnce(t, s.out.String(), res.Entries)

	if res.RSSMiB > res.BaselineRSSMiB+20 {
		t.Errorf("RSS %.1f MiB with the bad entries, more than the baseline %.1f MiB + 20 MiB", res.RSSMiB, res.BaselineRSSMiB)
	}
	if res.QuietCPUPerMin > res.BaselineCPUPerMin+0.2 {
		t.Errorf("CPU %.3f s per quiet minute with the bad entries, more than the baseline %.3f s + 0.2 s", res.QuietCPUPerMin, res.BaselineCPUPerMin)
	}
	if res.LogBytesPerBadFile > 1024 {
		t.Errorf("%.0f log bytes per bad entry, more than 1 KiB", res.LogBytesPerBadFile)
	}
}

// checkBadEntriesNamedOnce wants every lasting bad entry in exactly one log line (a
// transient one in at most one) and every log line under 1 KiB.
func checkBadEntriesNamedOnce(t *testing.T, out string, entries []hostile.Entry) {
	t.Helper()
	lines := strings.Split(out, "\n")
	for _, line := range lines {
		if len(line) >= 1024 {
			t.Errorf("a log line of %d bytes: %.300s…", len(line), line)
		}
	}
	problems := 0
	for _, e := range entries {
		n := 0
		for _, line := range lines {
			if strings.Contains(line, "/"+e.Name) {
				n++
			}
		}
		switch {
		case e.Transient && n > 1, !e.Transient && n != 1:
			problems++
			if problems <= 10 {
				t.Errorf("%s (%s) is named in %d log lines", e.Name, e.Kind, n)
			}
		}
	}
	if problems > 10 {
		t.Errorf("... and %d more entries not named exactly once", problems-10)
	}
}

// TestRuntimeOutageIsQuiet stops containerd for 30 s under 20 pods with probes: the whole
// outage logs at most five lines at warning level or above, and every pod comes back
// with the containers it had.
func TestRuntimeOutageIsQuiet(t *testing.T) {
	s := startStandalone(t)
	var pods []string
	for i := range 20 {
		name := fmt.Sprintf("probed-%02d", i)
		pods = append(pods, name)
		s.writeManifest(t, name+".yaml", probedPod(name, i%2 == 0))
	}
	allReady := func() bool {
		api := s.apiPods(t)
		for _, name := range pods {
			p, ok := api[name]
			if !ok || len(p.Status.ContainerStatuses) != 1 || !p.Status.ContainerStatuses[0].Ready {
				return false
			}
		}
		return true
	}
	waitFor(t, 90*time.Second, "20 probed pods ready", allReady)
	before := map[string][]string{}
	for _, name := range pods {
		before[name] = ids(s.containers(t, name, true))
	}

	mark := len(s.out.String())
	runtimeScript(t, "stop")
	time.Sleep(30 * time.Second)
	runtimeScript(t, "start")
	if err := s.waitHealthz(30*time.Second, 200); err != nil {
		t.Fatal(err)
	}
	// The pods' statuses were not refreshed during the outage: give the PLEG and the
	// workers a few rounds before judging them.
	time.Sleep(10 * time.Second)
	waitFor(t, 60*time.Second, "every pod ready again", allReady)

	outageLog := s.out.String()[mark:]
	var loud []string
	for _, line := range strings.Split(outageLog, "\n") {
		if hostile.IsWarningOrWorse(line) {
			loud = append(loud, line)
		}
	}
	t.Logf("%d log lines (%d bytes) from the outage until the pods were back, %d at warning level or above:\n%s",
		strings.Count(outageLog, "\n"), len(outageLog), len(loud), strings.Join(loud, "\n"))
	if len(loud) > 5 {
		t.Errorf("the outage logged %d lines at warning level or above, want at most 5", len(loud))
	}
	if n := strings.Count(outageLog, `"Container runtime is ready" downFor=`); n != 1 {
		t.Errorf("the end of the outage was logged %d times, want once", n)
	}
	for _, name := range pods {
		if after := ids(s.containers(t, name, true)); strings.Join(after, ",") != strings.Join(before[name], ",") {
			t.Errorf("%s: the outage changed its containers:\nbefore %v\nafter  %v", name, before[name], after)
		}
	}
}

// probedPod runs the probe server with HTTP readiness and TCP liveness probes, or busybox
// with exec probes; every probe runs each second.
func probedPod(name string, network bool) string {
	if network {
		return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: app
    image: %s
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "touch /tmp/ready /tmp/healthy; exec /probe-server"]
    readinessProbe: {httpGet: {path: /ready, port: 8080}, periodSeconds: 1}
    livenessProbe: {tcpSocket: {port: 9000}, periodSeconds: 1}
`, name, probeServerImage)
	}
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: app
    image: %s
    imagePullPolicy: IfNotPresent
    command: ["sleep", "3600"]
    readinessProbe: {exec: {command: ["true"]}, periodSeconds: 1}
    livenessProbe: {exec: {command: ["true"]}, periodSeconds: 1}
`, name, busybox)
}
