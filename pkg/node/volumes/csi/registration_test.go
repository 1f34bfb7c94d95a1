package csi

import (
	"context"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/nodelet/nodelet/pkg/node/pluginwatcher"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	ktesting "k8s.io/client-go/testing"
)

const (
	testNodeUID    = "node-uid-1"
	zoneKey        = "topology.example.com/zone"
	wantMigrations = "kubernetes.io/aws-ebs,kubernetes.io/azure-disk,kubernetes.io/azure-file,kubernetes.io/cinder,kubernetes.io/gce-pd,kubernetes.io/portworx-volume,kubernetes.io/vsphere-volume"
)

// Manager is the plugin watcher's handler for CSI drivers.
var _ pluginwatcher.Handler = (*Manager)(nil)

func testNodeObject() *v1.Node {
	return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: testNode, UID: testNodeUID, Labels: map[string]string{"kubernetes.io/hostname": testNode}}}
}

func newAPIManager(t *testing.T, objs ...runtime.Object) (*Manager, *fake.Clientset) {
	t.Helper()
	client := fake.NewClientset(objs...)
	return New(Config{RootDir: t.TempDir(), NodeName: testNode, Client: client}), client
}

func getNode(t *testing.T, client *fake.Clientset) *v1.Node {
	t.Helper()
	node, err := client.CoreV1().Nodes().Get(context.Background(), testNode, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return node
}

func getCSINode(t *testing.T, client *fake.Clientset) *storagev1.CSINode {
	t.Helper()
	csiNode, err := client.StorageV1().CSINodes().Get(context.Background(), testNode, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return csiNode
}

func TestValidatePluginVersions(t *testing.T) {
	m := New(Config{RootDir: t.TempDir(), NodeName: testNode})
	for _, tc := range []struct {
		versions []string
		wantErr  string
	}{
		{versions: nil, wantErr: `validation failed for CSI Driver d.example.com at endpoint /e.sock: kubernetes.io/csi: ValidatePlugin for CSI driver "d.example.com" failed. Plugin returned an empty list for supported versions`},
		{versions: []string{"0.3.0"}, wantErr: `None of the versions specified ["0.3.0"] are supported`},
		{versions: []string{"2.0.0"}, wantErr: `None of the versions specified ["2.0.0"] are supported`},
		{versions: []string{"v1"}, wantErr: `None of the versions specified`},
		{versions: []string{"1.0.0"}},
		{versions: []string{"0.3.0", "1.5.0", "2.0.0"}},
	} {
		err := m.ValidatePlugin(context.Background(), testDriver, "/e.sock", tc.versions)
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("versions %q: %v", tc.versions, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("versions %q: error %v, want one containing %q", tc.versions, err, tc.wantErr)
		}
	}
}

func TestRegisterTwiceNeedsNewerVersion(t *testing.T) {
	ctx := context.Background()
	old, newer := startFakeDriver(t), startFakeDriver(t)
	m := New(Config{RootDir: t.TempDir(), NodeName: testNode})
	if err := m.RegisterPlugin(ctx, testDriver, old.endpoint, []string{"1.0.0"}, nil); err != nil {
		t.Fatal(err)
	}
	wantErr := `kubernetes.io/csi: RegisterPlugin for CSI driver "d.example.com" failed. Another driver with the same name is already registered with a higher supported version: "1.0.0"`
	if err := m.RegisterPlugin(ctx, testDriver, newer.endpoint, []string{"1.0.0"}, nil); err == nil || err.Error() != wantErr {
		t.Fatalf("registering the same version again: %v, want %q", err, wantErr)
	}
	if err := m.ValidatePlugin(ctx, testDriver, newer.endpoint, []string{"1.0.0"}); err == nil {
		t.Fatal("validating the same version again succeeded")
	}
	if err := m.RegisterPlugin(ctx, testDriver, newer.endpoint, []string{"1.0.0", "1.2.0"}, nil); err != nil {
		t.Fatalf("registering a newer version: %v", err)
	}
	if got, _ := m.endpointOf(testDriver); got != newer.endpoint {
		t.Fatalf("endpoint %s, want the newer driver's %s", got, newer.endpoint)
	}

	// The replaced driver's socket going away must not unregister its successor.
	m.DeRegisterPlugin(ctx, testDriver, old.endpoint)
	if got := m.RegisteredDrivers(); !reflect.DeepEqual(got, []string{testDriver}) {
		t.Fatalf("after deregistering the old endpoint: drivers %v", got)
	}
	m.DeRegisterPlugin(ctx, testDriver, newer.endpoint)
	if got := m.RegisteredDrivers(); len(got) != 0 {
		t.Fatalf("after deregistering: drivers %v", got)
	}
}

func TestRegisterUpdatesNodeAndCSINode(t *testing.T) {
	ctx := context.Background()
	m, client := newAPIManager(t, testNodeObject())
	d1 := startFakeDriver(t)
	d1.nodeID, d1.maxVolumes, d1.topology = "n1", 5, map[string]string{zoneKey: "z1"}
	d2 := startFakeDriver(t)
	d2.nodeID = "n2"

	if err := m.RegisterPlugin(ctx, "a.example.com", d1.endpoint, []string{"1.0.0"}, nil); err != nil {
		t.Fatal(err)
	}
	if err := m.RegisterPlugin(ctx, "b.example.com", d2.endpoint, []string{"1.0.0"}, nil); err != nil {
		t.Fatal(err)
	}
	node := getNode(t, client)
	if got, want := node.Annotations[nodeIDAnnotation], `{"a.example.com":"n1","b.example.com":"n2"}`; got != want {
		t.Errorf("node ID annotation %s, want %s", got, want)
	}
	if node.Labels[zoneKey] != "z1" || node.Labels["kubernetes.io/hostname"] != testNode {
		t.Errorf("node labels %v", node.Labels)
	}
	csiNode := getCSINode(t, client)
	wantOwner := []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: testNode, UID: testNodeUID}}
	if !reflect.DeepEqual(csiNode.OwnerReferences, wantOwner) {
		t.Errorf("CSINode owners %+v, want %+v", csiNode.OwnerReferences, wantOwner)
	}
	if got := csiNode.Annotations[v1.MigratedPluginsAnnotationKey]; got != wantMigrations {
		t.Errorf("migrated plugins annotation %q", got)
	}
	wantDrivers := []storagev1.CSINodeDriver{
		{Name: "a.example.com", NodeID: "n1", TopologyKeys: []string{zoneKey}, Allocatable: &storagev1.VolumeNodeResources{Count: new(int32(5))}},
		{Name: "b.example.com", NodeID: "n2", TopologyKeys: []string{}},
	}
	if !reflect.DeepEqual(csiNode.Spec.Drivers, wantDrivers) {
		t.Errorf("CSINode drivers %+v, want %+v", csiNode.Spec.Drivers, wantDrivers)
	}

	// Deregistration removes the entry and the annotation key; labels stay.
	m.DeRegisterPlugin(ctx, "a.example.com", d1.endpoint)
	node = getNode(t, client)
	if got, want := node.Annotations[nodeIDAnnotation], `{"b.example.com":"n2"}`; got != want {
		t.Errorf("after deregistration: node ID annotation %s, want %s", got, want)
	}
	if node.Labels[zoneKey] != "z1" {
		t.Errorf("after deregistration: topology label removed: %v", node.Labels)
	}
	if got := getCSINode(t, client).Spec.Drivers; !reflect.DeepEqual(got, wantDrivers[1:]) {
		t.Errorf("after deregistration: CSINode drivers %+v", got)
	}
	m.DeRegisterPlugin(ctx, "b.example.com", d2.endpoint)
	if _, ok := getNode(t, client).Annotations[nodeIDAnnotation]; ok {
		t.Error("node ID annotation left with no driver registered")
	}
	if got := getCSINode(t, client).Spec.Drivers; len(got) != 0 {
		t.Errorf("CSINode drivers %+v, want none", got)
	}
}

