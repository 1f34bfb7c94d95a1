package criconfig

import (
	"reflect"
	"testing"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestExpand(t *testing.T) {
	mapping := MappingFuncFor(map[string]string{"A": "alpha", "B": "beta", "EMPTY": ""}, map[string]string{"B": "shadowed", "C": "gamma"})
	tests := []struct{ in, want string }{
		{"", ""},
		{"plain", "plain"},
		{"$(A)", "alpha"},
		{"x$(A)y$(B)z", "xalphaybetaz"},
		{"$(C)", "gamma"},            // second map
		{"$(EMPTY)|", "|"},           // known but empty
		{"$(UNKNOWN)", "$(UNKNOWN)"}, // left as written
		{"$$(A)", "$(A)"},            // escaped
		{"$$$(A)", "$alpha"},         // escape then reference
		{"$$$$", "$$"},
		{"$", "$"}, // lone operator at the end
		{"a$", "a$"},
		{"$A", "$A"},           // no parenthesis: not a reference
		{"$(A", "$(A"},         // unclosed
		{"$(A$(B)", "$(A$(B)"}, // unclosed, the name is "A$(B"
		{"$()", "$()"},         // empty name is unknown
		{"$(A)$(B)", "alphabeta"},
		{"((A))", "((A))"},
		{"$(A))", "alpha)"},
	}
	for _, tt := range tests {
		if got := Expand(tt.in, mapping); got != tt.want {
			t.Errorf("Expand(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestExpandContainerCommandAndArgs(t *testing.T) {
	c := &v1.Container{
		Command: []string{"sh", "-c", "echo $(MSG) $$(MSG)"},
		Args:    []string{"$(MISSING)", "$(N)"},
	}
	envs := []*runtimeapi.KeyValue{{Key: "MSG", Value: []byte("hi")}, {Key: "N", Value: []byte("1")}}
	command, args := ExpandContainerCommandAndArgs(c, envs)
	if want := []string{"sh", "-c", "echo hi $(MSG)"}; !reflect.DeepEqual(command, want) {
		t.Errorf("command = %q, want %q", command, want)
	}
	if want := []string{"$(MISSING)", "1"}; !reflect.DeepEqual(args, want) {
		t.Errorf("args = %q, want %q", args, want)
	}
	command, args = ExpandContainerCommandAndArgs(&v1.Container{}, envs)
	if command != nil || args != nil {
		t.Errorf("empty container gives %q %q, want nil (the image's entrypoint)", command, args)
	}
}
