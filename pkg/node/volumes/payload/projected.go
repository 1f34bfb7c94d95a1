package payload

import (
	"context"
	"errors"
	"fmt"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"

	"github.com/nodelet/nodelet/pkg/node/volumes/atomic"
)

// Tokens issues the service-account token of a projected
// serviceAccountToken source (audience, expiration, bound to the pod).
type Tokens interface {
	ServiceAccountToken(ctx context.Context, pod *v1.Pod, src *v1.ServiceAccountTokenProjection) ([]byte, error)
}

// TrustBundles gives the PEM trust anchors of clusterTrustBundle sources,
// with upstream's clustertrustbundle.Manager methods: by bundle name, or by
// signer and label selector, merged. allowMissing (the source's optional)
// turns "no such bundle" into an empty result.
type TrustBundles interface {
	GetTrustAnchorsByName(ctx context.Context, name string, allowMissing bool) ([]byte, error)
	GetTrustAnchorsBySigner(ctx context.Context, signerName string, labelSelector *metav1.LabelSelector, allowMissing bool) ([]byte, error)
}

// ProjectedDeps are what the sources of a projected volume read from.
type ProjectedDeps struct {
	Objects Objects
	Tokens  Tokens
	// NodeAllocatable stands in for unset container limits in downwardAPI
	// sources.
	NodeAllocatable v1.ResourceList
	// TrustBundles, when nil, makes clusterTrustBundle sources fail with a
	// "not supported" error.
	TrustBundles TrustBundles
}

// tokenMode is the mode of credential files (token, trust anchors) when the
// pod has a single runAsUser or an fsGroup: only that user may read it,
// and fsGroup ownership later adds the group.
const tokenMode int32 = 0o600

// Projected returns the files of a projected volume: the union of its
// sources' files. A source that fails does not stop the others; all errors
// are returned together and no files.
func Projected(ctx context.Context, pod *v1.Pod, src *v1.ProjectedVolumeSource, deps ProjectedDeps) (Files, error) {
	if err := duplicatePaths(src.Sources); err != nil {
		return nil, err
	}
	p := projection{
		ctx:  ctx,
		pod:  pod,
		deps: deps,
		mode: modeOr(src.DefaultMode, DefaultMode),
	}
	p.credentialUser, p.credentialMode = credentialOwner(pod, p.mode)
	files := Files{}
	var errs []error
	for i := range src.Sources {
		part, err := p.source(&src.Sources[i])
		if err != nil {
			errs = append(errs, err)
			continue
		}
		// Keys of whole-object sources may overlap; the later source wins,
		// as upstream.
		for path, f := range part {
			files[path] = f
		}
	}
	if err := utilerrors.NewAggregate(errs); err != nil {
		return nil, err
	}
	return files, nil
}

// projection holds what every source of one projected volume shares.
type projection struct {
	ctx  context.Context
	pod  *v1.Pod
	deps ProjectedDeps
	mode int32 // the volume's defaultMode
	// credentialUser and credentialMode own the token and trust-anchor files.
	credentialUser *int64
	credentialMode int32
}

func (p *projection) source(s *v1.VolumeProjection) (Files, error) {
	ns := p.pod.Namespace
	switch {
	case s.Secret != nil:
		return secretFiles(p.ctx, ns, s.Secret.Name, s.Secret.Items, isTrue(s.Secret.Optional), p.mode, p.deps.Objects)
	case s.ConfigMap != nil:
		return configMapFiles(p.ctx, ns, s.ConfigMap.Name, s.ConfigMap.Items, isTrue(s.ConfigMap.Optional), p.mode, p.deps.Objects)
	case s.DownwardAPI != nil:
		return downwardAPIFiles(p.pod, s.DownwardAPI.Items, p.mode, p.deps.NodeAllocatable)
	case s.ServiceAccountToken != nil:
		return p.token(s.ServiceAccountToken)
	case s.ClusterTrustBundle != nil:
		return p.trustBundle(s.ClusterTrustBundle)
	case s.PodCertificate != nil:
		return nil, errors.New("podCertificate projection is not supported by nodelet")
	}
	return Files{}, nil
}

func (p *projection) token(src *v1.ServiceAccountTokenProjection) (Files, error) {
	if p.deps.Tokens == nil {
		return nil, fmt.Errorf("cannot get a service account token for %s/%s: no API server", p.pod.Namespace, p.pod.Name)
	}
	token, err := p.deps.Tokens.ServiceAccountToken(p.ctx, p.pod, src)
	if err != nil {
		return nil, err
	}
	return Files{src.Path: p.credential(token)}, nil
}

