package state

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"k8s.io/utils/cpuset"
)

func writeFile(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), FileName)
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func entries(pod string, containers map[string]cpuset.CPUSet) map[string]map[string]cpuset.CPUSet {
	return map[string]map[string]cpuset.CPUSet{pod: containers}
}

// The files below are upstream's own test fixtures (state_checkpoint_test.go of v1.37.2,
// and of earlier versions for plain v2 files): their checksums were computed by
// upstream's code.
func TestReadUpstreamFiles(t *testing.T) {
	noEntries := map[string]map[string]cpuset.CPUSet{}
	tests := []struct {
		name    string
		content string
		want    Checkpoint
	}{{
		name: "v4, v2 part deliberately wrong and ignored",
		content: `{"policyName": "other", "defaultCPUSet": "1-9", "checksum": 1234,
			"data": "{\"policyName\":\"none\",\"defaultCPUSet\":\"4-6\"}", "dataChecksum": 657950972}`,
		want: Checkpoint{PolicyName: "none", DefaultCPUSet: cpuset.New(4, 5, 6), Entries: noEntries},
	}, {
		name: "v4 with entries",
		content: `{"policyName": "other", "defaultCPUSet": "1-9", "checksum": 1234,
			"data": "{\"policyName\":\"static\",\"defaultCPUSet\":\"7-9\",\"entries\":{\"pod\":{\"container1\":\"4-6\",\"container2\":\"1-3\"}}}",
			"dataChecksum": 1420829534}`,
		want: Checkpoint{PolicyName: "static", DefaultCPUSet: cpuset.New(7, 8, 9),
			Entries: entries("pod", map[string]cpuset.CPUSet{"container1": cpuset.New(4, 5, 6), "container2": cpuset.New(1, 2, 3)})},
	}, {
		name: "v4 with unknown fields in data",
		content: `{"policyName": "other", "defaultCPUSet": "1-9", "checksum": 1234,
			"data": "{\"policyName\":\"none\",\"defaultCPUSet\":\"4-6\",\"unknownField\":\"value\"}", "dataChecksum": 3492408555}`,
		want: Checkpoint{PolicyName: "none", DefaultCPUSet: cpuset.New(4, 5, 6), Entries: noEntries},
	}, {
		name: "v4 with pod-level entries and baselines, dropped with their gates off",
		content: `{"policyName": "other", "defaultCPUSet": "1-9", "checksum": 1234,
			"data": "{\"policyName\":\"static\",\"defaultCPUSet\":\"1-3\",\"entries\":{\"pod\":{\"container1\":\"4-6\",\"container2\":\"7-9\"}},\"podEntries\":{\"pod\":{\"cpuSet\":\"4-10\"}},\"baselines\":{\"pod\":{\"container1\":{\"baseline\":\"4-5\"},\"container2\":{\"baseline\":\"7-8\"}}}}",
			"dataChecksum": 1032795074}`,
		want: Checkpoint{PolicyName: "static", DefaultCPUSet: cpuset.New(1, 2, 3),
			Entries: entries("pod", map[string]cpuset.CPUSet{"container1": cpuset.New(4, 5, 6), "container2": cpuset.New(7, 8, 9)})},
	}, {
		name: "v3, checksum under the legacy struct name",
		content: `{"policyName": "static", "defaultCPUSet": "1-2",
			"entries": {"pod1": {"container1": "5-6", "container2": "3-4"}},
			"podEntries": {"pod2": {"cpuSet":"7-9"}}, "checksum": 766259872}`,
		want: Checkpoint{PolicyName: "static", DefaultCPUSet: cpuset.New(1, 2),
			Entries: entries("pod1", map[string]cpuset.CPUSet{"container1": cpuset.New(5, 6), "container2": cpuset.New(3, 4)})},
	}, {
		name: "v3, checksum under CPUManagerCheckpointV3",
		content: `{"policyName": "static", "defaultCPUSet": "1-2",
			"entries": {"pod1": {"container1": "5-6", "container2": "3-4"}},
			"podEntries": {"pod2": {"cpuSet":"7-9"}}, "checksum": 2284712151}`,
		want: Checkpoint{PolicyName: "static", DefaultCPUSet: cpuset.New(1, 2),
			Entries: entries("pod1", map[string]cpuset.CPUSet{"container1": cpuset.New(5, 6), "container2": cpuset.New(3, 4)})},
	}, {
		name: "v3 without pod entries (upstream's \"v2 migration\" fixture)",
		content: `{"policyName": "static", "defaultCPUSet": "7-9",
			"entries": {"pod": {"container1": "4-6", "container2": "1-3"}}, "checksum": 1942532442}`,
		want: Checkpoint{PolicyName: "static", DefaultCPUSet: cpuset.New(7, 8, 9),
			Entries: entries("pod", map[string]cpuset.CPUSet{"container1": cpuset.New(4, 5, 6), "container2": cpuset.New(1, 2, 3)})},
	}, {
		name:    "v2 written by an older kubelet",
		content: `{"policyName": "none", "defaultCPUSet": "4-6", "entries": {}, "checksum": 354655845}`,
		want:    Checkpoint{PolicyName: "none", DefaultCPUSet: cpuset.New(4, 5, 6), Entries: noEntries},
	}, {
		name: "v2 with entries written by an older kubelet",
		content: `{"policyName": "none", "defaultCPUSet": "1-3",
			"entries": {"pod": {"container1": "4-6", "container2": "1-3"}}, "checksum": 3610638499}`,
		want: Checkpoint{PolicyName: "none", DefaultCPUSet: cpuset.New(1, 2, 3),
			Entries: entries("pod", map[string]cpuset.CPUSet{"container1": cpuset.New(4, 5, 6), "container2": cpuset.New(1, 2, 3)})},
	}, {
		name:    "v2 of the old file backend, without checksum",
		content: `{"policyName": "static", "defaultCpuSet": "0-3"}`,
		want:    Checkpoint{PolicyName: "static", DefaultCPUSet: cpuset.New(0, 1, 2, 3), Entries: noEntries},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Read(writeFile(t, tt.content))
			if err != nil {
				t.Fatalf("Read: %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Read = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestReadRejects(t *testing.T) {
	tests := []struct {
		name, content, wantErr string
	}{{
		name: "data checksum without data",
		content: `{"policyName": "static", "defaultCPUSet": "7-9", "entries": {"pod": {"container1": "4-6", "container2": "1-3"}},
			"checksum": 1942532442, "dataChecksum": 1234}`,
		wantErr: "could not load v4 checkpoint: failed to deserialize cpu manager checkpoint data: unexpected end of JSON input",
	}, {
		name: "data without data checksum",
		content: `{"policyName": "static", "defaultCPUSet": "7-9", "checksum": 1942532442,
			"data": "{\"policyName\":\"static\",\"defaultCPUSet\":\"7-9\",\"entries\":{\"pod\":{\"container1\":\"4-6\",\"container2\":\"1-3\"}}}"}`,
		wantErr: "could not load v4 checkpoint: checkpoint is corrupted",
	}, {
		name: "wrong data checksum",
		content: `{"policyName": "static", "defaultCPUSet": "7-9", "checksum": 1942532442,
			"data": "{\"policyName\":\"static\",\"defaultCPUSet\":\"7-9\"}", "dataChecksum": 1234}`,
		wantErr: "checkpoint is corrupted",
	}, {
		name:    "invalid JSON",
		content: `{`,
		wantErr: "unexpected end of JSON input",
	}, {
		name: "unparsable default set",
		content: `{"policyName": "none", "defaultCPUSet": "7-9", "checksum": 98002435,
			"data": "{\"policyName\":\"none\",\"defaultCPUSet\":\"1.3\"}", "dataChecksum": 3033143655}`,
		wantErr: `could not parse default CPU set "1.3": strconv.Atoi: parsing "1.3": invalid syntax`,
	}, {
		name: "unparsable entry",
		content: `{"policyName": "static", "defaultCPUSet": "1-3", "checksum": 1659543133,
			"data": "{\"policyName\":\"static\",\"defaultCPUSet\":\"1-3\",\"entries\":{\"pod\":{\"container1\":\"4-6\",\"container2\":\"asd\"}}}",
			"dataChecksum": 3794806925}`,
		wantErr: `could not parse cpuset "asd" for container "container2" in pod "pod": strconv.Atoi: parsing "asd": invalid syntax`,
	}, {
		name:    "v2 file whose checksum was made for v1",
		content: `{"policyName": "none", "defaultCPUSet": "1-3", "checksum": 1694838852}`,
		wantErr: "checkpoint is corrupted",
	}, {
		name:    "v2 file with a tampered default set",
		content: `{"policyName": "none", "defaultCPUSet": "4-7", "entries": {}, "checksum": 354655845}`,
		wantErr: "checkpoint is corrupted",
	}, {
		name: "v1 file (entries by container ID), which upstream no longer migrates",
		content: `{"policyName": "static", "defaultCPUSet": "7-9",
			"entries": {"containerID1": "4-6", "containerID2": "1-3"}, "checksum": 2026311253}`,
		wantErr: "cannot unmarshal string into Go struct field",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Read(writeFile(t, tt.content))
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Read error = %v, want it to contain %q", err, tt.wantErr)
			}
		})
	}
}

func TestReadMissingFile(t *testing.T) {
	if _, err := Read(filepath.Join(t.TempDir(), FileName)); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Read error = %v, want ErrNotFound", err)
	}
}

// The checksums are computed by hand (FNV-32a of the dump text): the v2 one for an
// empty state is the one upstream's older fixtures carry (354655845).
func TestWriteUpstreamFormat(t *testing.T) {
	tests := []struct {
		name string
		cp   Checkpoint
		want string
	}{{
		name: "empty",
		cp:   Checkpoint{PolicyName: "none", DefaultCPUSet: cpuset.New(4, 5, 6)},
		want: `{"policyName":"none","defaultCpuSet":"4-6","checksum":354655845,` +
			`"data":"{\"policyName\":\"none\",\"defaultCpuSet\":\"4-6\"}","dataChecksum":3258904508}`,
	}, {
		name: "with an assignment",
		cp: Checkpoint{PolicyName: "static", DefaultCPUSet: cpuset.New(0, 2, 3),
			Entries: entries("pod-a", map[string]cpuset.CPUSet{"c1": cpuset.New(1)})},
		want: `{"policyName":"static","defaultCpuSet":"0,2-3","entries":{"pod-a":{"c1":"1"}},"checksum":2368110404,` +
			`"data":"{\"policyName\":\"static\",\"defaultCpuSet\":\"0,2-3\",\"entries\":{\"pod-a\":{\"c1\":\"1\"}}}","dataChecksum":1552889353}`,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "sub", FileName)
			if err := Write(path, tt.cp); err != nil {
				t.Fatal(err)
			}
			blob, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if string(blob) != tt.want {
				t.Errorf("file =\n%s\nwant\n%s", blob, tt.want)
			}
			back, err := Read(path)
			if err != nil {
				t.Fatalf("Read back: %v", err)
			}
			if back.PolicyName != tt.cp.PolicyName || !back.DefaultCPUSet.Equals(tt.cp.DefaultCPUSet) || len(back.Entries) != len(tt.cp.Entries) {
				t.Errorf("Read back %+v, want %+v", back, tt.cp)
			}
		})
	}
}

// Only the file itself is left in the directory: the temporary file is renamed.
func TestWriteLeavesNoTemporaryFile(t *testing.T) {
	dir := t.TempDir()
	if err := Write(filepath.Join(dir, FileName), Checkpoint{PolicyName: "none"}); err != nil {
		t.Fatal(err)
	}
	names, _ := os.ReadDir(dir)
	if len(names) != 1 || names[0].Name() != FileName {
		t.Errorf("directory holds %v", names)
	}
}
