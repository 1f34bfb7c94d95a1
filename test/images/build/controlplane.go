package main

import (
	"debug/elf"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// The control-plane images hold upstream's etcd and kube-apiserver, the binaries
// `hack/controlplane.sh build` caches, under the names kubeadm writes into its static
// pod manifests. They are big (~30 MB and ~95 MB unpacked) and only the kubeadm-shaped
// control-plane tests need them, so they form their own set, built and imported on
// demand (`hack/runtime.sh import-controlplane-images`), never by `hack/runtime.sh up`.

// controlPlane names the binaries and versions the control-plane images are built from.
type controlPlane struct {
	apiserver, k8sVersion string // kube-apiserver binary; its release, e.g. v1.37.2
	etcd, etcdVersion     string // etcd binary; its release, e.g. v3.7.3
}

// images are the etcd and kube-apiserver images, tagged as registry.k8s.io tags them:
// etcd:<version>-0 (the "-0" is the image revision) and kube-apiserver:<version>. As
// upstream's images, both put the binary in /usr/local/bin and leave the command to the
// manifest (kubeadm's command is the bare name, found on PATH).
func (cp controlPlane) images() ([]*image, error) {
	if cp.apiserver == "" || cp.k8sVersion == "" || cp.etcd == "" || cp.etcdVersion == "" {
		return nil, errors.New("-set controlplane needs -kube-apiserver, -k8s-version, -etcd and -etcd-version")
	}
	etcdTag := "registry.k8s.io/etcd:" + strings.TrimPrefix(cp.etcdVersion, "v") + "-0"
	return []*image{
		binaryImage("etcd", cp.etcd, etcdTag),
		binaryImage("kube-apiserver", cp.apiserver, "registry.k8s.io/kube-apiserver:"+cp.k8sVersion),
	}, nil
}

// binaryImage is a distroless-like image with one host binary as
// /usr/local/bin/<name>: a base layer (users, /tmp), the binary's interpreter and
// shared libraries when it is dynamically linked, and the binary.
func binaryImage(name, bin string, tags ...string) *image {
	return &image{
		name: name,
		tags: tags,
		layers: []func(*builder) ([]file, error){
			distrolessBase,
			func(b *builder) ([]file, error) { return sharedLibraries(bin, b.arch) },
			func(*builder) ([]file, error) {
				data, err := os.ReadFile(bin)
				if err != nil {
					return nil, fmt.Errorf("%s binary: %w", name, err)
				}
				return []file{{path: "usr/local/bin/" + name, mode: 0o755, data: data}}, nil
			},
		},
		config: containerConfig{Env: []string{defaultPath}},
	}
}

// distrolessBase is what distroless images (upstream's bases) offer a program: root
// and nobody users, a nsswitch.conf that makes the resolver read /etc/hosts first, and
// a world-writable /tmp.
func distrolessBase(*builder) ([]file, error) {
	return []file{
		{path: "etc/passwd", mode: 0o644, data: []byte(
			"root:x:0:0:root:/root:/sbin/nologin\n" +
				"nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n")},
		{path: "etc/group", mode: 0o644, data: []byte("root:x:0:\nnobody:x:65534:\n")},
		{path: "etc/nsswitch.conf", mode: 0o644, data: []byte("hosts: files dns\n")},
		{path: "root", mode: 0o700, dir: true},
		{path: "tmp", mode: 0o1777, dir: true},
	}, nil
}

// elfMachines maps GOARCH to the ELF machine and Debian's multiarch triple.
var elfMachines = map[string]struct {
	machine elf.Machine
	triple  string
}{
	"amd64": {elf.EM_X86_64, "x86_64-linux-gnu"},
	"arm64": {elf.EM_AARCH64, "aarch64-linux-gnu"},
}

// sharedLibraries returns what a dynamically linked binary needs at run time, read from
// its ELF headers (nothing is executed): the interpreter at the path the binary names
// (e.g. /lib64/ld-linux-x86-64.so.2) and every shared library it needs, transitively,
// in /lib/<triple>/, a directory the loader searches without an ld.so.cache. A static
// binary needs nothing.
func sharedLibraries(bin, arch string) ([]file, error) {
	m, ok := elfMachines[arch]
	if !ok {
		return nil, fmt.Errorf("no ELF machine known for GOARCH %q", arch)
	}
	interp, needed, err := elfImports(bin, m.machine)
	if err != nil {
		return nil, err
	}
	if interp == "" {
		return nil, nil
	}
	data, err := os.ReadFile(interp)
	if err != nil {
		return nil, fmt.Errorf("%s: interpreter: %w", bin, err)
	}
	files := []file{{path: interp, mode: 0o755, data: data}}
	seen := map[string]bool{path.Base(interp): true}
	for len(needed) > 0 {
		lib := needed[0]
		needed = needed[1:]
		if seen[lib] {
			continue
		}
		seen[lib] = true
		host, err := findLibrary(lib, m.triple)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", bin, err)
		}
		_, more, err := elfImports(host, m.machine)
		if err != nil {
			return nil, err
		}
		needed = append(needed, more...)
		data, err := os.ReadFile(host)
		if err != nil {
			return nil, err
		}
		files = append(files, file{path: path.Join("lib", m.triple, lib), mode: 0o755, data: data})
	}
	return files, nil
}

// elfImports reads an ELF file's interpreter (empty for a static binary) and the
// shared libraries it names (DT_NEEDED).
func elfImports(name string, machine elf.Machine) (string, []string, error) {
	f, err := elf.Open(name)
	if err != nil {
		return "", nil, err
	}
	defer f.Close()
	if f.Machine != machine {
		return "", nil, fmt.Errorf("%s is for %v, not %v", name, f.Machine, machine)
	}
	interp := ""
	for _, p := range f.Progs {
		if p.Type != elf.PT_INTERP {
			continue
		}
		b := make([]byte, p.Filesz)
		if _, err := p.ReadAt(b, 0); err != nil {
			return "", nil, fmt.Errorf("%s: reading PT_INTERP: %w", name, err)
		}
		interp = strings.TrimRight(string(b), "\x00")
	}
	needed, err := f.ImportedLibraries()
	if err != nil && !errors.Is(err, elf.ErrNoSymbols) {
		return "", nil, fmt.Errorf("%s: %w", name, err)
	}
	return interp, needed, nil
}

// findLibrary looks a shared library up where Debian's loader would, multiarch first.
func findLibrary(lib, triple string) (string, error) {
	for _, dir := range []string{"/lib/" + triple, "/usr/lib/" + triple, "/lib64", "/usr/lib64", "/lib", "/usr/lib"} {
		p := filepath.Join(dir, lib)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		} else if !errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
	}
	return "", fmt.Errorf("shared library %s not found in the usual directories", lib)
}
