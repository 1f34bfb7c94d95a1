package criconfig

import (
	"errors"

	"google.golang.org/protobuf/proto"
	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ErrUserNamespacesNotSupported refuses a pod with hostUsers: false for which the caller
// has no user namespace mapping. The runtime manager normally refuses such a pod earlier,
// with the reason (see pkg/runtime/userns); this is the backstop.
var ErrUserNamespacesNotSupported = errors.New("can't set `spec.hostUsers: false`: no user namespace mapping for the pod (user namespaces are not enabled)")

// checkUserNamespace refuses to run a pod that asked for its own user namespace in the
// node's: that would quietly give it more privilege than it asked for.
func checkUserNamespace(pod *v1.Pod, u *runtimeapi.UserNamespace) error {
	if pod.Spec.HostUsers == nil || *pod.Spec.HostUsers {
		return nil
	}
	if u.GetMode() != runtimeapi.NamespaceMode_POD || len(u.GetUids()) == 0 || len(u.GetGids()) == 0 {
		return ErrUserNamespacesNotSupported
	}
	return nil
}

// idmapMounts gives every mount of a container in a pod user namespace the pod's ID
// mappings, as upstream does, so that the runtime makes them idmapped mounts: what host
// root owns, container root owns. The mounts are copied, not changed in place: they may
// be the volume manager's.
func idmapMounts(mounts []*runtimeapi.Mount, u *runtimeapi.UserNamespace) {
	if u.GetMode() != runtimeapi.NamespaceMode_POD {
		return
	}
	for i, m := range mounts {
		m = proto.Clone(m).(*runtimeapi.Mount)
		m.UidMappings, m.GidMappings = u.GetUids(), u.GetGids()
		mounts[i] = m
	}
}
