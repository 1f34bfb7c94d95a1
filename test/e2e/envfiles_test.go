//go:build e2e

package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// envFilePod is a static pod whose init container writes an env file into an emptyDir and
// whose container reads key from it (and an optional key that is not there).
func envFilePod(name, key string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
spec:
  terminationGracePeriodSeconds: 2
  volumes:
  - name: config
    emptyDir: {}
  initContainers:
  - name: write
    image: %s
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "printf \"# made by init\\nGREETING='hello from init'\\nMULTI='a\\nb'\\n\" > /config/app.env"]
    volumeMounts:
    - name: config
      mountPath: /config
  containers:
  - name: c0
    image: %s
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "echo \"GREETING=[$GREETING] MULTI=[$MULTI] OPTIONAL=[${OPTIONAL-unset}]\"; sleep 3600"]
    env:
    - name: GREETING
      valueFrom:
        fileKeyRef: {volumeName: config, path: app.env, key: %s}
    - name: MULTI
      valueFrom:
        fileKeyRef: {volumeName: config, path: app.env, key: MULTI}
    - name: OPTIONAL
      valueFrom:
        fileKeyRef: {volumeName: config, path: app.env, key: ABSENT, optional: true}
    volumeMounts:
    - name: config
      mountPath: /config
`, name, busybox, busybox, key)
}

// Env files (EnvFiles, beta, on by default): a static pod's container gets a key of a file
// its init container wrote; an optional missing key is left out; a required missing key
// keeps the container from starting with upstream's reason.
func TestStandaloneEnvFiles(t *testing.T) {
	s := startStandalone(t)
	s.writeManifest(t, "good.yaml", envFilePod("envfile", "GREETING"))
	s.writeManifest(t, "bad.yaml", envFilePod("envfile-missing", "NOPE"))
	var out string
	waitFor(t, 30*time.Second, "the container printed its env", func() bool {
		out = s.podLog(t, "envfile", "c0")
		return strings.Contains(out, "GREETING=")
	})
	if want := "GREETING=[hello from init] MULTI=[a\n"; !strings.Contains(out, want) {
		t.Errorf("output %q, want %q", out, want)
	}
	if !strings.Contains(out, "OPTIONAL=[unset]") {
		t.Errorf("an optional missing key was set: %q", out)
	}
	waitFor(t, 30*time.Second, "CreateContainerConfigError for the missing key", func() bool {
		p, ok := s.apiPods(t)["envfile-missing"]
		if !ok {
			return false
		}
		for _, cs := range p.Status.ContainerStatuses {
			if w := cs.State.Waiting; w != nil && w.Reason == "CreateContainerConfigError" &&
				strings.Contains(w.Message, `environment variable key "NOPE" not found in file`) {
				return true
			}
		}
		return false
	})
	if n := len(s.containers(t, "envfile-missing", true)); n != 1 { // the init container only
		t.Errorf("the pod with a missing key has %d containers, want only its init container", n)
	}
}
