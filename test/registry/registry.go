// Package registry is a minimal, read-only OCI distribution registry for tests. It serves
// images built in memory or loaded from OCI image-layout archives, optionally behind HTTP
// basic auth, so that a real runtime can pull with and without credentials and never
// needs the network.
package registry

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path"
	"runtime"
	"strings"
	"sync"
)

// OCI media types the registry serves.
const (
	MediaTypeManifest = "application/vnd.oci.image.manifest.v1+json"
	MediaTypeIndex    = "application/vnd.oci.image.index.v1+json"
	MediaTypeConfig   = "application/vnd.oci.image.config.v1+json"
	MediaTypeLayer    = "application/vnd.oci.image.layer.v1.tar+gzip"
)

// Registry is a running test registry. Create it with New and stop it with Close.
type Registry struct {
	server         *httptest.Server
	user, password string

	mu        sync.Mutex
	blobs     map[string][]byte   // digest → content
	manifests map[string]manifest // "repo:tag" or "repo@digest" → manifest
	stats     Stats
}

type manifest struct {
	mediaType string
	digest    string
	data      []byte
}

// Stats counts the requests the registry answered.
type Stats struct {
	// Unauthorized counts requests refused for missing or wrong credentials.
	Unauthorized int
	// WrongCredentials counts the refused requests that carried credentials.
	WrongCredentials int
	// ManifestGets counts manifests served (GET, not HEAD) to authorized clients.
	ManifestGets int
}

// New starts a registry on a loopback port. With a non-empty user every request must
// carry that user and password (basic auth); with an empty one it is open.
func New(user, password string) *Registry {
	r := &Registry{user: user, password: password, blobs: map[string][]byte{}, manifests: map[string]manifest{}}
	r.server = httptest.NewServer(http.HandlerFunc(r.serve))
	return r
}

// Host is the registry's host:port, the first component of its image references.
func (r *Registry) Host() string { return strings.TrimPrefix(r.server.URL, "http://") }

// URL is the registry's base URL (http://host:port).
func (r *Registry) URL() string { return r.server.URL }

// Close stops the registry.
func (r *Registry) Close() { r.server.Close() }

// Stats returns the request counts so far.
func (r *Registry) Stats() Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stats
}

// AddTestImage builds a one-layer image for this machine's platform whose single file,
// /nodelet-test, holds content, and serves it as repo:tag. Different content gives a
// different image ID, so a test can remove its image without touching others. It returns
// the manifest digest.
func (r *Registry) AddTestImage(repo, tag, content string) (string, error) {
	layer, diffID, err := gzipTarLayer("nodelet-test", []byte(content))
	if err != nil {
		return "", err
	}
	config, err := json.Marshal(map[string]any{
		"architecture": runtime.GOARCH,
		"os":           "linux",
		"config":       map[string]any{"Cmd": []string{"/nodelet-test"}},
		"rootfs":       map[string]any{"type": "layers", "diff_ids": []string{diffID}},
	})
	if err != nil {
		return "", err
	}
	m, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     MediaTypeManifest,
		"config":        descriptor(MediaTypeConfig, config),
		"layers":        []any{descriptor(MediaTypeLayer, layer)},
	})
	if err != nil {
		return "", err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.blobs[digestOf(config)] = config
	r.blobs[digestOf(layer)] = layer
	return r.addManifestLocked(repo, tag, MediaTypeManifest, m), nil
}

// AddOCIArchive serves the first manifest of an OCI image-layout tar archive (such as
// those test/images/build writes) as repo:tag, with every blob of the archive. It returns
// the manifest digest. Beware that the image keeps the archive's image ID: removing it
// from a runtime through CRI removes every other reference to that ID as well.
func (r *Registry) AddOCIArchive(archive, repo, tag string) (string, error) {
	files, err := readTar(archive)
	if err != nil {
		return "", err
	}
	var index struct {
		Manifests []struct {
			MediaType string `json:"mediaType"`
			Digest    string `json:"digest"`
		} `json:"manifests"`
	}
	if err := json.Unmarshal(files["index.json"], &index); err != nil {
		return "", fmt.Errorf("%s: index.json: %w", archive, err)
	}
	if len(index.Manifests) == 0 {
		return "", fmt.Errorf("%s: no manifest in index.json", archive)
	}
	first := index.Manifests[0]
	r.mu.Lock()
	defer r.mu.Unlock()
	for name, data := range files {
		if hexDigest, ok := strings.CutPrefix(name, "blobs/sha256/"); ok {
			r.blobs["sha256:"+hexDigest] = data
		}
	}
	data, ok := r.blobs[first.Digest]
	if !ok {
		return "", fmt.Errorf("%s: manifest blob %s missing", archive, first.Digest)
	}
	return r.addManifestLocked(repo, tag, first.MediaType, data), nil
}

func (r *Registry) addManifestLocked(repo, tag, mediaType string, data []byte) string {
	m := manifest{mediaType: mediaType, digest: digestOf(data), data: data}
	r.manifests[repo+":"+tag] = m
	r.manifests[repo+"@"+m.digest] = m
	return m.digest
}

