package images

import (
	"errors"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/sets"
	kc "k8s.io/kubelet/config/v1beta1"
)

// CredentialVerificationPolicy decides whether a pod must prove it may pull an image that
// is already on the node (upstream's ImagePullPolicyEnforcer, the
// imagePullCredentialsVerificationPolicy setting). image is the container's image field;
// pulledByKubelet says a pulled record or a pull intent exists for it, i.e. the kubelet
// pulled it at some point, so it is not a preloaded image.
type CredentialVerificationPolicy interface {
	RequireCredentialVerificationForImage(image string, pulledByKubelet bool) bool
}

// CredentialVerificationPolicyFunc is a CredentialVerificationPolicy.
type CredentialVerificationPolicyFunc func(image string, pulledByKubelet bool) bool

// RequireCredentialVerificationForImage implements CredentialVerificationPolicy.
func (f CredentialVerificationPolicyFunc) RequireCredentialVerificationForImage(image string, pulledByKubelet bool) bool {
	return f(image, pulledByKubelet)
}

// NewCredentialVerificationPolicy builds the policy the configuration names: "" is the
// default, NeverVerifyPreloadedImages. allowlist is preloadedImagesVerificationAllowlist,
// only allowed (and only read) with NeverVerifyAllowlistedImages; upstream's
// configuration validation refuses it with any other policy, and so does this.
func NewCredentialVerificationPolicy(policy kc.ImagePullCredentialsVerificationPolicy, allowlist []string) (CredentialVerificationPolicy, error) {
	if policy == "" {
		policy = kc.NeverVerifyPreloadedImages
	}
	if len(allowlist) > 0 && policy != kc.NeverVerifyAllowlistedImages {
		return nil, errors.New("invalid configuration: can't set `preloadedImagesVerificationAllowlist` if `imagePullCredentialsVertificationPolicy` is not \"NeverVerifyAllowlistedImages\"")
	}
	switch policy {
	case kc.NeverVerify:
		// Anyone on the node may use any image on the node.
		return CredentialVerificationPolicyFunc(func(string, bool) bool { return false }), nil
	case kc.NeverVerifyPreloadedImages:
		// Images the kubelet did not pull are usable by all; pulled ones are verified.
		return CredentialVerificationPolicyFunc(func(_ string, pulledByKubelet bool) bool { return pulledByKubelet }), nil
	case kc.NeverVerifyAllowlistedImages:
		return newAllowlistPolicy(allowlist)
	case kc.AlwaysVerify:
		return CredentialVerificationPolicyFunc(func(string, bool) bool { return true }), nil
	}
	return nil, fmt.Errorf("invalid configuration: option %q specified for imagePullCredentialsVerificationPolicy. Valid options are %q, %q, %q or %q",
		policy, kc.NeverVerify, kc.NeverVerifyPreloadedImages, kc.NeverVerifyAllowlistedImages, kc.AlwaysVerify)
}

// allowlistPolicy verifies every image but those of the allowlist (upstream's
// NeverVerifyAllowlistedImages): an entry is an image without tag or digest
// ("registry.example/team/app"), matched exactly, or a prefix ending in "/*"
// ("registry.example/team/*"), matched by prefix. Whether the kubelet pulled the image
// does not matter.
type allowlistPolicy struct {
	exact    sets.Set[string]
	prefixes []string
}

func newAllowlistPolicy(allowlist []string) (*allowlistPolicy, error) {
	p := &allowlistPolicy{exact: sets.New[string]()}
	for _, entry := range allowlist {
		pattern, wildcard, err := allowlistPattern(entry)
		if err != nil {
			return nil, fmt.Errorf("invalid configuration: invalid image pattern in `preloadedImagesVerificationAllowlist`: %w", err)
		}
		if wildcard {
			p.prefixes = append(p.prefixes, pattern)
		} else {
			p.exact.Insert(pattern)
		}
	}
	return p, nil
}

// RequireCredentialVerificationForImage implements CredentialVerificationPolicy.
func (p *allowlistPolicy) RequireCredentialVerificationForImage(image string, _ bool) bool {
	name, err := trimImageTagDigest(image)
	if err != nil {
		name = image // best effort, as upstream
	}
	if p.exact.Has(name) {
		return false
	}
	for _, prefix := range p.prefixes {
		if strings.HasPrefix(name, prefix) {
			return false
		}
	}
	return true
}

// allowlistPattern checks an allowlist entry as upstream's getAllowlistImagePattern: it
// returns the prefix (without the "*") of a "/*" entry, or the entry itself.
func allowlistPattern(entry string) (pattern string, wildcard bool, err error) {
	if entry != strings.TrimSpace(entry) {
		return "", false, fmt.Errorf("leading/trailing spaces are not allowed: %s", entry)
	}
	trimmed := entry
	if strings.HasSuffix(entry, "/*") {
		wildcard = true
		trimmed = strings.TrimSuffix(trimmed, "*")
	}
	if trimmed == "" {
		return "", false, fmt.Errorf("the supplied pattern is too short: %s", entry)
	}
	if strings.ContainsRune(trimmed, '*') {
		return "", false, fmt.Errorf("not a valid wildcard pattern, only patterns ending with '/*' are allowed: %s", entry)
	}
	if wildcard {
		if len(trimmed) == 1 {
			return "", false, errors.New("at least registry hostname is required")
		}
		return trimmed, true, nil
	}
	name, err := trimImageTagDigest(trimmed)
	if err != nil {
		return "", false, fmt.Errorf("failed to parse as an image name: %w", err)
	}
	if name != trimmed {
		return "", false, fmt.Errorf("neither tag nor digest is accepted in an image reference: %s", entry)
	}
	return trimmed, false, nil
}

// trimImageTagDigest drops the tag and digest of an image reference as written, without
// normalizing it ("busybox:1.36" is "busybox"; upstream's, over reference.Parse). The
// pulled records key their credentials by it.
func trimImageTagDigest(image string) (string, error) {
	_, tag, digest, err := parseReference(image)
	if err != nil {
		return "", err
	}
	if digest != "" {
		var found bool
		if image, found = strings.CutSuffix(image, "@"+digest); !found {
			return "", fmt.Errorf("digest was not specified last, this does not appear to be a valid image spec: %q", image)
		}
	}
	if tag != "" {
		var found bool
		if image, found = strings.CutSuffix(image, ":"+tag); !found {
			return "", fmt.Errorf("tag %q was not specified last (or before the digest), this does not appear to be a valid image spec: %q", tag, image)
		}
	}
	return image, nil
}
