package memorymanager

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync/atomic"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/pkg/node/memorymanager/state"
)

func upstreamFixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "upstream", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// assertSameState compares two state files by content, blocks in any order, after
// verifying both their v3 and their legacy (v1) checksums.
func assertSameState(t *testing.T, got, want []byte) {
	t.Helper()
	g, w := decodeBothWays(t, got), decodeBothWays(t, want)
	if !reflect.DeepEqual(g, w) {
		t.Errorf("state:\n%s\nwant:\n%s", got, want)
	}
}

func decodeBothWays(t *testing.T, blob []byte) state.Data {
	t.Helper()
	d, err := state.Unmarshal(blob)
	if err != nil {
		t.Fatal(err)
	}
	// Without its v3 fields the file is read as v1, through its legacy checksum.
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(blob, &fields); err != nil {
		t.Fatal(err)
	}
	delete(fields, "data")
	delete(fields, "dataChecksum")
	legacyBlob, _ := json.Marshal(fields)
	legacy, err := state.Unmarshal(legacyBlob)
	if err != nil {
		t.Fatalf("legacy part: %v", err)
	}
	legacy.PodEntries = d.PodEntries
	for _, x := range []state.Data{d, legacy} {
		for _, containers := range x.Entries {
			for _, blocks := range containers {
				sort.Slice(blocks, func(i, j int) bool { return blocks[i].Type < blocks[j].Type })
			}
		}
	}
	if !reflect.DeepEqual(d, legacy) {
		t.Fatalf("legacy part differs from the data:\n%+v\n%+v", legacy, d)
	}
	return d
}

func writeState(t *testing.T, dir string, blob []byte) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, state.FileName), blob, 0o600); err != nil {
		t.Fatal(err)
	}
}

// The None policy reads no sysfs, writes upstream's empty None state and assigns
// nothing.
func TestNonePolicy(t *testing.T) {
	dir := t.TempDir()
	m := newManager(t, Options{Policy: PolicyNone, StateDir: dir, SysfsRoot: "/nonexistent"})
	if got, want := readState(t, dir), upstreamFixture(t, "none"); string(got) != string(want) {
		t.Errorf("state file:\n%s\nupstream:\n%s", got, want)
	}
	if err := m.Start(context.Background(), func() []*v1.Pod { return nil }); err != nil {
		t.Fatal(err)
	}
	p := pod("p", nil, container("app", "memory", "1Gi"))
	admit(t, m, p)
	if nodes, ok := m.MemoryNUMANodesFor(p, &p.Spec.Containers[0]); ok {
		t.Errorf("cpuset.mems %v", nodes)
	}
	if m.GetTopologyHints(p, &p.Spec.Containers[0]) != nil || m.GetPodTopologyHints(p) != nil ||
		len(m.GetAllocatableMemory()) != 0 || len(m.GetMemory("p", "app")) != 0 || m.RemoveContainer("p", "app") != nil {
		t.Error("the None policy did something")
	}
	if got, want := readState(t, dir), upstreamFixture(t, "none"); string(got) != string(want) {
		t.Errorf("state file changed:\n%s", got)
	}
	if len(m.Collectors()) != 2 {
		t.Error("the memory manager metrics are registered whatever the policy")
	}
}

func TestPolicyChangeRefused(t *testing.T) {
	opts := twoNodeOptions(t)
	writeState(t, opts.StateDir, upstreamFixture(t, "static-1-pod-a-app"))
	_, err := New(Options{Policy: PolicyNone, StateDir: opts.StateDir})
	want := `could not restore state from checkpoint: [memorymanager] configured policy "None" differs from state checkpoint policy "Static", please drain this node and delete the memory manager checkpoint file "` +
		filepath.Join(opts.StateDir, state.FileName) + `" before restarting Kubelet`
	if err == nil || err.Error() != want {
		t.Errorf("None over a Static state: %v\nwant %s", err, want)
	}
	writeState(t, opts.StateDir, upstreamFixture(t, "none"))
	if _, err := New(opts); err == nil || !strings.Contains(err.Error(), `configured policy "Static" differs from state checkpoint policy "None"`) {
		t.Errorf("Static over a None state: %v", err)
	}
}

