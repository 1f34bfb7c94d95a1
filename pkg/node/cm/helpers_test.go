package cm

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
)

// res builds container resources; "" leaves a value out.
func res(cpuReq, memReq, cpuLim, memLim string) v1.ResourceRequirements {
	r := v1.ResourceRequirements{}
	add := func(list *v1.ResourceList, name v1.ResourceName, v string) {
		if v == "" {
			return
		}
		if *list == nil {
			*list = v1.ResourceList{}
		}
		(*list)[name] = resource.MustParse(v)
	}
	add(&r.Requests, v1.ResourceCPU, cpuReq)
	add(&r.Requests, v1.ResourceMemory, memReq)
	add(&r.Limits, v1.ResourceCPU, cpuLim)
	add(&r.Limits, v1.ResourceMemory, memLim)
	return r
}

func testPod(uid string, rs ...v1.ResourceRequirements) *v1.Pod {
	p := &v1.Pod{}
	p.UID, p.Name, p.Namespace = types.UID(uid), "p-"+uid, "default"
	for i, r := range rs {
		p.Spec.Containers = append(p.Spec.Containers, v1.Container{Name: "c" + string(rune('0'+i)), Resources: r})
	}
	return p
}

func list(kv ...string) v1.ResourceList {
	l := v1.ResourceList{}
	for i := 0; i < len(kv); i += 2 {
		l[v1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return l
}

// fakeV1 is a cgroup v1 layout of plain directories: cpu and cpuacct share a
// hierarchy through symlinks, as on most hosts. It returns the root and a sysfs huge
// pages directory with 2Mi and 1Gi pages.
func fakeV1(t *testing.T) (root, hugePages string) {
	t.Helper()
	root = t.TempDir()
	for _, h := range []string{"cpu,cpuacct", "cpuset", "memory", "pids", "hugetlb", "systemd", "unified"} {
		mustMkdir(t, filepath.Join(root, h))
	}
	for _, l := range []string{"cpu", "cpuacct"} {
		if err := os.Symlink("cpu,cpuacct", filepath.Join(root, l)); err != nil {
			t.Fatal(err)
		}
	}
	writeTestFile(t, filepath.Join(root, "cpuset", "cpuset.cpus"), "0-3\n")
	writeTestFile(t, filepath.Join(root, "cpuset", "cpuset.mems"), "0\n")
	return root, fakeHugePages(t)
}

// fakeV2 is a unified hierarchy whose root offers the usual controllers.
func fakeV2(t *testing.T) (root, hugePages string) {
	t.Helper()
	root = t.TempDir()
	writeTestFile(t, filepath.Join(root, cgroupControllers), "cpuset cpu io memory hugetlb pids rdma misc\n")
	return root, fakeHugePages(t)
}

func fakeHugePages(t *testing.T) string {
	dir := t.TempDir()
	mustMkdir(t, filepath.Join(dir, "hugepages-2048kB"))
	mustMkdir(t, filepath.Join(dir, "hugepages-1048576kB"))
	return dir
}

func mustMkdir(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
}

func writeTestFile(t *testing.T, p, content string) {
	t.Helper()
	mustMkdir(t, filepath.Dir(p))
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// read returns a file's trimmed content, "<missing>" when it does not exist.
func read(t *testing.T, parts ...string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(parts...))
	if os.IsNotExist(err) {
		return "<missing>"
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(data))
}

// expectFiles checks files under dir against want (file -> content, "<missing>" for absent).
func expectFiles(t *testing.T, dir string, want map[string]string) {
	t.Helper()
	for f, v := range want {
		if got := read(t, dir, f); got != v {
			t.Errorf("%s/%s = %q, want %q", dir, f, got, v)
		}
	}
}
