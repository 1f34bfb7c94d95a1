// Package pod groups the pod loop: the kubelet's syncLoop and handlers, pod sources and
// validation, the pod manager and mirror pods, pod workers, PLEG and the pod cache, probes,
// status, admission and resource allocation.
// These packages import the leaves, pkg/runtime, pkg/node and each other, never pkg/api.
package pod
