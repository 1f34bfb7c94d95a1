//go:build tools

// Package tools pins the runc that hack/runtime.sh's containerd2 flavour uses: Debian's
// runc 1.1.5 runs ordinary pods under containerd 2 but lacks idmapped mounts, which user
// namespace pods (hostUsers: false) need.
package tools

import (
	_ "github.com/opencontainers/runc"
)
