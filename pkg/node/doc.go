// Package node groups the node's own resources and health: cgroups (cm), eviction, OOM
// events, stats and /metrics/cadvisor, node status and lease, volumes and service-account
// tokens; node plug-in managers (device plugins, DRA, CSI, shutdown) belong here too.
// These packages import the leaves, pkg/runtime and each other, never pkg/pod or above.
package node
