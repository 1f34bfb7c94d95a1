package imagegc

import (
	"encoding/json"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// SandboxImageFromStatus returns the sandbox (pause) image the runtime uses, from its
// verbose Status (RuntimeService.Status(ctx, true)): containerd's CRI plugin puts its
// configuration, with "sandboxImage", under the "config" key. It returns "" when the
// runtime does not say; runtimes that pin their sandbox image (containerd 1.7 and
// later, CRI-O) have it kept as a pinned image anyway.
func SandboxImageFromStatus(resp *runtimeapi.StatusResponse) string {
	raw, ok := resp.GetInfo()["config"]
	if !ok {
		return ""
	}
	var config struct {
		SandboxImage string `json:"sandboxImage"`
	}
	if err := json.Unmarshal([]byte(raw), &config); err != nil {
		return ""
	}
	return config.SandboxImage
}
