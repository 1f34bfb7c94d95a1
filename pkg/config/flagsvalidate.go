package config

import (
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	kubeletapis "k8s.io/kubelet/pkg/apis"
)

// ExternalCloudProvider is --cloud-provider's value for an out-of-tree cloud provider.
const ExternalCloudProvider = "external"

// ValidateKubeletFlags checks the command-only settings.
func ValidateKubeletFlags(f *KubeletFlags) error {
	var errs []error
	bad := func(flag, rule string, got string) {
		errs = append(errs, fmt.Errorf("invalid flag: --%s: %s (got %q)", flag, rule, got))
	}
	if !filepath.IsAbs(f.RootDirectory) {
		bad("root-dir", "must be an absolute path", f.RootDirectory)
	}
	if f.CloudProvider != "" && f.CloudProvider != ExternalCloudProvider {
		// Upstream's kubelet has no built-in providers any more; its words.
		errs = append(errs, fmt.Errorf("cloud provider %q was specified, but built-in cloud providers are disabled. Please set --cloud-provider=external and migrate to an external cloud provider", f.CloudProvider))
	}
	if f.ExitOnLockContention && f.LockFilePath == "" {
		bad("exit-on-lock-contention", "requires --lock-file", "true")
	}
	if f.HostnameOverride != "" {
		for _, msg := range validation.IsDNS1123Subdomain(strings.ToLower(strings.TrimSpace(f.HostnameOverride))) {
			bad("hostname-override", msg, f.HostnameOverride)
		}
	}
	if f.NodeIP != "" {
		ips := strings.Split(f.NodeIP, ",")
		if len(ips) > 2 {
			bad("node-ip", "must hold at most one IPv4 and one IPv6 address", f.NodeIP)
		}
		for _, ip := range ips {
			if net.ParseIP(strings.TrimSpace(ip)) == nil {
				bad("node-ip", "must be a valid IP address or a comma-separated dual-stack pair", f.NodeIP)
				break
			}
		}
	}
	if unknown := restrictedNodeLabels(f.NodeLabels); len(unknown) > 0 {
		errs = append(errs, fmt.Errorf("unknown 'kubernetes.io' or 'k8s.io' labels specified with --node-labels: %v\n--node-labels in the 'kubernetes.io' namespace must begin with an allowed prefix (%s) or be in the specifically allowed set (%s)",
			unknown, strings.Join(kubeletapis.KubeletLabelNamespaces(), ", "), strings.Join(kubeletapis.KubeletLabels(), ", ")))
	}
	for k, v := range f.NodeLabels {
		for _, msg := range validation.IsQualifiedName(k) {
			bad("node-labels", "label key "+msg, k)
		}
		for _, msg := range validation.IsValidLabelValue(v) {
			bad("node-labels", "label value "+msg, v)
		}
	}
	return errors.Join(errs...)
}

// restrictedNodeLabels lists, sorted, the --node-labels keys in the kubernetes.io and
// k8s.io namespaces that the NodeRestriction admission plugin does not let a kubelet
// set on its own Node.
func restrictedNodeLabels(labels map[string]string) []string {
	var out []string
	for k := range labels {
		ns, _, ok := strings.Cut(k, "/")
		if !ok || kubeletapis.IsKubeletLabel(k) {
			continue
		}
		if ns == "kubernetes.io" || strings.HasSuffix(ns, ".kubernetes.io") || ns == "k8s.io" || strings.HasSuffix(ns, ".k8s.io") {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}
