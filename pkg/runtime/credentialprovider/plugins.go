// Package credentialprovider runs the kubelet's image credential provider exec plugins
// (--image-credential-provider-config and --image-credential-provider-bin-dir), as
// upstream's pkg/credentialprovider/plugin does in kubelet v1.37: the config (a file, or
// a directory of them), its validation, the CredentialProviderRequest/Response exchange
// with each plugin, the per-plugin credential cache, service-account token mode and the
// kubelet_credential_provider_* metrics.
package credentialprovider

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// Plugins are the configured credential provider plugins. A nil *Plugins has none.
type Plugins struct {
	providers []*provider
	// serviceAccountTokens is the KubeletServiceAccountTokenForCredentialProviders gate.
	serviceAccountTokens bool
	access               atomic.Pointer[ServiceAccountAccess]
	metrics              *metrics
}

// Pod identifies the pod an image is pulled for: upstream takes the name, namespace
// and UID from the pod sandbox's metadata and the service account from the pod's spec.
type Pod struct {
	Namespace, Name    string
	UID                types.UID
	ServiceAccountName string
}

// ServiceAccountAccess is how service-account token mode reaches the API server. Either
// function may be nil, as in standalone mode, which makes getting credentials from a
// plugin in that mode fail for pods that have a service account.
type ServiceAccountAccess struct {
	// GetServiceAccount reads a service account (upstream reads it from the API server
	// on every request that is not answered from the cache).
	GetServiceAccount func(namespace, name string) (*v1.ServiceAccount, error)
	// GetToken creates a token for a service account; the kubelet's token manager,
	// which caches tokens, is expected here.
	GetToken func(namespace, name string, tr *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error)
}

// Credential is one set of registry credentials a plugin returned.
type Credential struct {
	// Registry is the auth key the credential was returned under, normalized to
	// host[:port][/path] (the host may hold globs).
	Registry string
	Username string
	Password string
	// ServiceAccount is the service account the plugin was given a token of; nil
	// unless the plugin is in service-account token mode and the pod has one.
	ServiceAccount *ServiceAccountRef
}

// ServiceAccountRef identifies a service account, as the image pull records note it.
type ServiceAccountRef struct {
	UID, Namespace, Name string
}

// Option changes how Load sets the plugins up.
type Option func(*options)

type options struct {
	serviceAccountTokens bool
	clock                clock.Clock
	execTimeout          time.Duration
	environ              func() []string
}

// WithServiceAccountTokens sets the KubeletServiceAccountTokenForCredentialProviders
// feature gate, on by default as in v1.37. Off, a config with tokenAttributes does not
// validate and plugins are never given tokens.
func WithServiceAccountTokens(enabled bool) Option {
	return func(o *options) { o.serviceAccountTokens = enabled }
}

// Load reads and validates the config at configPath (a file, or a directory whose
// *.json, *.yaml and *.yml files are merged in name order) and checks that every
// provider's executable is in binDir. Errors are upstream's.
func Load(configPath, binDir string, opts ...Option) (*Plugins, error) {
	o := options{serviceAccountTokens: true, clock: clock.RealClock{}, execTimeout: defaultExecTimeout, environ: os.Environ}
	for _, opt := range opts {
		opt(&o)
	}
	if err := checkBinDir(binDir); err != nil {
		return nil, err
	}
	providers, hash, err := readConfig(configPath)
	if err != nil {
		return nil, err
	}
	if errs := validateProviders(providers, o.serviceAccountTokens); len(errs) > 0 {
		return nil, fmt.Errorf("failed to validate credential provider config: %v", errs.ToAggregate())
	}
	p := &Plugins{serviceAccountTokens: o.serviceAccountTokens, metrics: newMetrics()}
	p.metrics.configInfo.WithLabelValues(hash).Set(1)
	for i := range providers {
		if err := checkExecutable(binDir, providers[i].Name); err != nil {
			return nil, err
		}
		p.providers = append(p.providers, newProvider(binDir, &providers[i], &o, p.metrics))
		klog.V(4).InfoS("Registered credential provider", "provider", providers[i].Name)
	}
	return p, nil
}

func checkBinDir(binDir string) error {
	_, err := os.Stat(binDir)
	switch {
	case os.IsNotExist(err):
		return fmt.Errorf("plugin binary directory %s did not exist", binDir)
	case err != nil:
		return fmt.Errorf("error inspecting binary directory %s: %w", binDir, err)
	}
	return nil
}

