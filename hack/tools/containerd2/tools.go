//go:build tools

// Package tools pins the containerd 2.x commands this module builds for the second
// runtime flavour of hack/runtime.sh (NODELET_RUNTIME=containerd2).
package tools

import (
	_ "github.com/containerd/containerd/v2/cmd/containerd"
	_ "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2"
	_ "github.com/containerd/containerd/v2/cmd/ctr"
)
