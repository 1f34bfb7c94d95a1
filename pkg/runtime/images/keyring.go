package images

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"slices"
	"sort"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/runtime/credentialprovider"
)

// AuthConfig is one set of registry credentials, as the CRI takes them.
type AuthConfig struct {
	Username      string `json:"username,omitempty"`
	Password      string `json:"password,omitempty"`
	Auth          string `json:"auth,omitempty"`
	Email         string `json:"email,omitempty"`
	ServerAddress string `json:"serveraddress,omitempty"`
	IdentityToken string `json:"identitytoken,omitempty"`
	RegistryToken string `json:"registrytoken,omitempty"`
}

// TrackedAuthConfig is a credential with where it came from, as upstream's
// credentialprovider.TrackedAuthConfig: the image manager records, for each pulled image,
// which pod credentials could pull it (KEP-2535).
type TrackedAuthConfig struct {
	AuthConfig
	// AuthConfigHash is the hex SHA-256 of the credential's JSON (upstream's
	// hashAuthConfig): two secrets holding the same credential have the same hash.
	AuthConfigHash string
	// Source is the pull secret (or service account) the credential came from; nil for
	// the node's own credentials, which every pod of the node may use.
	Source *CredentialSource
}

// CredentialSource says where a credential came from: one of its fields is set.
type CredentialSource struct {
	Secret         *SecretCoordinates
	ServiceAccount *ServiceAccountCoordinates
}

// SecretCoordinates name a pull secret.
type SecretCoordinates struct {
	UID, Namespace, Name string
}

// ServiceAccountCoordinates name the service account a credential provider plugin was
// given a token of.
type ServiceAccountCoordinates struct {
	UID, Namespace, Name string
}

// NewTrackedAuthConfig attaches src and the credential's hash to c.
func NewTrackedAuthConfig(c AuthConfig, src *CredentialSource) TrackedAuthConfig {
	return TrackedAuthConfig{AuthConfig: c, AuthConfigHash: hashAuthConfig(c), Source: src}
}

