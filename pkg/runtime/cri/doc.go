// Package cri holds nodelet's clients for a container runtime's CRI v1 gRPC
// API: a RuntimeService and an ImageManagerService (the interfaces from
// k8s.io/cri-api/pkg/apis) that talk to the runtime over a unix socket.
//
// The clients behave like the kubelet's remote runtime and image services:
// the same per-call deadlines, the same checks on what the runtime answers
// (reported here as typed errors), the same reduction of repeated per-container
// error logs, and, through NewInstrumentedRuntimeService and
// NewInstrumentedImageService, the same kubelet_runtime_operations_* metrics.
package cri