// checkExecutable checks that the provider's executable exists and may be run. Upstream
// prints the path that exec.LookPath returned on failure, which is always empty; this
// prints the path looked at.
func checkExecutable(binDir, name string) error {
	path := filepath.Join(binDir, name)
	_, err := exec.LookPath(path)
	switch {
	case errors.Is(err, os.ErrNotExist), errors.Is(err, exec.ErrNotFound):
		return fmt.Errorf("plugin binary executable %s did not exist", path)
	case err != nil:
		return fmt.Errorf("error inspecting binary executable %s: %w", path, err)
	}
	return nil
}

// SetServiceAccountAccess gives service-account token mode its access to the API
// server (cluster mode). Until it is called, that mode works as in standalone mode.
func (p *Plugins) SetServiceAccountAccess(a ServiceAccountAccess) {
	p.access.Store(&a)
}

// Collectors are the metrics to register on the kubelet's /metrics registry:
// kubelet_credential_provider_plugin_errors_total,
// kubelet_credential_provider_plugin_duration (a histogram) and
// kubelet_credential_provider_config_info.
func (p *Plugins) Collectors() []prometheus.Collector {
	if p == nil {
		return nil
	}
	return p.metrics.collectors()
}

// Credentials asks every plugin whose matchImages match image for credentials (from its
// cache or by running it, one plugin after the other) and returns those whose registry
// matches image, most specific registry first, as upstream's keyring orders them. A
// plugin that fails is logged and skipped.
//
// image is the normalized repository, without tag or digest, as upstream's image
// manager passes it (the first result of its parsers.ParseImageName):
// "docker.io/library/busybox" for "busybox:1.36". It is what the plugin receives in
// CredentialProviderRequest.image and what the cache keys on.
//
// pod may be nil (no pod); it matters only in service-account token mode. Plugin runs
// are not cancelled with ctx: a run may be shared with other callers, and is bounded by
// the one-minute exec timeout, as upstream's.
func (p *Plugins) Credentials(ctx context.Context, image string, pod *Pod) []Credential {
	if p == nil {
		return nil
	}
	var target Pod
	if pod != nil && p.serviceAccountTokens {
		target = *pod
	}
	access := p.serviceAccountAccess()
	logger := klog.FromContext(ctx)
	var kr keyring
	for _, prov := range p.providers {
		auth, sa, err := prov.provide(ctx, image, target, access)
		if err != nil {
			logProvideError(logger, err, prov, image, target)
			continue
		}
		kr.add(auth, sa, func(entry string, err error) {
			logger.Error(err, "Ignoring invalid registry in credential provider response", "provider", prov.name, "registry", entry)
		})
	}
	return kr.lookup(image)
}

func logProvideError(logger klog.Logger, err error, prov *provider, image string, pod Pod) {
	if prov.tokens == nil {
		logger.Error(err, "Failed to provide credentials for image", "provider", prov.name, "image", image)
		return
	}
	logger.Error(err, "Failed to provide credentials for image", "provider", prov.name, "image", image,
		"pod", klog.KRef(pod.Namespace, pod.Name), "podUID", pod.UID, "serviceAccount", klog.KRef(pod.Namespace, pod.ServiceAccountName))
}

func (p *Plugins) serviceAccountAccess() ServiceAccountAccess {
	if a := p.access.Load(); a != nil {
		return *a
	}
	return ServiceAccountAccess{}
}

// getServiceAccount and getToken fail, without access, as upstream's kubelet does in
// standalone mode.
func (a ServiceAccountAccess) getServiceAccount(namespace, name string) (*v1.ServiceAccount, error) {
	if a.GetServiceAccount == nil {
		return nil, errors.New("cannot get ServiceAccounts when kubelet is in standalone mode")
	}
	sa, err := a.GetServiceAccount(namespace, name)
	if err == nil && sa == nil {
		err = fmt.Errorf("service account %s/%s not found", namespace, name)
	}
	return sa, err
}

func (a ServiceAccountAccess) getToken(namespace, name string, tr *authenticationv1.TokenRequest) (string, error) {
	if a.GetToken == nil {
		return "", errors.New("cannot use TokenManager when kubelet is in standalone mode")
	}
	got, err := a.GetToken(namespace, name, tr)
	if err != nil {
		return "", err
	}
	if got == nil {
		return "", fmt.Errorf("no token returned for service account %s/%s", namespace, name)
	}
	return got.Status.Token, nil
}
