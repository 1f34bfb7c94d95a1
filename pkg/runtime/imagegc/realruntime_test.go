//go:build e2e

// Image GC against a real containerd. It imports throwaway images of its own (unique
// IDs, so removing one by ID never touches a shared image) and shows GC only those:
// the shared test images (pause, busybox, probe-server, grpc-health) are never
// candidates. Run, holding the rigs' lock, with
//
//	flock /run/nodelet-shared.lock env CONTAINER_RUNTIME_ENDPOINT=unix:///run/nodelet-e2e/containerd.sock \
//	    go test -tags e2e -count=1 -run Real ./pkg/runtime/imagegc/
package imagegc

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/tools/record"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/pkg/runtime/cri"
)

func TestRealRuntimeGarbageCollect(t *testing.T) {
	ep := os.Getenv("CONTAINER_RUNTIME_ENDPOINT")
	if ep == "" {
		t.Skip("CONTAINER_RUNTIME_ENDPOINT not set")
	}
	ctx := context.Background()
	rs, err := cri.NewRemoteRuntimeService(ctx, ep, 10*time.Second, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	is, err := cri.NewRemoteImageService(ctx, ep, 10*time.Second, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	sock := strings.TrimPrefix(ep, "unix://")
	nonce := fmt.Sprint(time.Now().UnixNano())
	guard := &throwawayOnly{ImageManagerService: is, t: t, ids: sets.New[string]()}
	t.Cleanup(func() { guard.removeAll(ctx) })

	tag := func(role string) string { return "nodelet.local/imagegc-" + role + ":" + nonce }
	unused := guard.importImage(ctx, sock, tag("unused"))
	used := guard.importImage(ctx, sock, tag("used"))
	sandbox := guard.importImage(ctx, sock, tag("sandbox"))
	runContainerOf(ctx, t, rs, tag("used"), nonce)

	rec := record.NewFakeRecorder(10)
	m, err := New(Options{
		Images: guard, Containers: rs, FsStats: CRIImageFs{Images: is},
		// Usage is always at least 1%, and 0% cannot be reached: GC removes all it may.
		Policy:       Policy{HighThresholdPercent: 1, LowThresholdPercent: 0},
		SandboxImage: tag("sandbox"), Recorder: rec,
		NodeRef: &v1.ObjectReference{Kind: "Node", Name: "imagegc-e2e"},
	})
	if err != nil {
		t.Fatal(err)
	}
	err = m.GarbageCollect(ctx, time.Now())
	if err == nil || !strings.HasPrefix(err.Error(), "Insufficient free disk space on the node's image filesystem") {
		t.Errorf("GarbageCollect err = %v, want the FreeDiskSpaceFailed message", err)
	}
	select {
	case ev := <-rec.Events:
		if !strings.HasPrefix(ev, "Warning FreeDiskSpaceFailed Insufficient free disk space") {
			t.Errorf("event = %q", ev)
		}
	default:
		t.Error("no FreeDiskSpaceFailed event")
	}
	guard.wantPresent(ctx, unused, false)
	guard.wantPresent(ctx, used, true)
	guard.wantPresent(ctx, sandbox, true)

	// The eviction manager's reclaim: another unused image goes, the others stay.
	unused2 := guard.importImage(ctx, sock, tag("unused2"))
	if err := m.DeleteUnusedImages(ctx); err != nil {
		t.Fatal(err)
	}
	guard.wantPresent(ctx, unused2, false)
	guard.wantPresent(ctx, used, true)
	guard.wantPresent(ctx, sandbox, true)
}

// throwawayOnly shows GC only the images this test imported and refuses to remove any
// other, so a bug cannot cost the shared rig its images.
type throwawayOnly struct {
	internalapi.ImageManagerService
	t   *testing.T
	ids sets.Set[string]
}

func (g *throwawayOnly) ListImages(ctx context.Context, filter *runtimeapi.ImageFilter) ([]*runtimeapi.Image, error) {
	all, err := g.ImageManagerService.ListImages(ctx, filter)
	var mine []*runtimeapi.Image
	for _, img := range all {
		if g.ids.Has(img.Id) {
			mine = append(mine, img)
		}
	}
	return mine, err
}

func (g *throwawayOnly) RemoveImage(ctx context.Context, image *runtimeapi.ImageSpec) error {
	if !g.ids.Has(image.Image) {
		g.t.Errorf("GC tried to remove %q, not one of this test's images", image.Image)
		return fmt.Errorf("refused")
	}
	return g.ImageManagerService.RemoveImage(ctx, image)
}

func (g *throwawayOnly) removeAll(ctx context.Context) {
	for id := range g.ids {
		if err := g.ImageManagerService.RemoveImage(ctx, &runtimeapi.ImageSpec{Image: id}); err != nil {
			g.t.Logf("cleanup: removing %s: %v", id, err)
		}
	}
}

func (g *throwawayOnly) wantPresent(ctx context.Context, id string, want bool) {
	g.t.Helper()
	resp, err := g.ImageStatus(ctx, &runtimeapi.ImageSpec{Image: id}, false)
	if err != nil {
		g.t.Fatal(err)
	}
	if got := resp.GetImage() != nil; got != want {
		g.t.Errorf("image %s present = %v, want %v", id, got, want)
	}
}

// importImage builds a one-file image unique to ref, imports it with ctr and returns
// its ID once the CRI plugin knows it.
func (g *throwawayOnly) importImage(ctx context.Context, sock, ref string) string {
	g.t.Helper()
	file := filepath.Join(g.t.TempDir(), "image.tar")
	if err := os.WriteFile(file, ociArchive(g.t, ref), 0o644); err != nil {
		g.t.Fatal(err)
	}
	if out, err := exec.Command("ctr", "-a", sock, "-n", "k8s.io", "images", "import", file).CombinedOutput(); err != nil {
		g.t.Fatalf("ctr images import: %v: %s", err, out)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := g.ImageStatus(ctx, &runtimeapi.ImageSpec{Image: ref}, false)
		if err != nil {
			g.t.Fatal(err)
		}
		if id := resp.GetImage().GetId(); id != "" {
			g.ids.Insert(id)
			return id
		}
		if time.Now().After(deadline) {
			g.t.Fatalf("imported image %s not seen by CRI", ref)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// runContainerOf creates (without starting) a container of image in a host-network
// sandbox, removed when the test ends: a container in any state keeps its image.
func runContainerOf(ctx context.Context, t *testing.T, rs internalapi.RuntimeService, image, nonce string) {
	t.Helper()
	sandboxConfig := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: "imagegc-" + nonce, Namespace: "imagegc-e2e", Uid: "imagegc-" + nonce},
		LogDirectory: t.TempDir(),
		Linux: &runtimeapi.LinuxPodSandboxConfig{SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
			NamespaceOptions: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE},
		}},
	}
	podID, err := rs.RunPodSandbox(ctx, sandboxConfig, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = rs.StopPodSandbox(ctx, podID)
		if err := rs.RemovePodSandbox(ctx, podID); err != nil {
			t.Logf("cleanup: removing sandbox: %v", err)
		}
	})
	_, err = rs.CreateContainer(ctx, podID, &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "c"},
		Image:    &runtimeapi.ImageSpec{Image: image},
		Command:  []string{"/never-started"},
		LogPath:  "c.log",
	}, sandboxConfig)
	if err != nil {
		t.Fatal(err)
	}
}

