package kubeletserver

import (
	"net"
	"time"

	kc "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"
)

// Options are the server's settings; OptionsFromConfig fills them from the (defaulted)
// KubeletConfiguration and the command line.
type Options struct {
	// Address and Port of the HTTPS server (address, port). ReadOnlyPort > 0 also serves
	// the unauthenticated read-only subset on Address:ReadOnlyPort (readOnlyPort).
	Address      string
	Port         int32
	ReadOnlyPort int32
	// NodeName is the Node that authorization asks about and the serving CSR names.
	NodeName string
	// Hostname and NodeIPs are what a self-signed certificate is valid for.
	Hostname string
	NodeIPs  []net.IP
	// CertDir holds the self-signed pair or the bootstrapped serving certificate (--cert-dir).
	CertDir string

	TLSCertFile         string
	TLSPrivateKeyFile   string
	TLSCipherSuites     []string
	TLSMinVersion       string
	TLSCurvePreferences []int32
	ServerTLSBootstrap  bool

	// Authentication: client certificates signed by ClientCAFile, bearer tokens through
	// the TokenReview API (answers cached TokenCacheTTL), anonymous requests.
	ClientCAFile          string
	WebhookAuthentication bool
	TokenCacheTTL         time.Duration
	Anonymous             bool

	// AuthorizationMode is "AlwaysAllow" or "Webhook" (SubjectAccessReview; allowed
	// answers cached CacheAuthorizedTTL, the others CacheUnauthorizedTTL).
	AuthorizationMode    string
	CacheAuthorizedTTL   time.Duration
	CacheUnauthorizedTTL time.Duration

	EnableDebuggingHandlers   bool
	EnableProfilingHandler    bool
	EnableContentionProfiling bool
	EnableDebugFlagsHandler   bool
	EnableSystemLogHandler    bool
	EnableSystemLogQuery      bool

	// Configz is the running configuration, served at /configz.
	Configz *kc.KubeletConfiguration
	// Statusz and Flagz serve /statusz and /flagz with the debugging handlers (feature
	// gates ComponentStatusz and ComponentFlagz, beta and on by default since 1.36).
	Statusz, Flagz bool
	// Flags are the command-line flags and their values /flagz lists; nil: no /flagz.
	Flags map[string]string
	// NodeLogDir is the directory /logs/ serves; "" is upstream's /var/log/.
	NodeLogDir string
	// FileCheckInterval is how often the certificate, key and client CA files are looked
	// at for changes; 0 is one minute (upstream's resync period).
	FileCheckInterval time.Duration
}

// OptionsFromConfig reads the server's settings from a defaulted configuration. hostname
// and nodeIPs come from --hostname-override and --node-ip (or the machine), certDir from
// --cert-dir.
func OptionsFromConfig(cfg *kc.KubeletConfiguration, nodeName, hostname string, nodeIPs []net.IP, certDir string) Options {
	authn, authz := cfg.Authentication, cfg.Authorization
	return Options{
		Address:                   cfg.Address,
		Port:                      cfg.Port,
		ReadOnlyPort:              cfg.ReadOnlyPort,
		NodeName:                  nodeName,
		Hostname:                  hostname,
		NodeIPs:                   nodeIPs,
		CertDir:                   certDir,
		TLSCertFile:               cfg.TLSCertFile,
		TLSPrivateKeyFile:         cfg.TLSPrivateKeyFile,
		TLSCipherSuites:           cfg.TLSCipherSuites,
		TLSMinVersion:             cfg.TLSMinVersion,
		TLSCurvePreferences:       cfg.TLSCurvePreferences,
		ServerTLSBootstrap:        cfg.ServerTLSBootstrap,
		ClientCAFile:              authn.X509.ClientCAFile,
		WebhookAuthentication:     ptr.Deref(authn.Webhook.Enabled, false),
		TokenCacheTTL:             authn.Webhook.CacheTTL.Duration,
		Anonymous:                 ptr.Deref(authn.Anonymous.Enabled, false),
		AuthorizationMode:         string(authz.Mode),
		CacheAuthorizedTTL:        authz.Webhook.CacheAuthorizedTTL.Duration,
		CacheUnauthorizedTTL:      authz.Webhook.CacheUnauthorizedTTL.Duration,
		EnableDebuggingHandlers:   ptr.Deref(cfg.EnableDebuggingHandlers, false),
		EnableProfilingHandler:    ptr.Deref(cfg.EnableProfilingHandler, false),
		EnableContentionProfiling: cfg.EnableContentionProfiling,
		EnableDebugFlagsHandler:   ptr.Deref(cfg.EnableDebugFlagsHandler, false),
		EnableSystemLogHandler:    ptr.Deref(cfg.EnableSystemLogHandler, false),
		EnableSystemLogQuery:      ptr.Deref(cfg.EnableSystemLogQuery, false),
		Configz:                   cfg,
		Statusz:                   featureGate(cfg, "ComponentStatusz", true),
		Flagz:                     featureGate(cfg, "ComponentFlagz", true),
	}
}

// featureGate is a feature gate's value, def when the configuration does not name it.
func featureGate(cfg *kc.KubeletConfiguration, name string, def bool) bool {
	if on, ok := cfg.FeatureGates[name]; ok {
		return on
	}
	return def
}