// A state upstream wrote is restored and used: blocks, hints and removals.
func TestRestoreUpstreamState(t *testing.T) {
	opts := twoNodeOptions(t)
	writeState(t, opts.StateDir, upstreamFixture(t, "static-3-pod-b-app"))
	m := newManager(t, opts)
	bPod := pod("pod-b-uid", []v1.Container{container("init", "memory", "1Gi")}, container("app", "memory", "1536Mi", "hugepages-1Gi", "1Gi"))
	if got, want := m.blocksOf("pod-b-uid", "app"), []string{b("hugepages-1Gi", gi, 0), b("memory", 1536*mi, 0)}; !reflect.DeepEqual(got, want) {
		t.Errorf("restored blocks %v, want %v", got, want)
	}
	hints := m.GetTopologyHints(bPod, &bPod.Spec.Containers[0])
	if len(hints) != 2 || !reflect.DeepEqual(hints["memory"], hints["hugepages-1Gi"]) || !reflect.DeepEqual(hints["memory"][0], hint(true, 0)) || len(hints["memory"]) != 1 {
		t.Errorf("hints of an allocated container: %v", hints)
	}
	// Admitting again changes nothing.
	if err := m.Allocate(bPod, &bPod.Spec.Containers[0]); err != nil {
		t.Fatal(err)
	}
	assertSameState(t, readState(t, opts.StateDir), upstreamFixture(t, "static-3-pod-b-app"))
	for _, ref := range [][2]string{{"pod-a-uid", "app"}, {"pod-b-uid", "app"}} {
		if err := m.RemoveContainer(ref[0], ref[1]); err != nil {
			t.Fatal(err)
		}
	}
	assertSameState(t, readState(t, opts.StateDir), upstreamFixture(t, "static-0-empty"))
}

// A state whose machine state does not match this machine, its reservations and its
// assignments is refused, as upstream does.
func TestMachineStateMismatchRefused(t *testing.T) {
	tests := map[string]func(*Options){
		"more memory": func(o *Options) {
			o.SysfsRoot = fakeSysfs(t, fakeNode{memTotal: 16 * gi, hugePages: standardNode.hugePages}, standardNode)
		},
		"another NUMA node": func(o *Options) { o.SysfsRoot = fakeSysfs(t, standardNode, standardNode, standardNode) },
		"other reservations": func(o *Options) {
			o.ReservedMemory[1] = reservation(1, "memory", "1Gi", "hugepages-1Gi", "1Gi")
			o.ExpectedReservedTotal["hugepages-1Gi"] = o.ReservedMemory[1].Limits["hugepages-1Gi"]
		},
	}
	for name, change := range tests {
		t.Run(name, func(t *testing.T) {
			opts := twoNodeOptions(t)
			change(&opts)
			writeState(t, opts.StateDir, upstreamFixture(t, "static-1-pod-a-app"))
			if _, err := New(opts); err == nil || err.Error() != "[memorymanager] the expected machine state is different from the real one" {
				t.Errorf("error %v", err)
			}
		})
	}
	// The assignments must account for the reserved memory.
	opts := twoNodeOptions(t)
	d, _ := state.Unmarshal(upstreamFixture(t, "static-1-pod-a-app"))
	d.Entries["pod-a-uid"]["app"][1].Size = gi
	if err := state.Save(opts.StateDir, d); err != nil {
		t.Fatal(err)
	}
	if _, err := New(opts); err != errMachineStateMismatch {
		t.Errorf("assignments not matching the machine state: %v", err)
	}
	d.MachineState = state.NUMANodeMap{}
	if err := state.Save(opts.StateDir, d); err != nil {
		t.Fatal(err)
	}
	if _, err := New(opts); err != errEmptyMachineWithAssignments {
		t.Errorf("assignments without machine state: %v", err)
	}
	d, _ = state.Unmarshal(upstreamFixture(t, "static-1-pod-a-app"))
	d.Entries["pod-a-uid"]["app"][1].NUMAAffinity = []int{5}
	if err := state.Save(opts.StateDir, d); err != nil {
		t.Fatal(err)
	}
	if _, err := New(opts); err == nil || err.Error() != "[memorymanager] (pod: pod-a-uid, container: app) the memory assignment uses the NUMA that does not exist" {
		t.Errorf("assignment on an unknown node: %v", err)
	}
}

