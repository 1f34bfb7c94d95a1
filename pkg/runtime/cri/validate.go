package cri

import (
	"strings"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The checks below reject answers that break the CRI contract, so the rest
// of nodelet can rely on the fields the kubelet relies on.

func checkVersion(resp *runtimeapi.VersionResponse) error {
	fields := []struct{ name, value string }{
		{"Version", resp.GetVersion()},
		{"RuntimeName", resp.GetRuntimeName()},
		{"RuntimeVersion", resp.GetRuntimeVersion()},
		{"RuntimeApiVersion", resp.GetRuntimeApiVersion()},
	}
	var missing []string
	for _, f := range fields {
		if f.value == "" {
			missing = append(missing, f.name)
		}
	}
	if len(missing) > 0 {
		return invalidResponse("Version", ErrIncompleteVersion, "missing %s", strings.Join(missing, ", "))
	}
	return nil
}

// checkRuntimeStatus requires the two conditions the kubelet reads to decide
// whether the node is ready.
func checkRuntimeStatus(resp *runtimeapi.StatusResponse) error {
	if resp.GetStatus() == nil {
		return invalidResponse("Status", ErrMissingRuntimeConditions, "status is nil")
	}
	seen := map[string]bool{}
	for _, c := range resp.GetStatus().GetConditions() {
		seen[c.GetType()] = true
	}
	var missing []string
	for _, want := range []string{runtimeapi.RuntimeReady, runtimeapi.NetworkReady} {
		if !seen[want] {
			missing = append(missing, want)
		}
	}
	if len(missing) > 0 {
		return invalidResponse("Status", ErrMissingRuntimeConditions, "missing %s", strings.Join(missing, ", "))
	}
	return nil
}

func checkContainerStatus(requestedID string, s *runtimeapi.ContainerStatus) error {
	const method = "ContainerStatus"
	if s == nil {
		return invalidResponse(method, ErrContainerStatusNil, "container %q", requestedID)
	}
	if err := checkStatusID(method, requestedID, s.GetId()); err != nil {
		return err
	}
	switch {
	case s.GetMetadata().GetName() == "":
		return invalidResponse(method, ErrIncompleteStatus, "metadata.name is not set for container %q", requestedID)
	case s.GetCreatedAt() == 0:
		return invalidResponse(method, ErrIncompleteStatus, "createdAt is not set for container %q", requestedID)
	case s.GetImage().GetImage() == "":
		return invalidResponse(method, ErrIncompleteStatus, "image is not set for container %q", requestedID)
	case s.GetImageRef() == "":
		return invalidResponse(method, ErrIncompleteStatus, "imageRef is not set for container %q", requestedID)
	}
	return nil
}

func checkPodSandboxStatus(requestedID string, s *runtimeapi.PodSandboxStatus) error {
	const method = "PodSandboxStatus"
	if s == nil {
		return invalidResponse(method, ErrPodSandboxStatusNil, "sandbox %q", requestedID)
	}
	if err := checkStatusID(method, requestedID, s.GetId()); err != nil {
		return err
	}
	md := s.GetMetadata()
	switch {
	case md.GetName() == "" || md.GetNamespace() == "" || md.GetUid() == "":
		return invalidResponse(method, ErrIncompleteStatus, "metadata name, namespace or uid is not set for sandbox %q", requestedID)
	case s.GetCreatedAt() == 0:
		return invalidResponse(method, ErrIncompleteStatus, "createdAt is not set for sandbox %q", requestedID)
	}
	return nil
}

// checkStatusID requires the status to describe the object asked for. A
// status ID that extends the requested one is accepted: runtimes such as
// containerd resolve unambiguous ID prefixes (as crictl users type them) and
// answer with the full ID.
func checkStatusID(method, requested, got string) error {
	if got == "" {
		return invalidResponse(method, ErrIncompleteStatus, "status ID is not set for %q", requested)
	}
	if requested != "" && !strings.HasPrefix(got, requested) {
		return invalidResponse(method, ErrStatusIDMismatch, "asked for %q, got %q", requested, got)
	}
	return nil
}

func checkImage(requested string, img *runtimeapi.Image) error {
	if img == nil {
		return nil // the image is not present: a valid answer
	}
	if img.GetId() == "" || img.GetSize() == 0 {
		return invalidResponse("ImageStatus", ErrIncompleteImage, "image %q has id %q and size %d", requested, img.GetId(), img.GetSize())
	}
	return nil
}

func checkURL(method, url string) error {
	if url == "" {
		return invalidResponse(method, ErrMissingURL, "")
	}
	return nil
}
