package state

import (
	"sort"
	"strconv"
	"strings"

	"k8s.io/utils/cpuset"
)

// legacyName is the struct name upstream's v2 and v3 checksums are computed under for
// older kubelets, which knew a single CPUManagerCheckpoint type.
const legacyName = "CPUManagerCheckpoint"

// The functions below write the text that upstream's checksums hash: spew's %#v dump
// (k8s.io/utils/dump.ForHash: sorted map keys, no pointers, no methods) of upstream's
// checkpoint structs. In that dump a struct field shows its type, a map or struct
// inside a map does not, strings are bare and a nil map is "<nil>".

// stringDump is the dump of a string, which dataChecksum hashes.
func stringDump(s string) string { return "(string)" + s }

// legacyDump is the dump of a *state.<structName> holding the v2 fields, and the v3
// podEntries field when pods is not nil (its already-dumped value).
func legacyDump(structName, policy, defaultSet string, entries map[string]map[string]string, pods *string) string {
	var b strings.Builder
	b.WriteString("(*state." + structName + "){")
	b.WriteString("PolicyName:(string)" + policy)
	b.WriteString(" DefaultCPUSet:(string)" + defaultSet)
	b.WriteString(" Entries:(map[string]map[string]string)" + entriesDump(entries))
	if pods != nil {
		b.WriteString(" PodEntries:(state.PodCPUAssignments)" + *pods)
	}
	// The checksum field is zero while the checksum is computed.
	b.WriteString(" Checksum:(checksum.Checksum)0}")
	return b.String()
}

// entriesDump dumps pod UID → container → cpuset string.
func entriesDump(entries map[string]map[string]string) string {
	if entries == nil {
		return "<nil>"
	}
	return mapDump(entries, func(containers map[string]string) string {
		if containers == nil {
			return "<nil>"
		}
		return mapDump(containers, func(cpus string) string { return cpus })
	})
}

// podEntriesDump dumps upstream's PodCPUAssignments, whose entries hold a parsed
// cpuset.CPUSet (a set of ints, stored as a map). Entries whose CPU set does not parse
// are dumped empty: upstream would have failed to decode the file before hashing it.
func podEntriesDump(pods map[string]podEntry) string {
	if pods == nil {
		return "<nil>"
	}
	return mapDump(pods, func(e podEntry) string {
		cpus, _ := cpuset.Parse(e.CPUSet)
		elems := make([]string, 0, cpus.Size())
		for _, cpu := range cpus.List() {
			elems = append(elems, strconv.Itoa(cpu)+":{}")
		}
		return "{CPUSet:(cpuset.CPUSet){elems:(map[int]struct {})map[" + strings.Join(elems, " ") + "]}}"
	})
}

func mapDump[V any](m map[string]V, value func(V) string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + ":" + value(m[k])
	}
	return "map[" + strings.Join(parts, " ") + "]"
}
