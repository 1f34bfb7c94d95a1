// Package dns computes the resolver configuration (nameservers, search
// domains, options) that the container runtime writes into a pod's
// /etc/resolv.conf, following the kubelet's rules for each pod DNS policy.
package dns

import (
	"errors"
	"fmt"
	"net"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/record"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
)

// Limits on the resolver configuration handed to the runtime. They are the
// API server's validation limits for pod dnsConfig (MaxDNSNameservers,
// MaxDNSSearchPaths, MaxDNSSearchListChars), which the kubelet also applies
// to what it composes from the host's resolv.conf.
const (
	maxNameservers     = 3
	maxSearchPaths     = 32
	maxSearchListChars = 2048
)

// clusterSearchDomains is how many search domains ClusterFirst pods get in
// front of the host's: <ns>.svc.<domain>, svc.<domain> and <domain>.
const clusterSearchDomains = 3

// Event reasons, as upstream emits them.
const (
	reasonMissingClusterDNS        = "MissingClusterDNS"
	reasonDNSConfigForming         = "DNSConfigForming"
	reasonCheckLimitsForResolvConf = "CheckLimitsForResolvConf"
)

// defaultDNSOptions are the options of pods that use the cluster DNS:
// ndots:5 makes "svc.ns" and "svc.ns.svc" go through the search list first.
var defaultDNSOptions = []string{"ndots:5"}

// podDNSType is the resolver configuration a pod gets, derived from its
// DNS policy and hostNetwork setting.
type podDNSType int

const (
	podDNSCluster podDNSType = iota
	podDNSHost
	podDNSNone
)

// Configurer builds the DNS configuration of pods.
type Configurer struct {
	recorder   record.EventRecorder
	nodeRef    *v1.ObjectReference
	nodeIPs    []net.IP
	clusterDNS []net.IP

	// ClusterDomain, when set, is the domain the cluster DNS serves; pods
	// using the cluster DNS search it first.
	ClusterDomain string
	// ResolverConfig is the host resolv.conf used as the base of pod DNS
	// configuration; "" means none (pods falling back to host DNS then
	// resolve through a nameserver on localhost).
	ResolverConfig string
}

// NewConfigurer returns a Configurer. recorder may be nil, in which case
// events are dropped (they are still logged).
func NewConfigurer(recorder record.EventRecorder, nodeRef *v1.ObjectReference, nodeIPs []net.IP, clusterDNS []net.IP, clusterDomain, resolverConfig string) *Configurer {
	if recorder == nil {
		recorder = discardRecorder{}
	}
	return &Configurer{
		recorder:       recorder,
		nodeRef:        nodeRef,
		nodeIPs:        nodeIPs,
		clusterDNS:     clusterDNS,
		ClusterDomain:  clusterDomain,
		ResolverConfig: resolverConfig,
	}
}

// GetPodDNS returns the resolver configuration for pod's sandbox.
func (c *Configurer) GetPodDNS(pod *v1.Pod) (*runtimeapi.DNSConfig, error) {
	config, err := c.hostDNSConfig()
	if err != nil {
		return nil, err
	}
	dnsType, err := getPodDNSType(pod)
	if err != nil {
		klog.ErrorS(err, "Failed to get DNS type for pod. Falling back to DNSClusterFirst policy.", "pod", klog.KObj(pod))
		dnsType = podDNSCluster
	}
	if dnsType == podDNSCluster && len(c.clusterDNS) == 0 {
		c.reportMissingClusterDNS(pod)
		dnsType = podDNSHost
	}
	switch dnsType {
	case podDNSNone:
		config = &runtimeapi.DNSConfig{}
	case podDNSCluster:
		c.useClusterDNS(config, pod)
	case podDNSHost:
		c.useHostDNS(config)
	}
	if pod.Spec.DNSConfig != nil {
		appendPodDNSConfig(config, pod.Spec.DNSConfig)
	}
	c.fitLimits(config, pod)
	return config, nil
}

// getPodDNSType maps the pod's DNS policy to the configuration it gets.
// ClusterFirst on the host network means Default: such pods usually cannot
// reach the cluster DNS service, so they opt in with ClusterFirstWithHostNet.
func getPodDNSType(pod *v1.Pod) (podDNSType, error) {
	switch pod.Spec.DNSPolicy {
	case v1.DNSNone:
		return podDNSNone, nil
	case v1.DNSClusterFirstWithHostNet:
		return podDNSCluster, nil
	case v1.DNSClusterFirst:
		if pod.Spec.HostNetwork {
			return podDNSHost, nil
		}
		return podDNSCluster, nil
	case v1.DNSDefault:
		return podDNSHost, nil
	}
	// The API server rejects other policies, so this is a malformed pod.
	return podDNSCluster, fmt.Errorf("invalid DNSPolicy=%v", pod.Spec.DNSPolicy)
}

