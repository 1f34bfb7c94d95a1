package main

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

func TestSharedLibrariesOfADynamicBinary(t *testing.T) {
	if _, ok := elfMachines[runtime.GOARCH]; !ok {
		t.Skipf("no ELF machine for %s", runtime.GOARCH)
	}
	const bin = "/bin/ls" // dynamically linked on Debian: libc, libselinux, libpcre2
	if _, err := os.Stat(bin); err != nil {
		t.Skip(err)
	}
	files, err := sharedLibraries(bin, runtime.GOARCH)
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, f := range files {
		if len(f.data) == 0 {
			t.Errorf("%s is empty", f.path)
		}
		paths = append(paths, f.path)
	}
	interp, _, err := elfImports(bin, elfMachines[runtime.GOARCH].machine)
	if err != nil || interp == "" {
		t.Fatalf("interpreter of %s: %q, %v", bin, interp, err)
	}
	libc := "lib/" + elfMachines[runtime.GOARCH].triple + "/libc.so.6"
	if !slices.Contains(paths, interp) || !slices.Contains(paths, libc) {
		t.Errorf("files %v, want the interpreter %s and %s among them", paths, interp, libc)
	}
	if n := strings.Count(strings.Join(paths, " "), "libc.so.6"); n != 1 {
		t.Errorf("libc.so.6 appears %d times (every library is needed by several): %v", n, paths)
	}
}

func TestSharedLibrariesOfAStaticBinaryAreNone(t *testing.T) {
	const bin = "/bin/busybox" // busybox-static, which the test images need anyway
	if _, err := os.Stat(bin); err != nil {
		t.Skip(err)
	}
	files, err := sharedLibraries(bin, runtime.GOARCH)
	if err != nil || len(files) != 0 {
		t.Fatalf("sharedLibraries(%s) = %d files, %v; want none", bin, len(files), err)
	}
}

func TestControlPlaneImagesNeedTheirBinaries(t *testing.T) {
	if _, err := (controlPlane{apiserver: "/x", k8sVersion: "v1.37.2"}).images(); err == nil {
		t.Fatal("no error without etcd")
	}
	ims, err := controlPlane{apiserver: "/a", k8sVersion: "v1.37.2", etcd: "/e", etcdVersion: "v3.7.3"}.images()
	if err != nil {
		t.Fatal(err)
	}
	if ims[0].tags[0] != "registry.k8s.io/etcd:3.7.3-0" || ims[1].tags[0] != "registry.k8s.io/kube-apiserver:v1.37.2" {
		t.Errorf("tags %v, %v", ims[0].tags, ims[1].tags)
	}
	b := &builder{arch: runtime.GOARCH, layerCache: t.TempDir(), usedLayers: map[string]bool{}}
	if _, _, err := b.build(ims[1]); err == nil || !strings.Contains(err.Error(), "/a") {
		t.Errorf("building from a missing binary: %v, want an error naming it", err)
	}
}

func TestLayerCacheGivesTheSameBytesAndPrunesUnused(t *testing.T) {
	b := &builder{layerCache: t.TempDir(), usedLayers: map[string]bool{}}
	raw := bytes.Repeat([]byte("nodelet "), cachedLayerMin/8+1)
	first, err := b.compress(raw)
	if err != nil {
		t.Fatal(err)
	}
	second, err := b.compress(raw)
	if err != nil || !bytes.Equal(first, second) {
		t.Fatalf("second compression differs (%v)", err)
	}
	stale := filepath.Join(b.layerCache, "stale.gz")
	if err := os.WriteFile(stale, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := b.pruneLayerCache(); err != nil {
		t.Fatal(err)
	}
	left, _ := os.ReadDir(b.layerCache)
	if len(left) != 1 || filepath.Join(b.layerCache, left[0].Name()) == stale {
		t.Errorf("after pruning: %v, want only the used layer", left)
	}
}
