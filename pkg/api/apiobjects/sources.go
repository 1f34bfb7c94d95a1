// Package apiobjects reads, in cluster mode, the API objects that containers'
// environments refer to: secrets and config maps through a short-lived cache
// of GETs, and services through an informer over all namespaces (upstream's
// secret and configmap managers and the kubelet's service lister). Its Sources
// implements criconfig.EnvSources.
package apiobjects

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
)

// DefaultTTL is how long a secret or config map read is reused. Upstream's
// caching managers keep objects for a minute, or the node's
// node.alpha.kubernetes.io/ttl (0 in clusters under 100 nodes); env vars are
// read only when a container starts, so a short TTL costs little and keeps a
// changed secret from being missed for long.
const DefaultTTL = 5 * time.Second

// Options tunes Sources; the zero value is upstream-like.
type Options struct {
	// TTL is how long a secret or config map is reused before it is read
	// again; 0 means DefaultTTL.
	TTL time.Duration
	// NoCache reads secrets and config maps afresh every time (the "Get"
	// configMapAndSecretChangeDetectionStrategy).
	NoCache bool
	// Watch watches each secret and config map read (the "Watch" strategy, upstream's
	// default) and serves later reads from the watch; reads go to the TTL cache until
	// the watch has listed. Ignored with NoCache.
	Watch bool
	// WatchIdle is how long a watched object nobody reads stays watched; 0 means
	// DefaultWatchIdle.
	WatchIdle time.Duration
	// Clock drives the TTL; nil means the real clock.
	Clock clock.Clock
}

// Sources reads secrets, config maps and services for container environments.
type Sources struct {
	client     kubernetes.Interface
	secrets    objectCache[*v1.Secret]
	configMaps objectCache[*v1.ConfigMap]
	services   cache.SharedIndexInformer
	stop       []func() // stops the watches of secrets and config maps
}

// objectCache reads one kind of object through a cache.
type objectCache[T object] interface {
	Get(ctx context.Context, namespace, name string) (T, error)
}

// New builds Sources over client. Services are listed only once Start has run.
func New(client kubernetes.Interface, opts Options) *Sources {
	switch {
	case opts.NoCache:
		opts.TTL = 0
	case opts.TTL <= 0:
		opts.TTL = DefaultTTL
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	getSecret := func(ctx context.Context, ns, name string, o metav1.GetOptions) (*v1.Secret, error) {
		return client.CoreV1().Secrets(ns).Get(ctx, name, o)
	}
	getConfigMap := func(ctx context.Context, ns, name string, o metav1.GetOptions) (*v1.ConfigMap, error) {
		return client.CoreV1().ConfigMaps(ns).Get(ctx, name, o)
	}
	secrets := newTTLCache(getSecret, v1.Resource("secret"), opts.TTL, opts.Clock)
	configMaps := newTTLCache(getConfigMap, v1.Resource("configmap"), opts.TTL, opts.Clock)
	s := &Sources{client: client, secrets: secrets, configMaps: configMaps, services: newServiceInformer(client)}
	if opts.Watch && !opts.NoCache {
		s.watchSecretsAndConfigMaps(secrets, configMaps, opts)
	}
	return s
}

// watchSecretsAndConfigMaps puts a watch per object read in front of the TTL caches.
func (s *Sources) watchSecretsAndConfigMaps(secretsTTL *ttlCache[*v1.Secret], configMapsTTL *ttlCache[*v1.ConfigMap], opts Options) {
	idle := opts.WatchIdle
	if idle <= 0 {
		idle = DefaultWatchIdle
	}
	core := s.client.CoreV1()
	secrets := newWatchCache(secretsTTL, namespacedListWatch[*v1.SecretList](s.client, core.Secrets),
		&v1.Secret{}, v1.Resource("secret"), idle, opts.Clock)
	configMaps := newWatchCache(configMapsTTL, namespacedListWatch[*v1.ConfigMapList](s.client, core.ConfigMaps),
		&v1.ConfigMap{}, v1.Resource("configmap"), idle, opts.Clock)
	s.secrets, s.configMaps = secrets, configMaps
	s.stop = []func(){secrets.Stop, configMaps.Stop}
}

// newServiceInformer watches the services of all namespaces, except headless
// ones: they make no env vars (upstream skips them too, issue 122394).
func newServiceInformer(client kubernetes.Interface) cache.SharedIndexInformer {
	notHeadless := func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermNotEqualSelector("spec.clusterIP", v1.ClusterIPNone).String()
	}
	indexers := cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}
	informer := coreinformers.NewFilteredServiceInformer(client, metav1.NamespaceAll, 0, indexers, notHeadless)
	_ = informer.SetTransform(serviceForEnv)
	return informer
}

