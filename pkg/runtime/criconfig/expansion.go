package criconfig

import (
	"strings"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Expand replaces each $(VAR) in input by mapping(VAR), as Kubernetes does
// for env values, commands and args: "$$" is an escaped "$", and a "$" that
// starts no reference, or an unclosed "$(", is kept as is.
func Expand(input string, mapping func(string) string) string {
	var out strings.Builder
	start := 0 // first byte of input not yet copied to out
	for i := 0; i < len(input)-1; i++ {
		if input[i] != '$' {
			continue
		}
		out.WriteString(input[start:i])
		text, consumed := expandAt(input[i+1:], mapping)
		out.WriteString(text)
		i += consumed
		start = i + 1
	}
	return out.String() + input[start:]
}

// expandAt reads what follows a '$' and returns its expansion and how many
// bytes after the '$' it used.
func expandAt(rest string, mapping func(string) string) (string, int) {
	switch rest[0] {
	case '$':
		return "$", 1
	case '(':
		if end := strings.IndexByte(rest, ')'); end > 0 {
			return mapping(rest[1:end]), end + 1
		}
		return "$(", 1
	default:
		return "$" + rest[:1], 1
	}
}

// MappingFuncFor looks a name up in each map in turn, and leaves unknown
// references as written, "$(NAME)".
func MappingFuncFor(maps ...map[string]string) func(string) string {
	return func(name string) string {
		for _, m := range maps {
			if v, ok := m[name]; ok {
				return v
			}
		}
		return "$(" + name + ")"
	}
}

// ExpandContainerCommandAndArgs expands $(VAR) references in the container's
// command and args against its final environment.
func ExpandContainerCommandAndArgs(c *v1.Container, envs []*runtimeapi.KeyValue) (command, args []string) {
	env := make(map[string]string, len(envs))
	for _, kv := range envs {
		env[kv.Key] = string(kv.Value)
	}
	mapping := MappingFuncFor(env)
	for _, s := range c.Command {
		command = append(command, Expand(s, mapping))
	}
	for _, s := range c.Args {
		args = append(args, Expand(s, mapping))
	}
	return command, args
}