// serve implements the pull half of the distribution API: /v2/, manifests and blobs.
func (r *Registry) serve(w http.ResponseWriter, req *http.Request) {
	w.Header().Set("Docker-Distribution-API-Version", "registry/2.0")
	if !r.authorized(req) {
		_, _, withCredentials := req.BasicAuth()
		r.count(func(s *Stats) {
			s.Unauthorized++
			if withCredentials {
				s.WrongCredentials++
			}
		})
		w.Header().Set("WWW-Authenticate", `Basic realm="nodelet-test-registry"`)
		writeError(w, http.StatusUnauthorized, "UNAUTHORIZED", "authentication required")
		return
	}
	if req.Method != http.MethodGet && req.Method != http.MethodHead {
		writeError(w, http.StatusMethodNotAllowed, "UNSUPPORTED", "read-only registry")
		return
	}
	p := req.URL.Path
	switch {
	case p == "/v2/" || p == "/v2":
		writeContent(w, req, "application/json", "", []byte("{}"))
	case strings.Contains(p, "/manifests/"):
		r.serveManifest(w, req)
	case strings.Contains(p, "/blobs/"):
		r.serveBlob(w, req)
	default:
		writeError(w, http.StatusNotFound, "NAME_UNKNOWN", "not found")
	}
}

func (r *Registry) serveManifest(w http.ResponseWriter, req *http.Request) {
	name, ref := splitPath(req.URL.Path, "/manifests/")
	key := name + ":" + ref
	if strings.Contains(ref, ":") {
		key = name + "@" + ref
	}
	r.mu.Lock()
	m, ok := r.manifests[key]
	if ok && req.Method == http.MethodGet {
		r.stats.ManifestGets++
	}
	r.mu.Unlock()
	if !ok {
		writeError(w, http.StatusNotFound, "MANIFEST_UNKNOWN", "manifest unknown")
		return
	}
	writeContent(w, req, m.mediaType, m.digest, m.data)
}

func (r *Registry) serveBlob(w http.ResponseWriter, req *http.Request) {
	_, digest := splitPath(req.URL.Path, "/blobs/")
	r.mu.Lock()
	data, ok := r.blobs[digest]
	r.mu.Unlock()
	if !ok {
		writeError(w, http.StatusNotFound, "BLOB_UNKNOWN", "blob unknown")
		return
	}
	writeContent(w, req, "application/octet-stream", digest, data)
}

func (r *Registry) authorized(req *http.Request) bool {
	if r.user == "" {
		return true
	}
	user, password, ok := req.BasicAuth()
	return ok && user == r.user && password == r.password
}

func (r *Registry) count(f func(*Stats)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f(&r.stats)
}

// splitPath splits "/v2/<name>/<sep>/<ref>" into name and ref; names may hold slashes.
func splitPath(p, sep string) (name, ref string) {
	i := strings.LastIndex(p, sep)
	return strings.TrimPrefix(p[:i], "/v2/"), p[i+len(sep):]
}

func writeContent(w http.ResponseWriter, req *http.Request, mediaType, digest string, data []byte) {
	w.Header().Set("Content-Type", mediaType)
	w.Header().Set("Content-Length", fmt.Sprint(len(data)))
	if digest != "" {
		w.Header().Set("Docker-Content-Digest", digest)
	}
	w.WriteHeader(http.StatusOK)
	if req.Method == http.MethodGet {
		_, _ = w.Write(data)
	}
}

func writeError(w http.ResponseWriter, status int, code, message string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"errors": []any{map[string]string{"code": code, "message": message}}})
}

func descriptor(mediaType string, data []byte) map[string]any {
	return map[string]any{"mediaType": mediaType, "digest": digestOf(data), "size": len(data)}
}

func digestOf(data []byte) string {
	sum := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// gzipTarLayer makes a layer holding one regular file, returning the compressed layer
// and the digest of the uncompressed tar (the image config's diff ID).
func gzipTarLayer(name string, content []byte) (layer []byte, diffID string, err error) {
	var tarBuf bytes.Buffer
	tw := tar.NewWriter(&tarBuf)
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o755, Size: int64(len(content)), Typeflag: tar.TypeReg, Format: tar.FormatPAX}); err != nil {
		return nil, "", err
	}
	if _, err := tw.Write(content); err != nil {
		return nil, "", err
	}
	if err := tw.Close(); err != nil {
		return nil, "", err
	}
	var gzBuf bytes.Buffer
	gw := gzip.NewWriter(&gzBuf)
	if _, err := gw.Write(tarBuf.Bytes()); err != nil {
		return nil, "", err
	}
	if err := gw.Close(); err != nil {
		return nil, "", err
	}
	return gzBuf.Bytes(), digestOf(tarBuf.Bytes()), nil
}

// readTar returns the regular files of a tar archive by cleaned path.
func readTar(archive string) (map[string][]byte, error) {
	f, err := os.Open(archive)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	files := map[string][]byte{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", archive, err)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", archive, err)
		}
		files[path.Clean(h.Name)] = data
	}
}
