package app

import (
	"context"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/pkg/config"
	"github.com/nodelet/nodelet/pkg/node/token"
	"github.com/nodelet/nodelet/pkg/runtime/credentialprovider"
)

// serviceAccountTokensForPluginsGate lets credential provider plugins ask for the pulling
// pod's service-account token (beta, on by default in v1.37).
const serviceAccountTokensForPluginsGate = "KubeletServiceAccountTokenForCredentialProviders"

// credentialPlugins loads the image credential provider plugins when either of their
// flags is given; a config that does not load stops start-up, as upstream's kubelet
// does. In cluster mode plugins in service-account token mode get the pulling pod's
// service account and a token bound to the pod from the API server.
func credentialPlugins(ctx context.Context, opts *config.Options, cl *cluster, reg prometheus.Registerer) (*credentialprovider.Plugins, error) {
	if opts.ImageCredentialProviderConfigPath == "" && opts.ImageCredentialProviderBinDir == "" {
		klog.V(2).InfoS("Neither image credential provider config path nor bin dir is set, skipping credential provider plugin registration")
		return nil, nil
	}
	p, err := credentialprovider.Load(opts.ImageCredentialProviderConfigPath, opts.ImageCredentialProviderBinDir,
		credentialprovider.WithServiceAccountTokens(featureEnabled(opts.Config, serviceAccountTokensForPluginsGate, true)))
	if err != nil {
		return nil, fmt.Errorf("failed to register credential provider plugins: %w", err)
	}
	if cl != nil {
		tokens := token.NewManagerForClient(cl.clients.Kube, clock.RealClock{})
		go tokens.RunCleanup(ctx)
		accounts := cl.clients.Kube.CoreV1()
		p.SetServiceAccountAccess(credentialprovider.ServiceAccountAccess{
			GetServiceAccount: func(namespace, name string) (*v1.ServiceAccount, error) {
				return accounts.ServiceAccounts(namespace).Get(ctx, name, metav1.GetOptions{})
			},
			GetToken: func(namespace, name string, tr *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error) {
				return tokens.GetServiceAccountToken(ctx, namespace, name, tr)
			},
		})
	}
	if reg != nil {
		for _, c := range p.Collectors() {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	klog.InfoS("Registered image credential provider plugins", "config", opts.ImageCredentialProviderConfigPath,
		"binDir", opts.ImageCredentialProviderBinDir)
	return p, nil
}
