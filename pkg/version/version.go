// Package version says which nodelet this is and which kubelet it stands in for.
package version

import (
	"fmt"
	"runtime"
)

// KubeletVersion is the upstream kubelet release whose behaviour and configuration nodelet
// follows; it is what nodelet reports where a kubelet reports its version.
const KubeletVersion = "v1.37.2"

// Nodelet is nodelet's own version, set at build time with
// -ldflags "-X github.com/nodelet/nodelet/pkg/version.Nodelet=...".
var Nodelet = "v0.1.0-dev"

// Short is what `nodelet --version` prints, in the shape tools parse from `kubelet --version`.
func Short() string { return fmt.Sprintf("Kubernetes %s (nodelet %s)", KubeletVersion, Nodelet) }

// Raw is the detailed --version=raw output.
func Raw() string {
	return fmt.Sprintf("kubeletVersion: %s\nnodeletVersion: %s\ngoVersion: %s\nplatform: %s/%s\n",
		KubeletVersion, Nodelet, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
