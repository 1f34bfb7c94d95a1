//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// sidecarPod is a static pod with a sidecar whose preStop hook never exits and a main
// container that runs mainCmd; the grace period is grace seconds.
func sidecarPod(name, restartPolicy, mainCmd string, grace int) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
spec:
  terminationGracePeriodSeconds: %d
  restartPolicy: %s
  initContainers:
  - name: sidecar
    image: %s
    imagePullPolicy: IfNotPresent
    restartPolicy: Always
    command: ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"]
    lifecycle:
      preStop:
        exec:
          command: ["sh", "-c", "sleep 3600"]
  containers:
  - name: main
    image: %s
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", %q]
`, name, grace, restartPolicy, busybox, busybox, mainCmd)
}

// finishedAt is when the named container of the static pod exited (zero while it runs).
func (s *standalone) finishedAt(t *testing.T, pod, name string) time.Time {
	t.Helper()
	for _, c := range s.containers(t, pod, true) {
		if c.Metadata.Name != name {
			continue
		}
		st, err := s.rs.ContainerStatus(context.Background(), c.Id, false)
		if err != nil || st.GetStatus().GetState() != runtimeapi.ContainerState_CONTAINER_EXITED {
			return time.Time{}
		}
		return time.Unix(0, st.GetStatus().GetFinishedAt())
	}
	return time.Time{}
}

// A sidecar's preStop hook runs for the pod's whole grace period, as upstream's kubelet
// lets it (its hook starts when the pod terminates, with the other containers'), both
// when the pod is deleted and when its main container completes; the sidecar is stopped
// after that, within the 2 s minimum.
func TestStandaloneSidecarPreStopGetsTheGracePeriod(t *testing.T) {
	const grace = 8
	s := startStandalone(t)
	s.writeManifest(t, "deleted.yaml", sidecarPod("deleted", "Always", "trap 'exit 0' TERM; while true; do sleep 1; done", grace))
	s.writeManifest(t, "completes.yaml", sidecarPod("completes", "Never", "sleep 3; exit 0", grace))
	waitFor(t, 30*time.Second, "both pods running", func() bool {
		return len(s.containers(t, "deleted", false)) == 2 && len(s.containers(t, "completes", false)) >= 1
	})
	removed := time.Now()
	if err := os.Remove(filepath.Join(s.manifests, "deleted.yaml")); err != nil {
		t.Fatal(err)
	}
	check := func(what string, from time.Time, sidecarDone time.Time) {
		t.Helper()
		took := sidecarDone.Sub(from)
		if took < (grace-1)*time.Second || took > (grace+5)*time.Second {
			t.Errorf("%s: the sidecar stopped %v after termination began, want its preStop to take the %d s grace period (then at most 2 s)", what, took.Round(100*time.Millisecond), grace)
		}
	}
	var deletedDone, mainDone, completesDone time.Time
	waitFor(t, 40*time.Second, "both sidecars stopped", func() bool {
		deletedDone = s.finishedAt(t, "deleted", "sidecar")
		mainDone = s.finishedAt(t, "completes", "main")
		completesDone = s.finishedAt(t, "completes", "sidecar")
		return !deletedDone.IsZero() && !completesDone.IsZero() && !mainDone.IsZero()
	})
	check("deleted pod", removed, deletedDone)
	check("completed pod", mainDone, completesDone)
}
