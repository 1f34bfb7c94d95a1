package resourcename

import (
	"testing"

	v1 "k8s.io/api/core/v1"
)

func TestClassification(t *testing.T) {
	for name, want := range map[v1.ResourceName][2]bool{ // native, extended
		"cpu":                       {true, false},
		"hugepages-2Mi":             {true, false},
		"kubernetes.io/foo":         {true, false},
		"example.kubernetes.io/gpu": {true, false},
		"example.com/gpu":           {false, true},
		"nvidia.com/gpu":            {false, true},
		"requests.example.com/gpu":  {false, false},
		v1.ResourceName("example.com/" + longName()): {false, false},
		"example.com/with space":                     {false, false},
		"deviceclass.resource.k8s.io/gpu":            {false, true},
	} {
		if got := [2]bool{IsNative(name), IsExtended(name)}; got != want {
			t.Errorf("%s: native, extended = %v, want %v", name, got, want)
		}
	}
}

func longName() string {
	b := make([]byte, 64)
	for i := range b {
		b[i] = 'a'
	}
	return string(b)
}
