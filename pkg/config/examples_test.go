package config

import (
	"testing"
)

// The demo (hack/demo.sh) runs nodelet on examples/kubelet-config.yaml with only
// command-only flags: its first screen must carry no warning the user did not cause.
func TestDemoConfigLoadsWithoutWarnings(t *testing.T) {
	cl, opts, err := parse(t, "--config=../../examples/kubelet-config.yaml", "--root-dir="+t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if w := cl.Warnings(); len(w) != 0 {
		t.Errorf("the demo's configuration warns: %q", w)
	}
	if got := opts.Config.ContainerRuntimeEndpoint; got != "unix:///run/nodelet-dev/containerd.sock" {
		t.Errorf("containerRuntimeEndpoint = %q, want the dev rig's (hack/runtime.sh)", got)
	}
}
