// Package core mirrors the types of upstream's internal API package
// (k8s.io/kubernetes/pkg/apis/core) that a Pod reaches: same package name, type names,
// field names, field order and field types. Upstream's kubelet names a static pod by a
// hash of a dump of its internal pod, and such a dump prints exactly these (type names
// like "core.PodSpec" included); a v1 Pod seen as these types dumps the same.
//
// zz_generated.types.go is written by gen.go, which reads upstream's source as data.
package core

//go:generate go run gen.go /root/go/pkg/mod/k8s.io/kubernetes@v1.37.2/pkg/apis/core

import (
	"unsafe"

	v1 "k8s.io/api/core/v1"
)

// FromV1 returns in as upstream's internal Pod, sharing its memory. Upstream converts
// a v1 Pod to the internal one the same way, by a pointer cast: the two types have the
// same memory layout (TestMirrorHasTheShapeOfV1 checks every type a Pod reaches). The
// caller must not change in while it uses the result.
func FromV1(in *v1.Pod) *Pod {
	return (*Pod)(unsafe.Pointer(in))
}
