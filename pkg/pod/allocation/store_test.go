package allocation

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
)

func cpuRequest(q string) v1.ResourceRequirements {
	return v1.ResourceRequirements{Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse(q)}}
}

func TestStoreSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	s, err := NewStore(dir, AllocatedPodsStateFile)
	if err != nil {
		t.Fatal(err)
	}
	plr := cpuRequest("2")
	if err := s.Set("pod1", PodResourceInfo{ContainerResources: map[string]v1.ResourceRequirements{"a": cpuRequest("500m")}, PodLevelResources: &plr}); err != nil {
		t.Fatal(err)
	}
	if err := s.SetContainer("pod1", "b", cpuRequest("250m")); err != nil {
		t.Fatal(err)
	}
	if err := s.SetContainer("pod2", "c", cpuRequest("1")); err != nil {
		t.Fatal(err)
	}
	s.Remove("pod2") // written with the next change only

	restored, err := NewStore(dir, AllocatedPodsStateFile)
	if err != nil {
		t.Fatal(err)
	}
	a, okA := restored.Container("pod1", "a")
	b, okB := restored.Container("pod1", "b")
	level, okL := restored.PodLevel("pod1")
	if !okA || !okB || !okL || a.Requests.Cpu().MilliValue() != 500 || b.Requests.Cpu().MilliValue() != 250 || level.Requests.Cpu().MilliValue() != 2000 {
		t.Fatalf("restored %v %v %v", a, b, level)
	}
	if !restored.Has("pod2") {
		t.Fatal("a removal was written before the next change")
	}
	if err := s.SetContainer("pod1", "a", cpuRequest("600m")); err != nil {
		t.Fatal(err)
	}
	if restored, _ = NewStore(dir, AllocatedPodsStateFile); restored.Has("pod2") {
		t.Fatal("a removal was not written with the next change")
	}
}

// The checkpoint format and checksum are upstream's: a checkpoint written by upstream's
// kubelet (from its own test data) restores, and a corrupted one is refused.
func TestStoreReadsUpstreamCheckpoints(t *testing.T) {
	dir := t.TempDir()
	upstream := `{"data":"{\"entries\":{\"pod1\":{\"ContainerResources\":{\"container1\":{\"requests\":{\"cpu\":\"1Ki\",\"memory\":\"1Ki\"}}}}}}","checksum":1178570812}`
	path := filepath.Join(dir, AllocatedPodsStateFile)
	if err := os.WriteFile(path, []byte(upstream), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := NewStore(dir, AllocatedPodsStateFile)
	if err != nil {
		t.Fatal(err)
	}
	r, ok := s.Container("pod1", "container1")
	if !ok || r.Requests.Memory().Value() != 1024 {
		t.Fatalf("restored %v", r)
	}

	if err := os.WriteFile(path, []byte(strings.Replace(upstream, "1178570812", "1178570813", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := NewStore(dir, AllocatedPodsStateFile); err == nil || !strings.Contains(err.Error(), "please drain this node") {
		t.Fatalf("corrupted checkpoint: err %v", err)
	}
}

func TestStoreGetReturnsCopies(t *testing.T) {
	s := NewMemoryStore()
	if err := s.SetContainer("p", "a", cpuRequest("1")); err != nil {
		t.Fatal(err)
	}
	got, _ := s.Get("p")
	got.ContainerResources["a"].Requests[v1.ResourceCPU] = resource.MustParse("3")
	if r, _ := s.Container("p", "a"); r.Requests.Cpu().MilliValue() != 1000 {
		t.Fatal("changing a returned value changed the store")
	}
}

// The checkpoint's data is assembled from each pod's entry encoded when it changed: it
// must stay exactly what encoding/json makes of all the entries, which upstream reads.
func TestCheckpointDataIsJSONOfAllEntries(t *testing.T) {
	s, err := NewStore(t.TempDir(), AllocatedPodsStateFile)
	if err != nil {
		t.Fatal(err)
	}
	if data, _ := s.encodeEntries(); data != "{}" {
		t.Fatalf("empty store: %s", data)
	}
	cpu := func(m string) v1.ResourceRequirements {
		return v1.ResourceRequirements{Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse(m)}}
	}
	for _, uid := range []types.UID{"c-3", "a-1", "b-2"} {
		if err := s.SetContainer(uid, "app", cpu("100m")); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.SetContainer("a-1", "side", cpu("50m")); err != nil {
		t.Fatal(err)
	}
	if err := s.SetPodLevel("b-2", &v1.ResourceRequirements{Limits: v1.ResourceList{v1.ResourceMemory: resource.MustParse("64Mi")}}); err != nil {
		t.Fatal(err)
	}
	s.Remove("c-3")
	want, err := json.Marshal(checkpointEntries{Entries: s.pods})
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.encodeEntries()
	if err != nil || got != string(want) {
		t.Fatalf("data\n%s\nwant\n%s (%v)", got, want, err)
	}
}