// reportMissingClusterDNS tells the node and the pod that a ClusterFirst pod
// falls back to the host's DNS because no cluster DNS server is configured.
func (c *Configurer) reportMissingClusterDNS(pod *v1.Pod) {
	msg := fmt.Sprintf("kubelet does not have ClusterDNS IP configured and cannot create Pod using %q policy. Falling back to %q policy.", v1.DNSClusterFirst, v1.DNSDefault)
	c.recorder.Event(c.nodeRef, v1.EventTypeWarning, reasonMissingClusterDNS, msg)
	c.recorder.Eventf(pod, v1.EventTypeWarning, reasonMissingClusterDNS, "pod: %q. %s", podDesc(pod), msg)
}

// useClusterDNS makes the cluster DNS servers the only nameservers (they
// forward what they cannot answer), puts the cluster domains in front of the
// host's search list and replaces the host's options with ndots:5.
func (c *Configurer) useClusterDNS(config *runtimeapi.DNSConfig, pod *v1.Pod) {
	config.Servers = make([]string, 0, len(c.clusterDNS))
	for _, ip := range c.clusterDNS {
		config.Servers = append(config.Servers, ip.String())
	}
	config.Searches = c.clusterSearches(config.Searches, pod.Namespace)
	config.Options = append([]string(nil), defaultDNSOptions...)
}

// clusterSearches returns <ns>.svc.<domain> svc.<domain> <domain> followed by
// the host's search domains, without duplicates.
func (c *Configurer) clusterSearches(hostSearches []string, namespace string) []string {
	if c.ClusterDomain == "" {
		return hostSearches
	}
	searches := []string{
		fmt.Sprintf("%s.svc.%s", namespace, c.ClusterDomain),
		"svc." + c.ClusterDomain,
		c.ClusterDomain,
	}
	return omitDuplicates(append(searches, hostSearches...))
}

// useHostDNS keeps the host's configuration. Without a host resolv.conf it
// points the pod at a resolver on localhost with the root as the only search
// domain, which is what a resolver does when it has no configuration at all;
// otherwise the runtime would fill in its own default.
func (c *Configurer) useHostDNS(config *runtimeapi.DNSConfig) {
	if c.ResolverConfig != "" {
		return
	}
	for _, ip := range c.nodeIPs {
		config.Servers = append(config.Servers, loopbackFor(ip))
	}
	if len(config.Servers) == 0 {
		config.Servers = []string{"127.0.0.1"}
	}
	config.Servers = omitDuplicates(config.Servers)
	config.Searches = []string{"."}
}

// loopbackFor returns the loopback address of ip's family.
func loopbackFor(ip net.IP) string {
	if ip.To4() == nil && ip.To16() != nil {
		return "::1"
	}
	return "127.0.0.1"
}

// appendPodDNSConfig adds the pod's own dnsConfig: nameservers and searches
// are appended without duplicates, options are merged by name.
func appendPodDNSConfig(config *runtimeapi.DNSConfig, podConfig *v1.PodDNSConfig) {
	config.Servers = omitDuplicates(append(config.Servers, podConfig.Nameservers...))
	config.Searches = omitDuplicates(append(config.Searches, podConfig.Searches...))
	config.Options = mergeDNSOptions(config.Options, podConfig.Options)
}

// mergeDNSOptions merges "name" / "name:value" options with the pod's
// options. Each name appears once, where it first appeared; a later value for
// a name (the pod's over the base's) replaces the earlier one. An empty value
// is written as the bare name.
func mergeDNSOptions(base []string, podOptions []v1.PodDNSConfigOption) []string {
	var names []string
	values := map[string]string{}
	set := func(name, value string) {
		if _, seen := values[name]; !seen {
			names = append(names, name)
		}
		values[name] = value
	}
	for _, opt := range base {
		name, value, _ := strings.Cut(opt, ":")
		set(name, value)
	}
	for _, opt := range podOptions {
		value := ""
		if opt.Value != nil {
			value = *opt.Value
		}
		set(opt.Name, value)
	}
	merged := make([]string, 0, len(names))
	for _, name := range names {
		if values[name] == "" {
			merged = append(merged, name)
		} else {
			merged = append(merged, name+":"+values[name])
		}
	}
	return merged
}

// fitLimits trims the configuration to what resolvers accept, warning the
// pod about anything dropped.
func (c *Configurer) fitLimits(config *runtimeapi.DNSConfig, pod *v1.Pod) {
	config.Servers = c.fitNameserverLimits(config.Servers, pod)
	config.Searches = c.fitSearchLimits(config.Searches, pod)
}

