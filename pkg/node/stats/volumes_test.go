package stats

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// Claims report their volume's filesystem and name their claim (pvcRef), as upstream's
// local volume plugin and volume stats calculator do: a local volume mounted in the
// pod's directory is measured with statfs, a hostPath one used in place is not, and a
// claim not mounted yet is left out.
func TestClaimVolumeStats(t *testing.T) {
	root := t.TempDir()
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "ns", UID: "u1"}, Spec: v1.PodSpec{Volumes: []v1.Volume{
		{Name: "data", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "data-db-0"}}},
		{Name: "scratch", VolumeSource: v1.VolumeSource{Ephemeral: &v1.EphemeralVolumeSource{}}},
		{Name: "host", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "on-host"}}},
		{Name: "pending", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "unbound"}}},
	}}}
	local := filepath.Join(root, "pods", "u1", "volumes", "kubernetes.io~local-volume")
	mounted := map[string]string{
		"data":    filepath.Join(local, "pv-a"),
		"scratch": filepath.Join(local, "pv-b"),
		"host":    t.TempDir(), // a hostPath persistent volume, used where it is
	}
	for _, dir := range mounted {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	src := volumeSources{rootDir: root, claimPath: func(p *v1.Pod, name string) (string, bool) {
		if p != pod {
			t.Errorf("asked about pod %v", p)
		}
		path, ok := mounted[name]
		return path, ok
	}}
	now := time.Unix(1790000000, 0)
	got := podVolumes(pod, src, nil, func() time.Time { return now })
	if len(got.ephemeral) != 0 || len(got.persistent) != 2 {
		t.Fatalf("volumes %+v, want the two local claims, persistent", got)
	}
	fs, err := statFS(root, now)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []struct{ volume, claim string }{{"data", "data-db-0"}, {"scratch", "db-scratch"}} {
		vs := got.persistent[i]
		if vs.Name != want.volume || vs.PVCRef == nil || *vs.PVCRef != (statsapi.PVCReference{Name: want.claim, Namespace: "ns"}) {
			t.Errorf("volume %d: %s with claim %+v, want %s with claim ns/%s", i, vs.Name, vs.PVCRef, want.volume, want.claim)
		}
		if *vs.CapacityBytes != fs.capacity || *vs.Inodes != fs.inodes || vs.UsedBytes == nil || vs.InodesUsed == nil ||
			vs.AvailableBytes == nil || vs.InodesFree == nil || !vs.Time.Time.Equal(now) {
			t.Errorf("volume %s: %+v, want its filesystem's statfs figures at %v", vs.Name, vs.FsStats, now)
		}
	}

	// Without a volume manager to ask, claims are left out.
	if got := podVolumes(pod, volumeSources{rootDir: root}, nil, func() time.Time { return now }); len(got.persistent) != 0 {
		t.Errorf("without ClaimPath: %+v", got.persistent)
	}
}

// ListPodStats, what /metrics' volume and log collectors read, has the summary's pods.
func TestListPodStatsIsTheSummarysPods(t *testing.T) {
	f := newPodFixture(t, procFixture(t, ""), cgroupV1Fixture(t), "")
	pods, err := f.p.ListPodStats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	s, err := f.p.Get(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(pods) != len(s.Pods) || len(pods) == 0 {
		t.Fatalf("ListPodStats has %d pods, the summary %d", len(pods), len(s.Pods))
	}
	web := podByName(t, pods, "web")
	if len(web.Containers) == 0 || web.Containers[0].Logs == nil {
		t.Errorf("web's containers %+v lack their log stats", web.Containers)
	}
}
