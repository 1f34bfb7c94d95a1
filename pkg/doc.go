// Package pkg is nodelet's library tree, grouped by the role a package plays on a pod's
// path (docs/architecture.md): runtime → node → pod → api, wired by app. The packages
// directly under pkg/ outside those groups (config, kubetypes, qos, outage, lockfile,
// metrics, version) are leaves that every group may import; they import only each other.
package pkg
