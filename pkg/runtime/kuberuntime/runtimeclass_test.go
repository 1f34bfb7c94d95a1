package kuberuntime

import (
	"slices"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/nodelet/nodelet/pkg/runtime/runtimeclass"
)

func className(s string) *string { return &s }

// everyPodOn runs every pod, whatever its class, under one handler.
type everyPodOn string

func (h everyPodOn) LookupRuntimeHandler(*string) (string, error) { return string(h), nil }

// classes is a RuntimeClass lookup over a map of class → handler.
type classes map[string]string

func (c classes) LookupRuntimeHandler(name *string) (string, error) {
	if name == nil || *name == "" {
		return "", nil
	}
	if h, ok := c[*name]; ok {
		return h, nil
	}
	return "", apierrors.NewNotFound(schema.GroupResource{Group: "node.k8s.io", Resource: "runtimeclass"}, *name)
}

func sandboxHandlers(env *testEnv) []string {
	env.rt.Lock()
	defer env.rt.Unlock()
	var out []string
	for _, s := range env.rt.Sandboxes {
		out = append(out, s.RuntimeHandler)
	}
	return out
}

// A pod's RuntimeClass picks the handler its sandbox is run with; a pod without one runs
// under the runtime's default.
func TestSyncPodRunsTheSandboxUnderItsRuntimeClassHandler(t *testing.T) {
	env := newTestEnv(t, func(o *Options) { o.RuntimeClasses = classes{"sandboxed": "test-handler"} })
	pod := newPod("classy", ctr("app"))
	pod.Spec.RuntimeClassName = className("sandboxed")
	if err := syncPod(t, env, pod, nil).Error(); err != nil {
		t.Fatalf("SyncPod: %v", err)
	}
	plain := newPod("plain", ctr("app"))
	if err := syncPod(t, env, plain, nil).Error(); err != nil {
		t.Fatalf("SyncPod: %v", err)
	}
	got := sandboxHandlers(env)
	slices.Sort(got)
	if !slices.Equal(got, []string{"", "test-handler"}) {
		t.Errorf("sandbox handlers %q, want the default and test-handler", got)
	}
}

// A RuntimeClass that does not exist fails the sandbox with upstream's event, and no
// sandbox runs under the default handler in its place.
func TestSyncPodRefusesAMissingRuntimeClass(t *testing.T) {
	env := newTestEnv(t, func(o *Options) { o.RuntimeClasses = classes{} })
	pod := newPod("missing", ctr("app"))
	pod.Spec.RuntimeClassName = className("gvisor")
	if err := syncPod(t, env, pod, nil).Error(); err == nil {
		t.Fatal("SyncPod succeeded for a pod whose RuntimeClass does not exist")
	}
	if n := len(sandboxHandlers(env)); n != 0 {
		t.Errorf("%d sandboxes created", n)
	}
	want := `Warning FailedCreatePodSandBox Failed to create pod sandbox: runtimeclass.node.k8s.io "gvisor" not found`
	if events := env.events(); !hasEvent(events, want) {
		t.Errorf("events %q, want %q", events, want)
	}
}

// Standalone, a pod naming a RuntimeClass is refused with the reason.
func TestSyncPodRefusesARuntimeClassStandalone(t *testing.T) {
	env := newTestEnv(t, func(o *Options) { o.RuntimeClasses = runtimeclass.Standalone{} })
	pod := newPod("standalone", ctr("app"))
	pod.Spec.RuntimeClassName = className("kata")
	err := syncPod(t, env, pod, nil).Error()
	if err == nil || len(sandboxHandlers(env)) != 0 {
		t.Fatalf("SyncPod: %v, sandboxes %q; want refused", err, sandboxHandlers(env))
	}
	if events := env.events(); !hasEvent(events, `Warning FailedCreatePodSandBox Failed to create pod sandbox: RuntimeClass "kata" cannot be resolved: nodelet runs standalone`) {
		t.Errorf("events %q", events)
	}
	if err := syncPod(t, env, newPod("plain", ctr("app")), nil).Error(); err != nil {
		t.Errorf("a pod without a RuntimeClass: %v", err)
	}
}