// ociArchive is an OCI image layout, as `ctr images import` takes it, of an image
// named ref whose only layer holds one file naming ref: a new ID for every ref.
func ociArchive(t *testing.T, ref string) []byte {
	t.Helper()
	layer := tarOf(t, map[string][]byte{"imagegc-test": []byte(ref + "\n")})
	var zbuf bytes.Buffer
	zw := gzip.NewWriter(&zbuf)
	_, _ = zw.Write(layer)
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	blobs := map[string][]byte{}
	add := func(mediaType string, data []byte) map[string]any {
		d := digest(data)
		blobs["blobs/sha256/"+strings.TrimPrefix(d, "sha256:")] = data
		return map[string]any{"mediaType": mediaType, "digest": d, "size": len(data)}
	}
	config := add("application/vnd.oci.image.config.v1+json", mustJSON(t, map[string]any{
		"architecture": runtime.GOARCH, "os": "linux", "config": map[string]any{},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{digest(layer)}},
	}))
	layerDesc := add("application/vnd.oci.image.layer.v1.tar+gzip", zbuf.Bytes())
	manifest := add("application/vnd.oci.image.manifest.v1+json", mustJSON(t, map[string]any{
		"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
		"config": config, "layers": []any{layerDesc},
	}))
	manifest["annotations"] = map[string]string{"io.containerd.image.name": ref, "org.opencontainers.image.ref.name": ref[strings.LastIndex(ref, ":")+1:]}
	blobs["index.json"] = mustJSON(t, map[string]any{"schemaVersion": 2, "manifests": []any{manifest}})
	blobs["oci-layout"] = []byte(`{"imageLayoutVersion":"1.0.0"}`)
	return tarOf(t, blobs)
}

func tarOf(t *testing.T, files map[string][]byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for name, data := range files {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(data)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(data); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func digest(b []byte) string { return fmt.Sprintf("sha256:%x", sha256.Sum256(b)) }

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
