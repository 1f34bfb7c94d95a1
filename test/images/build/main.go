// Command build writes the test images as OCI image-layout archives that
// `ctr -n k8s.io images import` accepts, without any registry or Docker.
//
// Usage (from anywhere inside the module):
//
//	go run ./test/images/build -out DIR
//	go run ./test/images/build -out DIR -set controlplane \
//		-kube-apiserver BIN -k8s-version v1.37.2 -etcd BIN -etcd-version v3.7.3
//
// For each image it writes DIR/<name>.tar, and it writes DIR/images.txt with
// one line per tag: "<file>\t<ref>\t<manifest digest>", which hack/runtime.sh
// uses to import only images that are missing or changed.
//
// Builds are reproducible: fixed timestamps, owners and entry order, so the
// same inputs (and Go toolchain, for Go images) give the same digests. Files
// are only rewritten when their content changes.
//
// Only the Go standard library is used.
package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"
)

// images is the list of test images. To add an image from a static Go
// program in test/images/<name>/ (package main), add one line such as
//
//	goImage("agnhost", "registry.k8s.io/e2e-test-images/agnhost:2.53"),
//
// and, if the program needs a shell and tools next to it (exec, probes),
// append .onBusybox().
var images = []*image{
	goImage("pause", "registry.k8s.io/pause:3.10").withUser("65535:65535"),
	busyboxImage("docker.io/library/busybox:1.36", "registry.k8s.io/e2e-test-images/busybox:1.36.1-1"),
	goImage("probe-server", "nodelet.local/probe-server:1.0").onBusybox(),
	goImage("grpc-health", "nodelet.local/grpc-health:1.0").onBusybox(),
}

// epoch is the fixed timestamp of every file and of the image config.
var epoch = time.Unix(0, 0).UTC()

const defaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// file is one entry of a layer. Paths are relative to the root, without a
// leading slash. Exactly one of data (regular file), link (symlink) or dir is
// meaningful.
type file struct {
	path string
	mode int64
	data []byte
	link string
	dir  bool
}

// image describes one image archive.
type image struct {
	name   string   // archive base name: <out>/<name>.tar
	tags   []string // full references, e.g. registry.k8s.io/pause:3.10
	layers []func(*builder) ([]file, error)
	config containerConfig
}

func (im *image) withUser(u string) *image { im.config.User = u; return im }

// onBusybox puts the busybox layer under the image's own layers and sets
// PATH, so the image has a shell and the usual tools.
func (im *image) onBusybox() *image {
	im.layers = append([]func(*builder) ([]file, error){busyboxLayer}, im.layers...)
	if len(im.config.Env) == 0 {
		im.config.Env = []string{defaultPath}
	}
	return im
}

// goImage is an image holding the static Go program built from
// test/images/<name> as /<name>, which is also its entrypoint.
func goImage(name string, tags ...string) *image {
	return &image{
		name: name,
		tags: tags,
		layers: []func(*builder) ([]file, error){func(b *builder) ([]file, error) {
			bin, err := b.goBuild(name)
			if err != nil {
				return nil, err
			}
			return []file{{path: name, mode: 0o755, data: bin}}, nil
		}},
		config: containerConfig{Entrypoint: []string{"/" + name}},
	}
}

// busyboxImage is the host's static busybox with all its applets in /bin.
func busyboxImage(tags ...string) *image {
	return &image{
		name:   "busybox",
		tags:   tags,
		layers: []func(*builder) ([]file, error){busyboxLayer},
		config: containerConfig{Env: []string{defaultPath}, Cmd: []string{"sh"}},
	}
}

