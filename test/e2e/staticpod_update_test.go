//go:build e2e

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Editing a static pod's manifest replaces the pod (a new UID): the old pod's container
// gets its whole grace period to exit on SIGTERM, and the new pod's container starts only
// after the old one has gone, as upstream's pod workers order static pods of one name.
func TestStandaloneEditedStaticPodWaitsForTheOldOne(t *testing.T) {
	s := startStandalone(t)
	manifest := func(version string) string {
		m := busyboxPod("web", "Always", "trap 'sleep 4; exit 0' TERM; while true; do sleep 1; done")
		m = strings.Replace(m, "terminationGracePeriodSeconds: 2", "terminationGracePeriodSeconds: 10", 1)
		return strings.Replace(m, "metadata:\n", "metadata:\n  labels:\n    version: \""+version+"\"\n", 1)
	}
	s.writeManifest(t, "web.yaml", manifest("1"))
	waitFor(t, 20*time.Second, "version 1 running", func() bool { return len(s.containers(t, "web", false)) == 1 })
	oldID := s.containers(t, "web", false)[0].Id
	edited := time.Now()
	s.writeManifest(t, "web.yaml", manifest("2"))
	waitFor(t, 40*time.Second, "version 2 running", func() bool {
		for _, c := range s.containers(t, "web", false) {
			if c.Id != oldID {
				return true
			}
		}
		return false
	})
	ctx := context.Background()
	old, err := s.rs.ContainerStatus(ctx, oldID, false)
	if err != nil {
		t.Fatal(err)
	}
	st := old.GetStatus()
	if st.GetState() != runtimeapi.ContainerState_CONTAINER_EXITED || st.GetExitCode() != 0 {
		t.Errorf("the old container: state %s, exit code %d; want it exited 0 after its TERM trap (not killed)", st.GetState(), st.GetExitCode())
	}
	if took := time.Unix(0, st.GetFinishedAt()).Sub(edited); took < 3*time.Second {
		t.Errorf("the old container finished %v after the edit: its grace period was cut short", took)
	}
	for _, c := range s.containers(t, "web", true) {
		if c.Id == oldID {
			continue
		}
		if c.CreatedAt < st.GetFinishedAt() {
			t.Errorf("the new container was created at %v, before the old one finished at %v",
				time.Unix(0, c.CreatedAt), time.Unix(0, st.GetFinishedAt()))
		}
	}
}
