package main

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// The Deployment starts empty, and its pods are benchPods the tracker sees (bench label)
// and finds by Deployment (deployment label), pinned to the kubelet's node.
func TestDensityDeploymentIsEmptyBenchPodsOnTheNode(t *testing.T) {
	k := &kubelet{namespace: "ns", node: "node-a"}
	d := densityDeployment("run1", k, "density-0")
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 0 {
		t.Errorf("replicas %v, want 0", d.Spec.Replicas)
	}
	labels := d.Spec.Template.Labels
	if labels[benchLabel] != "run1" || labels[deploymentLabel] != "density-0" {
		t.Errorf("template labels %v, want the bench and deployment labels", labels)
	}
	for k, v := range d.Spec.Selector.MatchLabels {
		if labels[k] != v {
			t.Errorf("selector %s=%s does not match the template", k, v)
		}
	}
	spec := d.Spec.Template.Spec
	if spec.NodeName != "node-a" || len(spec.Containers) != 1 || spec.Containers[0].Image != image {
		t.Errorf("pod spec on %q with %d containers, want benchPod's on node-a", spec.NodeName, len(spec.Containers))
	}
	if d.Namespace != "ns" || d.Spec.Template.Namespace != "" || d.Spec.Template.Name != "" {
		t.Errorf("deployment in %q, template named %q in %q; want ns, and a template without name", d.Namespace, d.Spec.Template.Name, d.Spec.Template.Namespace)
	}
}

func TestPprofTableKeepsTheTable(t *testing.T) {
	out := "File: nodelet\nType: inuse_space\nTime: 2026-01-02 10:00:00 UTC\nShowing nodes accounting for 10MB, 90% of 11MB total\n      flat  flat%   sum%        cum   cum%\n       5MB 45% 45%  5MB 45%  main.f\n"
	want := "Showing nodes accounting for 10MB, 90% of 11MB total\n      flat  flat%   sum%        cum   cum%\n       5MB 45% 45%  5MB 45%  main.f"
	if got := pprofTable(out); got != want {
		t.Errorf("pprofTable = %q, want %q", got, want)
	}
}

func TestCounterByLabel(t *testing.T) {
	text := `# HELP kubelet_runtime_operations_total Cumulative number of runtime operations by operation type.
# TYPE kubelet_runtime_operations_total counter
kubelet_runtime_operations_total{operation_type="list_containers"} 12
kubelet_runtime_operations_total{operation_type="run_podsandbox"} 3
kubelet_runtime_operations_total{operation_type="list_containers",extra="x"} 1
kubelet_runtime_operations_total_other{operation_type="list_containers"} 99
kubelet_runtime_operations_errors_total{operation_type="run_podsandbox"} 7
`
	got := counterByLabel(text, "kubelet_runtime_operations_total", "operation_type")
	want := map[string]float64{"list_containers": 13, "run_podsandbox": 3}
	if len(got) != len(want) || got["list_containers"] != 13 || got["run_podsandbox"] != 3 {
		t.Errorf("counterByLabel = %v, want %v", got, want)
	}
	since := countersSince(map[string]float64{"list_containers": 10}, got)
	if since["list_containers"] != 3 || since["run_podsandbox"] != 3 || len(since) != 2 {
		t.Errorf("countersSince = %v", since)
	}
	if countersSince(nil, got) != nil {
		t.Error("countersSince without a first reading is not nil")
	}
	if line := criCallsLine(map[string]float64{"list_containers": 220, "run_podsandbox": 110}, 110); !strings.Contains(line, "330 in all, 3.0 a pod") || !strings.Contains(line, "list_containers 2.0") {
		t.Errorf("criCallsLine = %q", line)
	}
}

func TestOffsetsAreSortedFromStartWithoutMissingKeys(t *testing.T) {
	start := time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC)
	tr := &tracker{added: map[string]time.Time{
		"ns/b": start.Add(3 * time.Second),
		"ns/a": start.Add(time.Second),
		"ns/c": start.Add(-time.Second), // seen before the clock: at the start
	}}
	got := tr.offsets(addedTimes, []string{"ns/a", "ns/b", "ns/c", "ns/missing"}, start)
	want := []time.Duration{0, time.Second, 3 * time.Second}
	if !slices.Equal(got, want) {
		t.Errorf("offsets %v, want %v", got, want)
	}
}

func TestStartupPhasesMeanPerPodWithOther(t *testing.T) {
	metrics := `nodelet_pod_startup_phase_duration_seconds_sum{phase="sandbox"} 4
nodelet_pod_startup_phase_duration_seconds_sum{phase="readiness"} 2
nodelet_pod_startup_phase_duration_seconds_count{phase="sandbox"} 2
nodelet_pod_startup_duration_seconds_sum 10
nodelet_pod_startup_duration_seconds_count 2
`
	line := phasesLine(startupPhases(metrics), 2)
	for _, want := range []string{"total 5.00 s a pod", "sandbox 2.00", "readiness 1.00", "other 2.00"} {
		if !strings.Contains(line, want) {
			t.Errorf("phasesLine = %q, want %q in it", line, want)
		}
	}
	if phasesLine(startupPhases(""), 2) != "" {
		t.Error("a kubelet without the metrics has a phases line")
	}
}
