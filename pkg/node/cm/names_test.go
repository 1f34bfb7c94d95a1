package cm

import (
	"path"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

func TestSystemdNames(t *testing.T) {
	for _, tc := range []struct {
		name cgroupName
		want string
	}{
		{cgroupName{}, "/"},
		{cgroupName{"kubepods"}, "/kubepods.slice"},
		{cgroupName{"kubepods", "burstable"}, "/kubepods.slice/kubepods-burstable.slice"},
		{cgroupName{"kubepods", "besteffort", "pod12-ab"}, "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod12_ab.slice"},
		{cgroupName{"kubepods", "pod12-ab"}, "/kubepods.slice/kubepods-pod12_ab.slice"},
	} {
		if got := tc.name.systemd(); got != tc.want {
			t.Errorf("%v.systemd() = %q, want %q", tc.name, got, tc.want)
		}
		back := parseSystemd(tc.want)
		if len(back) != len(tc.name) || back.cgroupfs() != tc.name.cgroupfs() {
			t.Errorf("parseSystemd(%q) = %v, want %v", tc.want, back, tc.name)
		}
	}
	if got := parseSystemd("/system.slice"); got.systemd() != "/system.slice" {
		t.Errorf("system.slice round trip = %q", got.systemd())
	}
}

func TestCgroupfsNames(t *testing.T) {
	for in, want := range map[string]string{"/": "/", "": "/", "/node1": "/node1", "a/b/": "/a/b"} {
		if got := parseCgroupfs(in).cgroupfs(); got != want {
			t.Errorf("parseCgroupfs(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestParentAndPodUID(t *testing.T) {
	guaranteed := testPod("1-2", res("1", "1Gi", "1", "1Gi"))
	burstable := testPod("3-4", res("1", "", "", ""))
	bestEffort := testPod("5-6", v1.ResourceRequirements{})
	for _, tc := range []struct {
		driver, root string
		perQOS       bool
		want         [3]string
	}{
		{DriverCgroupfs, "/", true, [3]string{"/kubepods/pod1-2", "/kubepods/burstable/pod3-4", "/kubepods/besteffort/pod5-6"}},
		{"", "/node1", true, [3]string{"/node1/kubepods/pod1-2", "/node1/kubepods/burstable/pod3-4", "/node1/kubepods/besteffort/pod5-6"}},
		{DriverSystemd, "/", true, [3]string{
			"/kubepods.slice/kubepods-pod1_2.slice",
			"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod3_4.slice",
			"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod5_6.slice"}},
		{DriverCgroupfs, "/", false, [3]string{"", "", ""}},
	} {
		m, _ := newManager(Options{CgroupDriver: tc.driver, CgroupRoot: tc.root, CgroupsPerQOS: tc.perQOS, CgroupFS: t.TempDir()})
		for i, p := range []*v1.Pod{guaranteed, burstable, bestEffort} {
			got := m.Parent(p)
			if got != tc.want[i] {
				t.Errorf("%s %s: Parent(%s) = %q, want %q", tc.driver, tc.root, p.UID, got, tc.want[i])
			}
			if got == "" {
				continue
			}
			if uid, ok := m.names.podUID(path.Base(got)); !ok || uid != p.UID {
				t.Errorf("podUID(%q) = %q, %v; want %q", path.Base(got), uid, ok, p.UID)
			}
		}
	}
	for _, base := range []string{"burstable", "besteffort", "pod", "kubepods-burstable.slice"} {
		for _, systemd := range []bool{false, true} {
			if uid, ok := (naming{systemd: systemd}).podUID(base); ok {
				t.Errorf("podUID(%q, systemd=%v) = %q, want none", base, systemd, uid)
			}
		}
	}
}

// The status's QoS class wins: a resized pod stays in its cgroup.
func TestParentFollowsStatusQOS(t *testing.T) {
	m, _ := newManager(Options{CgroupsPerQOS: true, CgroupFS: t.TempDir()})
	p := testPod("u", res("1", "1Gi", "2", "1Gi"))
	p.Status.QOSClass = v1.PodQOSGuaranteed
	if got := m.Parent(p); got != "/kubepods/pod"+string(types.UID("u")) {
		t.Errorf("Parent = %q", got)
	}
}
