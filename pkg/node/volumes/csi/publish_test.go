package csi

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"syscall"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// attachment1 is AttachmentName("vol-1", "d.example.com", "node-1"): "csi-" and
// sha256("vol-1d.example.comnode-1").
const attachment1 = "csi-4499ee017ffbd7c27adcaf4b6d7385ae0ab9c5fa487205ab041ef1825c4e8e71"

func persistentRequest() PublishRequest {
	return PublishRequest{
		Driver: testDriver, VolumeHandle: "vol-1", PodUID: "uid-1", SpecName: "pv-1",
		Capability:     VolumeCapability{FSType: "ext4", MountFlags: []string{"noatime"}, AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce}},
		PublishContext: map[string]string{"devicePath": "/dev/xvdb"},
		VolumeContext:  map[string]string{"attr": "1"},
		Secrets:        map[string]string{"key": "secret"},
	}
}

func TestPathsAndHandles(t *testing.T) {
	m := New(Config{RootDir: "/var/lib/kubelet"})
	if got, want := m.TargetPath("uid-1", "pv-1"), "/var/lib/kubelet/pods/uid-1/volumes/kubernetes.io~csi/pv-1/mount"; got != want {
		t.Errorf("TargetPath = %s, want %s", got, want)
	}
	if got := AttachmentName("vol-1", testDriver, testNode); got != attachment1 {
		t.Errorf("AttachmentName = %s, want %s", got, attachment1)
	}
	// sha256("uid-1inline")
	if got, want := EphemeralVolumeHandle("uid-1", "inline"), "csi-fa93c84a653239e9b4b90d6a3a772a15ad4f6edddc842c6de9db5478e79bbd5b"; got != want {
		t.Errorf("EphemeralVolumeHandle = %s, want %s", got, want)
	}
}

