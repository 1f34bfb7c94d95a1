package volumes

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/node/volumes/atomic"
	"github.com/nodelet/nodelet/pkg/node/volumes/ownership"
	"github.com/nodelet/nodelet/pkg/node/volumes/payload"
)

// Plugin directories under a pod's volumes directory, named as upstream's plugins
// ("kubernetes.io/configmap" escaped), so tools that know the kubelet's layout find them.
const (
	configMapPluginDir   = "kubernetes.io~configmap"
	secretPluginDir      = "kubernetes.io~secret"
	downwardAPIPluginDir = "kubernetes.io~downward-api"
	projectedPluginDir   = "kubernetes.io~projected"
)

// API is what the volume types backed by API objects need. Standalone, nodelet has none
// of it, and such volumes fail to mount with a clear error.
type API struct {
	Objects payload.Objects
	Tokens  Tokens
	Claims  Claims
	// ClaimStatus writes claims' status when a volume was expanded; nil: no expansion.
	ClaimStatus ClaimStatusPatcher
	// Recorder records volume events (FileSystemResizeSuccessful); nil: none.
	Recorder record.EventRecorder
	// NodeAllocatable is the default of a downward-API limit a container does not set.
	NodeAllocatable func() v1.ResourceList
}

// Tokens issues service-account tokens for projected volumes and forgets a pod's
// tokens when the pod is gone.
type Tokens interface {
	payload.Tokens
	// GetServiceAccountToken issues (or reuses while fresh) a token as tr asks: the
	// tokens CSI drivers ask for in their CSIDriver's tokenRequests.
	GetServiceAccountToken(ctx context.Context, namespace, name string, tr *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error)
	DeleteServiceAccountToken(podUID types.UID)
}

// errNoAPI is the mount error of API-backed volumes without an API server.
var errNoAPI = errors.New("nodelet runs without an API server (no --kubeconfig)")

// noObjects answers every lookup with errNoAPI.
type noObjects struct{}

func (noObjects) GetConfigMap(context.Context, string, string) (*v1.ConfigMap, error) {
	return nil, errNoAPI
}
func (noObjects) GetSecret(context.Context, string, string) (*v1.Secret, error) { return nil, errNoAPI }
func (noObjects) ServiceAccountToken(context.Context, *v1.Pod, *v1.ServiceAccountTokenProjection) ([]byte, error) {
	return nil, errNoAPI
}
func (noObjects) GetServiceAccountToken(context.Context, string, string, *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error) {
	return nil, errNoAPI
}
func (noObjects) DeleteServiceAccountToken(types.UID) {}

// SetAPI gives the manager the API clients of cluster mode.
func (m *Manager) SetAPI(api API) {
	if api.Objects == nil {
		api.Objects = noObjects{}
	}
	if api.Tokens == nil {
		api.Tokens = noObjects{}
	}
	if api.NodeAllocatable == nil {
		api.NodeAllocatable = func() v1.ResourceList { return nil }
	}
	m.api = api
	m.claimStatus = api.ClaimStatus
}

// recordEvent records an event on a pod or claim when there is a recorder.
func (m *Manager) recordEvent(obj runtime.Object, eventType, reason, message string) {
	if m.api.Recorder != nil {
		m.api.Recorder.Event(obj, eventType, reason, message)
	}
}

// projectionPluginDir is the plugin directory of the file-projecting volume types.
func projectionPluginDir(vol *v1.Volume) string {
	switch {
	case vol.ConfigMap != nil:
		return configMapPluginDir
	case vol.Secret != nil:
		return secretPluginDir
	case vol.DownwardAPI != nil:
		return downwardAPIPluginDir
	case vol.Projected != nil:
		return projectedPluginDir
	}
	return ""
}

// isProjection reports the volume types whose files nodelet writes from API objects.
func isProjection(vol *v1.Volume) bool { return projectionPluginDir(vol) != "" }

// projectionPath is where a configMap, secret, downwardAPI or projected volume lives.
func (m *Manager) projectionPath(uid types.UID, vol *v1.Volume) string {
	return filepath.Join(m.podVolumesDir(uid), projectionPluginDir(vol), vol.Name)
}

// setUpProjection writes the volume's files from their API objects. Upstream backs these
// volumes with an emptyDir: on tmpfs for secrets and projected volumes (tokens and
// credentials never touch the disk), on disk for configMaps and the downward API. The
// files are swapped in atomically, so a reader sees the old set or the new one; an
// unchanged set is not rewritten.
func (m *Manager) setUpProjection(ctx context.Context, pod *v1.Pod, vol *v1.Volume) error {
	files, err := m.payload(ctx, pod, vol)
	if err != nil {
		return err
	}
	dir := m.projectionPath(pod.UID, vol)
	if vol.Secret != nil || vol.Projected != nil {
		err = m.setUpTmpfs(dir, tmpfsSize(pod, &v1.EmptyDirVolumeSource{Medium: v1.StorageMediumMemory}))
	} else {
		err = makeEmptyDir(dir)
	}
	if err != nil {
		return err
	}
	w, err := atomic.NewWriter(dir, fmt.Sprintf("pod %s/%s volume %s", pod.Namespace, pod.Name, vol.Name))
	if err != nil {
		return err
	}
	fsGroup := podFSGroup(pod)
	return w.Write(files, func(string) error {
		// Upstream applies fsGroup to every write of these volumes, whatever the policy,
		// as to a read-only volume: the group may read, not write.
		return ownership.Set(dir, fsGroup, nil, true)
	})
}

// payload builds the volume's file set from the API objects it projects.
func (m *Manager) payload(ctx context.Context, pod *v1.Pod, vol *v1.Volume) (map[string]atomic.FileProjection, error) {
	switch {
	case vol.ConfigMap != nil:
		return payload.ConfigMap(ctx, pod, vol.ConfigMap, m.api.Objects)
	case vol.Secret != nil:
		return payload.Secret(ctx, pod, vol.Secret, m.api.Objects)
	case vol.DownwardAPI != nil:
		return payload.DownwardAPI(pod, vol.DownwardAPI, m.api.NodeAllocatable())
	default:
		return payload.Projected(ctx, pod, vol.Projected, payload.ProjectedDeps{
			Objects: m.api.Objects, Tokens: m.api.Tokens, NodeAllocatable: m.api.NodeAllocatable(),
		})
	}
}

// podFSGroup is the pod's fsGroup, nil when it has none.
func podFSGroup(pod *v1.Pod) *int64 {
	if sc := pod.Spec.SecurityContext; sc != nil {
		return sc.FSGroup
	}
	return nil
}

// podFSGroupChangePolicy is the pod's fsGroupChangePolicy, nil for the default (Always).
func podFSGroupChangePolicy(pod *v1.Pod) *v1.PodFSGroupChangePolicy {
	if sc := pod.Spec.SecurityContext; sc != nil {
		return sc.FSGroupChangePolicy
	}
	return nil
}

// forgetPod drops what the manager remembers of a pod that is gone.
func (m *Manager) forgetPod(uid types.UID) {
	m.api.Tokens.DeleteServiceAccountToken(uid)
	m.claims.forget(uid)
	m.inUse.forget(uid)
	klog.V(4).InfoS("Forgot pod volumes", "podUID", uid)
}
