package podmanager

import (
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodelet/nodelet/pkg/kubetypes"
)

func pod(name, uid string, annotations map[string]string) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID(uid), Annotations: annotations}}
}

func TestMirrorPodsAreKeptApartFromPods(t *testing.T) {
	m := New()
	static := pod("etcd-n1", "static-1", map[string]string{kubetypes.ConfigHashAnnotationKey: "h1", "kubernetes.io/config.source": "file"})
	mirror := pod("etcd-n1", "mirror-1", map[string]string{kubetypes.ConfigMirrorAnnotationKey: "h1"})
	m.AddPod(static)
	m.AddPod(mirror)

	if pods := m.GetPods(); len(pods) != 1 || pods[0].UID != "static-1" {
		t.Fatalf("GetPods = %v, want only the static pod", pods)
	}
	if p, ok := m.GetPodByName("ns", "etcd-n1"); !ok || p.UID != "static-1" {
		t.Errorf("GetPodByName found %v, want the static pod", p)
	}
	if got, ok := m.GetMirrorPodByPod(static); !ok || got.UID != "mirror-1" {
		t.Errorf("GetMirrorPodByPod = %v, %v", got, ok)
	}
	if got, ok := m.GetPodByMirrorPod(mirror); !ok || got.UID != "static-1" {
		t.Errorf("GetPodByMirrorPod = %v, %v", got, ok)
	}
	if got := m.TranslatePodUID("mirror-1"); got != "static-1" {
		t.Errorf("TranslatePodUID(mirror) = %q, want the static pod's UID", got)
	}
	if got := m.TranslatePodUID("other"); got != "other" {
		t.Errorf("TranslatePodUID(other) = %q, want it unchanged", got)
	}
	if !IsMirrorPodOf(mirror, static) {
		t.Error("mirror with the static pod's hash is not recognised")
	}
	outdated := pod("etcd-n1", "mirror-0", map[string]string{kubetypes.ConfigMirrorAnnotationKey: "h0"})
	if IsMirrorPodOf(outdated, static) {
		t.Error("a mirror of another hash counts as the static pod's mirror")
	}
	if names := m.GetOrphanedMirrorPodNames(); len(names) != 0 {
		t.Errorf("orphans %v while the static pod exists", names)
	}

	m.RemovePod(static)
	if names := m.GetOrphanedMirrorPodNames(); len(names) != 1 || names[0] != "etcd-n1_ns" {
		t.Errorf("orphans = %v, want [etcd-n1_ns]", names)
	}
	m.RemovePod(mirror)
	if _, ok := m.GetMirrorPodByPod(static); ok {
		t.Error("removed mirror pod still found")
	}
}

func TestReplacedPodOfTheSameNameForgetsTheOldUID(t *testing.T) {
	m := New()
	m.AddPod(pod("web", "old", nil))
	m.AddPod(pod("web", "new", nil))
	if _, ok := m.GetPodByUID("old"); ok {
		t.Error("old UID still known after a pod of the same name replaced it")
	}
	m.RemovePod(pod("web", "old", nil))
	if p, ok := m.GetPodByName("ns", "web"); !ok || p.UID != "new" {
		t.Errorf("removing the old UID dropped the new pod: %v", p)
	}
}

// GetPods keeps its sorted answer until the pods change; callers own what it returns.
func TestGetPodsFollowsChangesAndHandsOutCopies(t *testing.T) {
	m := New()
	uids := func() []types.UID {
		var out []types.UID
		for _, p := range m.GetPods() {
			out = append(out, p.UID)
		}
		return out
	}
	at := func(p *v1.Pod, sec int64) *v1.Pod {
		p.CreationTimestamp = metav1.Unix(sec, 0)
		return p
	}
	m.AddPod(at(pod("b", "b", nil), 2))
	m.AddPod(at(pod("a", "a", nil), 2))
	m.AddPod(at(pod("old", "old", nil), 1))
	if got := uids(); !slices.Equal(got, []types.UID{"old", "a", "b"}) {
		t.Fatalf("GetPods = %v, want oldest first, then by name", got)
	}
	pods := m.GetPods()
	pods[0] = nil
	slices.Reverse(pods)
	if got := uids(); !slices.Equal(got, []types.UID{"old", "a", "b"}) {
		t.Fatalf("GetPods = %v after a caller changed its copy", got)
	}
	m.RemovePod(pod("a", "a", nil))
	m.UpdatePod(at(pod("b", "b2", nil), 0))
	if got := uids(); !slices.Equal(got, []types.UID{"b2", "old"}) {
		t.Fatalf("GetPods = %v after a removal and a replacement", got)
	}
}
