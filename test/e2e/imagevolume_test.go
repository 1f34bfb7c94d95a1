//go:build e2e

package e2e

// Image volumes (pod.spec.volumes[].image, KEP-4639): nodelet pulls the volume's image and
// the runtime mounts it, read-only. containerd 2.x (2.1 and later) does; containerd 1.6
// does not know the CRI mount's image field, drops it and fails CreateContainer on the
// empty host path that is left, so there the pod must be refused with upstream's reason,
// never run without its volume. On containerd 2.x (NODELET_RUNTIME=containerd2
// hack/runtime.sh up, docs/runtimes.md) run:
//
//	NODELET_RUNTIME=containerd2 go test -count=1 -tags e2e -run ImageVolume ./test/e2e/

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

func imageVolumeRuntime() bool { return os.Getenv("NODELET_RUNTIME") == "containerd2" }

// imageVolumePod mounts the busybox image as a volume (its pull policy left to the default,
// IfNotPresent for a tagged image: the rig has it) at mountPath, with subPath when set, and
// prints what the container sees there: the checksum of its passwd file next to that of
// the container's own /etc/passwd (the same image's), and what a write says.
func imageVolumePod(name, mountPath, subPath, passwd string) string {
	script := fmt.Sprintf(`echo "OWN=$(md5sum < /etc/passwd)"; echo "VOL=$(md5sum < %[1]s/%[2]s)"; `+
		`echo "ROOTFS=$(ls %[1]s | tr '\n' ' ')"; echo "WRITE=$(touch %[1]s/probe 2>&1 && echo allowed)"; sleep 3600`, mountPath, passwd)
	mount := fmt.Sprintf("{name: img, mountPath: %s}", mountPath)
	if subPath != "" {
		mount = fmt.Sprintf("{name: img, mountPath: %s, subPath: %s}", mountPath, subPath)
	}
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
spec:
  terminationGracePeriodSeconds: 1
  volumes:
  - name: img
    image:
      reference: %s
  containers:
  - name: c0
    image: %s
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", %q]
    volumeMounts:
    - %s
`, name, busybox, busybox, script, mount)
}

// imageVolumeOutput waits for the pod's report and returns its KEY=value lines.
func imageVolumeOutput(t *testing.T, s *standalone, pod string) map[string]string {
	t.Helper()
	out := map[string]string{}
	waitFor(t, 60*time.Second, pod+"'s report", func() bool {
		for _, line := range strings.Split(s.podLog(t, pod, "c0"), "\n") {
			for _, key := range []string{"OWN", "VOL", "ROOTFS", "WRITE"} {
				if i := strings.Index(line, key+"="); i >= 0 {
					out[key] = strings.TrimSpace(line[i+len(key)+1:])
				}
			}
		}
		_, done := out["WRITE"]
		return done
	})
	t.Logf("%s: %q", pod, out)
	return out
}

// checkImageVolume checks the report: the file read through the mount is the image's, and
// the mount refuses writes as a read-only file system.
func checkImageVolume(t *testing.T, out map[string]string) {
	t.Helper()
	if out["OWN"] == "" || out["VOL"] != out["OWN"] {
		t.Errorf("passwd through the image volume has checksum %q, want the image's %q", out["VOL"], out["OWN"])
	}
	if !strings.Contains(out["WRITE"], "Read-only file system") {
		t.Errorf("a write to the image volume said %q, want a read-only file system", out["WRITE"])
	}
}

func TestImageVolumeMountsTheImageReadOnly(t *testing.T) {
	if !imageVolumeRuntime() {
		t.Skip("containerd 1.6 cannot mount image volumes (TestImageVolumeRefusedWithoutRuntimeSupport); run with NODELET_RUNTIME=containerd2")
	}
	s := startStandalone(t)
	s.writeManifest(t, "imgvol.yaml", imageVolumePod("imgvol", "/img", "", "etc/passwd"))
	out := imageVolumeOutput(t, s, "imgvol")
	checkImageVolume(t, out)
	if listed := strings.Fields(out["ROOTFS"]); !slices.Contains(listed, "bin") || !slices.Contains(listed, "etc") {
		t.Errorf("the volume's root lists %q, want the image's root (bin, etc)", out["ROOTFS"])
	}
}

// subPath mounts a directory of the image instead of its root.
func TestImageVolumeSubPath(t *testing.T) {
	if !imageVolumeRuntime() {
		t.Skip("containerd 1.6 cannot mount image volumes (TestImageVolumeRefusedWithoutRuntimeSupport); run with NODELET_RUNTIME=containerd2")
	}
	s := startStandalone(t)
	s.writeManifest(t, "imgvol-sub.yaml", imageVolumePod("imgvol-sub", "/imgetc", "etc", "passwd"))
	out := imageVolumeOutput(t, s, "imgvol-sub")
	checkImageVolume(t, out)
	if listed := strings.Fields(out["ROOTFS"]); slices.Contains(listed, "bin") || !slices.Contains(listed, "passwd") {
		t.Errorf("the subPath mount lists %q, want the image's etc directory", out["ROOTFS"])
	}
}

// On containerd 1.6 the container is never created: its status shows the runtime's
// CreateContainer error, as under upstream's kubelet.
func TestImageVolumeRefusedWithoutRuntimeSupport(t *testing.T) {
	if imageVolumeRuntime() {
		t.Skip("containerd 2.x mounts image volumes (TestImageVolumeMountsTheImageReadOnly)")
	}
	s := startStandalone(t)
	s.writeManifest(t, "imgvol-old.yaml", imageVolumePod("imgvol-old", "/img", "", "etc/passwd"))
	var message string
	waitFor(t, 60*time.Second, "CreateContainerError for the image volume", func() bool {
		p, ok := s.apiPods(t)["imgvol-old"]
		if !ok {
			return false
		}
		for _, cs := range p.Status.ContainerStatuses {
			if w := cs.State.Waiting; w != nil && w.Reason == "CreateContainerError" {
				message = w.Message
				return true
			}
		}
		return false
	})
	t.Logf("message: %s", message)
	if !strings.Contains(message, `failed to mkdir ""`) {
		t.Errorf("message %q, want containerd 1.6's refusal of the mount's empty host path", message)
	}
	if cs := s.containers(t, "imgvol-old", true); len(cs) != 0 {
		t.Errorf("%d containers created for the pod, want none", len(cs))
	}
}
