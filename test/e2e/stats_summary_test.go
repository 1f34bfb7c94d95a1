//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/uuid"
)

// TestStatsSummaryMatchesUpstream runs the switch test's static pods under upstream's
// kubelet v1.37.2, reads its /stats/summary, hands the node to nodelet and reads nodelet's:
// every field upstream fills for the node, its system containers, the test's pods, their
// containers, volumes and network must be in nodelet's summary too, with values within
// what the same host can give a few seconds later.
func TestStatsSummaryMatchesUpstream(t *testing.T) {
	node := "stats-" + string(uuid.NewUUID())[:8]
	manifests := t.TempDir()
	for name, body := range switchStaticPods(node) {
		if err := os.WriteFile(filepath.Join(manifests, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	readOnly := freePort(t)
	sw, _ := newStandaloneSwitchServing(t, node, manifests,
		fmt.Sprintf("enableServer: true\nport: %d\nreadOnlyPort: %d\n", freePort(t), readOnly))
	url := fmt.Sprintf("http://127.0.0.1:%d/stats/summary", readOnly)
	complete := summaryHasPods(node)

	sw.start(upstream)
	before := sw.waitRunning(3, 90*time.Second)
	theirs := settledSummary(t, sw, url, complete)
	sw.switchTo(nodeletK, before)
	ours := settledSummary(t, sw, url, complete)
	if dir := os.Getenv("NODELET_STATS_DUMP"); dir != "" {
		dumpSummary(t, filepath.Join(dir, "upstream.json"), theirs.raw)
		dumpSummary(t, filepath.Join(dir, "nodelet.json"), ours.raw)
	}
	compareSummaries(t, theirs, ours)
}

// summary is one /stats/summary answer: its raw JSON, its leaves by path, and when it
// was read.
type summary struct {
	raw    []byte
	leaves map[string]any
	read   time.Time
}

// summaryHasPods says whether a summary carries the test's pods with their running
// containers' CPU and memory and the web pod's emptyDir.
func summaryHasPods(node string) func(map[string]any) error {
	want := []string{
		"pods[default/web-" + node + "].containers[server].cpu.usageCoreNanoSeconds",
		"pods[default/web-" + node + "].containers[sleeper].memory.workingSetBytes",
		"pods[default/web-" + node + "].volume[scratch].usedBytes",
		"pods[kube-system/hostnet-" + node + "].containers[main].cpu.usageCoreNanoSeconds",
	}
	return func(leaves map[string]any) error {
		for _, p := range want {
			if _, ok := leaves[p]; !ok {
				return fmt.Errorf("no %s", p)
			}
		}
		return nil
	}
}

// settledSummary polls the running kubelet's summary until it is complete and its set of
// fields has stopped growing (cAdvisor fills rates and volume stats a sample or two late).
func settledSummary(t *testing.T, sw *switchNode, url string, complete func(map[string]any) error) summary {
	t.Helper()
	var last summary
	stable := 0
	deadline := time.Now().Add(150 * time.Second)
	var err error
	for time.Now().Before(deadline) && stable < 3 {
		time.Sleep(3 * time.Second)
		if exitErr := sw.exited(); exitErr != nil {
			t.Fatal(exitErr)
		}
		var s summary
		if s, err = fetchSummary(url); err != nil {
			continue
		}
		if err = complete(s.leaves); err != nil {
			continue
		}
		if samePaths(s.leaves, last.leaves) {
			stable++
		} else {
			stable = 0
		}
		last = s
	}
	if stable < 3 {
		t.Fatalf("%s's summary did not settle: %v", sw.current.kind, err)
	}
	t.Logf("%s's summary: %d fields", sw.current.kind, len(last.leaves))
	return last
}

func fetchSummary(url string) (summary, error) {
	resp, err := http.Get(url)
	if err != nil {
		return summary{}, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return summary{}, fmt.Errorf("%s: %s %q %v", url, resp.Status, raw, err)
	}
	var doc any
	if err := json.Unmarshal(raw, &doc); err != nil {
		return summary{}, err
	}
	leaves := map[string]any{}
	flattenJSON("", doc, leaves)
	return summary{raw: raw, leaves: leaves, read: time.Now()}, nil
}

// flattenJSON records every leaf of doc under its path. List items are named by what
// identifies them in a summary (a pod by namespace/name, anything else by its name), so
// that the two kubelets' lists line up whatever their order.
func flattenJSON(path string, doc any, out map[string]any) {
	switch v := doc.(type) {
	case map[string]any:
		for k, child := range v {
			flattenJSON(strings.TrimPrefix(path+"."+k, "."), child, out)
		}
	case []any:
		for i, item := range v {
			flattenJSON(fmt.Sprintf("%s[%s]", path, listItemKey(item, i)), item, out)
		}
	default:
		out[path] = v
	}
}

func listItemKey(item any, i int) string {
	m, ok := item.(map[string]any)
	if !ok {
		return fmt.Sprint(i)
	}
	if ref, ok := m["podRef"].(map[string]any); ok {
		return fmt.Sprintf("%v/%v", ref["namespace"], ref["name"])
	}
	if name, ok := m["name"].(string); ok {
		return name
	}
	return fmt.Sprint(i)
}

func samePaths(a, b map[string]any) bool {
	if len(a) != len(b) {
		return false
	}
	for p := range a {
		if _, ok := b[p]; !ok {
			return false
		}
	}
	return true
}

// comparedPath says whether a field is about this test's node-wide stats or its own
// pods: other tests' pods come and go on the shared containerd.
func comparedPath(path, node string) bool {
	if !strings.HasPrefix(path, "pods[") {
		return true
	}
	return strings.Contains(path, "-"+node+"]")
}

func compareSummaries(t *testing.T, theirs, ours summary) {
	t.Helper()
	node := ""
	if name, ok := theirs.leaves["node.nodeName"].(string); ok {
		node = name
	}
	var missing, extra, off []string
	for path, want := range theirs.leaves {
		if !comparedPath(path, node) {
			continue
		}
		got, ok := ours.leaves[path]
		if !ok {
			missing = append(missing, fmt.Sprintf("%s (upstream: %v)", path, want))
			continue
		}
		if err := withinBounds(path, want, got, ours.read); err != nil {
			off = append(off, fmt.Sprintf("%s: %v", path, err))
		}
	}
	for path := range ours.leaves {
		if _, ok := theirs.leaves[path]; !ok && comparedPath(path, node) {
			extra = append(extra, path)
		}
	}
	for _, l := range [][]string{missing, extra, off} {
		sort.Strings(l)
	}
	if len(missing) > 0 {
		t.Errorf("%d fields upstream fills are missing from nodelet's summary:\n%s", len(missing), strings.Join(missing, "\n"))
	}
	if len(off) > 0 {
		t.Errorf("%d fields are out of upstream's bounds:\n%s", len(off), strings.Join(off, "\n"))
	}
	if len(extra) > 0 {
		t.Logf("fields only nodelet fills:\n%s", strings.Join(extra, "\n"))
	}
}

// withinBounds checks one field of nodelet's summary, read at ours, against upstream's,
// read earlier: the same identity and capacities, time stamps of the reading,
// cumulative counters that have not gone back, and levels of the same magnitude.
func withinBounds(path string, want, got any, ours time.Time) error {
	leaf := path[strings.LastIndex(path, ".")+1:]
	switch w := want.(type) {
	case string:
		g, _ := got.(string)
		if strings.HasSuffix(strings.ToLower(leaf), "time") {
			return checkTimeStamp(leaf, w, g, ours)
		}
		if w != g {
			return fmt.Errorf("%q, upstream %q", g, w)
		}
		return nil
	case float64:
		g, ok := got.(float64)
		if !ok {
			return fmt.Errorf("%v is not a number", got)
		}
		return checkNumber(path, leaf, w, g)
	default:
		if fmt.Sprint(want) != fmt.Sprint(got) {
			return fmt.Errorf("%v, upstream %v", got, want)
		}
		return nil
	}
}

func checkTimeStamp(leaf, want, got string, read time.Time) error {
	wt, err1 := time.Parse(time.RFC3339, want)
	gt, err2 := time.Parse(time.RFC3339, got)
	if err1 != nil || err2 != nil {
		return fmt.Errorf("%q (upstream %q): not RFC 3339", got, want)
	}
	if leaf == "startTime" {
		// A container's or pod's start does not move; the node's is the kubelet's
		// idea of boot time (cAdvisor's root cgroup).
		if d := gt.Sub(wt); d < -2*time.Second || d > 2*time.Second {
			return fmt.Errorf("%s, upstream %s", gt, wt)
		}
		return nil
	}
	// A sample's time: not after the reading, and fresh (cAdvisor samples every 10 s,
	// volume stats every minute).
	if gt.After(read.Add(time.Second)) || read.Sub(gt) > 2*time.Minute {
		return fmt.Errorf("sample time %s for a reading at %s", gt, read.Format(time.RFC3339))
	}
	return nil
}

// Fields whose value is fixed for the host or the pod's spec.
var exactFields = []string{"capacityBytes", "inodes", "maxpid"}

// Cumulative counters: nodelet's reading, taken later, is at least upstream's (a PSI
// "total" too; its averages are rates).
var counterFields = []string{"usageCoreNanoSeconds", "rxBytes", "txBytes", "rxErrors", "txErrors",
	"pageFaults", "majorPageFaults", "total"}

func checkNumber(path, leaf string, want, got float64) error {
	switch {
	case slices.Contains(exactFields, leaf):
		if got != want {
			return fmt.Errorf("%.0f, upstream %.0f", got, want)
		}
	case slices.Contains(counterFields, leaf):
		if got < want {
			return fmt.Errorf("%.0f went back from upstream's %.0f", got, want)
		}
	case got < 0:
		return fmt.Errorf("%v is negative", got)
	case strings.HasPrefix(leaf, "avg"):
	case leaf == "usageNanoCores":
		// A rate over the last samples of a busy 2-core host: at most the host.
		if got > 2.5e9 {
			return fmt.Errorf("%.0f nanocores", got)
		}
	default:
		return checkLevel(path, leaf, want, got)
	}
	return nil
}

// checkLevel bounds a level (bytes in use, available, free inodes, process count): on a
// quiet pod it stays within a factor of two plus a little; node-wide levels move with
// the rest of the host, so those get a tenth of its capacity.
func checkLevel(path, leaf string, want, got float64) error {
	slack := 4.0 * (1 << 20) // a few MiB of a busybox container's memory
	switch {
	case strings.HasPrefix(path, "node.memory.") || strings.HasPrefix(path, "node.swap."):
		// The whole host's memory: whatever else runs (builds, other tests) moves it.
		slack = 0.1 * hostMemory()
	case path == "node.rlimit.curproc":
		slack = 1000
	case strings.HasPrefix(path, "node.") && (strings.Contains(path, "fs.") || strings.Contains(path, "Fs.")):
		slack = 0.1 * math.Max(want, got)
	case strings.HasPrefix(path, "node."):
		slack = math.Max(0.3*want, 64*(1<<20))
	case strings.Contains(leaf, "nodes") || leaf == "curproc" || leaf == "process_count":
		slack = 64
	}
	if got > 2*want+slack || got < want/2-slack {
		return fmt.Errorf("%.0f, upstream %.0f", got, want)
	}
	return nil
}

// hostMemory is the machine's memory in bytes.
func hostMemory() float64 {
	var info syscall.Sysinfo_t
	if err := syscall.Sysinfo(&info); err != nil {
		return 0
	}
	return float64(info.Totalram) * float64(info.Unit)
}

func dumpSummary(t *testing.T, path string, raw []byte) {
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		t.Log(err)
	}
}