func TestPublishPersistent(t *testing.T) {
	d := startFakeDriver(t, stageCap()...)
	m := newStandaloneManager(t, d)
	req := persistentRequest()
	req.ReadOnly = true
	req.PodInfo = &PodInfo{Name: "web", Namespace: "ns", UID: "uid-1", ServiceAccountName: "sa"}
	target, err := m.Publish(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(m.rootDir, "pods/uid-1/volumes/kubernetes.io~csi/pv-1/mount"); target != want {
		t.Errorf("target %s, want %s", target, want)
	}
	want := &csipb.NodePublishVolumeRequest{
		VolumeId:          "vol-1",
		PublishContext:    map[string]string{"devicePath": "/dev/xvdb"},
		StagingTargetPath: m.StagingPath(testDriver, "vol-1"),
		TargetPath:        target,
		VolumeCapability: &csipb.VolumeCapability{
			AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{FsType: "ext4", MountFlags: []string{"noatime"}}},
			AccessMode: &csipb.VolumeCapability_AccessMode{Mode: csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		},
		Readonly: true,
		Secrets:  map[string]string{"key": "secret"},
		VolumeContext: map[string]string{
			"attr":                                   "1",
			"csi.storage.k8s.io/pod.name":            "web",
			"csi.storage.k8s.io/pod.namespace":       "ns",
			"csi.storage.k8s.io/pod.uid":             "uid-1",
			"csi.storage.k8s.io/serviceAccount.name": "sa",
			"csi.storage.k8s.io/ephemeral":           "false",
		},
	}
	if got := received[*csipb.NodePublishVolumeRequest](d); len(got) != 1 || !proto.Equal(got[0], want) {
		t.Fatalf("NodePublishVolume requests %v, want %v", got, want)
	}
	wantData := `{"attachmentID":"` + attachment1 + `","driverName":"d.example.com","nodeName":"node-1","specVolID":"pv-1","volumeHandle":"vol-1","volumeLifecycleMode":"Persistent"}` + "\n"
	if got := readFile(t, filepath.Join(filepath.Dir(target), "vol_data.json")); got != wantData {
		t.Errorf("vol_data.json = %q, want %q", got, wantData)
	}
	if !reflect.DeepEqual(req.VolumeContext, map[string]string{"attr": "1"}) {
		t.Errorf("caller's volume context changed to %v", req.VolumeContext)
	}
}

func TestPublishWithoutStaging(t *testing.T) {
	d := startFakeDriver(t)
	m := newStandaloneManager(t, d)
	if _, err := m.Publish(context.Background(), persistentRequest()); err != nil {
		t.Fatal(err)
	}
	if got := received[*csipb.NodePublishVolumeRequest](d)[0].GetStagingTargetPath(); got != "" {
		t.Errorf("staging path %q sent to a driver that does not stage", got)
	}
}

func TestPublishEphemeral(t *testing.T) {
	d := startFakeDriver(t, stageCap()...)
	m := newStandaloneManager(t, d)
	handle := EphemeralVolumeHandle("uid-1", "inline")
	req := PublishRequest{
		Driver: testDriver, VolumeHandle: handle, PodUID: "uid-1", SpecName: "inline", Ephemeral: true,
		Capability:     VolumeCapability{FSType: "ext4", MountFlags: []string{"ignored"}, AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadOnlyMany}},
		PublishContext: map[string]string{"ignored": "x"},
		PodInfo:        &PodInfo{Name: "web", Namespace: "ns", UID: "uid-1", ServiceAccountName: "sa"},
	}
	target, err := m.Publish(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	got := received[*csipb.NodePublishVolumeRequest](d)[0]
	want := &csipb.NodePublishVolumeRequest{
		VolumeId:   handle,
		TargetPath: target,
		VolumeCapability: &csipb.VolumeCapability{
			AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{FsType: "ext4"}},
			AccessMode: &csipb.VolumeCapability_AccessMode{Mode: csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		},
		VolumeContext: map[string]string{
			"csi.storage.k8s.io/pod.name":            "web",
			"csi.storage.k8s.io/pod.namespace":       "ns",
			"csi.storage.k8s.io/pod.uid":             "uid-1",
			"csi.storage.k8s.io/serviceAccount.name": "sa",
			"csi.storage.k8s.io/ephemeral":           "true",
		},
	}
	if !proto.Equal(got, want) {
		t.Fatalf("NodePublishVolume request %v, want %v", got, want)
	}
	wantData := `{"attachmentID":"` + AttachmentName(handle, testDriver, testNode) + `","driverName":"d.example.com","nodeName":"node-1","specVolID":"inline","volumeHandle":"` + handle + `","volumeLifecycleMode":"Ephemeral"}` + "\n"
	if got := readFile(t, filepath.Join(filepath.Dir(target), "vol_data.json")); got != wantData {
		t.Errorf("vol_data.json = %q, want %q", got, wantData)
	}
}

func TestPublishServiceAccountTokens(t *testing.T) {
	tokens := map[string]authenticationv1.TokenRequestStatus{
		"aud": {Token: "tok", ExpirationTimestamp: metav1.NewTime(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))},
	}
	const wantTokens = `{"aud":{"token":"tok","expirationTimestamp":"2030-01-01T00:00:00Z"}}`
	for _, inSecrets := range []bool{false, true} {
		d := startFakeDriver(t)
		m := newStandaloneManager(t, d)
		req := persistentRequest()
		req.ServiceAccountTokens, req.TokensInSecrets = tokens, inSecrets
		if _, err := m.Publish(context.Background(), req); err != nil {
			t.Fatal(err)
		}
		got := received[*csipb.NodePublishVolumeRequest](d)[0]
		inContext, inSecret := got.VolumeContext["csi.storage.k8s.io/serviceAccount.tokens"], got.Secrets["csi.storage.k8s.io/serviceAccount.tokens"]
		if inSecrets && (inSecret != wantTokens || inContext != "" || got.Secrets["key"] != "secret") {
			t.Errorf("tokens in secrets: secrets %v, context %v", got.Secrets, got.VolumeContext)
		}
		if !inSecrets && (inContext != wantTokens || inSecret != "") {
			t.Errorf("tokens in context: secrets %v, context %v", got.Secrets, got.VolumeContext)
		}
	}
}

