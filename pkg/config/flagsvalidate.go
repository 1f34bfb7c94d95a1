package config

import (
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// ValidateKubeletFlags checks the command-only settings.
func ValidateKubeletFlags(f *KubeletFlags) error {
	var errs []error
	bad := func(flag, rule string, got string) {
		errs = append(errs, fmt.Errorf("invalid flag: --%s: %s (got %q)", flag, rule, got))
	}
	if !filepath.IsAbs(f.RootDirectory) {
		bad("root-dir", "must be an absolute path", f.RootDirectory)
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
