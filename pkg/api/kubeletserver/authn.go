package kubeletserver

import (
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"unicode/utf8"

	asn1util "k8s.io/apimachinery/pkg/apis/asn1"
)

// Well-known user and group names, as the API server uses them.
const (
	anonymousUser         = "system:anonymous"
	unauthenticatedGroup  = "system:unauthenticated"
	authenticatedGroup    = "system:authenticated"
	credentialIDExtraKey  = "authentication.kubernetes.io/credential-id"
	bearerProtocolPrefix  = "base64url.bearer.authorization.k8s.io."
	webSocketProtocolName = "Sec-Websocket-Protocol"
)

// uidOID is the subject attribute client certificates carry a user UID in (upstream's
// AllowParsingUserUIDFromCertAuth, on by default in 1.37).
var uidOID = asn1util.X509UID()

var (
	errInvalidToken  = errors.New("invalid bearer token")
	errNoCredentials = errors.New("no credentials")
)

// UserInfo is who made a request, as authentication found it.
type UserInfo struct {
	Name   string
	UID    string
	Groups []string
	Extra  map[string][]string
}

// authenticator identifies the caller of a request the way upstream's kubelet does: a
// client certificate signed by the client CA, else a bearer token (Authorization header
// or WebSocket protocol) reviewed by the API server, else, when allowed, anonymous.
// Credentials that are presented but fail are an error, never anonymous.
type authenticator struct {
	clientCAs func() *x509.CertPool // nil without authentication.x509.clientCAFile
	tokens    *tokenReviewer        // nil without authentication.webhook.enabled
	anonymous bool
}

