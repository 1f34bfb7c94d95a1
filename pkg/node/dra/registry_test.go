package dra

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	drahealth "k8s.io/kubelet/pkg/apis/dra-health/v1"
	drahealthv1alpha1 "k8s.io/kubelet/pkg/apis/dra-health/v1alpha1"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
	drapbv1beta1 "k8s.io/kubelet/pkg/apis/dra/v1beta1"
)

func TestVersionNegotiation(t *testing.T) {
	for name, tc := range map[string]struct {
		versions      []string
		service       string
		healthService string
		err           string
	}{
		"none":                      {err: "invalid supported gRPC versions of DRA driver plugin gpu.example.com at endpoint /x.sock: empty list of supported gRPC services (aka supported versions)"},
		"unknown":                   {versions: []string{"1.0.0"}, err: `invalid supported gRPC versions of DRA driver plugin gpu.example.com at endpoint /x.sock: none of services supported by the plugin (["1.0.0"]) are supported by the kubelet (["v1.DRAPlugin" "v1beta1.DRAPlugin"])`},
		"v1":                        {versions: []string{"v1.DRAPlugin"}, service: drapb.DRAPluginService},
		"v1beta1":                   {versions: []string{"v1beta1.DRAPlugin"}, service: drapbv1beta1.DRAPluginService},
		"plugin order wins":         {versions: []string{"v1beta1.DRAPlugin", "v1.DRAPlugin"}, service: drapbv1beta1.DRAPluginService},
		"health only is not enough": {versions: []string{"v1.DRAResourceHealth"}, err: "none of services supported by the plugin"},
		"v1alpha1 health":           {versions: []string{"v1.DRAPlugin", "v1alpha1.DRAResourceHealth"}, service: drapb.DRAPluginService, healthService: drahealthv1alpha1.DRAResourceHealthService},
		"newest health":             {versions: []string{"v1alpha1.DRAResourceHealth", "v1.DRAResourceHealth", "v1.DRAPlugin"}, service: drapb.DRAPluginService, healthService: drahealth.DRAResourceHealthService},
	} {
		t.Run(name, func(t *testing.T) {
			r := newRegistry(nil, "", time.Second, nil, newMetrics(&claimCache{}).grpcDuration)
			err := r.ValidatePlugin(context.Background(), testDriver, "/x.sock", tc.versions)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				if err := r.RegisterPlugin(context.Background(), testDriver, "/x.sock", tc.versions, nil); err == nil {
					t.Error("RegisterPlugin accepted what ValidatePlugin refused")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			service, _ := chooseService(tc.versions)
			if service != tc.service || chooseHealthService(tc.versions) != tc.healthService {
				t.Errorf("chose %q and %q, want %q and %q", service, chooseHealthService(tc.versions), tc.service, tc.healthService)
			}
		})
	}
}

func TestRegisterSeveralPluginsOfADriver(t *testing.T) {
	m := newTestManager(t, nil, Options{})
	r := m.PluginHandler()
	ctx := context.Background()
	dir := socketDir(t)
	old, newer := filepath.Join(dir, "old.sock"), filepath.Join(dir, "new.sock")
	serve(t, newFakeDriver(), old, serveOptions{})
	serve(t, newFakeDriver(), newer, serveOptions{})
	versions := []string{drapb.DRAPluginService}

	if err := r.RegisterPlugin(ctx, testDriver, old, versions, nil); err != nil {
		t.Fatal(err)
	}
	if err := r.RegisterPlugin(ctx, testDriver, old, versions, nil); err == nil ||
		err.Error() != "endpoint "+old+" already registered for DRA driver plugin "+testDriver {
		t.Errorf("same endpoint again: err = %v", err)
	}
	if err := r.RegisterPlugin(ctx, testDriver, newer, versions, nil); err != nil {
		t.Fatal(err)
	}
	eventually(t, "both plugins connected", func() bool {
		r.mu.RLock()
		defer r.mu.RUnlock()
		return !slices.ContainsFunc(r.plugins[testDriver], func(p *driverPlugin) bool { return !p.connected })
	})
	if p, err := r.getPlugin(testDriver); err != nil || p.endpoint != newer {
		t.Errorf("getPlugin = %v, %v; want the newest", p, err)
	}
	r.DeRegisterPlugin(ctx, testDriver, newer)
	if p, err := r.getPlugin(testDriver); err != nil || p.endpoint != old {
		t.Errorf("after removing the newest: %v, %v", p, err)
	}
	if p, _ := r.getPlugin(testDriver); p.timeout != DefaultCallTimeout {
		t.Errorf("timeout = %v, want the default", p.timeout)
	}
	r.DeRegisterPlugin(ctx, testDriver, old)
	r.DeRegisterPlugin(ctx, testDriver, old) // no-op
	if _, err := r.getPlugin(testDriver); err == nil || err.Error() != "DRA driver gpu.example.com is not registered" {
		t.Errorf("after removing all: err = %v", err)
	}
}

// sliceWipes records the field selectors of the ResourceSlice DeleteCollection calls.
type sliceWipes struct {
	mu        sync.Mutex
	selectors []string
}

func (w *sliceWipes) record(client *fake.Clientset) {
	client.PrependReactor("delete-collection", "resourceslices", func(action k8stesting.Action) (bool, runtime.Object, error) {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.selectors = append(w.selectors, action.(k8stesting.DeleteCollectionAction).GetListRestrictions().Fields.String())
		return true, nil, nil
	})
}

func (w *sliceWipes) list() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.selectors)
}