func TestReRegistrationUpdatesEntry(t *testing.T) {
	ctx := context.Background()
	m, client := newAPIManager(t, testNodeObject())
	d := startFakeDriver(t)
	d.nodeID, d.maxVolumes = "n1", 5
	if err := m.RegisterPlugin(ctx, testDriver, d.endpoint, []string{"1.0.0"}, nil); err != nil {
		t.Fatal(err)
	}
	d.mu.Lock()
	d.nodeID, d.maxVolumes, d.topology = "n1-new", 0, map[string]string{zoneKey: "z1"}
	d.mu.Unlock()
	if err := m.RefreshDriver(ctx, testDriver); err != nil {
		t.Fatal(err)
	}
	want := []storagev1.CSINodeDriver{{Name: testDriver, NodeID: "n1-new", TopologyKeys: []string{zoneKey}}}
	if got := getCSINode(t, client).Spec.Drivers; !reflect.DeepEqual(got, want) {
		t.Errorf("CSINode drivers %+v, want %+v", got, want)
	}
}

func TestCSINodeDriverAllocatable(t *testing.T) {
	for _, tc := range []struct {
		max  int64
		want *int32
	}{
		{max: 0},
		{max: -3},
		{max: 7, want: new(int32(7))},
		{max: math.MaxInt32 + 10, want: new(int32(math.MaxInt32))},
	} {
		got := csiNodeDriver(testDriver, nodeInfo{nodeID: "n", maxVolumes: tc.max}).Allocatable
		switch {
		case tc.want == nil && got != nil:
			t.Errorf("max %d: allocatable %+v, want none", tc.max, got)
		case tc.want != nil && (got == nil || got.Count == nil || *got.Count != *tc.want):
			t.Errorf("max %d: allocatable %+v, want count %d", tc.max, got, *tc.want)
		}
	}
}

