// Package runtime groups what talks to the container runtime over CRI: the gRPC clients
// (cri), runtime-neutral types (container), the runtime manager (kuberuntime), PodSpec → CRI
// configs (criconfig), images and their GC, container logs, user namespaces and DNS.
// These packages import only the leaves (pkg/config, pkg/kubetypes, pkg/qos, ...) and each
// other; docs/architecture.md lists the two upward imports of kuberuntime and why.
package runtime
