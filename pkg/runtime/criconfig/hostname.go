package criconfig

import (
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/klog/v2"
)

// FormatPod names a pod the way the kubelet's messages do: "name_namespace(uid)".
func FormatPod(pod *v1.Pod) string {
	return fmt.Sprintf("%s_%s(%s)", pod.Name, pod.Namespace, pod.UID)
}

// hostnameMaxLen is the kernel's limit: 64 bytes including the terminating NUL.
const hostnameMaxLen = 63

// fqdnMaxLen is the limit on a FQDN used as the kernel hostname (the utsname
// nodename field is 65 bytes).
const fqdnMaxLen = 64

// GeneratePodHostNameAndDomain returns the pod's hostname (spec.hostname, or
// the pod name, cut to 63 characters) and its domain
// "<subdomain>.<namespace>.svc.<clusterDomain>", empty without a subdomain.
// spec.hostnameOverride (GA in v1.37) replaces both: the pod gets exactly that
// name and no domain. See PodKernelHostname for the name the sandbox actually
// gets, which depends on setHostnameAsFQDN.
func GeneratePodHostNameAndDomain(pod *v1.Pod, clusterDomain string) (hostname, hostDomain string, err error) {
	if o := pod.Spec.HostnameOverride; o != nil {
		if msgs := validation.IsDNS1123Subdomain(*o); len(msgs) != 0 {
			return "", "", fmt.Errorf("pod HostnameOverride %q is not a valid DNS subdomain: %s", *o, strings.Join(msgs, ";"))
		}
		hostname, err = truncatePodHostname(pod.Name, *o)
		return hostname, "", err
	}
	hostname = pod.Name
	if pod.Spec.Hostname != "" {
		if msgs := validation.IsDNS1123Label(pod.Spec.Hostname); len(msgs) != 0 {
			return "", "", fmt.Errorf("pod Hostname %q is not a valid DNS label: %s", pod.Spec.Hostname, strings.Join(msgs, ";"))
		}
		hostname = pod.Spec.Hostname
	}
	hostname, err = truncatePodHostname(pod.Name, hostname)
	if err != nil {
		return "", "", err
	}
	if pod.Spec.Subdomain != "" {
		if msgs := validation.IsDNS1123Label(pod.Spec.Subdomain); len(msgs) != 0 {
			return "", "", fmt.Errorf("pod Subdomain %q is not a valid DNS label: %s", pod.Spec.Subdomain, strings.Join(msgs, ";"))
		}
		hostDomain = fmt.Sprintf("%s.%s.svc.%s", pod.Spec.Subdomain, pod.Namespace, clusterDomain)
	}
	return hostname, hostDomain, nil
}

// truncatePodHostname cuts a hostname (typically a long pod name) to 63
// characters without leaving a trailing '-' or '.'.
func truncatePodHostname(podName, hostname string) (string, error) {
	if len(hostname) <= hostnameMaxLen {
		return hostname, nil
	}
	truncated := hostname[:hostnameMaxLen]
	klog.ErrorS(nil, "Hostname for pod was too long, truncated it", "podName", podName, "hostnameMaxLen", hostnameMaxLen, "truncatedHostname", truncated)
	truncated = strings.TrimRight(truncated, "-.")
	if truncated == "" {
		return "", fmt.Errorf("hostname for pod %q was invalid: %q", podName, hostname)
	}
	return truncated, nil
}

// PodKernelHostname returns the hostname the pod's UTS namespace gets: the
// FQDN "<hostname>.<hostDomain>" when setHostnameAsFQDN is true and there is
// a domain, the short hostname otherwise.
func PodKernelHostname(hostname, hostDomain string, setHostnameAsFQDN *bool) (string, error) {
	if hostDomain == "" || setHostnameAsFQDN == nil || !*setHostnameAsFQDN {
		return hostname, nil
	}
	fqdn := hostname + "." + hostDomain
	if len(fqdn) > fqdnMaxLen {
		return "", fmt.Errorf("failed to construct FQDN from pod hostname and cluster domain, FQDN %s is too long (%d characters is the max, %d characters requested)", fqdn, fqdnMaxLen, len(fqdn))
	}
	return fqdn, nil
}
