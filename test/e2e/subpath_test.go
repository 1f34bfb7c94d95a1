//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
)

// SubPath mounts (CVE-2017-1002101): nodelet bind-mounts a volumeMount's subPath, opened
// without following symlinks, under <pod dir>/volume-subpaths/ and gives the runtime that
// mount, so a container that swaps the subPath for a symlink cannot get a host path
// mounted; the bind mounts go with the pod, also when an earlier nodelet made them.

// subPathAttackPod: "attacker" swaps the emptyDir's "sub" between its directory and a
// symlink to the host's root in a tight loop; "victim" mounts "sub" as a subPath, writes
// what it sees there to its log and to a report volume the attacker cannot reach, and
// exits, so that it restarts (with back-off) and its subPath is prepared again each time.
func subPathAttackPod(name string) string {
	attacker := `cd /vol; while true; do mv sub sub.d; ln -s / sub; rm -f sub; mv sub.d sub; done 2>/dev/null`
	victim := `echo "run $(date +%s): $(ls -a /mnt | tr '\n' ' ')" | tee -a /report/runs; if [ -e /mnt/proc/1 ]; then echo ESCAPED | tee -a /report/runs; fi; sleep 1; exit 1`
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
spec:
  terminationGracePeriodSeconds: 1
  restartPolicy: Always
  volumes:
  - name: shared
    emptyDir: {}
  - name: report
    emptyDir: {}
  containers:
  - name: attacker
    image: %s
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", %q]
    resources:
      limits: {cpu: 500m, memory: 32Mi}
    volumeMounts:
    - {name: shared, mountPath: /vol}
  - name: victim
    image: %s
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", %q]
    volumeMounts:
    - {name: shared, mountPath: /mnt, subPath: sub}
    - {name: report, mountPath: /report}
`, name, busybox, attacker, busybox, victim)
}

// unmountPodsOnCleanup detaches whatever is left mounted under the nodelet's pods
// directory when the test ends, after nodelet is killed and its pods removed, so that a
// failed test leaks no mount and the root dir's removal cannot go through one.
func (s *standalone) unmountPodsOnCleanup(t *testing.T) {
	t.Helper()
	t.Cleanup(func() {
		s.removeAllPods(t)
		pods, err := filepath.EvalSymlinks(filepath.Join(s.rootDir, "pods"))
		if err != nil {
			return
		}
		left := mountsUnder(t, pods)
		for i := len(left) - 1; i >= 0; i-- { // mountinfo lists parents first
			_ = syscall.Unmount(left[i], syscall.MNT_DETACH)
		}
	})
}

// podDir is the directory of this node's only pod named pod.
func (s *standalone) podDir(t *testing.T, pod string) string {
	t.Helper()
	sbs := s.sandboxes(t, pod)
	if len(sbs) == 0 {
		t.Fatalf("no sandbox for %s", pod)
	}
	dir, err := filepath.EvalSymlinks(filepath.Join(s.rootDir, "pods", sbs[0].Metadata.Uid))
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestSubPathSymlinkSwapDoesNotMountTheHost(t *testing.T) {
	// A file only the host's root directory has: the victim must never list it.
	marker := "nodelet-e2e-subpath-" + string(uuid.NewUUID())[:8]
	if err := os.WriteFile("/"+marker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove("/" + marker) })

	s := startStandalone(t)
	s.unmountPodsOnCleanup(t)
	s.writeManifest(t, "subpath.yaml", subPathAttackPod("subpath"))
	waitFor(t, 30*time.Second, "the attacker running", func() bool {
		for _, c := range s.containers(t, "subpath", false) {
			if c.Metadata.Name == "attacker" {
				return true
			}
		}
		return false
	})
	podDir := s.podDir(t, "subpath")
	report := filepath.Join(podDir, "volumes", "kubernetes.io~empty-dir", "report", "runs")
	runs := func() []string {
		b, _ := os.ReadFile(report)
		if len(b) == 0 {
			return nil
		}
		return strings.Split(strings.TrimSpace(string(b)), "\n")
	}
	// Each start of the victim prepares its subPath anew: it runs, or nodelet refuses
	// the subPath (a symlink at that moment) and the start counts as failed. Back-off
	// spaces the attempts 10 s, 20 s, 40 s apart: four take about 75 s.
	refusals := func() int {
		out := s.out.String()
		return strings.Count(out, "Failed to prepare subPath for volumeMount of the container") +
			strings.Count(out, "Failed to create subPath directory for volumeMount of the container")
	}
	took := waitFor(t, 110*time.Second, "four starts of the victim", func() bool { return len(runs())+refusals() >= 4 })
	t.Logf("after %v: %d victim runs, %d subPath refusals", took.Round(time.Second), len(runs()), refusals())
	if len(runs()) == 0 {
		t.Fatal("the victim never ran: nothing shows what its subPath mount was")
	}

	seen := strings.Join(runs(), "\n")
	// And its logs, as far as the garbage collector left them.
	logs, _ := filepath.Glob(filepath.Join(s.logsDir, "*_subpath-"+s.node+"_*", "victim", "*.log"))
	for _, l := range logs {
		b, _ := os.ReadFile(l)
		seen += "\n" + string(b)
	}
	t.Logf("what the victim saw:\n%s", seen)
	for _, line := range strings.Split(seen, "\n") {
		if strings.Contains(line, marker) || strings.Contains(line, "ESCAPED") || strings.Contains(line, " proc ") {
			t.Errorf("the victim's subPath showed the host's root: %q", line)
		}
	}
	// The only mount in the pod's directory is the victim's subPath bind mount, not stacked.
	victimTarget := filepath.Join(podDir, "volume-subpaths", "shared", "victim", "0")
	for _, mp := range mountsUnder(t, podDir) {
		if mp != victimTarget {
			t.Errorf("%s is mounted, want only %s", mp, victimTarget)
		}
	}
	if m := mountsUnder(t, podDir); len(m) > 1 {
		t.Errorf("%d mounts in the pod directory, want at most the victim's subPath", len(m))
	}
}

func TestSubPathMountsCleanedUpAfterKill(t *testing.T) {
	s := startStandalone(t)
	s.unmountPodsOnCleanup(t)
	// "app" runs with its subPath mounted; "never" gets its subPath mounted but cannot
	// start (no such command), as a container whose nodelet died between the mount and
	// its start.
	s.writeManifest(t, "orphans.yaml", fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: orphans
spec:
  terminationGracePeriodSeconds: 1
  volumes:
  - name: data
    emptyDir: {}
  containers:
  - name: app
    image: %[1]s
    imagePullPolicy: IfNotPresent
    command: ["sleep", "3600"]
    volumeMounts:
    - {name: data, mountPath: /data, subPath: app}
    - {name: data, mountPath: /etc/app.conf, subPath: conf/app.conf}
  - name: never
    image: %[1]s
    imagePullPolicy: IfNotPresent
    command: ["/does-not-exist"]
    volumeMounts:
    - {name: data, mountPath: /data, subPath: never}
`, busybox))
	waitFor(t, 30*time.Second, "app running", func() bool { return len(s.containers(t, "orphans", false)) == 1 })
	podDir := s.podDir(t, "orphans")
	subPaths := filepath.Join(podDir, "volume-subpaths")
	waitFor(t, 30*time.Second, "the subPath bind mounts of both containers", func() bool {
		var app, never bool
		for _, mp := range mountsUnder(t, subPaths) {
			app = app || strings.HasPrefix(mp, filepath.Join(subPaths, "data", "app")+"/")
			never = never || strings.HasPrefix(mp, filepath.Join(subPaths, "data", "never")+"/")
		}
		return app && never
	})
	t.Logf("mounted before the kill: %v", mountsUnder(t, podDir))

	s.restart(t, true)
	if err := s.waitHealthz(10*time.Second, 200); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "the pod reported running again", func() bool {
		p, ok := s.apiPods(t)["orphans"]
		return ok && p.Status.Phase == v1.PodRunning
	})
	if err := os.Remove(filepath.Join(s.manifests, "orphans.yaml")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "app stopped", func() bool { return len(s.containers(t, "orphans", false)) == 0 })
	waitFor(t, 30*time.Second, "nothing of the pod mounted and its directory removed", func() bool {
		if len(mountsUnder(t, podDir)) > 0 {
			return false
		}
		_, err := os.Lstat(podDir)
		return os.IsNotExist(err)
	})
}
