//go:build e2e

package e2e

import (
	"strings"
	"testing"
	"time"
)

// A memory emptyDir with fsGroup, mounted whole and through a subPath that does not exist
// yet: its root has upstream's mode, drwxrwsrwt (tmpfs's sticky 1777 plus fsGroup's setgid).
func TestStandaloneMemoryEmptyDirFSGroupMode(t *testing.T) {
	s := startStandalone(t)
	s.unmountPodsOnCleanup(t) // the tmpfs outlives the killed nodelet
	manifest := busyboxPod("memfs", "Always", `echo "ROOT=$(stat -c %A /vol) SUB=$(stat -c %A /sub)"; sleep 3600`)
	manifest = strings.Replace(manifest, "spec:\n", "spec:\n  securityContext:\n    fsGroup: 2000\n  volumes:\n  - name: mem\n    emptyDir:\n      medium: Memory\n", 1)
	manifest += "    volumeMounts:\n    - name: mem\n      mountPath: /vol\n    - name: mem\n      mountPath: /sub\n      subPath: not/there/yet\n"
	s.writeManifest(t, "memfs.yaml", manifest)
	var out string
	waitFor(t, 30*time.Second, "the pod printed the modes", func() bool {
		out = s.podLog(t, "memfs", "c0")
		return strings.Contains(out, "ROOT=")
	})
	if !strings.Contains(out, "ROOT=drwxrwsrwt SUB=drwxrwsrwt") {
		t.Errorf("modes %q, want drwxrwsrwt for the volume root and the new subPath", out)
	}
}