func TestPublishSELinuxContext(t *testing.T) {
	d := startFakeDriver(t)
	m := newStandaloneManager(t, d)
	req := persistentRequest()
	req.SELinuxMountContext = seLinuxContext
	target, err := m.Publish(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	flags := received[*csipb.NodePublishVolumeRequest](d)[0].GetVolumeCapability().GetMount().GetMountFlags()
	if want := []string{"noatime", `context="` + seLinuxContext + `"`}; !reflect.DeepEqual(flags, want) {
		t.Errorf("mount flags %q, want %q", flags, want)
	}
	data, err := readVolumeData(filepath.Dir(target))
	if err != nil || data.SELinuxMountContext != seLinuxContext {
		t.Errorf("vol_data.json %+v (%v), want the SELinux context", data, err)
	}
}

func TestPublishFSGroup(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("changing a file's group needs root")
	}
	const gid = 4321
	for _, tc := range []struct {
		name           string
		caps           []csipb.NodeServiceCapability_RPC_Type
		policy         storagev1.FSGroupPolicy
		wantGID        uint32
		wantMountGroup string
	}{
		{name: "File policy", policy: storagev1.FileFSGroupPolicy, wantGID: gid},
		{name: "default policy, RWO with fsType", wantGID: gid},
		{name: "None policy", policy: storagev1.NoneFSGroupPolicy, wantGID: 0},
		{name: "driver applies it", caps: []csipb.NodeServiceCapability_RPC_Type{csipb.NodeServiceCapability_RPC_VOLUME_MOUNT_GROUP}, policy: storagev1.FileFSGroupPolicy, wantGID: 0, wantMountGroup: "4321"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := startFakeDriver(t, tc.caps...)
			m := newStandaloneManager(t, d)
			req := persistentRequest()
			req.FSGroup, req.FSGroupPolicy = new(int64(gid)), tc.policy
			target, err := m.Publish(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			st, err := os.Stat(filepath.Join(target, "published"))
			if err != nil {
				t.Fatal(err)
			}
			if got := st.Sys().(*syscall.Stat_t).Gid; got != tc.wantGID {
				t.Errorf("published file's group %d, want %d", got, tc.wantGID)
			}
			if got := received[*csipb.NodePublishVolumeRequest](d)[0].GetVolumeCapability().GetMount().GetVolumeMountGroup(); got != tc.wantMountGroup {
				t.Errorf("volume_mount_group %q, want %q", got, tc.wantMountGroup)
			}
		})
	}
}

func TestKubeletAppliesFSGroup(t *testing.T) {
	rwo, rox := []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce}, []v1.PersistentVolumeAccessMode{v1.ReadOnlyMany}
	group := new(int64(1))
	for _, tc := range []struct {
		name string
		req  PublishRequest
		want bool
	}{
		{name: "no fsGroup", req: PublishRequest{Capability: VolumeCapability{FSType: "ext4", AccessModes: rwo}}},
		{name: "read-only", req: PublishRequest{FSGroup: group, ReadOnly: true, FSGroupPolicy: storagev1.FileFSGroupPolicy}},
		{name: "File without fsType", req: PublishRequest{FSGroup: group, FSGroupPolicy: storagev1.FileFSGroupPolicy}, want: true},
		{name: "default without fsType", req: PublishRequest{FSGroup: group, Capability: VolumeCapability{AccessModes: rwo}}},
		{name: "default RWO", req: PublishRequest{FSGroup: group, Capability: VolumeCapability{FSType: "ext4", AccessModes: rwo}}, want: true},
		{name: "default ROX", req: PublishRequest{FSGroup: group, Capability: VolumeCapability{FSType: "ext4", AccessModes: rox}}},
		{name: "default, no access modes", req: PublishRequest{FSGroup: group, Capability: VolumeCapability{FSType: "ext4"}}},
		{name: "default inline", req: PublishRequest{FSGroup: group, Ephemeral: true, Capability: VolumeCapability{FSType: "ext4"}}, want: true},
	} {
		if got := kubeletAppliesFSGroup(tc.req); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestPublishFailure(t *testing.T) {
	for _, tc := range []struct {
		name      string
		err       error
		remount   bool
		wantClean bool
	}{
		{name: "final", err: status.Error(codes.InvalidArgument, "bad"), wantClean: true},
		{name: "uncertain", err: status.Error(codes.DeadlineExceeded, "slow")},
		{name: "final on remount", err: status.Error(codes.Internal, "bad"), remount: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := startFakeDriver(t)
			d.setErr("NodePublishVolume", tc.err)
			m := newStandaloneManager(t, d)
			req := persistentRequest()
			req.Remount = tc.remount
			_, err := m.Publish(context.Background(), req)
			if err == nil || IsUncertain(err) != (status.Code(tc.err) == codes.DeadlineExceeded) {
				t.Fatalf("Publish error %v (uncertain %v)", err, IsUncertain(err))
			}
			volDir := filepath.Dir(m.TargetPath("uid-1", "pv-1"))
			if tc.wantClean {
				assertMissing(t, volDir)
			} else {
				assertExists(t, filepath.Join(volDir, "vol_data.json"))
			}
		})
	}
}

