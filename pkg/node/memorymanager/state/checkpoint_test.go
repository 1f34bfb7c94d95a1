package state

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/pkg/node/memorymanager/state/checksum"
)

// The checkpoint fixtures below are transcribed from upstream's state tests
// (state_checkpoint_test.go, TestCheckpointStateRestore), checksums included.
const (
	v1MachineState = `"machineState":{"0":{"numberOfAssignments":0,"memoryMap":{"memory":{"total":2048,"systemReserved":512,"allocatable":1536,"reserved":512,"free":1024}},"cells":[]}}`
	v1Entries      = `"entries":{"pod":{"container1":[{"numaAffinity":[0],"type":"memory","size":512}]}}`
	v2PodEntries   = `"podEntries":{"pod":{"memoryBlocks":[{"numaAffinity":[0],"type":"memory","size":512}]}}`
	// A v1/v2 part that does not match the v3 data: a v3 file must be read from its data.
	staleLegacy = `"policyName":"other","machineState":{"0":{"numberOfAssignments":5,"memoryMap":{"memory":{"total":1024,"systemReserved":256,"allocatable":768,"reserved":256,"free":512}},"cells":[]}},"entries":{"pod":{"containerX":[{"numaAffinity":[0],"type":"memory","size":128}]}},"checksum": 1234`
	v3Data      = `"data": "{\"policyName\":\"static\",\"machineState\":{\"0\":{\"numberOfAssignments\":0,\"memoryMap\":{\"memory\":{\"total\":2048,\"systemReserved\":512,\"allocatable\":1536,\"reserved\":512,\"free\":1024}},\"cells\":[]}},\"entries\":{\"pod\":{\"container1\":[{\"numaAffinity\":[0],\"type\":\"memory\",\"size\":512}]}}}"`
)

// fixtureData is what every valid fixture holds.
func fixtureData() Data {
	return Data{
		PolicyName: "static",
		MachineState: NUMANodeMap{0: {Cells: []int{}, MemoryMap: map[v1.ResourceName]*MemoryTable{
			v1.ResourceMemory: {TotalMemSize: 2048, SystemReserved: 512, Allocatable: 1536, Reserved: 512, Free: 1024},
		}}},
		Entries: ContainerMemoryAssignments{"pod": {"container1": {{NUMAAffinity: []int{0}, Type: v1.ResourceMemory, Size: 512}}}},
	}
}

