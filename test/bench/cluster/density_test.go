package main

import (
	"testing"
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
