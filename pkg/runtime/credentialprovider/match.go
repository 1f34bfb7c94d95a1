package credentialprovider

import (
	"maps"
	"net"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
)

// parseSchemelessURL parses host[:port][/path]: url.Parse needs a scheme, so one is
// added and dropped again (upstream's ParseSchemelessURL).
func parseSchemelessURL(s string) (*url.URL, error) {
	u, err := url.Parse("https://" + s)
	if err != nil {
		return nil, err
	}
	u.Scheme = ""
	return u, nil
}

// URLsMatch reports whether target (a schemeless host[:port][/path], such as an image
// repository) falls under glob, as upstream's URLsMatchStr: the same port (none matches
// only none), the same number of host labels with each target label matching the glob's
// (filepath.Match: "*.dkr.ecr.*.amazonaws.com", "app*.k8s.io"; one label per "*"), and
// the glob's path a string prefix of the target's. Globs are not allowed in the port or
// path. An error is returned for an unparsable URL or bad label pattern.
func URLsMatch(glob, target string) (bool, error) {
	globURL, err := parseSchemelessURL(glob)
	if err != nil {
		return false, err
	}
	targetURL, err := parseSchemelessURL(target)
	if err != nil {
		return false, err
	}
	globLabels, globPort := splitHost(globURL.Host)
	targetLabels, targetPort := splitHost(targetURL.Host)
	if globPort != targetPort || len(globLabels) != len(targetLabels) {
		return false, nil
	}
	if !strings.HasPrefix(targetURL.Path, globURL.Path) {
		return false, nil
	}
	for i, pattern := range globLabels {
		if ok, err := filepath.Match(pattern, targetLabels[i]); err != nil || !ok {
			return false, err
		}
	}
	return true, nil
}

// splitHost splits host[:port] into its dot-separated labels and its port ("" if none).
func splitHost(hostport string) (labels []string, port string) {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		host, port = hostport, ""
	}
	return strings.Split(host, "."), port
}

// registryOf is the first path element of an image: its registry host (and port), the
// key of credentials a plugin returns with cacheKeyType Registry.
func registryOf(image string) string {
	registry, _, _ := strings.Cut(image, "/")
	return registry
}

// dockerHubKey is where `docker login` stores Docker Hub credentials
// ("https://index.docker.io/v1/" once normalized).
const dockerHubKey = "index.docker.io"

// keyring orders the credentials of every provider for one image as upstream's
// BasicDockerKeyring does: entries are indexed by normalized registry key, keys are
// tried in reverse lexical order (so "quay.io/org" before "quay.io"), and credentials
// under the same key keep the order in which providers returned them.
type keyring struct {
	index []string
	creds map[string][]Credential
}

// add indexes a provider's auth entries; sa is the service account the provider was
// given a token of (nil: none). Entries that are not URLs are skipped.
func (k *keyring) add(auth authMap, sa *ServiceAccountRef, logInvalid func(entry string, err error)) {
	if k.creds == nil {
		k.creds = map[string][]Credential{}
	}
	// A map has no order; sorting the entries makes the order of credentials that
	// normalize to the same key ("https://a.io" and "a.io") stable.
	for _, entry := range slices.Sorted(maps.Keys(auth)) {
		key, err := RegistryKey(entry)
		if err != nil {
			logInvalid(entry, err)
			continue
		}
		c := auth[entry]
		k.creds[key] = append(k.creds[key], Credential{Registry: key, Username: c.Username, Password: c.Password, ServiceAccount: sa})
		if !slices.Contains(k.index, key) {
			k.index = append(k.index, key)
		}
	}
	slices.Sort(k.index)
	slices.Reverse(k.index)
}

// lookup returns the credentials of every key that matches image. When none does and
// image is on Docker Hub, the credentials stored for index.docker.io are used.
func (k *keyring) lookup(image string) []Credential {
	var out []Credential
	for _, key := range k.index {
		if ok, _ := URLsMatch(key, image); ok {
			out = append(out, k.creds[key]...)
		}
	}
	if len(out) == 0 && IsDockerHub(image) {
		out = k.creds[dockerHubKey]
	}
	return out
}

// RegistryKey normalizes an auth entry to host[:port][/path]: the scheme is dropped and
// docker's /v1/ and /v2/ API prefixes count as the bare host.
func RegistryKey(entry string) (string, error) {
	if !strings.HasPrefix(entry, "https://") && !strings.HasPrefix(entry, "http://") {
		entry = "https://" + entry
	}
	u, err := url.Parse(entry)
	if err != nil {
		return "", err
	}
	path := u.Path
	if strings.HasPrefix(path, "/v2/") || strings.HasPrefix(path, "/v1/") {
		path = path[3:]
	}
	if path == "" || path == "/" {
		return u.Host, nil
	}
	return u.Host + path, nil
}

// IsDockerHub tells whether image would be pulled from Docker Hub: its first element is
// docker.io or index.docker.io, or holds neither '.' nor ':' (so is not a host), or there
// is no other element.
func IsDockerHub(image string) bool {
	first, _, found := strings.Cut(image, "/")
	switch {
	case first == "":
		return false
	case !found, first == "docker.io", first == dockerHubKey:
		return true
	}
	return !strings.ContainsAny(first, ".:")
}
