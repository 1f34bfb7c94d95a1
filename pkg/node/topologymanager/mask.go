package topologymanager

import (
	"fmt"
	"math/bits"
	"strings"
)

// Mask is a set of NUMA node IDs, 0 to 63 (upstream's bitmask.BitMask, as a value). The
// empty mask stands for "no preference" in a hint, where upstream uses a nil mask: an
// allocation always has at least one NUMA node, so the two cannot be confused.
type Mask uint64

// NewMask makes the mask of the given NUMA node IDs.
func NewMask(ids ...int) (Mask, error) {
	var m Mask
	for _, id := range ids {
		if id < 0 || id >= 64 {
			return 0, fmt.Errorf("NUMA node %d out of range 0-63", id)
		}
		m |= 1 << id
	}
	return m, nil
}

// MustMask is NewMask for IDs known to be in range.
func MustMask(ids ...int) Mask {
	m, err := NewMask(ids...)
	if err != nil {
		panic(err)
	}
	return m
}

func (m Mask) IsSet(id int) bool   { return id >= 0 && id < 64 && m&(1<<id) != 0 }
func (m Mask) IsEmpty() bool       { return m == 0 }
func (m Mask) Count() int          { return bits.OnesCount64(uint64(m)) }
func (m Mask) And(o Mask) Mask     { return m & o }
func (m Mask) Or(o Mask) Mask      { return m | o }
func (m Mask) IsEqual(o Mask) bool { return m == o }

// Bits lists the NUMA node IDs in the mask, lowest first.
func (m Mask) Bits() []int {
	var out []int
	for v := uint64(m); v != 0; v &= v - 1 {
		out = append(out, bits.TrailingZeros64(v))
	}
	return out
}

// IsNarrowerThan: fewer NUMA nodes, or as many with lower IDs (upstream's order when
// the topology manager picks the best hint).
func (m Mask) IsNarrowerThan(o Mask) bool {
	if m.Count() == o.Count() {
		return m.IsLessThan(o)
	}
	return m.Count() < o.Count()
}

// IsLessThan compares the masks as numbers, as upstream does.
func (m Mask) IsLessThan(o Mask) bool { return m < o }

// String is the mask in binary with 64 digits, as upstream prints it.
func (m Mask) String() string { return fmt.Sprintf("%064b", uint64(m)) }

// Pretty lists the NUMA nodes, as "0,2".
func (m Mask) Pretty() string {
	ids := m.Bits()
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = fmt.Sprint(id)
	}
	return strings.Join(s, ",")
}

// IterateMasks calls f with every non-empty subset of ids, smallest subsets first (in
// the order upstream's IterateBitMasks gives them).
func IterateMasks(ids []int, f func(Mask)) {
	for size := 1; size <= len(ids); size++ {
		iterateOfSize(ids, size, 0, 0, f)
	}
}

func iterateOfSize(ids []int, size, start int, acc Mask, f func(Mask)) {
	if size == 0 {
		f(acc)
		return
	}
	for i := start; i <= len(ids)-size; i++ {
		iterateOfSize(ids, size-1, i+1, acc|1<<ids[i], f)
	}
}