func (p *projection) trustBundle(src *v1.ClusterTrustBundleProjection) (Files, error) {
	if p.deps.TrustBundles == nil {
		return nil, errors.New("ClusterTrustBundle projection is not supported by nodelet")
	}
	var anchors []byte
	var err error
	switch {
	case src.Name != nil:
		anchors, err = p.deps.TrustBundles.GetTrustAnchorsByName(p.ctx, *src.Name, isTrue(src.Optional))
	case src.SignerName != nil:
		anchors, err = p.deps.TrustBundles.GetTrustAnchorsBySigner(p.ctx, *src.SignerName, src.LabelSelector, isTrue(src.Optional))
	default:
		err = errors.New("ClusterTrustBundle projection requires either name or signerName to be set")
	}
	if err != nil {
		return nil, err
	}
	return Files{src.Path: p.credential(anchors)}, nil
}

func (p *projection) credential(data []byte) atomic.FileProjection {
	return atomic.FileProjection{Data: data, Mode: p.credentialMode, FsUser: p.credentialUser}
}

// credentialOwner gives token and trust-anchor files to the user every
// container of the pod runs as (if they all set the same runAsUser), mode
// 0600; when the pod has an fsGroup they are 0600 too, and fsGroup
// ownership makes them 0640. Otherwise they keep the volume's defaultMode.
func credentialOwner(pod *v1.Pod, defaultMode int32) (*int64, int32) {
	user := singleRunAsUser(pod)
	if user != nil || (pod.Spec.SecurityContext != nil && pod.Spec.SecurityContext.FSGroup != nil) {
		return user, tokenMode
	}
	return nil, defaultMode
}

// singleRunAsUser is the effective runAsUser shared by every container
// (init, regular, ephemeral), nil when one has none or two differ.
func singleRunAsUser(pod *v1.Pod) *int64 {
	var podUser *int64
	if sc := pod.Spec.SecurityContext; sc != nil {
		podUser = sc.RunAsUser
	}
	var user *int64
	check := func(sc *v1.SecurityContext) bool {
		u := podUser
		if sc != nil && sc.RunAsUser != nil {
			u = sc.RunAsUser
		}
		if u == nil || (user != nil && *user != *u) {
			return false
		}
		user = u
		return true
	}
	for _, c := range pod.Spec.InitContainers {
		if !check(c.SecurityContext) {
			return nil
		}
	}
	for _, c := range pod.Spec.Containers {
		if !check(c.SecurityContext) {
			return nil
		}
	}
	for _, c := range pod.Spec.EphemeralContainers {
		if !check(c.SecurityContext) {
			return nil
		}
	}
	if user == nil {
		return nil
	}
	u := *user
	return &u
}

// duplicatePaths refuses two sources naming the same file explicitly (an
// item path, a token or trust-anchor path), which API validation rejects as
// "conflicting duplicate paths"; static pods skip that validation. Keys of
// configMaps and secrets projected whole are not known here and may
// overlap, as upstream allows.
func duplicatePaths(sources []v1.VolumeProjection) error {
	seen := map[string]bool{}
	for i, s := range sources {
		for _, path := range explicitPaths(&s) {
			if path == "" {
				continue // validation's business, and the writer refuses it
			}
			if seen[path] {
				return fmt.Errorf("projected volume sources[%d]: path %q: conflicting duplicate paths", i, path)
			}
			seen[path] = true
		}
	}
	return nil
}

func explicitPaths(s *v1.VolumeProjection) []string {
	var paths []string
	keyPaths := func(items []v1.KeyToPath) {
		for _, item := range items {
			paths = append(paths, item.Path)
		}
	}
	switch {
	case s.Secret != nil:
		keyPaths(s.Secret.Items)
	case s.ConfigMap != nil:
		keyPaths(s.ConfigMap.Items)
	case s.DownwardAPI != nil:
		for _, item := range s.DownwardAPI.Items {
			paths = append(paths, item.Path)
		}
	case s.ServiceAccountToken != nil:
		paths = append(paths, s.ServiceAccountToken.Path)
	case s.ClusterTrustBundle != nil:
		paths = append(paths, s.ClusterTrustBundle.Path)
	case s.PodCertificate != nil:
		for _, p := range []string{s.PodCertificate.CredentialBundlePath, s.PodCertificate.KeyPath, s.PodCertificate.CertificateChainPath} {
			if p != "" {
				paths = append(paths, p)
			}
		}
	}
	return paths
}