// hashAuthConfig is upstream's: SHA-256 of the credential's JSON, in hex; "" if it does
// not marshal. AuthConfig has upstream's fields, order and tags, so the hashes agree with
// those in records written by upstream's kubelet.
func hashAuthConfig(c AuthConfig) string {
	data, err := json.Marshal(c)
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// DockerConfig is the legacy .dockercfg format (the kubernetes.io/dockercfg secret): a
// map from registry (host, host/path or URL; the host may hold * globs) to credentials.
type DockerConfig map[string]DockerConfigEntry

// DockerConfigJSON is the ~/.docker/config.json format (the
// kubernetes.io/dockerconfigjson secret).
type DockerConfigJSON struct {
	Auths       DockerConfig      `json:"auths"`
	HTTPHeaders map[string]string `json:"HttpHeaders,omitempty"`
}

// DockerConfigEntry is one registry's credentials. In JSON, a non-empty "auth" field
// (base64 of user:password) wins over "username" and "password".
type DockerConfigEntry struct {
	Username string
	Password string
	Email    string
}

type dockerConfigEntryJSON struct {
	Username string `json:"username,omitempty"`
	Password string `json:"password,omitempty"`
	Email    string `json:"email,omitempty"`
	Auth     string `json:"auth,omitempty"`
}

// UnmarshalJSON reads an entry, decoding its "auth" field.
func (e *DockerConfigEntry) UnmarshalJSON(data []byte) error {
	var raw dockerConfigEntryJSON
	if err := json.Unmarshal(data, &raw); err != nil {
		return err
	}
	e.Username, e.Password, e.Email = raw.Username, raw.Password, raw.Email
	if raw.Auth == "" {
		return nil
	}
	var err error
	e.Username, e.Password, err = decodeAuthField(raw.Auth)
	return err
}

// MarshalJSON writes an entry with its "auth" field, as docker does.
func (e DockerConfigEntry) MarshalJSON() ([]byte, error) {
	auth := base64.StdEncoding.EncodeToString([]byte(e.Username + ":" + e.Password))
	return json.Marshal(dockerConfigEntryJSON{Username: e.Username, Password: e.Password, Email: e.Email, Auth: auth})
}

// decodeAuthField reads base64(user:password); padding is optional, as with docker.
func decodeAuthField(field string) (username, password string, err error) {
	enc := base64.RawStdEncoding
	if strings.HasSuffix(strings.TrimSpace(field), "=") {
		enc = base64.StdEncoding
	}
	decoded, err := enc.DecodeString(field)
	if err != nil {
		return "", "", err
	}
	username, password, ok := strings.Cut(string(decoded), ":")
	if !ok {
		return "", "", errors.New("unable to parse auth field, must be formatted as base64(username:password)")
	}
	return username, password, nil
}

// Keyring finds the credentials to try for an image.
type Keyring interface {
	// Lookup takes a normalized repository such as "docker.io/library/busybox" and returns
	// every matching credential, most specific registry first; ok is false when none match.
	Lookup(repo string) (creds []TrackedAuthConfig, ok bool)
}

// BasicKeyring indexes docker configs by registry key. Keys are kept in reverse
// lexical order, so "quay.io/org" is tried before "quay.io".
type BasicKeyring struct {
	index []string
	creds map[string][]TrackedAuthConfig
}

// Add indexes every entry of cfg as credentials of the node (no source); credentials
// under an already known key are appended after the earlier ones. Entries that are not
// URLs are skipped.
func (k *BasicKeyring) Add(cfg DockerConfig) { k.AddFrom(nil, cfg) }

// AddFrom is Add for credentials that came from src (nil: the node's own).
func (k *BasicKeyring) AddFrom(src *CredentialSource, cfg DockerConfig) {
	if k.creds == nil {
		k.creds = map[string][]TrackedAuthConfig{}
	}
	for loc, entry := range cfg {
		key, err := credentialprovider.RegistryKey(loc)
		if err != nil {
			klog.ErrorS(err, "Ignoring invalid registry in docker config", "registry", loc)
			continue
		}
		c := AuthConfig{Username: entry.Username, Password: entry.Password, Email: entry.Email}
		k.creds[key] = append(k.creds[key], NewTrackedAuthConfig(c, src))
		if !slices.Contains(k.index, key) {
			k.index = append(k.index, key)
		}
	}
	sort.Sort(sort.Reverse(sort.StringSlice(k.index)))
}

// Lookup returns the credentials of every key that matches repo. When none does and repo
// is on Docker Hub, the credentials stored for index.docker.io (what `docker login`
// writes as https://index.docker.io/v1/) are used.
func (k *BasicKeyring) Lookup(repo string) ([]TrackedAuthConfig, bool) {
	var out []TrackedAuthConfig
	for _, key := range k.index {
		if ok, _ := credentialprovider.URLsMatch(key, repo); ok {
			out = append(out, k.creds[key]...)
		}
	}
	if len(out) > 0 {
		return out, true
	}
	if credentialprovider.IsDockerHub(repo) {
		if creds, ok := k.creds[legacyDomain]; ok {
			return creds, true
		}
	}
	return nil, false
}

// UnionKeyring asks each keyring in turn and returns all their credentials in order.
type UnionKeyring []Keyring

// Lookup implements Keyring.
func (u UnionKeyring) Lookup(repo string) ([]TrackedAuthConfig, bool) {
	var out []TrackedAuthConfig
	for _, k := range u {
		if k == nil {
			continue
		}
		creds, _ := k.Lookup(repo)
		out = append(out, creds...)
	}
	return out, len(out) > 0
}

// KeyringFromSecrets indexes the docker credentials in the pod's pull secrets
// (kubernetes.io/dockerconfigjson and kubernetes.io/dockercfg; others are ignored) ahead
// of fallback, which may be nil. Each credential carries its secret's coordinates
// (namespace, name, UID). A secret whose config does not parse is an error.
func KeyringFromSecrets(secrets []v1.Secret, fallback Keyring) (Keyring, error) {
	fromSecrets := &BasicKeyring{}
	found := false
	for i := range secrets {
		cfg, ok, err := dockerConfigOfSecret(&secrets[i])
		if err != nil {
			return nil, err
		}
		if ok {
			s := &secrets[i]
			fromSecrets.AddFrom(&CredentialSource{Secret: &SecretCoordinates{UID: string(s.UID), Namespace: s.Namespace, Name: s.Name}}, cfg)
			found = true
		}
	}
	if !found {
		return fallback, nil
	}
	return UnionKeyring{fromSecrets, fallback}, nil
}

// dockerConfigOfSecret reads the docker config of a pull secret; ok is false when the
// secret is of another type or carries no config.
func dockerConfigOfSecret(s *v1.Secret) (cfg DockerConfig, ok bool, err error) {
	switch data := s.Data; {
	case s.Type == v1.SecretTypeDockerConfigJson && len(data[v1.DockerConfigJsonKey]) > 0:
		var cj DockerConfigJSON
		if err := json.Unmarshal(data[v1.DockerConfigJsonKey], &cj); err != nil {
			return nil, false, err
		}
		return cj.Auths, true, nil
	case s.Type == v1.SecretTypeDockercfg && len(data[v1.DockerConfigKey]) > 0:
		if err := json.Unmarshal(data[v1.DockerConfigKey], &cfg); err != nil {
			return nil, false, err
		}
		return cfg, true, nil
	}
	return nil, false, nil
}
