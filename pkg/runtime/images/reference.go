package images

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	v1 "k8s.io/api/core/v1"
)

// Image references follow the docker grammar (github.com/distribution/reference), which
// upstream parses with ParseNormalizedNamed; these patterns are that grammar.
const (
	alphanumeric     = `[a-z0-9]+`
	separator        = `(?:[._]|__|[-]+)`
	pathComponent    = alphanumeric + `(?:` + separator + alphanumeric + `)*`
	domainComponent  = `(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])`
	domainName       = domainComponent + `(?:\.` + domainComponent + `)*`
	ipv6Host         = `\[(?:[a-fA-F0-9:]+)\]`
	domainAndPort    = `(?:` + domainName + `|` + ipv6Host + `)(?::[0-9]+)?`
	namePattern      = `(?:` + domainAndPort + `/)?` + pathComponent + `(?:/` + pathComponent + `)*`
	tagPattern       = `[\w][\w.-]{0,127}`
	digestPattern    = `[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*[:][[:xdigit:]]{32,}`
	maxNameLength    = 255
	defaultDomain    = "docker.io"
	legacyDomain     = "index.docker.io"
	officialPrefix   = "library/"
	defaultImageTag  = "latest"
	localhostDomain  = "localhost"
	errReferenceText = "invalid reference format"
)

var (
	referenceRegexp   = regexp.MustCompile(`^(` + namePattern + `)(?::(` + tagPattern + `))?(?:@(` + digestPattern + `))?$`)
	bareIDRegexp      = regexp.MustCompile(`^[a-f0-9]{64}$`)
	digestNameRegexp  = regexp.MustCompile(`^[a-z0-9]+(?:[.+_-][a-z0-9]+)*:[a-zA-Z0-9=_-]+$`)
	lowerHexRegexp    = regexp.MustCompile(`^[a-f0-9]+$`)
	digestHexLengthOf = map[string]int{"sha256": 64, "sha384": 96, "sha512": 128}
)

// parseImageName splits an image reference into its normalized repository (e.g.
// "docker.io/library/busybox"), tag and digest, as upstream's parsers.ParseImageName:
// the tag is "latest" when neither tag nor digest is given.
func parseImageName(image string) (repo, tag, digest string, err error) {
	repo, tag, digest, err = parseNormalizedNamed(image)
	if err != nil {
		return "", "", "", fmt.Errorf("couldn't parse image name %q: %v", image, err)
	}
	if tag == "" && digest == "" {
		tag = defaultImageTag
	}
	return repo, tag, digest, nil
}

// parseNormalizedNamed parses a familiar or full reference, completing docker.io and
// library/ the way the docker CLI does.
func parseNormalizedNamed(s string) (name, tag, digest string, err error) {
	if bareIDRegexp.MatchString(s) {
		return "", "", "", fmt.Errorf("invalid repository name (%s), cannot specify 64-byte hexadecimal strings", s)
	}
	domain, remainder := splitDockerDomain(s)
	remote, _, _ := strings.Cut(remainder, ":")
	if strings.ToLower(remote) != remote {
		return "", "", "", fmt.Errorf("%s: repository name (%s) must be lowercase", errReferenceText, remote)
	}
	return parseReference(domain + "/" + remainder)
}

// splitDockerDomain tells the registry host from the repository path: the first component
// is a host when it has a dot or port, is localhost, or has upper case (Docker Hub
// namespaces never do).
func splitDockerDomain(s string) (domain, remainder string) {
	first, rest, found := strings.Cut(s, "/")
	switch {
	case !found:
		return defaultDomain, officialPrefix + s
	case first == localhostDomain, strings.ContainsAny(first, ".:"), strings.ToLower(first) != first:
		domain, remainder = first, rest
	default:
		domain, remainder = defaultDomain, s
	}
	if domain == legacyDomain {
		domain = defaultDomain
	}
	if domain == defaultDomain && !strings.Contains(remainder, "/") {
		remainder = officialPrefix + remainder
	}
	return domain, remainder
}

// parseReference checks a full reference against the grammar and validates its digest.
func parseReference(s string) (name, tag, digest string, err error) {
	m := referenceRegexp.FindStringSubmatch(s)
	if m == nil {
		if s == "" {
			return "", "", "", errors.New("repository name must have at least one component")
		}
		if referenceRegexp.MatchString(strings.ToLower(s)) {
			return "", "", "", errors.New("repository name must be lowercase")
		}
		return "", "", "", errors.New(errReferenceText)
	}
	if len(m[1]) > maxNameLength {
		return "", "", "", fmt.Errorf("repository name must not be more than %d characters", maxNameLength)
	}
	if m[3] != "" {
		if err := validateDigest(m[3]); err != nil {
			return "", "", "", err
		}
	}
	return m[1], m[2], m[3], nil
}

// validateDigest accepts the digests the kubelet can verify: sha256, sha384 and sha512
// in lower-case hex of the right length (go-digest's rules and messages).
func validateDigest(d string) error {
	alg, hex, _ := strings.Cut(d, ":")
	size, known := digestHexLengthOf[alg]
	switch {
	case !known && !digestNameRegexp.MatchString(d):
		return errors.New("invalid checksum digest format")
	case !known:
		return errors.New("unsupported digest algorithm")
	case len(hex) != size:
		return errors.New("invalid checksum digest length")
	case !lowerHexRegexp.MatchString(hex):
		return errors.New("invalid checksum digest format")
	}
	return nil
}

// applyDefaultImageTag appends ":latest" to a reference with neither tag nor digest. The
// name itself stays as written (no docker.io/ prefix), keeping CRI calls runtime-neutral.
func applyDefaultImageTag(image string) (string, error) {
	_, tag, digest, err := parseImageName(image)
	if err != nil {
		return "", err
	}
	if digest == "" && tag != "" && !strings.HasSuffix(image, ":"+tag) {
		image += ":" + tag
	}
	return image, nil
}

// DefaultPullPolicy is the pull policy the API server gives a container that sets none:
// Always for a ":latest" or untagged image, IfNotPresent otherwise (including images
// referenced by digest only, and names that do not parse).
func DefaultPullPolicy(image string) v1.PullPolicy {
	_, tag, _, _ := parseImageName(image)
	if tag == defaultImageTag {
		return v1.PullAlways
	}
	return v1.PullIfNotPresent
}
