package main

import (
	"strings"
	"testing"
)

func TestLayerOrder(t *testing.T) {
	order := []string{"pkg/qos", "pkg/runtime/cri", "pkg/node/cm", "pkg/pod/kubelet", "pkg/api/server", "pkg/app", "cmd/nodelet"}
	prev := -1
	for _, p := range order {
		rank, _, ok := layer(p)
		if !ok || rank <= prev {
			t.Fatalf("%s: rank %d (covered %v), want above %d", p, rank, ok, prev)
		}
		prev = rank
	}
	for _, p := range []string{"test/e2e", "hack/cricheck"} {
		if _, _, ok := layer(p); ok {
			t.Errorf("%s is covered by the rule", p)
		}
	}
	if r, _, _ := layer("pkg/apple"); r != 0 {
		t.Errorf("pkg/apple is in group %d, want a leaf", r)
	}
}

func TestViolations(t *testing.T) {
	imports := parseList([]byte(strings.Join([]string{
		module + "pkg/pod/kubelet|" + module + "pkg/runtime/container," + module + "pkg/qos,k8s.io/api/core/v1,",
		module + "pkg/runtime/images|" + module + "pkg/pod/status",
		module + "pkg/node/cm (test)|" + module + "pkg/pod/kubelet," + module + "pkg/node/cm",
		module + "pkg/qos|" + module + "test/internal/host",
		module + "pkg/runtime/kuberuntime (test)|" + module + "pkg/pod/allocation",
	}, "\n")))
	bad, used := violations(imports)
	want := []string{
		"pkg/node/cm (test) (node) imports pkg/pod/kubelet (pod)",
		"pkg/qos (leaf) imports test/internal/host",
		"pkg/runtime/images (runtime) imports pkg/pod/status (pod)",
	}
	if len(bad) != len(want) {
		t.Fatalf("violations %q, want %d", bad, len(want))
	}
	for i, w := range want {
		if !strings.HasPrefix(bad[i], w) {
			t.Errorf("violation %d: %q, want it to start %q", i, bad[i], w)
		}
	}
	if !used["pkg/runtime/kuberuntime -> pkg/pod/allocation"] || len(used) != 1 {
		t.Errorf("exceptions used %v, want the allocation one (from a test)", used)
	}
}