func TestUnpublish(t *testing.T) {
	ctx := context.Background()
	d := startFakeDriver(t)
	m := newStandaloneManager(t, d)
	target, err := m.Publish(ctx, persistentRequest())
	if err != nil {
		t.Fatal(err)
	}
	for range 2 { // idempotent
		if err := m.Unpublish(ctx, "uid-1", "pv-1"); err != nil {
			t.Fatal(err)
		}
	}
	want := &csipb.NodeUnpublishVolumeRequest{VolumeId: "vol-1", TargetPath: target}
	if got := received[*csipb.NodeUnpublishVolumeRequest](d); len(got) != 1 || !proto.Equal(got[0], want) {
		t.Errorf("NodeUnpublishVolume requests %v, want one %v", got, want)
	}
	assertMissing(t, filepath.Dir(target))
	assertExists(t, filepath.Join(m.rootDir, "pods/uid-1/volumes/kubernetes.io~csi"))
}

func TestUnpublishCleansUpAfterDriver(t *testing.T) {
	ctx := context.Background()
	for name, setUp := range map[string]func(d *fakeDriver, target string){
		// The driver leaves the unmounted target behind.
		"target kept": func(d *fakeDriver, _ string) { d.keepTarget = true },
		// The driver no longer knows the volume.
		"NOT_FOUND": func(d *fakeDriver, target string) {
			d.setErr("NodeUnpublishVolume", status.Error(codes.NotFound, "gone"))
			if err := removeIfExists(filepath.Join(target, "published")); err != nil {
				t.Fatal(err)
			}
		},
	} {
		t.Run(name, func(t *testing.T) {
			d := startFakeDriver(t)
			m := newStandaloneManager(t, d)
			target, err := m.Publish(ctx, persistentRequest())
			if err != nil {
				t.Fatal(err)
			}
			setUp(d, target)
			if err := m.Unpublish(ctx, "uid-1", "pv-1"); err != nil {
				t.Fatal(err)
			}
			assertMissing(t, filepath.Dir(target))
		})
	}
}

func TestUnpublishFailureKeepsData(t *testing.T) {
	ctx := context.Background()
	d := startFakeDriver(t)
	m := newStandaloneManager(t, d)
	target, err := m.Publish(ctx, persistentRequest())
	if err != nil {
		t.Fatal(err)
	}
	d.setErr("NodeUnpublishVolume", status.Error(codes.Internal, "boom"))
	if err := m.Unpublish(ctx, "uid-1", "pv-1"); status.Code(err) != codes.Internal {
		t.Fatalf("Unpublish: %v", err)
	}
	assertExists(t, filepath.Join(filepath.Dir(target), "vol_data.json"))
}

func TestUnpublishWithoutVolumeData(t *testing.T) {
	m := New(Config{RootDir: t.TempDir(), NodeName: testNode})
	target := m.TargetPath("uid-1", "orphan")
	if err := os.MkdirAll(target, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := m.Unpublish(context.Background(), "uid-1", "orphan"); err != nil {
		t.Fatal(err)
	}
	assertMissing(t, filepath.Dir(target))
}
