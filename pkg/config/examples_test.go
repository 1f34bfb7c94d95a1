package config

import (
	"os"
	"strings"
	"testing"
)

// defaultsNotHonoured are the fields whose upstream default asks for something nodelet
// does not do yet; every start with them at their defaults warns about exactly these.
var defaultsNotHonoured = []string{"makeIPTablesUtilChains", "protectKernelDefaults"}

// The demo (hack/demo.sh) runs nodelet on examples/kubelet-config.yaml with only
// command-only flags: its first screen carries no warning but the one every node gets for
// the defaults nodelet does not honour yet.
func TestDemoConfigWarnsOnlyAboutUnhonouredDefaults(t *testing.T) {
	cl, opts, err := parse(t, "--config=../../examples/kubelet-config.yaml", "--root-dir="+t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	w := cl.Warnings()
	if len(w) != 1 || warnedFields(w[0]) != strings.Join(defaultsNotHonoured, ",") {
		t.Errorf("the demo's configuration warns: %q; want one line naming %v", w, defaultsNotHonoured)
	}
	if got := opts.Config.ContainerRuntimeEndpoint; got != "unix:///run/nodelet-dev/containerd.sock" {
		t.Errorf("containerRuntimeEndpoint = %q, want the dev rig's (hack/runtime.sh)", got)
	}
}

// warnedFields lists, comma-joined, the fields an unhonouredFields warning names.
func warnedFields(warning string) string {
	_, list, ok := strings.Cut(warning, "what nodelet does instead: ")
	if !ok {
		return ""
	}
	var names []string
	for _, item := range strings.Split(list, "; ") {
		name, _, _ := strings.Cut(item, " → ")
		names = append(names, name)
	}
	return strings.Join(names, ",")
}

// The systemd drop-in in examples/systemd starts nodelet with kubeadm's command line: every
// flag in it (with what kubeadm-flags.env typically holds) must parse.
func TestKubeadmDropInParses(t *testing.T) {
	data, err := os.ReadFile("../../examples/systemd/10-kubeadm.conf")
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{
		"KUBELET_KUBEADM_ARGS": "--container-runtime-endpoint=unix:///var/run/containerd/containerd.sock --node-ip=10.0.0.5 --hostname-override=node-a",
		"KUBELET_EXTRA_ARGS":   "",
	}
	var exec string
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "Environment="); ok {
			name, value, _ := strings.Cut(strings.Trim(v, `"`), "=")
			env[name] = value
		}
		if v, ok := strings.CutPrefix(line, "ExecStart="); ok && v != "" {
			exec = v
		}
	}
	args := strings.Fields(os.Expand(exec, func(k string) string { return env[k] }))
	if len(args) < 4 || args[0] != "/usr/bin/kubelet" {
		t.Fatalf("ExecStart %q", exec)
	}
	cl := NewCommandLine("nodelet")
	if err := cl.Parse(args[1:]); err != nil {
		t.Fatalf("nodelet does not take kubeadm's command line %q: %v", args[1:], err)
	}
}
