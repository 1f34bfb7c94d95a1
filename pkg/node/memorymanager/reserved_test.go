package memorymanager

import (
	"reflect"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	kubeletconfig "k8s.io/kubelet/config/v1beta1"
)

// The cases of upstream's TestValidateReservedMemory (memory_manager_test.go).
func TestValidateReservedMemory(t *testing.T) {
	nodes := []int{0, 1}
	tests := []struct {
		name         string
		expected     v1.ResourceList
		reservations []kubeletconfig.MemoryReservation
		wantErr      string
	}{
		{"nothing reserved or expected", v1.ResourceList{}, nil, ""},
		{"zero reserved, zero expected", resourceList("memory", "0"), []kubeletconfig.MemoryReservation{reservation(0, "memory", "0")}, ""},
		{"reserved, none expected", v1.ResourceList{}, []kubeletconfig.MemoryReservation{reservation(0, "memory", "12")},
			`the total amount "12" of type "memory" is not equal to the value "0" determined by Node Allocatable feature`},
		{"expected, none reserved", resourceList("hugepages-2Mi", "5"), nil,
			`the total amount "0" of type "hugepages-2Mi" is not equal to the value "5" determined by Node Allocatable feature`},
		{"reserved differs", resourceList("memory", "5"), []kubeletconfig.MemoryReservation{reservation(0, "memory", "12")},
			`the total amount "12" of type "memory" is not equal to the value "5" determined by Node Allocatable feature`},
		{"unknown NUMA node", resourceList("memory", "17"), []kubeletconfig.MemoryReservation{reservation(0, "memory", "12"), reservation(2, "memory", "5")},
			"the reserved memory configuration references a NUMA node 2 that does not exist on this machine"},
		{"totals equal", resourceList("memory", "17", "hugepages-2Mi", "77", "hugepages-1Gi", "13", "cpu", "1"),
			[]kubeletconfig.MemoryReservation{
				reservation(0, "memory", "12", "hugepages-2Mi", "70", "hugepages-1Gi", "13"),
				reservation(1, "memory", "5", "hugepages-2Mi", "7"),
			}, ""},
		{"hugepages-2Mi total differs", resourceList("memory", "17", "hugepages-2Mi", "14", "hugepages-1Gi", "13"),
			[]kubeletconfig.MemoryReservation{
				reservation(0, "memory", "12", "hugepages-2Mi", "70", "hugepages-1Gi", "13"),
				reservation(1, "memory", "5", "hugepages-2Mi", "7"),
			}, `the total amount "77" of type "hugepages-2Mi" is not equal to the value "14" determined by Node Allocatable feature`},
		// Upstream's TestGetSystemReservedMemory: binary quantities print as such.
		{"1Gi reserved, none expected", v1.ResourceList{}, []kubeletconfig.MemoryReservation{reservation(0, "memory", "1Gi")},
			`the total amount "1Gi" of type "memory" is not equal to the value "0" determined by Node Allocatable feature`},
		{"1Gi reserved on each node, 2Gi expected", resourceList("memory", "2Gi"),
			[]kubeletconfig.MemoryReservation{reservation(0, "memory", "1Gi"), reservation(1, "memory", "1Gi")}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := validateReservedMemory(nodes, tc.reservations, tc.expected)
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || err.Error() != tc.wantErr) {
				t.Errorf("error %v, want %q", err, tc.wantErr)
			}
		})
	}
}

func TestConvertReserved(t *testing.T) {
	got, err := convertReserved([]int{0, 1}, []kubeletconfig.MemoryReservation{
		reservation(0, "memory", "12", "hugepages-2Mi", "70", "hugepages-1Gi", "13"),
	})
	want := reservedByNode{0: {v1.ResourceMemory: 12, "hugepages-2Mi": 70, "hugepages-1Gi": 13}, 1: {}}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, %v; want %v", got, err, want)
	}
}

func TestStaticPolicyNeedsReservedMemory(t *testing.T) {
	opts := oneNodeOptions(t)
	opts.ReservedMemory, opts.ExpectedReservedTotal = nil, nil
	if _, err := New(opts); err == nil || err.Error() != "[memorymanager] you should specify the system reserved memory" {
		t.Errorf("no reservation: %v", err)
	}
	opts = oneNodeOptions(t)
	opts.ExpectedReservedTotal = resourceList("memory", "2Gi")
	if _, err := New(opts); err == nil || !strings.HasPrefix(err.Error(), `the total amount "1Gi" of type "memory" is not equal to the value "2Gi"`) {
		t.Errorf("mismatched totals: %v", err)
	}
	opts = oneNodeOptions(t)
	opts.Policy = "static"
	if _, err := New(opts); err == nil || err.Error() != `unknown policy: "static"` {
		t.Errorf("unknown policy: %v", err)
	}
}