// serviceForEnv is the service informer's transform: it keeps only what the service
// env vars are made of (criconfig's serviceEnv reads the name, cluster IP and ports) and
// what the informer itself needs (namespace for the index, resourceVersion and UID), so
// a cluster's services cost a few hundred bytes each, not their labels, annotations
// (kubectl's last-applied-configuration), selector, managedFields and load-balancer
// status. Anything that is not a service (a DeletedFinalStateUnknown tombstone) is
// passed through.
func serviceForEnv(obj any) (any, error) {
	svc, ok := obj.(*v1.Service)
	if !ok {
		return obj, nil
	}
	kept := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Name:            svc.Name,
			Namespace:       svc.Namespace,
			UID:             svc.UID,
			ResourceVersion: svc.ResourceVersion,
		},
		Spec: v1.ServiceSpec{ClusterIP: svc.Spec.ClusterIP},
	}
	if len(svc.Spec.Ports) > 0 {
		kept.Spec.Ports = make([]v1.ServicePort, len(svc.Spec.Ports))
		for i, p := range svc.Spec.Ports {
			kept.Spec.Ports[i] = v1.ServicePort{Name: p.Name, Protocol: p.Protocol, Port: p.Port}
		}
	}
	return kept, nil
}

// Start runs the service informer until ctx ends, when the watches of secrets and config
// maps stop too; it returns at once.
func (s *Sources) Start(ctx context.Context) {
	go s.services.RunWithContext(ctx)
	go func() {
		<-ctx.Done()
		for _, stop := range s.stop {
			stop()
		}
	}()
}

// GetSecret returns the secret, reusing a read younger than the TTL. A missing
// secret is a NotFound error worded as upstream's: `secret "name" not found`.
func (s *Sources) GetSecret(ctx context.Context, namespace, name string) (*v1.Secret, error) {
	return s.secrets.Get(ctx, namespace, name)
}

// GetConfigMap is GetSecret for config maps (`configmap "name" not found`).
func (s *Sources) GetConfigMap(ctx context.Context, namespace, name string) (*v1.ConfigMap, error) {
	return s.configMaps.Get(ctx, namespace, name)
}

// ListServices returns the services of namespace the informer holds.
func (s *Sources) ListServices(namespace string) ([]*v1.Service, error) {
	objs, err := s.services.GetIndexer().ByIndex(cache.NamespaceIndex, namespace)
	if err != nil {
		return nil, err
	}
	out := make([]*v1.Service, 0, len(objs))
	for _, o := range objs {
		svc, ok := o.(*v1.Service)
		if !ok {
			return nil, fmt.Errorf("unexpected object %T in the service informer", o)
		}
		out = append(out, svc)
	}
	return out, nil
}

// ServicesSynced reports whether the informer has listed services once.
func (s *Sources) ServicesSynced() bool {
	return s.services.HasSynced()
}

// WaitForServices waits until services are listed once or ctx ends, and
// reports which. Upstream does not wait (pods from the API server fail to
// start until then and are retried); a caller may wait briefly at start-up.
func (s *Sources) WaitForServices(ctx context.Context) bool {
	return cache.WaitForCacheSync(ctx.Done(), s.services.HasSynced)
}

// GetPersistentVolumeClaim reads a claim from the API server; as upstream's volume
// manager, claims and volumes are not cached: their binding must be current.
func (s *Sources) GetPersistentVolumeClaim(ctx context.Context, namespace, name string) (*v1.PersistentVolumeClaim, error) {
	return s.client.CoreV1().PersistentVolumeClaims(namespace).Get(ctx, name, metav1.GetOptions{})
}

// GetPersistentVolume reads a persistent volume from the API server.
func (s *Sources) GetPersistentVolume(ctx context.Context, name string) (*v1.PersistentVolume, error) {
	return s.client.CoreV1().PersistentVolumes().Get(ctx, name, metav1.GetOptions{})
}

// PatchPersistentVolumeClaimStatus sends the difference between old and updated as a
// strategic merge patch of the claim's status, carrying old's resourceVersion so that
// it fails, as an update would, when the claim changed since it was read (upstream's
// PatchPVCStatus).
func (s *Sources) PatchPersistentVolumeClaimStatus(ctx context.Context, old, updated *v1.PersistentVolumeClaim) (*v1.PersistentVolumeClaim, error) {
	// The version is left out of the old side, so the patch carries it.
	before, after := old.DeepCopy(), updated.DeepCopy()
	before.ResourceVersion, after.ResourceVersion = "", old.ResourceVersion
	oldJSON, err := json.Marshal(before)
	if err != nil {
		return nil, err
	}
	newJSON, err := json.Marshal(after)
	if err != nil {
		return nil, err
	}
	patch, err := strategicpatch.CreateTwoWayMergePatch(oldJSON, newJSON, v1.PersistentVolumeClaim{})
	if err != nil {
		return nil, fmt.Errorf("patchPVCStatus failed to patch PVC %q: %w", old.Name, err)
	}
	claim, err := s.client.CoreV1().PersistentVolumeClaims(old.Namespace).Patch(ctx, old.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	if err != nil {
		return nil, fmt.Errorf("patchPVCStatus failed to patch PVC %q: %w", old.Name, err)
	}
	return claim, nil
}