func TestChecksumMismatchRefused(t *testing.T) {
	opts := twoNodeOptions(t)
	tampered := strings.Replace(string(upstreamFixture(t, "static-1-pod-a-app")), `\"reserved\":2147483648`, `\"reserved\":1073741824`, 1)
	writeState(t, opts.StateDir, []byte(tampered))
	if _, err := New(opts); err == nil || !strings.Contains(err.Error(), "could not restore state from checkpoint: could not load v3 checkpoint: checkpoint is corrupted, please drain") {
		t.Errorf("error %v", err)
	}
}

// A v1 file (upstream before v1.37) with the zero checksum of upstream's old file
// backend, written by hand: one standard node, 1Gi of memory reserved, 1Gi given to
// p1/c. It is read, and written back as v3.
func TestHandWrittenV1State(t *testing.T) {
	opts := oneNodeOptions(t)
	writeState(t, opts.StateDir, []byte(`{
		"policyName": "Static",
		"machineState": {"0": {"numberOfAssignments": 1, "cells": [0], "memoryMap": {
			"memory": {"total": 8589934592, "systemReserved": 1073741824, "allocatable": 4294967296, "reserved": 1073741824, "free": 3221225472},
			"hugepages-2Mi": {"total": 1073741824, "systemReserved": 0, "allocatable": 1073741824, "reserved": 0, "free": 1073741824},
			"hugepages-1Gi": {"total": 2147483648, "systemReserved": 0, "allocatable": 2147483648, "reserved": 0, "free": 2147483648}}}},
		"entries": {"p1": {"c": [{"numaAffinity": [0], "type": "memory", "size": 1073741824}]}},
		"checksum": 0
	}`))
	m := newManager(t, opts)
	if got := m.blocksOf("p1", "c"); !reflect.DeepEqual(got, []string{b("memory", gi, 0)}) {
		t.Fatalf("blocks %v", got)
	}
	if err := m.RemoveContainer("p1", "c"); err != nil {
		t.Fatal(err)
	}
	blob := readState(t, opts.StateDir)
	if !strings.Contains(string(blob), `"dataChecksum":`) || m.machine()[0].NumberOfAssignments != 0 {
		t.Errorf("written back: %s", blob)
	}
	newManager(t, opts) // and read again
}

func TestStaleStateRemoved(t *testing.T) {
	var ready atomic.Bool
	opts := twoNodeOptions(t)
	opts.SourcesReady = ready.Load
	m := newManager(t, opts)
	a := pod("a", nil, container("app", "memory", "1Gi"))
	gone := pod("gone", []v1.Container{container("init", "memory", "1Gi")}, container("app", "memory", "6Gi"))
	var active atomic.Pointer[[]*v1.Pod]
	active.Store(&[]*v1.Pod{a, gone})
	if err := m.Start(context.Background(), func() []*v1.Pod { return *active.Load() }); err != nil {
		t.Fatal(err)
	}
	ready.Store(true)
	admit(t, m, a)
	for i := range gone.Spec.InitContainers {
		if err := m.Allocate(gone, &gone.Spec.InitContainers[i]); err != nil {
			t.Fatal(err)
		}
	}
	active.Store(&[]*v1.Pod{a})
	ready.Store(false)
	m.GetTopologyHints(a, &a.Spec.Containers[0])
	if m.blocksOf("gone", "init") == nil {
		t.Fatal("state removed before the pod sources were ready")
	}
	ready.Store(true)
	m.GetTopologyHints(a, &a.Spec.Containers[0])
	if m.blocksOf("gone", "init") != nil || m.blocksOf("a", "app") == nil {
		t.Fatalf("after stale state removal: gone %v, a %v", m.blocksOf("gone", "init"), m.blocksOf("a", "app"))
	}
	if got := m.machine()[0].MemoryMap[v1.ResourceMemory].Reserved; got != gi {
		t.Errorf("node 0 reserved %d, want 1Gi", got)
	}
	d, err := state.Unmarshal(readState(t, opts.StateDir))
	if err != nil || d.Entries["gone"] != nil {
		t.Errorf("state file still has the stale pod: %+v, %v", d.Entries, err)
	}
}