func TestUnmarshalUpstreamFixtures(t *testing.T) {
	withPodEntries := fixtureData()
	withPodEntries.PodEntries = PodMemoryAssignments{"pod": {MemoryBlocks: []Block{{NUMAAffinity: []int{0}, Type: v1.ResourceMemory, Size: 512}}}}
	tests := []struct {
		name, file string
		want       Data
		wantErr    string
	}{
		{"v3", `{` + staleLegacy + `,` + v3Data + `,"dataChecksum": 1849615440}`, fixtureData(), ""},
		{"v3 with an unknown field in its data", `{` + staleLegacy + `,"data": "{\"unknownField\":\"value\",\"policyName\":\"static\",\"machineState\":{\"0\":{\"numberOfAssignments\":0,\"memoryMap\":{\"memory\":{\"total\":2048,\"systemReserved\":512,\"allocatable\":1536,\"reserved\":512,\"free\":1024}},\"cells\":[]}},\"entries\":{\"pod\":{\"container1\":[{\"numaAffinity\":[0],\"type\":\"memory\",\"size\":512}]}}}","dataChecksum": 2100279793}`, fixtureData(), ""},
		{"v3 with pod entries", `{` + staleLegacy + `,"data": "{\"policyName\":\"static\",\"machineState\":{\"0\":{\"numberOfAssignments\":0,\"memoryMap\":{\"memory\":{\"total\":2048,\"systemReserved\":512,\"allocatable\":1536,\"reserved\":512,\"free\":1024}},\"cells\":[]}},\"entries\":{\"pod\":{\"container1\":[{\"numaAffinity\":[0],\"type\":\"memory\",\"size\":512}]}},\"podEntries\":{\"pod\":{\"memoryBlocks\":[{\"numaAffinity\":[0],\"type\":\"memory\",\"size\":512}]}}}","dataChecksum": 637296054}`, withPodEntries, ""},
		{"v3 with a wrong data checksum", `{"policyName":"static",` + v1MachineState + `,` + v1Entries + `,"checksum": 4215593881,` + v3Data + `,"dataChecksum": 1234}`, Data{}, "could not load v3 checkpoint: checkpoint is corrupted"},
		{"v3 without data checksum", `{"policyName":"static",` + v1MachineState + `,` + v1Entries + `,"checksum": 4215593881,` + v3Data + `}`, Data{}, "could not load v3 checkpoint: checkpoint is corrupted"},
		{"v3 without data", `{"policyName":"static",` + v1MachineState + `,` + v1Entries + `,"checksum": 4215593881,"dataChecksum": 1234}`, Data{}, "could not load v3 checkpoint: failed to deserialize memory manager checkpoint data: unexpected end of JSON input"},
		{"v3 with broken data", `{"policyName":"static",` + v1MachineState + `,` + v1Entries + `,"checksum": 4215593881,"data": "{","dataChecksum": 1234}`, Data{}, "could not load v3 checkpoint: failed to deserialize memory manager checkpoint data: unexpected end of JSON input"},
		{"v2", `{"policyName":"static",` + v1MachineState + `,` + v1Entries + `,` + v2PodEntries + `,"checksum": 1278640530}`, withPodEntries, ""},
		// v2 refuses a zero checksum; read as v1, which accepts it, the pod entries go.
		{"v2 with zero checksum", `{"policyName":"static",` + v1MachineState + `,` + v1Entries + `,` + v2PodEntries + `,"checksum": 0}`, fixtureData(), ""},
		{"v2 with a wrong checksum", `{"policyName":"static",` + v1MachineState + `,` + v1Entries + `,` + v2PodEntries + `,"checksum": 101010}`, Data{}, "checkpoint is corrupted"},
		{"v1", `{"policyName":"static",` + v1MachineState + `,` + v1Entries + `,"checksum": 4215593881}`, fixtureData(), ""},
		{"v1 with zero checksum", `{"policyName":"static",` + v1MachineState + `,` + v1Entries + `,"checksum": 0}`, fixtureData(), ""},
		{"v1 with a wrong checksum", `{"policyName":"static",` + v1MachineState + `,"entries":{"pod":{"container1":[{"affinity":[0],"type":"memory","size":512}]}},"checksum": 101010}`, Data{}, "checkpoint is corrupted"},
		{"not JSON", `{`, Data{}, "unexpected end of JSON input"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Unmarshal([]byte(tc.file))
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.want.PodEntries == nil {
				tc.want.PodEntries = got.PodEntries // absent or dropped: only its emptiness matters
				if len(got.PodEntries) != 0 {
					t.Errorf("pod entries %v, want none", got.PodEntries)
				}
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestChecksumMismatchIsCorruptError(t *testing.T) {
	_, err := Unmarshal([]byte(`{"policyName":"static",` + v1MachineState + `,` + v1Entries + `,"checksum": 101010}`))
	var corrupt *checksum.CorruptError
	if !errors.As(err, &corrupt) || corrupt.ExpectedCS != 101010 {
		t.Fatalf("error %#v, want a CorruptError expecting 101010", err)
	}
}

// TestMarshalMatchesUpstream: the bytes upstream's v1.37.2 writes for a cross-NUMA state
// (testdata/README.md), and what the fixtures' data gives.
func TestMarshalMatchesUpstream(t *testing.T) {
	want, err := os.ReadFile(filepath.Join("testdata", "upstream-cross-numa"))
	if err != nil {
		t.Fatal(err)
	}
	table := func(reserved, free uint64) map[v1.ResourceName]*MemoryTable {
		return map[v1.ResourceName]*MemoryTable{
			v1.ResourceMemory: {TotalMemSize: 4 << 30, SystemReserved: 1 << 30, Allocatable: 3 << 30, Reserved: reserved, Free: free},
			"hugepages-2Mi":   {},
		}
	}
	d := Data{
		PolicyName: "Static",
		MachineState: NUMANodeMap{
			0: {NumberOfAssignments: 2, Cells: []int{0, 1}, MemoryMap: table(3<<30, 0)},
			1: {NumberOfAssignments: 2, Cells: []int{0, 1}, MemoryMap: table(1<<30, 2<<30)},
		},
		Entries: ContainerMemoryAssignments{"pod-uid-1": {"app": {{NUMAAffinity: []int{0, 1}, Type: v1.ResourceMemory, Size: 4 << 30}}}},
	}
	got, err := Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Errorf("Marshal:\n%s\nupstream:\n%s", got, want)
	}
	// Legacy checksum 4215593881 and data checksum 1849615440 are upstream's for the
	// fixtures' data.
	got, err = Marshal(fixtureData())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(got), `"checksum":4215593881,`) || !strings.HasSuffix(string(got), `"dataChecksum":1849615440}`) {
		t.Errorf("Marshal of the fixtures' data: %s", got)
	}
}

func TestMarshalRoundTripEveryVersionReader(t *testing.T) {
	blob, err := Marshal(fixtureData())
	if err != nil {
		t.Fatal(err)
	}
	for name, read := range map[string]func([]byte) (Data, error){"v3": Unmarshal, "v1 reader": unmarshalV1} {
		got, err := read(blob)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		got.PodEntries = nil
		if !reflect.DeepEqual(got, fixtureData()) {
			t.Errorf("%s: got %+v", name, got)
		}
	}
}

func TestLoad(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "root")
	d, err := Load(dir, "Static")
	if err != nil {
		t.Fatal(err)
	}
	if d.PolicyName != "Static" || len(d.MachineState) != 0 || len(d.Entries) != 0 {
		t.Errorf("new state %+v", d)
	}
	// The file was created, empty; another policy is refused with upstream's error.
	_, err = Load(dir, "None")
	want := `could not restore state from checkpoint: [memorymanager] configured policy "None" differs from state checkpoint policy "Static", please drain this node and delete the memory manager checkpoint file "` +
		filepath.Join(dir, FileName) + `" before restarting Kubelet`
	if err == nil || err.Error() != want {
		t.Errorf("other policy: %v\nwant %s", err, want)
	}
	if err := os.WriteFile(filepath.Join(dir, FileName), []byte(`{"policyName":"Static","machineState":{},"checksum":1}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(dir, "Static"); err == nil || !strings.Contains(err.Error(), "from checkpoint: checkpoint is corrupted, please drain") {
		t.Errorf("corrupted file: %v", err)
	}
}

func TestSaveLeavesNoTemporaryFile(t *testing.T) {
	dir := t.TempDir()
	for range 2 {
		if err := Save(dir, fixtureData()); err != nil {
			t.Fatal(err)
		}
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 || entries[0].Name() != FileName {
		t.Errorf("directory holds %v", entries)
	}
	d, err := Load(dir, "static")
	if err != nil || len(d.Entries["pod"]["container1"]) != 1 {
		t.Errorf("Load after Save: %+v, %v", d, err)
	}
}

func TestMachineStateCloneIsDeep(t *testing.T) {
	m := fixtureData().MachineState
	c := m.Clone()
	c[0].MemoryMap[v1.ResourceMemory].Free = 0
	c[0].Cells = append(c[0].Cells, 1)
	if m[0].MemoryMap[v1.ResourceMemory].Free != 1024 || len(m[0].Cells) != 0 {
		t.Error("machine state clone shares memory with the original")
	}
}
