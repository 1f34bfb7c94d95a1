package kubeclient

import (
	"crypto/x509"
	"fmt"
	"os"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/klog/v2"
)

// loadKubeconfig reads a kubeconfig file into a rest.Config for its current context.
func loadKubeconfig(path string) (*rest.Config, error) {
	rules := &clientcmd.ClientConfigLoadingRules{ExplicitPath: path}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("invalid kubeconfig %s: %w", path, err)
	}
	return cfg, nil
}

// clientCertificates returns the client certificate chain cfg presents, read from
// the inline data or the file it names.
func clientCertificates(cfg *rest.Config) ([]*x509.Certificate, error) {
	data := cfg.CertData
	if len(data) == 0 && cfg.CertFile != "" {
		var err error
		if data, err = os.ReadFile(cfg.CertFile); err != nil {
			return nil, err
		}
	}
	if len(data) == 0 {
		return nil, fmt.Errorf("no client certificate")
	}
	return certutil.ParseCertsPEM(data)
}

// kubeconfigCertValid reports whether the kubeconfig at path exists and carries a
// client certificate that has not expired, the test upstream applies before it
// decides to bootstrap. A kubeconfig that cannot be read or has no certificate is
// not valid (and gets replaced by bootstrapping); only a failing stat is an error.
func kubeconfigCertValid(logger klog.Logger, path string, now time.Time) (bool, error) {
	if _, err := os.Stat(path); os.IsNotExist(err) {
		return false, nil
	} else if err != nil {
		return false, fmt.Errorf("error reading existing kubeconfig %s: %w", path, err)
	}
	cfg, err := loadKubeconfig(path)
	if err != nil {
		logger.Info("Existing kubeconfig is unusable, will bootstrap", "path", path, "err", err)
		return false, nil
	}
	certs, err := clientCertificates(cfg)
	if err != nil || len(certs) == 0 {
		logger.Info("Existing kubeconfig has no usable client certificate, will bootstrap", "path", path, "err", err)
		return false, nil
	}
	for _, c := range certs {
		if now.After(c.NotAfter) {
			logger.Info("Existing kubeconfig's client certificate has expired, will bootstrap", "path", path, "notAfter", c.NotAfter)
			return false, nil
		}
	}
	return true, nil
}

// writeNodeKubeconfig writes the kubeconfig the node uses after bootstrapping: the
// bootstrap kubeconfig's cluster (server, CA) with the client certificate and key
// both read from pemPath, the cert dir's kubelet-client-current.pem. Names and
// layout match what upstream's kubelet writes.
func writeNodeKubeconfig(path string, boot *rest.Config, pemPath string) error {
	cluster := &clientcmdapi.Cluster{
		Server:                boot.Host,
		InsecureSkipTLSVerify: boot.Insecure,
		CertificateAuthority:  boot.CAFile,
		TLSServerName:         boot.ServerName,
	}
	if boot.CAFile == "" {
		cluster.CertificateAuthorityData = boot.CAData
	}
	kubeconfig := clientcmdapi.Config{
		Clusters:  map[string]*clientcmdapi.Cluster{"default-cluster": cluster},
		AuthInfos: map[string]*clientcmdapi.AuthInfo{"default-auth": {ClientCertificate: pemPath, ClientKey: pemPath}},
		Contexts: map[string]*clientcmdapi.Context{"default-context": {
			Cluster: "default-cluster", AuthInfo: "default-auth", Namespace: "default",
		}},
		CurrentContext: "default-context",
	}
	if err := clientcmd.WriteToFile(kubeconfig, path); err != nil {
		return fmt.Errorf("writing kubeconfig %s: %w", path, err)
	}
	return nil
}
