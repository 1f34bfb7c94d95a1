// Package checksum is the checksum of upstream's kubelet checkpoints
// (pkg/kubelet/checkpointmanager/checksum): FNV-32a over the k8s.io/utils/dump hash
// dump of a value. The dump spells Go type names, and upstream's memory manager
// checkpoint hashes a struct with a field of type checksum.Checksum: the names of this
// package and of its type are therefore part of the state file's format.
package checksum

import (
	"fmt"
	"hash/fnv"

	"k8s.io/utils/dump"
)

// Checksum is a checkpoint checksum, a 32-bit FNV-1a hash stored in 64 bits.
type Checksum uint64

// New returns the checksum of data, as upstream's checksum.New.
func New(data any) Checksum { return OfDump(dump.ForHash(data)) }

// OfDump returns the checksum of a hash dump already made (for callers that must
// rename a type in the dump before hashing it).
func OfDump(d string) Checksum {
	h := fnv.New32a()
	_, _ = fmt.Fprintf(h, "%v", d)
	return Checksum(h.Sum32())
}

// Verify returns a *CorruptError when data's checksum is not c.
func (c Checksum) Verify(data any) error {
	if actual := New(data); actual != c {
		return &CorruptError{ActualCS: uint64(actual), ExpectedCS: uint64(c)}
	}
	return nil
}

// CorruptError is a checksum mismatch; its text is upstream's.
type CorruptError struct {
	ActualCS, ExpectedCS uint64
}

func (*CorruptError) Error() string { return "checkpoint is corrupted" }