const (
	nodeSelector   = resourceapi.ResourceSliceSelectorNodeName + "=" + testNode
	driverSelector = resourceapi.ResourceSliceSelectorDriver + "=" + testDriver + "," + nodeSelector
)

func startWiping(t *testing.T, delay time.Duration) (*Manager, *sliceWipes) {
	client := fakeClient()
	wipes := &sliceWipes{}
	wipes.record(client)
	m := newTestManager(t, client, Options{NodeName: testNode, WipingDelay: delay})
	if err := m.Start(context.Background(), noPods, func() bool { return false }); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the start-up wipe", func() bool { return slices.Equal(wipes.list(), []string{nodeSelector}) })
	return m, wipes
}

func TestSlicesWipedAfterDriverLeaves(t *testing.T) {
	m, wipes := startWiping(t, 100*time.Millisecond)
	_, endpoint, stop := startDriver(t, m, []string{drapb.DRAPluginService})
	stop()
	m.PluginHandler().DeRegisterPlugin(context.Background(), testDriver, endpoint)
	eventually(t, "the driver's wipe", func() bool { return slices.Equal(wipes.list(), []string{nodeSelector, driverSelector}) })
}

func TestSlicesWipedWhenDriverIsUnreachable(t *testing.T) {
	m, wipes := startWiping(t, 100*time.Millisecond)
	endpoint := filepath.Join(socketDir(t), "nobody.sock")
	if err := m.PluginHandler().RegisterPlugin(context.Background(), testDriver, endpoint, []string{drapb.DRAPluginService}, nil); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the driver's wipe", func() bool { return slices.Equal(wipes.list(), []string{nodeSelector, driverSelector}) })
}

func TestSlicesKeptWhenDriverComesBack(t *testing.T) {
	const delay = 300 * time.Millisecond
	m, wipes := startWiping(t, delay)
	_, endpoint, _ := startDriver(t, m, []string{drapb.DRAPluginService})
	// A new instance of the plugin replaces the old one on the same socket path.
	m.PluginHandler().DeRegisterPlugin(context.Background(), testDriver, endpoint)
	if err := m.PluginHandler().RegisterPlugin(context.Background(), testDriver, endpoint, []string{drapb.DRAPluginService}, nil); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * delay)
	if got := wipes.list(); !slices.Equal(got, []string{nodeSelector}) {
		t.Errorf("wipes = %q, want only the start-up one", got)
	}
}

func TestNoWipingWithoutAPIServer(t *testing.T) {
	m := newTestManager(t, nil, Options{NodeName: testNode, WipingDelay: time.Millisecond})
	if err := m.Start(context.Background(), noPods, nil); err != nil {
		t.Fatal(err)
	}
	endpoint := filepath.Join(socketDir(t), "nobody.sock")
	if err := m.PluginHandler().RegisterPlugin(context.Background(), testDriver, endpoint, []string{drapb.DRAPluginService}, nil); err != nil {
		t.Fatal(err)
	}
	m.PluginHandler().DeRegisterPlugin(context.Background(), testDriver, endpoint)
	m.registry.mu.RLock()
	defer m.registry.mu.RUnlock()
	if len(m.registry.wipes) != 0 {
		t.Errorf("wipes scheduled without a client: %v", m.registry.wipes)
	}
}

// The plugin watcher's handler interface (pkg/node/pluginwatcher.Handler), restated
// here so that this package does not import it.
var _ interface {
	ValidatePlugin(ctx context.Context, pluginName, endpoint string, versions []string) error
	RegisterPlugin(ctx context.Context, pluginName, endpoint string, versions []string, pluginClientTimeout *time.Duration) error
	DeRegisterPlugin(ctx context.Context, pluginName, endpoint string)
} = (*Registry)(nil)