// fitNameserverLimits keeps the first maxNameservers nameservers.
func (c *Configurer) fitNameserverLimits(servers []string, pod *v1.Pod) []string {
	if len(servers) <= maxNameservers {
		return servers
	}
	servers = servers[:maxNameservers]
	msg := fmt.Sprintf("Nameserver limits were exceeded, some nameservers have been omitted, the applied nameserver line is: %s", strings.Join(servers, " "))
	c.recorder.Event(pod, v1.EventTypeWarning, reasonDNSConfigForming, msg)
	klog.ErrorS(errors.New(msg), "Nameserver limits exceeded")
	return servers
}

// fitSearchLimits keeps at most maxSearchPaths search domains, drops any
// longer than a DNS name may be (glibc 2.28 aborts on them), then drops
// domains from the end until the search line fits maxSearchListChars.
func (c *Configurer) fitSearchLimits(searches []string, pod *v1.Pod) []string {
	if len(searches) == 0 {
		return searches
	}
	exceeded := false
	if len(searches) > maxSearchPaths {
		searches, exceeded = searches[:maxSearchPaths], true
	}
	kept := make([]string, 0, len(searches))
	for _, s := range searches {
		if len(s) > utilvalidation.DNS1123SubdomainMaxLength {
			exceeded = true
			continue
		}
		kept = append(kept, s)
	}
	for len(kept) > 0 && len(strings.Join(kept, " ")) > maxSearchListChars {
		kept, exceeded = kept[:len(kept)-1], true
	}
	if exceeded {
		msg := fmt.Sprintf("Search Line limits were exceeded, some search paths have been omitted, the applied search line is: %s", strings.Join(kept, " "))
		c.recorder.Event(pod, v1.EventTypeWarning, reasonDNSConfigForming, msg)
		klog.ErrorS(errors.New(msg), "Search Line limits exceeded")
	}
	return kept
}

// CheckLimitsForResolvConf warns the node (event and log) when the host's
// resolv.conf cannot be read or has a search line that pods would get
// trimmed: more domains than fit next to the cluster's three, a domain longer
// than a DNS name, or a line longer than the limit. It does nothing when no
// resolver file is configured.
func (c *Configurer) CheckLimitsForResolvConf() {
	if c.ResolverConfig == "" {
		return
	}
	conf, err := readResolvConf(c.ResolverConfig)
	if err != nil {
		c.recorder.Event(c.nodeRef, v1.EventTypeWarning, reasonCheckLimitsForResolvConf, err.Error())
		klog.V(4).InfoS("Check limits for resolv.conf failed", "err", err)
		return
	}
	if msg := c.resolvConfLimitViolation(conf.searches); msg != "" {
		c.recorder.Event(c.nodeRef, v1.EventTypeWarning, reasonCheckLimitsForResolvConf, msg)
		klog.V(4).InfoS("Check limits for resolv.conf failed", "eventlog", msg)
	}
}

// resolvConfLimitViolation describes the first limit the host search line
// breaks, or returns "".
func (c *Configurer) resolvConfLimitViolation(searches []string) string {
	domainLimit := maxSearchPaths
	if c.ClusterDomain != "" {
		domainLimit -= clusterSearchDomains
	}
	if len(searches) > domainLimit {
		return fmt.Sprintf("Resolv.conf file '%s' contains search line consisting of more than %d domains!", c.ResolverConfig, domainLimit)
	}
	for _, s := range searches {
		if len(s) > utilvalidation.DNS1123SubdomainMaxLength {
			return fmt.Sprintf("Resolv.conf file %q contains a search path which length is more than allowed %d chars!", c.ResolverConfig, utilvalidation.DNS1123SubdomainMaxLength)
		}
	}
	if len(strings.Join(searches, " ")) > maxSearchListChars {
		return fmt.Sprintf("Resolv.conf file '%s' contains search line which length is more than allowed %d chars!", c.ResolverConfig, maxSearchListChars)
	}
	return ""
}

// omitDuplicates returns strs without repeats, keeping first occurrences.
func omitDuplicates(strs []string) []string {
	seen := make(map[string]bool, len(strs))
	var out []string
	for _, s := range strs {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

// podDesc names a pod the way kubelet messages do: name_namespace(uid).
func podDesc(pod *v1.Pod) string {
	return fmt.Sprintf("%s_%s(%s)", pod.Name, pod.Namespace, pod.UID)
}

// discardRecorder stands in for a nil recorder.
type discardRecorder struct{}

func (discardRecorder) Event(runtime.Object, string, string, string)          {}
func (discardRecorder) Eventf(runtime.Object, string, string, string, ...any) {}
func (discardRecorder) AnnotatedEventf(runtime.Object, map[string]string, string, string, string, ...any) {
}
