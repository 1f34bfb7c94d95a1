package volumes

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/nodelet/nodelet/pkg/node/volumes/csi"
)

// fakeCSIObjects serves one VolumeAttachment and the node's volumesAttached.
type fakeCSIObjects struct {
	mu         sync.Mutex
	attached   []v1.AttachedVolume
	attachment *storagev1.VolumeAttachment
}

func (f *fakeCSIObjects) GetCSIDriver(context.Context, string) (*storagev1.CSIDriver, error) {
	return nil, nil
}

func (f *fakeCSIObjects) GetVolumeAttachment(_ context.Context, name string) (*storagev1.VolumeAttachment, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.attachment == nil || f.attachment.Name != name {
		return nil, apierrors.NewNotFound(schema.GroupResource{Group: "storage.k8s.io", Resource: "volumeattachments"}, name)
	}
	return f.attachment.DeepCopy(), nil
}

func (f *fakeCSIObjects) AttachedVolumes(context.Context, string) ([]v1.AttachedVolume, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.attached), nil
}

func (f *fakeCSIObjects) set(fn func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn()
}

func newCSITestManager(t *testing.T, objects CSIObjects) *Manager {
	t.Helper()
	m := newTestManager(t)
	m.SetCSI(csi.New(csi.Config{RootDir: m.rootDir, NodeName: "node1"}), objects, "node1")
	return m
}

// stageOnDisk leaves a staging directory with its vol_data.json, as a staged volume has.
func stageOnDisk(t *testing.T, m *Manager, driver, handle string) {
	t.Helper()
	dir := filepath.Join(m.rootDir, "plugins", "kubernetes.io", "csi", driver, "h-"+handle)
	if err := os.MkdirAll(filepath.Join(dir, "globalmount"), 0o750); err != nil {
		t.Fatal(err)
	}
	data := `{"driverName":"` + driver + `","volumeHandle":"` + handle + `"}`
	if err := os.WriteFile(filepath.Join(dir, "vol_data.json"), []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

// Volumes in use are the pods' wanted attachable volumes and what is staged on disk,
// except the volumes of drivers known not to need attaching.
func TestVolumesInUse(t *testing.T) {
	m := newCSITestManager(t, &fakeCSIObjects{})
	if got := m.VolumesInUse(); len(got) != 0 {
		t.Fatalf("in use on an empty node: %v", got)
	}
	stageOnDisk(t, m, "attach.example.com", "vol-b")
	stageOnDisk(t, m, "local.example.com", "vol-c")
	m.inUse.noteDriver("local.example.com", false)
	m.inUse.want("pod-1", csiUniqueVolumeName("attach.example.com", "vol-a"))
	want := []v1.UniqueVolumeName{"kubernetes.io/csi/attach.example.com^vol-a", "kubernetes.io/csi/attach.example.com^vol-b"}
	if got := m.VolumesInUse(); !slices.Equal(got, want) {
		t.Errorf("VolumesInUse = %v, want %v", got, want)
	}
	// The pod is gone; its volume was never mounted, so it is no longer in use.
	m.inUse.forget("pod-1")
	if got := m.VolumesInUse(); !slices.Equal(got, want[1:]) {
		t.Errorf("after the pod went: %v, want %v", got, want[1:])
	}
	// A driver not known yet counts as attachable: safer to keep its volume in use.
	m.inUse.noteDriver("local.example.com", true)
	if got := m.VolumesInUse(); len(got) != 2 {
		t.Errorf("with both drivers attachable: %v", got)
	}
}

// Standalone (no CSI drivers' API objects) nothing is in use.
func TestVolumesInUseStandalone(t *testing.T) {
	if got := newTestManager(t).VolumesInUse(); got != nil {
		t.Errorf("VolumesInUse = %v", got)
	}
}

// waitForAttach waits for volumesInUse, then volumesAttached, then the attachment, and
// asks for a status sync when the volume is new.
func TestWaitForAttach(t *testing.T) {
	objects := &fakeCSIObjects{}
	m := newCSITestManager(t, objects)
	syncs := make(chan struct{}, 4)
	m.SetVolumesInUseChanged(func() { syncs <- struct{}{} })
	src := &v1.CSIPersistentVolumeSource{Driver: "attach.example.com", VolumeHandle: "vol-a"}
	name := csiUniqueVolumeName(src.Driver, src.VolumeHandle)

	type result struct {
		publish map[string]string
		err     error
	}
	done := make(chan result, 1)
	go func() {
		p, err := m.waitForAttach(context.Background(), "pod-1", src)
		done <- result{p, err}
	}()
	select {
	case <-syncs:
	case <-time.After(5 * time.Second):
		t.Fatal("no status sync asked for a new volume")
	}
	steps := []func(){
		func() { m.MarkVolumesAsReportedInUse([]v1.UniqueVolumeName{name}) },
		func() { objects.set(func() { objects.attached = []v1.AttachedVolume{{Name: name}} }) },
		func() {
			objects.set(func() {
				objects.attachment = &storagev1.VolumeAttachment{}
				objects.attachment.Name = csi.AttachmentName(src.VolumeHandle, src.Driver, "node1")
			})
		},
		func() {
			objects.set(func() {
				objects.attachment.Status = storagev1.VolumeAttachmentStatus{Attached: true, AttachmentMetadata: map[string]string{"dev": "/dev/x"}}
			})
		},
	}
	for i, step := range steps {
		time.Sleep(2 * attachPollInterval)
		select {
		case r := <-done:
			t.Fatalf("returned before step %d: %v, %v", i, r.publish, r.err)
		default:
		}
		step()
	}
	select {
	case r := <-done:
		if r.err != nil || r.publish["dev"] != "/dev/x" {
			t.Errorf("waitForAttach = %v, %v; want the attachment's metadata", r.publish, r.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("waitForAttach did not return once attached")
	}
}

// A cancelled wait names what it was waiting for.
func TestWaitForAttachCancelled(t *testing.T) {
	m := newCSITestManager(t, &fakeCSIObjects{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	src := &v1.CSIPersistentVolumeSource{Driver: "attach.example.com", VolumeHandle: "vol-a"}
	_, err := m.waitForAttach(ctx, "pod-1", src)
	if err == nil || !strings.Contains(err.Error(), "has not been added to the list of VolumesInUse") {
		t.Errorf("error %v, want the volumesInUse reason", err)
	}
}

// The tokens a CSIDriver asks for are issued bound to the pod, by audience; an empty
// audience asks for the API server's.
func TestCSITokens(t *testing.T) {
	m := newCSITestManager(t, &fakeCSIObjects{})
	m.SetAPI(API{Tokens: &fakeAPI{}})
	pod := newPod("uid-1")
	pod.Spec.ServiceAccountName = "sa"
	ten := int64(600)
	tokens, err := m.csiTokens(context.Background(), pod, csiDriverInfo{tokenRequests: []storagev1.TokenRequest{{Audience: "vault", ExpirationSeconds: &ten}, {}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(tokens) != 2 || tokens["vault"].Token != "token-of-ns1/sa-for-web" || tokens[""].Token == "" {
		t.Errorf("tokens %v", tokens)
	}
	if none, err := m.csiTokens(context.Background(), pod, csiDriverInfo{}); none != nil || err != nil {
		t.Errorf("no token requests: %v, %v", none, err)
	}
}