func busyboxLayer(b *builder) ([]file, error) {
	bin, err := os.ReadFile(b.busybox)
	if err != nil {
		return nil, fmt.Errorf("busybox: %w (install busybox-static)", err)
	}
	out, err := exec.Command(b.busybox, "--list").Output()
	if err != nil {
		return nil, fmt.Errorf("%s --list: %w", b.busybox, err)
	}
	files := []file{
		{path: "bin/busybox", mode: 0o755, data: bin},
		{path: "etc/passwd", mode: 0o644, data: []byte(
			"root:x:0:0:root:/root:/bin/sh\n" +
				"nobody:x:65534:65534:nobody:/home:/bin/false\n")},
		{path: "etc/group", mode: 0o644, data: []byte("root:x:0:\nnobody:x:65534:\n")},
		{path: "home", mode: 0o755, dir: true},
		{path: "root", mode: 0o700, dir: true},
		{path: "tmp", mode: 0o1777, dir: true},
		{path: "var", mode: 0o755, dir: true},
	}
	for _, a := range strings.Fields(string(out)) {
		if a == "busybox" || strings.Contains(a, "/") {
			continue
		}
		files = append(files, file{path: "bin/" + a, mode: 0o777, link: "busybox"})
	}
	return files, nil
}

// OCI image config (the subset we set).
type containerConfig struct {
	User       string            `json:"User,omitempty"`
	Env        []string          `json:"Env,omitempty"`
	Entrypoint []string          `json:"Entrypoint,omitempty"`
	Cmd        []string          `json:"Cmd,omitempty"`
	WorkingDir string            `json:"WorkingDir,omitempty"`
	Labels     map[string]string `json:"Labels,omitempty"`
}

type imageConfig struct {
	Created      string          `json:"created"`
	Architecture string          `json:"architecture"`
	OS           string          `json:"os"`
	Config       containerConfig `json:"config"`
	RootFS       struct {
		Type    string   `json:"type"`
		DiffIDs []string `json:"diff_ids"`
	} `json:"rootfs"`
}

type platform struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
}