func TestRegistrationFailuresUnregister(t *testing.T) {
	ctx := context.Background()
	node := testNodeObject()
	node.Labels[zoneKey] = "other"
	for name, setUp := range map[string]func(d *fakeDriver){
		"empty node ID":       func(d *fakeDriver) { d.nodeID = "" },
		"topology collision":  func(d *fakeDriver) { d.topology = map[string]string{zoneKey: "z1"} },
		"NodeGetInfo failing": func(d *fakeDriver) { d.setErr("NodeGetInfo", status.Error(codes.Internal, "boom")) },
	} {
		t.Run(name, func(t *testing.T) {
			m, client := newAPIManager(t, node.DeepCopy())
			d := startFakeDriver(t)
			setUp(d)
			if err := m.RegisterPlugin(ctx, testDriver, d.endpoint, []string{"1.0.0"}, nil); err == nil {
				t.Fatal("registration succeeded")
			}
			if got := m.RegisteredDrivers(); len(got) != 0 {
				t.Errorf("drivers %v registered after failure", got)
			}
			if ann, ok := getNode(t, client).Annotations[nodeIDAnnotation]; ok {
				t.Errorf("node ID annotation %s after failure", ann)
			}
		})
	}
}

func TestRegistrationReplacesCSINodeOfFormerNode(t *testing.T) {
	ctx := context.Background()
	stale := &storagev1.CSINode{
		ObjectMeta: metav1.ObjectMeta{Name: testNode, OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: testNode, UID: "old-uid"}}},
		Spec:       storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{{Name: "gone.example.com", NodeID: "x"}}},
	}
	m, client := newAPIManager(t, testNodeObject(), stale)
	d := startFakeDriver(t)
	if err := m.RegisterPlugin(ctx, testDriver, d.endpoint, []string{"1.0.0"}, nil); err != nil {
		t.Fatal(err)
	}
	csiNode := getCSINode(t, client)
	if csiNode.OwnerReferences[0].UID != testNodeUID {
		t.Errorf("CSINode owner %+v, want the current node", csiNode.OwnerReferences)
	}
	if len(csiNode.Spec.Drivers) != 1 || csiNode.Spec.Drivers[0].Name != testDriver {
		t.Errorf("CSINode drivers %+v, want only %s", csiNode.Spec.Drivers, testDriver)
	}
}

func TestInitializeNode(t *testing.T) {
	ctx := context.Background()
	t.Run("creates the CSINode", func(t *testing.T) {
		m, client := newAPIManager(t, testNodeObject())
		if err := m.InitializeNode(ctx); err != nil {
			t.Fatal(err)
		}
		csiNode := getCSINode(t, client)
		if csiNode.Annotations[v1.MigratedPluginsAnnotationKey] != wantMigrations || csiNode.OwnerReferences[0].UID != testNodeUID {
			t.Errorf("CSINode %+v", csiNode.ObjectMeta)
		}
		if csiNode.Spec.Drivers == nil || len(csiNode.Spec.Drivers) != 0 {
			t.Errorf("drivers %#v, want an empty list", csiNode.Spec.Drivers)
		}
	})
	t.Run("annotates an existing CSINode", func(t *testing.T) {
		existing := &storagev1.CSINode{
			ObjectMeta: metav1.ObjectMeta{Name: testNode, OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: testNode, UID: testNodeUID}},
				Annotations: map[string]string{v1.MigratedPluginsAnnotationKey: "kubernetes.io/gce-pd"}},
			Spec: storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{{Name: testDriver, NodeID: "n"}}},
		}
		m, client := newAPIManager(t, testNodeObject(), existing)
		if err := m.InitializeNode(ctx); err != nil {
			t.Fatal(err)
		}
		csiNode := getCSINode(t, client)
		if csiNode.Annotations[v1.MigratedPluginsAnnotationKey] != wantMigrations {
			t.Errorf("annotation %q", csiNode.Annotations[v1.MigratedPluginsAnnotationKey])
		}
		if len(csiNode.Spec.Drivers) != 1 {
			t.Errorf("drivers %+v, want the existing one kept", csiNode.Spec.Drivers)
		}
	})
	t.Run("standalone", func(t *testing.T) {
		if err := New(Config{RootDir: t.TempDir(), NodeName: testNode}).InitializeNode(ctx); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("gives up when ctx ends", func(t *testing.T) {
		m, client := newAPIManager(t)
		client.PrependReactor("get", "csinodes", func(ktesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewServiceUnavailable("down")
		})
		ctx, cancel := context.WithCancel(ctx)
		cancel()
		if err := m.InitializeNode(ctx); !errors.Is(err, context.Canceled) {
			t.Fatalf("InitializeNode: %v, want context.Canceled", err)
		}
	})
}

func TestStandaloneRegistration(t *testing.T) {
	d := startFakeDriver(t, csipb.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME)
	m := newStandaloneManager(t, d)
	if got := m.RegisteredDrivers(); !reflect.DeepEqual(got, []string{testDriver}) {
		t.Fatalf("drivers %v", got)
	}
}