// authenticate returns the caller, or nil and the reason when nobody is identified.
func (a *authenticator) authenticate(r *http.Request) (*UserInfo, error) {
	var errs []error
	for _, method := range []func(*http.Request) (*UserInfo, error){a.fromClientCert, a.fromBearerToken, a.fromWebSocketProtocol} {
		u, err := method(r)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if u != nil {
			return withAuthenticatedGroup(u), nil
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if a.anonymous {
		return &UserInfo{Name: anonymousUser, Groups: []string{unauthenticatedGroup}}, nil
	}
	return nil, errNoCredentials
}

// withAuthenticatedGroup adds system:authenticated, as the API server's group adder does.
func withAuthenticatedGroup(u *UserInfo) *UserInfo {
	if slices.Contains(u.Groups, authenticatedGroup) || slices.Contains(u.Groups, unauthenticatedGroup) {
		return u
	}
	withGroup := *u
	withGroup.Groups = append(slices.Clip(u.Groups), authenticatedGroup)
	return &withGroup
}

// fromClientCert verifies the first peer certificate against the client CA for client
// authentication: user = CN, groups = O. A certificate without a CN identifies nobody.
func (a *authenticator) fromClientCert(r *http.Request) (*UserInfo, error) {
	if a.clientCAs == nil || r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		return nil, nil
	}
	certs := r.TLS.PeerCertificates
	opts := x509.VerifyOptions{Roots: a.clientCAs(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	if len(certs) > 1 {
		opts.Intermediates = x509.NewCertPool()
		for _, c := range certs[1:] {
			opts.Intermediates.AddCert(c)
		}
	}
	leaf := certs[0]
	if _, err := leaf.Verify(opts); err != nil {
		return nil, fmt.Errorf("verifying certificate %s failed: %w", certIdentifier(leaf), err)
	}
	if leaf.Subject.CommonName == "" {
		return nil, nil
	}
	uid, err := certUID(leaf)
	if err != nil {
		return nil, err
	}
	fp := sha256.Sum256(leaf.Raw)
	return &UserInfo{
		Name:   leaf.Subject.CommonName,
		UID:    uid,
		Groups: slices.Clone(leaf.Subject.Organization),
		Extra:  map[string][]string{credentialIDExtraKey: {"X509SHA256=" + hex.EncodeToString(fp[:])}},
	}, nil
}

// certIdentifier names a certificate in errors without dumping it.
func certIdentifier(c *x509.Certificate) string {
	return fmt.Sprintf("SN=%d, SKID=%s, AKID=%s", c.SerialNumber, hexColons(c.SubjectKeyId), hexColons(c.AuthorityKeyId))
}

func hexColons(b []byte) string {
	parts := make([]string, len(b))
	for i, c := range b {
		parts[i] = fmt.Sprintf("%02X", c)
	}
	return strings.Join(parts, ":")
}

// certUID reads the single optional UID attribute of the subject.
func certUID(c *x509.Certificate) (string, error) {
	var uids []string
	for _, name := range c.Subject.Names {
		if !name.Type.Equal(uidOID) {
			continue
		}
		uid, ok := name.Value.(string)
		if !ok {
			return "", errors.New("unable to parse UID into a string")
		}
		uids = append(uids, uid)
	}
	switch {
	case len(uids) == 0:
		return "", nil
	case len(uids) > 1:
		return "", fmt.Errorf("expected 1 UID, but found multiple: %v", uids)
	case uids[0] == "":
		return "", errors.New("UID cannot be an empty string")
	}
	return uids[0], nil
}

// fromBearerToken reviews "Authorization: Bearer <token>"; the header is removed once the
// token is accepted, so that no handler is tempted to use it.
func (a *authenticator) fromBearerToken(r *http.Request) (*UserInfo, error) {
	if a.tokens == nil {
		return nil, nil
	}
	auth := strings.TrimSpace(r.Header.Get("Authorization"))
	parts := strings.SplitN(auth, " ", 3)
	if len(parts) < 2 || !strings.EqualFold(parts[0], "bearer") || parts[1] == "" {
		return nil, nil
	}
	u, err := a.tokens.review(r.Context(), parts[1])
	if err != nil {
		return nil, err
	}
	if u == nil {
		return nil, errInvalidToken
	}
	r.Header.Del("Authorization")
	return u, nil
}

// fromWebSocketProtocol reviews a token sent as the WebSocket subprotocol
// "base64url.bearer.authorization.k8s.io.<token>" (browsers cannot set headers on
// WebSocket requests); once accepted, that subprotocol is removed from the request.
func (a *authenticator) fromWebSocketProtocol(r *http.Request) (*UserInfo, error) {
	if a.tokens == nil || !isWebSocketRequest(r) {
		return nil, nil
	}
	token, others, err := bearerFromProtocols(r.Header.Values(webSocketProtocolName))
	if err != nil || token == "" {
		return nil, err
	}
	u, err := a.tokens.review(r.Context(), token)
	if err != nil {
		return nil, err
	}
	if u == nil {
		return nil, errInvalidToken
	}
	r.Header.Set(webSocketProtocolName, strings.Join(others, ","))
	return u, nil
}

// bearerFromProtocols splits the offered subprotocols into the token and the others.
func bearerFromProtocols(headers []string) (token string, others []string, err error) {
	seen := false
	for _, h := range headers {
		for _, p := range strings.Split(h, ",") {
			p = strings.TrimSpace(p)
			encoded, ok := strings.CutPrefix(p, bearerProtocolPrefix)
			if !ok {
				others = append(others, p)
				continue
			}
			if seen {
				return "", nil, errors.New("multiple base64.bearer.authorization tokens specified")
			}
			seen = true
			decoded, err := base64.RawURLEncoding.DecodeString(encoded)
			if err != nil {
				return "", nil, errors.New("invalid base64.bearer.authorization token encoding")
			}
			if !utf8.Valid(decoded) {
				return "", nil, errors.New("invalid base64.bearer.authorization token")
			}
			token = string(decoded)
		}
	}
	if token != "" && len(others) == 0 {
		return "", nil, errors.New("missing additional subprotocol")
	}
	return token, others, nil
}

// isWebSocketRequest is upstream's test: an Upgrade: websocket header and a Connection
// header that names upgrade.
func isWebSocketRequest(r *http.Request) bool {
	if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		return false
	}
	for _, v := range r.Header.Values("Connection") {
		for _, token := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(token), "upgrade") {
				return true
			}
		}
	}
	return false
}