type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Platform    *platform         `json:"platform,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

type manifest struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Config        descriptor   `json:"config"`
	Layers        []descriptor `json:"layers"`
}

type index struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Manifests     []descriptor `json:"manifests"`
}

const (
	mtIndex    = "application/vnd.oci.image.index.v1+json"
	mtManifest = "application/vnd.oci.image.manifest.v1+json"
	mtConfig   = "application/vnd.oci.image.config.v1+json"
	mtLayer    = "application/vnd.oci.image.layer.v1.tar+gzip"
)

type builder struct {
	modRoot string
	busybox string
	goCmd   string
	arch    string
	tmp     string
	// layerCache holds big compressed layers by the digest of their tar, so an
	// unchanged 100 MB layer is not compressed again on every build.
	layerCache string
	usedLayers map[string]bool
}

// cachedLayerMin is the size from which a layer's compressed form is cached.
const cachedLayerMin = 1 << 20

// compress gzips a layer tar, taking big layers from the layer cache when it has them.
// The cache is content-addressed (the name is the tar's digest) and written
// atomically, so a hit is the very bytes gz would produce.
func (b *builder) compress(raw []byte) ([]byte, error) {
	if len(raw) < cachedLayerMin {
		return gz(raw)
	}
	name := filepath.Join(b.layerCache, strings.TrimPrefix(sha(raw), "sha256:")+".gz")
	b.usedLayers[name] = true
	if z, err := os.ReadFile(name); err == nil {
		return z, nil
	}
	z, err := gz(raw)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(b.layerCache, 0o755); err != nil {
		return nil, err
	}
	_, err = writeIfChanged(name, z)
	return z, err
}

// pruneLayerCache removes cached layers this build did not use (older binaries).
func (b *builder) pruneLayerCache() error {
	entries, err := os.ReadDir(b.layerCache)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range entries {
		if name := filepath.Join(b.layerCache, e.Name()); !b.usedLayers[name] {
			if err := os.Remove(name); err != nil {
				return err
			}
		}
	}
	return nil
}

// goBuild builds ./test/images/<name> as a static binary for linux/<arch>.
func (b *builder) goBuild(name string) ([]byte, error) {
	pkg := "./" + path.Join("test/images", name)
	if _, err := os.Stat(filepath.Join(b.modRoot, "test", "images", name)); err != nil {
		return nil, fmt.Errorf("go image %q: %w", name, err)
	}
	out := filepath.Join(b.tmp, name)
	cmd := exec.Command(b.goCmd, "build", "-trimpath", "-buildvcs=false", "-ldflags=-s -w", "-o", out, pkg)
	cmd.Dir = b.modRoot
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+b.arch)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("go build %s: %w", pkg, err)
	}
	return os.ReadFile(out)
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

// layerTar returns the uncompressed tar of files, adding missing parent
// directories and sorting entries (parents sort before their children).
func layerTar(files []file) ([]byte, error) {
	byPath := map[string]file{}
	for _, f := range files {
		f.path = strings.Trim(path.Clean("/"+f.path), "/")
		if f.path == "" {
			continue
		}
		if _, dup := byPath[f.path]; dup {
			return nil, fmt.Errorf("duplicate path %q in layer", f.path)
		}
		byPath[f.path] = f
	}
	for p := range byPath {
		for d := path.Dir(p); d != "."; d = path.Dir(d) {
			if _, ok := byPath[d]; !ok {
				byPath[d] = file{path: d, mode: 0o755, dir: true}
			}
		}
	}
	paths := make([]string, 0, len(byPath))
	for p := range byPath {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, p := range paths {
		f := byPath[p]
		h := &tar.Header{Name: p, Mode: f.mode, ModTime: epoch, Format: tar.FormatPAX}
		switch {
		case f.dir:
			h.Typeflag, h.Name = tar.TypeDir, p+"/"
		case f.link != "":
			h.Typeflag, h.Linkname = tar.TypeSymlink, f.link
		default:
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write(f.data); err != nil {
				return nil, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func gz(b []byte) ([]byte, error) {
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	if _, err := zw.Write(b); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// build returns the OCI-layout archive of im and its manifest digest.
func (b *builder) build(im *image) ([]byte, string, error) {
	blobs := map[string][]byte{}
	cfg := imageConfig{Created: epoch.Format(time.RFC3339), Architecture: b.arch, OS: "linux", Config: im.config}
	cfg.RootFS.Type = "layers"
	cfg.RootFS.DiffIDs = []string{}
	var layers []descriptor
	for _, lf := range im.layers {
		files, err := lf(b)
		if err != nil {
			return nil, "", err
		}
		if len(files) == 0 {
			continue // e.g. no shared libraries for a static binary
		}
		raw, err := layerTar(files)
		if err != nil {
			return nil, "", err
		}
		z, err := b.compress(raw)
		if err != nil {
			return nil, "", err
		}
		cfg.RootFS.DiffIDs = append(cfg.RootFS.DiffIDs, sha(raw))
		d := sha(z)
		blobs[d] = z
		layers = append(layers, descriptor{MediaType: mtLayer, Digest: d, Size: int64(len(z))})
	}
	cj, err := json.Marshal(cfg)
	if err != nil {
		return nil, "", err
	}
	blobs[sha(cj)] = cj
	mj, err := json.Marshal(manifest{
		SchemaVersion: 2, MediaType: mtManifest,
		Config: descriptor{MediaType: mtConfig, Digest: sha(cj), Size: int64(len(cj))},
		Layers: layers,
	})
	if err != nil {
		return nil, "", err
	}
	md := sha(mj)
	blobs[md] = mj
	idx := index{SchemaVersion: 2, MediaType: mtIndex}
	for _, t := range im.tags {
		tag := "latest"
		if i := strings.LastIndex(t, ":"); i > strings.LastIndex(t, "/") {
			tag = t[i+1:]
		}
		idx.Manifests = append(idx.Manifests, descriptor{
			MediaType: mtManifest, Digest: md, Size: int64(len(mj)),
			Platform: &platform{Architecture: b.arch, OS: "linux"},
			Annotations: map[string]string{
				// containerd names the imported image after this one.
				"io.containerd.image.name": t,
				// The OCI spec's name of the tag within the layout.
				"org.opencontainers.image.ref.name": tag,
			},
		})
	}
	ij, err := json.Marshal(idx)
	if err != nil {
		return nil, "", err
	}
	files := []file{
		{path: "oci-layout", mode: 0o644, data: []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{path: "index.json", mode: 0o644, data: ij},
	}
	for d, data := range blobs {
		files = append(files, file{path: "blobs/sha256/" + strings.TrimPrefix(d, "sha256:"), mode: 0o644, data: data})
	}
	archive, err := layerTar(files)
	return archive, md, err
}

// writeIfChanged writes data to name atomically, unless it already holds it.
func writeIfChanged(name string, data []byte) (bool, error) {
	if old, err := os.ReadFile(name); err == nil && bytes.Equal(old, data) {
		return false, nil
	}
	tmp := name + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return false, err
	}
	return true, os.Rename(tmp, name)
}

func findModRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("go.mod not found: run from inside the nodelet module")
		}
		dir = parent
	}
}

func main() {
	out := flag.String("out", "", "output directory (required)")
	set := flag.String("set", "test", "which images: test (the test images `hack/runtime.sh up` imports) or controlplane (etcd and kube-apiserver from upstream's binaries, imported on demand)")
	busybox := flag.String("busybox", "/bin/busybox", "static busybox binary to put in the busybox image")
	goCmd := flag.String("go", "go", "go command used to build Go images")
	arch := flag.String("arch", runtime.GOARCH, "image architecture (GOARCH)")
	var cp controlPlane
	flag.StringVar(&cp.apiserver, "kube-apiserver", "", "controlplane: the kube-apiserver binary")
	flag.StringVar(&cp.k8sVersion, "k8s-version", "", "controlplane: its Kubernetes release, e.g. v1.37.2 (the image tag)")
	flag.StringVar(&cp.etcd, "etcd", "", "controlplane: the etcd binary")
	flag.StringVar(&cp.etcdVersion, "etcd-version", "", "controlplane: its etcd release, e.g. v3.7.3 (tagged 3.7.3-0)")
	flag.Parse()
	if *out == "" {
		fmt.Fprintln(os.Stderr, "usage: build -out DIR [-set test|controlplane ...]")
		os.Exit(2)
	}
	list := images
	switch *set {
	case "test":
	case "controlplane":
		var err error
		if list, err = cp.images(); err != nil {
			fmt.Fprintln(os.Stderr, "build:", err)
			os.Exit(2)
		}
	default:
		fmt.Fprintf(os.Stderr, "build: unknown -set %q (want test or controlplane)\n", *set)
		os.Exit(2)
	}
	if err := run(list, *out, *busybox, *goCmd, *arch); err != nil {
		fmt.Fprintln(os.Stderr, "build:", err)
		os.Exit(1)
	}
}

func run(list []*image, out, busybox, goCmd, arch string) error {
	root, err := findModRoot()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "nodelet-images-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	b := &builder{modRoot: root, busybox: busybox, goCmd: goCmd, arch: arch, tmp: tmp,
		layerCache: filepath.Join(out, ".layers"), usedLayers: map[string]bool{}}
	var lines strings.Builder
	for _, im := range list {
		start := time.Now()
		archive, md, err := b.build(im)
		if err != nil {
			return fmt.Errorf("image %s: %w", im.name, err)
		}
		name := filepath.Join(out, im.name+".tar")
		changed, err := writeIfChanged(name, archive)
		if err != nil {
			return err
		}
		state := "unchanged"
		if changed {
			state = "written"
		}
		fmt.Fprintf(os.Stderr, "image %-10s %s %s (%d bytes, %s, %v)\n", im.name, md[:19], strings.Join(im.tags, ","), len(archive), state, time.Since(start).Round(time.Millisecond))
		for _, t := range im.tags {
			fmt.Fprintf(&lines, "%s\t%s\t%s\n", name, t, md)
		}
	}
	if err := b.pruneLayerCache(); err != nil {
		return err
	}
	_, err = writeIfChanged(filepath.Join(out, "images.txt"), []byte(lines.String()))
	return err
}
