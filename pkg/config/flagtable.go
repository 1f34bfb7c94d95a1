package config

// flagKind says how a flag is wired.
type flagKind int

const (
	// configFlag sets a KubeletConfiguration field; Field is its JSON path (dots for nesting),
	// e.g. "syncFrequency", "authentication.anonymous.enabled", "evictionHard".
	configFlag flagKind = iota
	// commandFlag is a kubelet-only flag (upstream's KubeletFlags, not in the config file),
	// e.g. --kubeconfig, --hostname-override, --node-ip, --root-dir, --lock-file.
	commandFlag
)

// flagSpec describes one upstream kubelet flag.
type flagSpec struct {
	Name       string // flag name without dashes
	Kind       flagKind
	Field      string // JSON path in KubeletConfiguration for configFlag; "" otherwise
	Type       string // value type, one of the names documented above upstreamFlags
	Default    string // upstream's default as it would print in --help ("" if none)
	Usage      string // one short line in our own words
	Deprecated string // non-empty if upstream marks the flag deprecated: what to use instead
}

// upstreamFlags lists every flag of upstream's kubelet v1.37 (Linux build), in upstream's
// registration order: KubeletFlags.AddFlags (container-runtime options first), then
// AddKubeletConfigFlags (which includes the logging flags of component-base's logs API),
// then the global flags (cAdvisor's housekeeping interval).
//
// Not in the table, wired by hand: --config, --config-dir, --version (takes an optional
// value: --version, --version=raw, --version=vX.Y.Z) and -h/--help. The Windows-only
// flags --windows-service and --windows-priorityclass are not registered on Linux and are
// left out too.
//
// Type is one of:
//
//	bool                  true/false; a bare --flag means true
//	string                any text (IP addresses, paths, URLs, quantities, enums)
//	int32, int64          decimal integers
//	float64               decimal number (no flag uses it today)
//	duration              Go duration syntax: 300ms, 10s, 2h45m
//	stringSlice           comma-separated list: a,b,c
//	mapStringString       comma-separated key=value pairs: k=v,k2=v2
//	mapStringBool         feature-gate syntax: Name=true,Other=false
//	taints                comma-separated key=value:Effect (or key:Effect) list
//	int32Slice            comma-separated integers (no flag uses it today)
//	mapStringSliceString  comma-separated name:value pairs; a repeated name (or a repeated
//	                      flag) appends to that name's list (--manifest-url-header only)
//
// Parsing quirks that the Type alone does not tell (see the comments on those rows):
//   - --eviction-hard and --eviction-soft write their pairs as signal<quantity
//     (memory.available<1Gi), not signal=quantity.
//   - --cpu-manager-policy-options and --topology-manager-policy-options take one
//     key=value per flag occurrence and do not split on commas (repeat the flag instead).
//   - --node-labels accepts a bare key (empty value) besides key=value.
//   - --reserved-memory uses "numa:res=qty,res=qty" per NUMA node, nodes separated by ';'
//     or by repeating the flag; its field is a list of {numaNode, limits}.
//   - --log-text-info-buffer-size / --log-json-info-buffer-size take a resource quantity
//     (512, 1K, 2Ki, 3M); the field is a resource.QuantityValue.
//   - v, vmodule and log-flush-frequency are listed as commandFlag: upstream registers
//     them through the logging API (they write logging.verbosity, logging.vmodule and
//     logging.flushFrequency, whose Go types are not plain values) but keeps them as
//     permanent, non-deprecated command-line flags driving klog. -v is the shorthand of
//     --v. A value given on the command line must win over the config file's logging.*.
//
// Default is what upstream prints after "(default ...)" in --help: strings without quotes,
// durations as Go prints them (1m0s), string slices in brackets ([pods]), and "" where
// upstream prints no default (zero values, empty lists and maps). Flags whose default
// comes from KubeletConfiguration use upstream's command-line defaults, which differ from
// the config-file defaults for --anonymous-auth, --authentication-token-webhook,
// --authorization-mode and --read-only-port.
//
// Deprecated: upstream marks every flag that sets a KubeletConfiguration field deprecated
// ("set it in the --config file") except v, vmodule, log-flush-frequency, provider-id and
// fail-cgroupv1. Upstream's --help still lists its deprecated flags, with the note.
var upstreamFlags = []flagSpec{
	// --- KubeletFlags: container runtime options ---
	{Name: "runtime-cgroups", Kind: commandFlag, Type: "string",
		Usage: "Absolute name of the cgroup to create and run the container runtime in."},
	{Name: "image-credential-provider-config", Kind: commandFlag, Type: "string",
		Usage: "Credential provider plugin config file, or a directory of such files merged in name order."},
	{Name: "image-credential-provider-bin-dir", Kind: commandFlag, Type: "string",
		Usage: "Directory holding the credential provider plugin binaries."},

	// --- KubeletFlags ---
	// (--config and --config-dir come here upstream; wired by hand.)
	{Name: "kubeconfig", Kind: commandFlag, Type: "string",
		Usage: "Kubeconfig file for reaching the API server; without it the kubelet runs standalone."},
	{Name: "bootstrap-kubeconfig", Kind: commandFlag, Type: "string",
		Usage: "Kubeconfig used to request a client certificate when --kubeconfig does not exist yet."},
	{Name: "hostname-override", Kind: commandFlag, Type: "string",
		Usage: "Name to identify this node by instead of the machine's hostname."},
	{Name: "node-ip", Kind: commandFlag, Type: "string",
		Usage: "Node IP address, or a comma-separated IPv4/IPv6 pair; '::' prefers the default IPv6 address."},
	{Name: "cert-dir", Kind: commandFlag, Type: "string", Default: "/var/lib/kubelet/pki",
		Usage: "Directory for TLS certificates; ignored when --tls-cert-file and --tls-private-key-file are set."},
	{Name: "cloud-provider", Kind: commandFlag, Type: "string",
		Usage: "Cloud provider name: empty for none, 'external' for an out-of-tree provider."},
	{Name: "root-dir", Kind: commandFlag, Type: "string", Default: "/var/lib/kubelet",
		Usage: "Directory where the kubelet keeps its state (volume mounts, plugins, pod data)."},
	// Upstream keeps this in KubeletFlags; it is OR-ed with the config file's seccompDefault.
	{Name: "seccomp-default", Kind: commandFlag, Type: "bool",
		Usage: "Use the RuntimeDefault seccomp profile for every workload by default."},
	// ConfigurationMap: a bare "key" (no '=') means an empty value.
	{Name: "node-labels", Kind: commandFlag, Type: "mapStringString",
		Usage: "Labels (key=value, comma-separated) to set when registering the node; kubernetes.io keys are restricted."},
	{Name: "lock-file", Kind: commandFlag, Type: "string",
		Usage: "<Alpha> File the kubelet locks to keep other kubelet processes out."},
	{Name: "exit-on-lock-contention", Kind: commandFlag, Type: "bool",
		Usage: "Exit when another process contends for the --lock-file."},
	{Name: "minimum-container-ttl-duration", Kind: commandFlag, Type: "duration",
		Usage:      "Minimum age of a finished container before it may be garbage collected.",
		Deprecated: "use --eviction-hard or --eviction-soft instead; will be removed"},
	{Name: "maximum-dead-containers-per-container", Kind: commandFlag, Type: "int32", Default: "1",
		Usage:      "How many old instances of each container to keep.",
		Deprecated: "use --eviction-hard or --eviction-soft instead; will be removed"},
	{Name: "maximum-dead-containers", Kind: commandFlag, Type: "int32", Default: "-1",
		Usage:      "How many old container instances to keep in total; negative disables the limit.",
		Deprecated: "use --eviction-hard or --eviction-soft instead; will be removed"},
	{Name: "experimental-mounter-path", Kind: commandFlag, Type: "string",
		Usage:      "[Experimental] Path of the mount binary; empty uses the default mount.",
		Deprecated: "will be removed; use CSI drivers instead"},
	{Name: "experimental-allocatable-ignore-eviction", Kind: commandFlag, Type: "bool",
		Usage:      "Leave hard eviction thresholds out of the Node Allocatable calculation.",
		Deprecated: "will be removed; no replacement"},

	// --- AddKubeletConfigFlags ---
	{Name: "enable-server", Kind: configFlag, Field: "enableServer", Type: "bool", Default: "true",
		Usage:      "Run the kubelet's HTTPS server.",
		Deprecated: "set enableServer in the --config file instead"},
	{Name: "fail-swap-on", Kind: configFlag, Field: "failSwapOn", Type: "bool", Default: "true",
		Usage:      "Refuse to start when swap is enabled on the node.",
		Deprecated: "set failSwapOn in the --config file instead"},
	{Name: "fail-cgroupv1", Kind: configFlag, Field: "failCgroupV1", Type: "bool", Default: "true",
		Usage: "Refuse to start on a host that uses cgroup v1."},
	{Name: "pod-manifest-path", Kind: configFlag, Field: "staticPodPath", Type: "string",
		Usage:      "Directory of static pod files (dot files skipped), or a single static pod file.",
		Deprecated: "set staticPodPath in the --config file instead"},
	{Name: "sync-frequency", Kind: configFlag, Field: "syncFrequency", Type: "duration", Default: "1m0s",
		Usage:      "Longest interval between syncs of running containers with their config.",
		Deprecated: "set syncFrequency in the --config file instead"},
	{Name: "file-check-frequency", Kind: configFlag, Field: "fileCheckFrequency", Type: "duration", Default: "20s",
		Usage:      "How often to re-read static pod files.",
		Deprecated: "set fileCheckFrequency in the --config file instead"},
	{Name: "http-check-frequency", Kind: configFlag, Field: "httpCheckFrequency", Type: "duration", Default: "20s",
		Usage:      "How often to re-fetch the --manifest-url.",
		Deprecated: "set httpCheckFrequency in the --config file instead"},
	{Name: "manifest-url", Kind: configFlag, Field: "staticPodURL", Type: "string",
		Usage:      "URL to fetch extra static pod specs from.",
		Deprecated: "set staticPodURL in the --config file instead"},
	// Upstream syntax: 'a:hello,b:again' and the flag may repeat; same names accumulate.
	{Name: "manifest-url-header", Kind: configFlag, Field: "staticPodURLHeader", Type: "mapStringSliceString",
		Usage:      "HTTP headers (name:value, comma-separated, repeatable) sent when fetching --manifest-url.",
		Deprecated: "set staticPodURLHeader in the --config file instead"},
	{Name: "address", Kind: configFlag, Field: "address", Type: "string", Default: "0.0.0.0",
		Usage:      "IP address the kubelet server listens on ('0.0.0.0' or '::' for all).",
		Deprecated: "set address in the --config file instead"},
	{Name: "port", Kind: configFlag, Field: "port", Type: "int32", Default: "10250",
		Usage:      "Port the kubelet server listens on.",
		Deprecated: "set port in the --config file instead"},
	{Name: "read-only-port", Kind: configFlag, Field: "readOnlyPort", Type: "int32", Default: "0",
		Usage:      "Port of the unauthenticated read-only server; 0 turns it off. (Upstream's kubelet started without --config defaults to 10255.)",
		Deprecated: "set readOnlyPort in the --config file instead"},
	{Name: "container-runtime-endpoint", Kind: configFlag, Field: "containerRuntimeEndpoint", Type: "string", Default: "unix:///run/containerd/containerd.sock",
		Usage:      "CRI runtime service endpoint, e.g. unix:///path/to/runtime.sock.",
		Deprecated: "set containerRuntimeEndpoint in the --config file instead"},
	{Name: "image-service-endpoint", Kind: configFlag, Field: "imageServiceEndpoint", Type: "string",
		Usage:      "CRI image service endpoint; defaults to --container-runtime-endpoint.",
		Deprecated: "set imageServiceEndpoint in the --config file instead"},
	{Name: "anonymous-auth", Kind: configFlag, Field: "authentication.anonymous.enabled", Type: "bool", Default: "false",
		Usage:      "Let requests no authenticator rejects through as system:anonymous. (Upstream's kubelet started without --config defaults to true.)",
		Deprecated: "set authentication.anonymous.enabled in the --config file instead"},
	{Name: "authentication-token-webhook", Kind: configFlag, Field: "authentication.webhook.enabled", Type: "bool", Default: "true",
		Usage:      "Authenticate bearer tokens with the TokenReview API. (Upstream's kubelet started without --config defaults to false.)",
		Deprecated: "set authentication.webhook.enabled in the --config file instead"},
	{Name: "authentication-token-webhook-cache-ttl", Kind: configFlag, Field: "authentication.webhook.cacheTTL", Type: "duration", Default: "2m0s",
		Usage:      "How long to cache token review answers.",
		Deprecated: "set authentication.webhook.cacheTTL in the --config file instead"},
	{Name: "client-ca-file", Kind: configFlag, Field: "authentication.x509.clientCAFile", Type: "string",
		Usage:      "CA bundle for verifying client certificates; the cert's CommonName becomes the user.",
		Deprecated: "set authentication.x509.clientCAFile in the --config file instead"},
	{Name: "authorization-mode", Kind: configFlag, Field: "authorization.mode", Type: "string", Default: "Webhook",
		Usage:      "Authorization mode of the kubelet server: AlwaysAllow or Webhook (SubjectAccessReview). (Upstream's kubelet started without --config defaults to AlwaysAllow.)",
		Deprecated: "set authorization.mode in the --config file instead"},
	{Name: "authorization-webhook-cache-authorized-ttl", Kind: configFlag, Field: "authorization.webhook.cacheAuthorizedTTL", Type: "duration", Default: "5m0s",
		Usage:      "How long to cache 'allowed' answers from the authorization webhook.",
		Deprecated: "set authorization.webhook.cacheAuthorizedTTL in the --config file instead"},
	{Name: "authorization-webhook-cache-unauthorized-ttl", Kind: configFlag, Field: "authorization.webhook.cacheUnauthorizedTTL", Type: "duration", Default: "30s",
		Usage:      "How long to cache 'denied' answers from the authorization webhook.",
		Deprecated: "set authorization.webhook.cacheUnauthorizedTTL in the --config file instead"},
	{Name: "tls-cert-file", Kind: configFlag, Field: "tlsCertFile", Type: "string",
		Usage:      "Serving certificate (chain appended); a self-signed one goes to --cert-dir if unset.",
		Deprecated: "set tlsCertFile in the --config file instead"},
	{Name: "tls-private-key-file", Kind: configFlag, Field: "tlsPrivateKeyFile", Type: "string",
		Usage:      "Private key for --tls-cert-file.",
		Deprecated: "set tlsPrivateKeyFile in the --config file instead"},
	{Name: "rotate-server-certificates", Kind: configFlag, Field: "serverTLSBootstrap", Type: "bool",
		Usage:      "Request serving certificates from the API server and renew them before expiry.",
		Deprecated: "set serverTLSBootstrap in the --config file instead"},
	{Name: "tls-cipher-suites", Kind: configFlag, Field: "tlsCipherSuites", Type: "stringSlice",
		Usage:      "Cipher suites the server allows (comma-separated); Go's defaults if empty.",
		Deprecated: "set tlsCipherSuites in the --config file instead"},
	{Name: "tls-min-version", Kind: configFlag, Field: "tlsMinVersion", Type: "string",
		Usage:      "Lowest TLS version served: VersionTLS10, VersionTLS11, VersionTLS12 or VersionTLS13.",
		Deprecated: "set tlsMinVersion in the --config file instead"},
	{Name: "rotate-certificates", Kind: configFlag, Field: "rotateCertificates", Type: "bool",
		Usage:      "Renew the client certificate from the API server before it expires.",
		Deprecated: "set rotateCertificates in the --config file instead"},
	{Name: "registry-qps", Kind: configFlag, Field: "registryPullQPS", Type: "int32", Default: "5",
		Usage:      "Image pull rate limit per second; 0 means unlimited.",
		Deprecated: "set registryPullQPS in the --config file instead"},
	{Name: "registry-burst", Kind: configFlag, Field: "registryBurst", Type: "int32", Default: "10",
		Usage:      "Burst size of image pulls above --registry-qps.",
		Deprecated: "set registryBurst in the --config file instead"},
	{Name: "event-qps", Kind: configFlag, Field: "eventRecordQPS", Type: "int32", Default: "50",
		Usage:      "Rate limit for creating events, per second.",
		Deprecated: "set eventRecordQPS in the --config file instead"},
	{Name: "event-burst", Kind: configFlag, Field: "eventBurst", Type: "int32", Default: "100",
		Usage:      "Burst size of event creation above --event-qps.",
		Deprecated: "set eventBurst in the --config file instead"},
	{Name: "enable-debugging-handlers", Kind: configFlag, Field: "enableDebuggingHandlers", Type: "bool", Default: "true",
		Usage:      "Serve the log, exec, attach and port-forward endpoints.",
		Deprecated: "set enableDebuggingHandlers in the --config file instead"},
	{Name: "contention-profiling", Kind: configFlag, Field: "enableContentionProfiling", Type: "bool",
		Usage:      "Turn on block profiling when profiling is on.",
		Deprecated: "set enableContentionProfiling in the --config file instead"},
	{Name: "healthz-port", Kind: configFlag, Field: "healthzPort", Type: "int32", Default: "10248",
		Usage:      "Port of the local healthz endpoint; 0 turns it off.",
		Deprecated: "set healthzPort in the --config file instead"},
	{Name: "healthz-bind-address", Kind: configFlag, Field: "healthzBindAddress", Type: "string", Default: "127.0.0.1",
		Usage:      "IP address the healthz server listens on ('0.0.0.0' or '::' for all).",
		Deprecated: "set healthzBindAddress in the --config file instead"},
	{Name: "oom-score-adj", Kind: configFlag, Field: "oomScoreAdj", Type: "int32", Default: "-999",
		Usage:      "oom_score_adj of the kubelet process, between -1000 and 1000.",
		Deprecated: "set oomScoreAdj in the --config file instead"},
	{Name: "cluster-domain", Kind: configFlag, Field: "clusterDomain", Type: "string",
		Usage:      "Cluster DNS domain added to containers' search domains.",
		Deprecated: "set clusterDomain in the --config file instead"},
	{Name: "volume-plugin-dir", Kind: configFlag, Field: "volumePluginDir", Type: "string", Default: "/usr/libexec/kubernetes/kubelet-plugins/volume/exec/",
		Usage:      "Directory searched for third-party (flexvolume) volume plugins.",
		Deprecated: "set volumePluginDir in the --config file instead"},
	{Name: "cluster-dns", Kind: configFlag, Field: "clusterDNS", Type: "stringSlice",
		Usage:      "DNS server IPs (comma-separated) given to pods with dnsPolicy=ClusterFirst.",
		Deprecated: "set clusterDNS in the --config file instead"},
	{Name: "streaming-connection-idle-timeout", Kind: configFlag, Field: "streamingConnectionIdleTimeout", Type: "duration", Default: "4h0m0s",
		Usage:      "Close exec/attach/port-forward streams idle this long; 0 never.",
		Deprecated: "set streamingConnectionIdleTimeout in the --config file instead"},
	{Name: "node-status-update-frequency", Kind: configFlag, Field: "nodeStatusUpdateFrequency", Type: "duration", Default: "10s",
		Usage:      "How often the node status is computed and posted.",
		Deprecated: "set nodeStatusUpdateFrequency in the --config file instead"},
	{Name: "minimum-image-ttl-duration", Kind: configFlag, Field: "imageMinimumGCAge", Type: "duration", Default: "2m0s",
		Usage:      "Minimum age of an unused image before it may be garbage collected.",
		Deprecated: "set imageMinimumGCAge in the --config file instead"},
	{Name: "image-gc-high-threshold", Kind: configFlag, Field: "imageGCHighThresholdPercent", Type: "int32", Default: "85",
		Usage:      "Disk usage percent above which image garbage collection always runs; 100 disables it.",
		Deprecated: "set imageGCHighThresholdPercent in the --config file instead"},
	{Name: "image-gc-low-threshold", Kind: configFlag, Field: "imageGCLowThresholdPercent", Type: "int32", Default: "80",
		Usage:      "Disk usage percent that image garbage collection frees down to.",
		Deprecated: "set imageGCLowThresholdPercent in the --config file instead"},
	{Name: "volume-stats-agg-period", Kind: configFlag, Field: "volumeStatsAggPeriod", Type: "duration", Default: "1m0s",
		Usage:      "How often volume disk usage is measured; negative disables it.",
		Deprecated: "set volumeStatsAggPeriod in the --config file instead"},
	{Name: "feature-gates", Kind: configFlag, Field: "featureGates", Type: "mapStringBool",
		Usage:      "Feature gates to switch, as Name=true|false pairs.",
		Deprecated: "set featureGates in the --config file instead"},
	{Name: "kubelet-cgroups", Kind: configFlag, Field: "kubeletCgroups", Type: "string",
		Usage:      "Absolute name of the cgroup to create and run the kubelet in.",
		Deprecated: "set kubeletCgroups in the --config file instead"},
	{Name: "system-cgroups", Kind: configFlag, Field: "systemCgroups", Type: "string",
		Usage:      "Absolute cgroup for non-kernel processes not already in a cgroup below '/'.",
		Deprecated: "set systemCgroups in the --config file instead"},
	{Name: "provider-id", Kind: configFlag, Field: "providerID", Type: "string",
		Usage: "ID the cloud provider (machine database) knows this node by."},
	{Name: "cgroups-per-qos", Kind: configFlag, Field: "cgroupsPerQOS", Type: "bool", Default: "true",
		Usage:      "Create the QoS-class and per-pod cgroup hierarchy.",
		Deprecated: "set cgroupsPerQOS in the --config file instead"},
	{Name: "cgroup-driver", Kind: configFlag, Field: "cgroupDriver", Type: "string", Default: "cgroupfs",
		Usage:      "How the kubelet manages cgroups: 'cgroupfs' or 'systemd'.",
		Deprecated: "set cgroupDriver in the --config file instead"},
	{Name: "cgroup-root", Kind: configFlag, Field: "cgroupRoot", Type: "string",
		Usage:      "Root cgroup for pods; empty leaves it to the container runtime.",
		Deprecated: "set cgroupRoot in the --config file instead"},
	{Name: "cpu-manager-policy", Kind: configFlag, Field: "cpuManagerPolicy", Type: "string", Default: "none",
		Usage:      "CPU manager policy: 'none' or 'static'.",
		Deprecated: "set cpuManagerPolicy in the --config file instead"},
	// NoSplit map upstream: one key=value per occurrence, commas stay in the value.
	{Name: "cpu-manager-policy-options", Kind: configFlag, Field: "cpuManagerPolicyOptions", Type: "mapStringString",
		Usage:      "Key=value options fine-tuning the CPU manager policy.",
		Deprecated: "set cpuManagerPolicyOptions in the --config file instead"},
	{Name: "cpu-manager-reconcile-period", Kind: configFlag, Field: "cpuManagerReconcilePeriod", Type: "duration", Default: "10s",
		Usage:      "<Alpha> How often the CPU manager reconciles assignments.",
		Deprecated: "set cpuManagerReconcilePeriod in the --config file instead"},
	{Name: "qos-reserved", Kind: configFlag, Field: "qosReserved", Type: "mapStringString",
		Usage:      "<Alpha> Resource=percent pairs (only memory) reserved per QoS class; needs the QOSReserved gate.",
		Deprecated: "set qosReserved in the --config file instead"},
	{Name: "topology-manager-policy", Kind: configFlag, Field: "topologyManagerPolicy", Type: "string", Default: "none",
		Usage:      "Topology manager policy: 'none', 'best-effort', 'restricted' or 'single-numa-node'.",
		Deprecated: "set topologyManagerPolicy in the --config file instead"},
	{Name: "runtime-request-timeout", Kind: configFlag, Field: "runtimeRequestTimeout", Type: "duration", Default: "2m0s",
		Usage:      "Timeout of runtime calls other than pull, logs, exec and attach.",
		Deprecated: "set runtimeRequestTimeout in the --config file instead"},
	{Name: "hairpin-mode", Kind: configFlag, Field: "hairpinMode", Type: "string", Default: "promiscuous-bridge",
		Usage:      "Hairpin NAT setup: 'promiscuous-bridge', 'hairpin-veth' or 'none'.",
		Deprecated: "set hairpinMode in the --config file instead"},
	{Name: "max-pods", Kind: configFlag, Field: "maxPods", Type: "int32", Default: "110",
		Usage:      "Most pods this node may run.",
		Deprecated: "set maxPods in the --config file instead"},
	{Name: "pod-cidr", Kind: configFlag, Field: "podCIDR", Type: "string",
		Usage:      "Pod IP range in standalone mode; the control plane assigns it otherwise.",
		Deprecated: "set podCIDR in the --config file instead"},
	{Name: "pod-max-pids", Kind: configFlag, Field: "podPidsLimit", Type: "int64", Default: "-1",
		Usage:      "Most processes per pod; -1 uses the node's allocatable PID count.",
		Deprecated: "set podPidsLimit in the --config file instead"},
	{Name: "resolv-conf", Kind: configFlag, Field: "resolvConf", Type: "string", Default: "/etc/resolv.conf",
		Usage:      "Resolver config file that container DNS settings start from.",
		Deprecated: "set resolvConf in the --config file instead"},
	{Name: "runonce", Kind: configFlag, Field: "runOnce", Type: "bool",
		Usage:      "Start the pods from static files or the manifest URL, then exit; excludes --enable-server.",
		Deprecated: "set runOnce in the --config file instead"},
	{Name: "cpu-cfs-quota", Kind: configFlag, Field: "cpuCFSQuota", Type: "bool", Default: "true",
		Usage:      "Enforce container CPU limits with CFS quota.",
		Deprecated: "set cpuCFSQuota in the --config file instead"},
	{Name: "cpu-cfs-quota-period", Kind: configFlag, Field: "cpuCFSQuotaPeriod", Type: "duration", Default: "100ms",
		Usage:      "CFS quota period (cpu.cfs_period_us).",
		Deprecated: "set cpuCFSQuotaPeriod in the --config file instead"},
	{Name: "enable-controller-attach-detach", Kind: configFlag, Field: "enableControllerAttachDetach", Type: "bool", Default: "true",
		Usage:      "Leave volume attach/detach to the attach/detach controller.",
		Deprecated: "set enableControllerAttachDetach in the --config file instead"},
	{Name: "make-iptables-util-chains", Kind: configFlag, Field: "makeIPTablesUtilChains", Type: "bool", Default: "true",
		Usage:      "Create the iptables hint chain on the host.",
		Deprecated: "set makeIPTablesUtilChains in the --config file instead"},
	{Name: "container-log-max-size", Kind: configFlag, Field: "containerLogMaxSize", Type: "string", Default: "10Mi",
		Usage:      "Size (e.g. 10Mi) at which a container log file is rotated.",
		Deprecated: "set containerLogMaxSize in the --config file instead"},
	{Name: "container-log-max-files", Kind: configFlag, Field: "containerLogMaxFiles", Type: "int32", Default: "5",
		Usage:      "Most log files kept per container; at least 2.",
		Deprecated: "set containerLogMaxFiles in the --config file instead"},
	{Name: "allowed-unsafe-sysctls", Kind: configFlag, Field: "allowedUnsafeSysctls", Type: "stringSlice",
		Usage:      "Unsafe sysctls or patterns ending in * that pods may set (comma-separated).",
		Deprecated: "set allowedUnsafeSysctls in the --config file instead"},
	{Name: "node-status-max-images", Kind: configFlag, Field: "nodeStatusMaxImages", Type: "int32", Default: "50",
		Usage:      "Most images listed in the node status; -1 for no cap.",
		Deprecated: "set nodeStatusMaxImages in the --config file instead"},
	{Name: "kernel-memcg-notification", Kind: configFlag, Field: "kernelMemcgNotification", Type: "bool",
		Usage:      "Detect memory eviction thresholds through kernel memcg notifications instead of polling.",
		Deprecated: "set kernelMemcgNotification in the --config file instead"},
	{Name: "local-storage-capacity-isolation", Kind: configFlag, Field: "localStorageCapacityIsolation", Type: "bool", Default: "true",
		Usage:      "Enforce limits on local ephemeral storage.",
		Deprecated: "set localStorageCapacityIsolation in the --config file instead"},
	{Name: "max-open-files", Kind: configFlag, Field: "maxOpenFiles", Type: "int64", Default: "1000000",
		Usage:      "Open file limit of the kubelet process.",
		Deprecated: "set maxOpenFiles in the --config file instead"},
	{Name: "kube-api-content-type", Kind: configFlag, Field: "contentType", Type: "string", Default: "application/vnd.kubernetes.protobuf",
		Usage:      "Content type of requests to the API server.",
		Deprecated: "set contentType in the --config file instead"},
	{Name: "kube-api-qps", Kind: configFlag, Field: "kubeAPIQPS", Type: "int32", Default: "50",
		Usage:      "API server request rate limit per second (events and heartbeats excluded).",
		Deprecated: "set kubeAPIQPS in the --config file instead"},
	{Name: "kube-api-burst", Kind: configFlag, Field: "kubeAPIBurst", Type: "int32", Default: "100",
		Usage:      "Burst size of API server requests above --kube-api-qps.",
		Deprecated: "set kubeAPIBurst in the --config file instead"},
	{Name: "serialize-image-pulls", Kind: configFlag, Field: "serializeImagePulls", Type: "bool", Default: "true",
		Usage:      "Pull one image at a time.",
		Deprecated: "set serializeImagePulls in the --config file instead"},
	// Upstream spells the pairs signal<quantity, e.g. memory.available<1Gi.
	{Name: "eviction-hard", Kind: configFlag, Field: "evictionHard", Type: "mapStringString", Default: "imagefs.available<15%,imagefs.inodesFree<5%,memory.available<100Mi,nodefs.available<10%,nodefs.inodesFree<5%",
		Usage:      "Thresholds (signal<quantity) that trigger pod eviction at once.",
		Deprecated: "set evictionHard in the --config file instead"},
	// Upstream spells the pairs signal<quantity, e.g. memory.available<1.5Gi.
	{Name: "eviction-soft", Kind: configFlag, Field: "evictionSoft", Type: "mapStringString",
		Usage:      "Thresholds (signal<quantity) that trigger eviction after their grace period.",
		Deprecated: "set evictionSoft in the --config file instead"},
	{Name: "eviction-soft-grace-period", Kind: configFlag, Field: "evictionSoftGracePeriod", Type: "mapStringString",
		Usage:      "Grace periods (signal=duration) a soft eviction threshold must hold first.",
		Deprecated: "set evictionSoftGracePeriod in the --config file instead"},
	{Name: "eviction-pressure-transition-period", Kind: configFlag, Field: "evictionPressureTransitionPeriod", Type: "duration", Default: "5m0s",
		Usage:      "How long to wait before leaving an eviction pressure condition.",
		Deprecated: "set evictionPressureTransitionPeriod in the --config file instead"},
	{Name: "eviction-max-pod-grace-period", Kind: configFlag, Field: "evictionMaxPodGracePeriod", Type: "int32",
		Usage:      "Longest grace period (seconds) for soft evictions; negative uses the pod's own.",
		Deprecated: "set evictionMaxPodGracePeriod in the --config file instead"},
	{Name: "eviction-minimum-reclaim", Kind: configFlag, Field: "evictionMinimumReclaim", Type: "mapStringString",
		Usage:      "Least amount (signal=quantity) each eviction must reclaim.",
		Deprecated: "set evictionMinimumReclaim in the --config file instead"},
	{Name: "pods-per-core", Kind: configFlag, Field: "podsPerCore", Type: "int32",
		Usage:      "Pods allowed per CPU core, capped by --max-pods; 0 disables the limit.",
		Deprecated: "set podsPerCore in the --config file instead"},
	{Name: "protect-kernel-defaults", Kind: configFlag, Field: "protectKernelDefaults", Type: "bool",
		Usage:      "Fail if kernel tunables differ from the kubelet's expectations instead of changing them.",
		Deprecated: "set protectKernelDefaults in the --config file instead"},
	{Name: "reserved-cpus", Kind: configFlag, Field: "reservedSystemCPUs", Type: "string",
		Usage:      "CPUs or ranges kept for system and Kubernetes daemons; overrides cpu in the reserved maps.",
		Deprecated: "set reservedSystemCPUs in the --config file instead"},
	{Name: "topology-manager-scope", Kind: configFlag, Field: "topologyManagerScope", Type: "string", Default: "container",
		Usage:      "Granularity of topology alignment: 'container' or 'pod'.",
		Deprecated: "set topologyManagerScope in the --config file instead"},
	// NoSplit map upstream: one key=value per occurrence, commas stay in the value.
	{Name: "topology-manager-policy-options", Kind: configFlag, Field: "topologyManagerPolicyOptions", Type: "mapStringString",
		Usage:      "Key=value options fine-tuning the topology manager policy.",
		Deprecated: "set topologyManagerPolicyOptions in the --config file instead"},
	{Name: "system-reserved", Kind: configFlag, Field: "systemReserved", Type: "mapStringString",
		Usage:      "Resources (cpu, memory, ephemeral-storage, pid as name=quantity) kept for OS daemons.",
		Deprecated: "set systemReserved in the --config file instead"},
	{Name: "kube-reserved", Kind: configFlag, Field: "kubeReserved", Type: "mapStringString",
		Usage:      "Resources (cpu, memory, ephemeral-storage, pid as name=quantity) kept for Kubernetes daemons.",
		Deprecated: "set kubeReserved in the --config file instead"},
	{Name: "enforce-node-allocatable", Kind: configFlag, Field: "enforceNodeAllocatable", Type: "stringSlice", Default: "[pods]",
		Usage:      "Allocatable levels to enforce: none, pods, system-reserved[-compressible], kube-reserved[-compressible].",
		Deprecated: "set enforceNodeAllocatable in the --config file instead"},
	{Name: "system-reserved-cgroup", Kind: configFlag, Field: "systemReservedCgroup", Type: "string",
		Usage:      "Absolute cgroup of the OS daemons covered by --system-reserved.",
		Deprecated: "set systemReservedCgroup in the --config file instead"},
	{Name: "kube-reserved-cgroup", Kind: configFlag, Field: "kubeReservedCgroup", Type: "string",
		Usage:      "Absolute cgroup of the Kubernetes daemons covered by --kube-reserved.",
		Deprecated: "set kubeReservedCgroup in the --config file instead"},

	// Logging flags (component-base logs API, registered here by AddKubeletConfigFlags).
	{Name: "logging-format", Kind: configFlag, Field: "logging.format", Type: "string", Default: "text",
		Usage:      "Log output format: \"json\" or \"text\".",
		Deprecated: "set logging.format in the --config file instead"},
	// Upstream field: logging.flushFrequency (a TimeOrMetaDuration). See the note above.
	{Name: "log-flush-frequency", Kind: commandFlag, Type: "duration", Default: "5s",
		Usage: "Longest time between log flushes."},
	// Upstream field: logging.verbosity (a uint32); shorthand -v. See the note above.
	{Name: "v", Kind: commandFlag, Type: "int32",
		Usage: "Log verbosity level."},
	// Upstream field: logging.vmodule (a list of {filePattern, verbosity}). See the note above.
	{Name: "vmodule", Kind: commandFlag, Type: "string",
		Usage: "Per-file verbosity as comma-separated pattern=N pairs (text format only)."},
	{Name: "log-text-split-stream", Kind: configFlag, Field: "logging.options.text.splitStream", Type: "bool",
		Usage:      "[Alpha] Text format: errors to stderr, info to stdout; needs the LoggingAlphaOptions gate.",
		Deprecated: "set logging.options.text.splitStream in the --config file instead"},
	// Value is a resource quantity (512, 1K, 2Ki); the field is a resource.QuantityValue.
	{Name: "log-text-info-buffer-size", Kind: configFlag, Field: "logging.options.text.infoBufferSize", Type: "string",
		Usage:      "[Alpha] Text format with split streams: bytes of info output to buffer; 0 disables.",
		Deprecated: "set logging.options.text.infoBufferSize in the --config file instead"},
	{Name: "log-json-split-stream", Kind: configFlag, Field: "logging.options.json.splitStream", Type: "bool",
		Usage:      "[Alpha] JSON format: errors to stderr, info to stdout; needs the LoggingAlphaOptions gate.",
		Deprecated: "set logging.options.json.splitStream in the --config file instead"},
	// Value is a resource quantity (512, 1K, 2Ki); the field is a resource.QuantityValue.
	{Name: "log-json-info-buffer-size", Kind: configFlag, Field: "logging.options.json.infoBufferSize", Type: "string",
		Usage:      "[Alpha] JSON format with split streams: bytes of info output to buffer; 0 disables.",
		Deprecated: "set logging.options.json.infoBufferSize in the --config file instead"},

	{Name: "memory-manager-policy", Kind: configFlag, Field: "memoryManagerPolicy", Type: "string", Default: "None",
		Usage:      "Memory manager policy: 'None' or 'Static'.",
		Deprecated: "set memoryManagerPolicy in the --config file instead"},
	// Syntax "0:memory=1Gi,hugepages-1M=2Gi"; NUMA nodes separated by ';' or by repeating
	// the flag. The field is []MemoryReservation{numaNode, limits}; needs its own parser.
	{Name: "reserved-memory", Kind: configFlag, Field: "reservedMemory", Type: "string",
		Usage:      "Per-NUMA-node memory reservations, e.g. 0:memory=1Gi,hugepages-1M=2Gi (repeatable).",
		Deprecated: "set reservedMemory in the --config file instead"},
	{Name: "register-node", Kind: configFlag, Field: "registerNode", Type: "bool", Default: "true",
		Usage:      "Register this node with the API server (needs --kubeconfig).",
		Deprecated: "set registerNode in the --config file instead"},
	{Name: "register-with-taints", Kind: configFlag, Field: "registerWithTaints", Type: "taints",
		Usage:      "Taints (key=value:Effect, comma-separated) to register the node with.",
		Deprecated: "set registerWithTaints in the --config file instead"},

	// --- Global flags ---
	// cAdvisor's flag, kept for node e2e tests; the kubelet overrides cAdvisor's default.
	{Name: "housekeeping-interval", Kind: commandFlag, Type: "duration", Default: "10s",
		Usage: "How often cAdvisor collects container stats."},
	// (--version and -h/--help come here upstream; wired by hand.)
}
