package main

import (
	"reflect"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
)

func TestParseScenarios(t *testing.T) {
	for _, c := range []struct {
		list string
		want []string
	}{{"all", allScenarios}, {"volumes", []string{"volumes"}}, {"volumes, pods", []string{"pods", "volumes"}}} {
		set, err := parseScenarios(c.list)
		if err != nil {
			t.Fatalf("%q: %v", c.list, err)
		}
		if got := (options{scenarios: set}).scenarioList(); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%q: scenarios %v, want %v", c.list, got, c.want)
		}
	}
	if _, err := parseScenarios("volume"); err == nil || !strings.Contains(err.Error(), `"volume"`) {
		t.Errorf("an unknown scenario should be refused by name, got %v", err)
	}
}

// The volume pod leaves the token to the default (admission adds it), mounts both objects
// and checks the three files before it sleeps.
func TestVolumePodMountsConfigMapSecretAndDefaultToken(t *testing.T) {
	pod := volumePod("run", "ns", "p", "node")
	if pod.Spec.AutomountServiceAccountToken != nil {
		t.Error("automountServiceAccountToken must be left unset")
	}
	if len(pod.Spec.Volumes) != 2 || pod.Spec.Volumes[0].ConfigMap == nil || pod.Spec.Volumes[1].Secret == nil {
		t.Fatalf("volumes %+v, want a configMap and a secret", pod.Spec.Volumes)
	}
	script := pod.Spec.Containers[0].Command[2]
	for _, f := range []string{configDir + "/app.conf", secretDir + "/password", tokenFile} {
		if !strings.Contains(script, f) {
			t.Errorf("container script %q does not check %s", script, f)
		}
	}
	if hasTokenVolume(pod) {
		t.Error("the pod as created has no token volume yet: admission adds it")
	}
	pod.Spec.Volumes = append(pod.Spec.Volumes, v1.Volume{Name: "kube-api-access-x", VolumeSource: v1.VolumeSource{
		Projected: &v1.ProjectedVolumeSource{Sources: []v1.VolumeProjection{{ServiceAccountToken: &v1.ServiceAccountTokenProjection{Path: "token"}}}}}})
	if !hasTokenVolume(pod) {
		t.Error("a projected serviceAccountToken volume should be found")
	}
}
