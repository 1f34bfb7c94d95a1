package topologymanager

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// pref and nonPref are hints on the given NUMA nodes; with no nodes, hints with no
// affinity.
func pref(ids ...int) TopologyHint    { return TopologyHint{MustMask(ids...), true} }
func nonPref(ids ...int) TopologyHint { return TopologyHint{MustMask(ids...), false} }

// hints is one provider's answer: resource name to hints.
type hints = map[string][]TopologyHint

func showHint(h TopologyHint) string {
	return fmt.Sprintf("{%s %v}", h.NUMANodeAffinity.Pretty(), h.Preferred)
}

// fakeProvider records its calls in a shared log, with the affinity the store gives
// the container when Allocate is called.
type fakeProvider struct {
	name string
	log  *[]string
	// store is read at Allocate; nil skips it.
	store Store
	// containerHints by container name; missing names have no preference.
	containerHints map[string]hints
	podHints       hints
	// allocateErr by container name.
	allocateErr map[string]error
}

func (p *fakeProvider) GetTopologyHints(pod *v1.Pod, c *v1.Container) map[string][]TopologyHint {
	*p.log = append(*p.log, fmt.Sprintf("%s.hints(%s)", p.name, c.Name))
	return p.containerHints[c.Name]
}

func (p *fakeProvider) GetPodTopologyHints(pod *v1.Pod) map[string][]TopologyHint {
	*p.log = append(*p.log, p.name+".podHints")
	return p.podHints
}

func (p *fakeProvider) Allocate(pod *v1.Pod, c *v1.Container) error {
	affinity := "-"
	if p.store != nil {
		affinity = showHint(p.store.GetAffinity(string(pod.UID), c.Name))
	}
	*p.log = append(*p.log, fmt.Sprintf("%s.allocate(%s %s)", p.name, c.Name, affinity))
	return p.allocateErr[c.Name]
}

// testPod has a regular init container, a sidecar and an app container.
func testPod(name string) *v1.Pod {
	always := v1.ContainerRestartPolicyAlways
	pod := &v1.Pod{Spec: v1.PodSpec{
		InitContainers: []v1.Container{{Name: "init"}, {Name: "sidecar", RestartPolicy: &always}},
		Containers:     []v1.Container{{Name: "app"}},
	}}
	pod.UID = types.UID("uid-" + name)
	pod.Name = name
	return pod
}

// writeFile writes content under root, making the directories.
func writeFile(t *testing.T, root, path, content string) {
	t.Helper()
	full := filepath.Join(root, path)
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// fakeSysfs makes a sysfs tree whose NUMA nodes have the given distance rows (a nil
// row: no distance file).
func fakeSysfs(t *testing.T, rows map[int][]uint64) string {
	t.Helper()
	root := t.TempDir()
	writeFile(t, root, "devices/system/node/online", "0\n")
	for id, row := range rows {
		dir := fmt.Sprintf("devices/system/node/node%d", id)
		if row == nil {
			writeFile(t, root, dir+"/cpulist", "0\n")
			continue
		}
		fields := make([]string, len(row))
		for i, d := range row {
			fields[i] = fmt.Sprint(d)
		}
		writeFile(t, root, dir+"/distance", strings.Join(fields, " ")+"\n")
	}
	return root
}

// numaOf is a NUMAInfo with nodes 0..n-1 and no distances.
func numaOf(n int) *NUMAInfo {
	info := &NUMAInfo{Distances: NUMADistances{}}
	for id := range n {
		info.Nodes = append(info.Nodes, id)
		info.Distances[id] = nil
	}
	return info
}

// fourNodes and eightNodes have upstream's test distance matrices: pairs of close
// nodes, and on eight nodes two far apart groups of four.
func fourNodes() *NUMAInfo {
	return &NUMAInfo{Nodes: []int{0, 1, 2, 3}, Distances: NUMADistances{
		0: {10, 11, 12, 12},
		1: {11, 10, 12, 12},
		2: {12, 12, 10, 11},
		3: {12, 12, 11, 10},
	}}
}

func eightNodes() *NUMAInfo {
	return &NUMAInfo{Nodes: []int{0, 1, 2, 3, 4, 5, 6, 7}, Distances: NUMADistances{
		0: {10, 11, 12, 12, 30, 30, 30, 30},
		1: {11, 10, 12, 12, 30, 30, 30, 30},
		2: {12, 12, 10, 11, 30, 30, 30, 30},
		3: {12, 12, 11, 10, 30, 30, 30, 30},
		4: {30, 30, 30, 30, 10, 11, 12, 12},
		5: {30, 30, 30, 30, 11, 10, 12, 12},
		6: {30, 30, 30, 30, 12, 12, 10, 11},
		7: {30, 30, 30, 30, 12, 12, 13, 10},
	}}
}
