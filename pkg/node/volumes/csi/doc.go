// Package csi is the node side of the Container Storage Interface as the kubelet drives
// it, as a library: upstream's pkg/volume/csi without the volume-plugin framework.
//
// A Manager is three things:
//
//   - The plugin watcher's handler for type "CSIPlugin" (ValidatePlugin, RegisterPlugin,
//     DeRegisterPlugin: upstream's RegistrationHandler in csi_plugin.go). Registering a
//     driver asks it for NodeGetInfo and records the answer in the cluster as upstream's
//     nodeinfomanager does: the csi.volume.kubernetes.io/nodeid annotation and topology
//     labels on the Node, and the driver's entry in the CSINode object. InitializeNode is
//     the CSINode initialization upstream runs at kubelet start (initializeCSINode).
//
//   - The node operations on a registered driver: Stage and Unstage (upstream's
//     csiAttacher MountDevice and UnmountDevice, csi_attacher.go), Publish and Unpublish
//     (csiMountMgr SetUpAt and TearDownAt, csi_mounter.go), VolumeStats and Expand
//     (csi_metrics.go, expander.go). They lay out the kubelet's directories and their
//     vol_data.json files exactly as upstream, so either kubelet can take over the
//     other's volumes:
//
//     <root>/plugins/kubernetes.io/csi/<driver>/<sha256(volumeHandle)>/globalmount
//     <root>/plugins/kubernetes.io/csi/<driver>/<sha256(volumeHandle)>/vol_data.json
//     <root>/pods/<podUID>/volumes/kubernetes.io~csi/<specName>/mount
//     <root>/pods/<podUID>/volumes/kubernetes.io~csi/<specName>/vol_data.json
//
//   - A listing of what is staged and published on disk (ListStaged, ListPublished), for
//     adopting or cleaning up volumes after a restart, as upstream's reconstruction reads
//     vol_data.json.
//
// The operations take plain values: resolving claims to volumes, reading secrets and the
// CSIDriver object, waiting for attachment and deciding when a pod's volume is staged or
// published is the caller's volume manager's business. Only filesystem volumes are
// handled; raw block volumes (upstream's csiBlockMapper) are not.
package csi
