package userns

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// handlerSupport is a HandlerSupport with fixed answers.
type handlerSupport struct {
	supported map[string]bool
	err       error
}

func (h handlerSupport) SupportsUserNamespaces(_ context.Context, handler string) (bool, error) {
	return h.supported[handler], h.err
}

var supportsDefault = handlerSupport{supported: map[string]bool{"": true}}

func pod(uid string, hostUsers *bool) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p-" + uid, Namespace: "ns", UID: types.UID(uid)},
		Spec: v1.PodSpec{HostUsers: hostUsers}}
}

func ptr(b bool) *bool { return &b }

// newTestManager manages dir/pods with a range of the given number of 65536-ID blocks
// starting at block 2.
func newTestManager(t *testing.T, dir string, blocks uint32) *Manager {
	t.Helper()
	m, err := NewManager(Config{PodsDir: filepath.Join(dir, "pods"), MaxPods: 1, Handlers: supportsDefault,
		Range: &IDRange{First: 2 * 65536, Length: blocks * 65536}})
	if err != nil {
		t.Fatalf("NewManager: %v", err)
	}
	return m
}

func mustMap(t *testing.T, m *Manager, p *v1.Pod) *runtimeapi.UserNamespace {
	t.Helper()
	u, err := m.GetOrCreateUserNamespaceMappings(context.Background(), p, "")
	if err != nil {
		t.Fatalf("GetOrCreateUserNamespaceMappings(%s): %v", p.UID, err)
	}
	return u
}

// hostID checks the pod mapping's shape (root mapped, one range, same for UIDs and GIDs,
// 65536 long) and returns its first host ID.
func hostID(t *testing.T, u *runtimeapi.UserNamespace) uint32 {
	t.Helper()
	if u.Mode != runtimeapi.NamespaceMode_POD || len(u.Uids) != 1 || len(u.Gids) != 1 {
		t.Fatalf("want one POD mapping, got %v", u)
	}
	uid, gid := u.Uids[0], u.Gids[0]
	if uid.ContainerId != 0 || uid.Length != 65536 || uid.HostId != gid.HostId || gid.ContainerId != 0 || gid.Length != 65536 {
		t.Fatalf("mapping %v / %v: want 0 <host> 65536 for both", uid, gid)
	}
	return uid.HostId
}

func TestHostUsersPodsGetTheNodeNamespace(t *testing.T) {
	dir := t.TempDir()
	m := newTestManager(t, dir, 4)
	for _, p := range []*v1.Pod{pod("a", nil), pod("b", ptr(true)), nil} {
		u := mustMap(t, m, p)
		if u.Mode != runtimeapi.NamespaceMode_NODE || len(u.Uids)+len(u.Gids) != 0 {
			t.Errorf("pod %v: got %v, want mode NODE without mappings", p, u)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "pods", "a")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a host-users pod got a pod directory or mapping file: %v", err)
	}
}

func TestPodsGetDistinctBlocksKeptAcrossCalls(t *testing.T) {
	dir := t.TempDir()
	m := newTestManager(t, dir, 4)
	seen := map[uint32]string{}
	for _, uid := range []string{"a", "b", "c", "d"} {
		first := hostID(t, mustMap(t, m, pod(uid, ptr(false))))
		if first < 2*65536 || first >= 6*65536 || first%65536 != 0 {
			t.Errorf("pod %s: host ID %d outside the range's blocks", uid, first)
		}
		if other, dup := seen[first]; dup {
			t.Errorf("pods %s and %s share host ID %d", other, uid, first)
		}
		seen[first] = uid
		if again := hostID(t, mustMap(t, m, pod(uid, ptr(false)))); again != first {
			t.Errorf("pod %s: second call gave %d, first %d", uid, again, first)
		}
	}
	_, err := m.GetOrCreateUserNamespaceMappings(context.Background(), pod("e", ptr(false)), "")
	if err == nil || !strings.Contains(err.Error(), "could not find an empty slot") {
		t.Errorf("fifth pod in a four-block range: err %v, want no empty slot", err)
	}
}

func TestMappingFileIsUpstreamsFormat(t *testing.T) {
	dir := t.TempDir()
	m := newTestManager(t, dir, 1)
	mustMap(t, m, pod("a", ptr(false)))
	data, err := os.ReadFile(filepath.Join(dir, "pods", "a", "userns"))
	if err != nil {
		t.Fatal(err)
	}
	var got map[string][]map[string]uint32
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatalf("%s: %v", data, err)
	}
	want := map[string]uint32{"hostId": 2 * 65536, "containerId": 0, "length": 65536}
	for _, key := range []string{"uidMappings", "gidMappings"} {
		if len(got[key]) != 1 || len(got[key][0]) != 3 || got[key][0]["hostId"] != want["hostId"] ||
			got[key][0]["length"] != want["length"] || got[key][0]["containerId"] != 0 {
			t.Errorf("%s in %s: want [%v]", key, data, want)
		}
	}
	if entries, _ := os.ReadDir(filepath.Join(dir, "pods", "a")); len(entries) != 1 {
		t.Errorf("pod directory holds %d entries, want only the mapping file (no temp file left)", len(entries))
	}
}

func TestRestartKeepsMappingsAndTheirBlocks(t *testing.T) {
	dir := t.TempDir()
	m := newTestManager(t, dir, 2)
	a := hostID(t, mustMap(t, m, pod("a", ptr(false))))

	// A new manager over the same directory: pod a keeps its block, and the only other
	// block is what pod b gets, whatever block the search starts from.
	for start := range 2 {
		m2 := newTestManager(t, dir, 2)
		m2.intN = func(int) int { return start }
		if got, ok := m2.Allocated("a"); !ok || got != a {
			t.Fatalf("after restart pod a has %d (%v), want %d", got, ok, a)
		}
		if again := hostID(t, mustMap(t, m2, pod("a", ptr(false)))); again != a {
			t.Errorf("after restart pod a maps to %d, want %d", again, a)
		}
		b := hostID(t, mustMap(t, m2, pod("b", ptr(false))))
		if b == a {
			t.Errorf("start %d: pod b got pod a's block %d", start, a)
		}
		m2.Release("b")
	}
}

func TestReleaseFreesTheBlockAndRemovesTheFile(t *testing.T) {
	dir := t.TempDir()
	m := newTestManager(t, dir, 1)
	a := hostID(t, mustMap(t, m, pod("a", ptr(false))))
	if _, err := m.GetOrCreateUserNamespaceMappings(context.Background(), pod("b", ptr(false)), ""); err == nil {
		t.Fatal("pod b got a block while pod a held the only one")
	}
	m.Release("a")
	m.Release("a") // twice, and for unknown pods: no-op
	m.Release("unknown")
	if _, err := os.Stat(filepath.Join(dir, "pods", "a", "userns")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("mapping file after Release: %v", err)
	}
	if _, ok := m.Allocated("a"); ok {
		t.Error("pod a still allocated after Release")
	}
	if b := hostID(t, mustMap(t, m, pod("b", ptr(false)))); b != a {
		t.Errorf("pod b got %d, want the freed block %d", b, a)
	}
}

func TestCleanupOrphanedFreesUnknownAndVanishedPods(t *testing.T) {
	dir := t.TempDir()
	m := newTestManager(t, dir, 4)
	for _, uid := range []string{"keep", "unknown", "vanished"} {
		mustMap(t, m, pod(uid, ptr(false)))
	}
	if err := os.RemoveAll(filepath.Join(dir, "pods", "vanished")); err != nil {
		t.Fatal(err)
	}
	if err := m.CleanupOrphaned(func(uid types.UID) bool { return uid == "keep" || uid == "vanished" }); err != nil {
		t.Fatal(err)
	}
	for uid, want := range map[types.UID]bool{"keep": true, "unknown": false, "vanished": false} {
		if _, got := m.Allocated(uid); got != want {
			t.Errorf("pod %s allocated=%v after cleanup, want %v", uid, got, want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "pods", "unknown", "userns")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("orphan's mapping file after cleanup: %v", err)
	}
}

func TestUnsupportedRuntimeRefusesWithAReason(t *testing.T) {
	cases := []struct {
		name     string
		handlers HandlerSupport
		handler  string
		want     string
	}{
		{"no handler support configured", nil, "",
			"can't set `spec.hostUsers: false`, runtime does not support user namespaces"},
		{"default handler without support", handlerSupport{supported: map[string]bool{"runc": true}}, "",
			"can't set `spec.hostUsers: false`, runtime does not support user namespaces"},
		{"named handler without support", supportsDefault, "kata",
			"can't set `spec.hostUsers: false`, RuntimeClass handler \"kata\" does not support user namespaces"},
		{"status error", handlerSupport{err: errors.New("the handler \"x\" is not known")}, "",
			"can't set `spec.hostUsers: false`, runtime does not support user namespaces: the handler \"x\" is not known"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			m, err := NewManager(Config{PodsDir: filepath.Join(dir, "pods"), Handlers: tc.handlers, Range: &IDRange{First: 65536, Length: 65536}})
			if err != nil {
				t.Fatal(err)
			}
			_, err = m.GetOrCreateUserNamespaceMappings(context.Background(), pod("a", ptr(false)), tc.handler)
			if err == nil || err.Error() != tc.want {
				t.Errorf("err %v, want %q", err, tc.want)
			}
			if _, ok := m.Allocated("a"); ok {
				t.Error("a refused pod holds a block")
			}
			// A pod in the host's user namespace runs on any runtime.
			if u := mustMap(t, m, pod("b", nil)); u.Mode != runtimeapi.NamespaceMode_NODE {
				t.Errorf("host-users pod: %v", u)
			}
		})
	}
}

func TestBadMappingFilesFailStartUp(t *testing.T) {
	valid := func(host, length uint32) string {
		m := `{"hostId":` + itoa(host) + `,"containerId":0,"length":` + itoa(length) + `}`
		return `{"uidMappings":[` + m + `],"gidMappings":[` + m + `]}`
	}
	cases := map[string]struct {
		files map[string]string
		want  string
	}{
		"not JSON":              {map[string]string{"a": "{"}, "invalid user namespace mappings file"},
		"two mappings":          {map[string]string{"a": `{"uidMappings":[{},{}],"gidMappings":[{},{}]}`}, "no more than one mapping"},
		"gid differs":           {map[string]string{"a": `{"uidMappings":[{"hostId":131072,"length":65536}],"gidMappings":[{"hostId":196608,"length":65536}]}`}, "should be identical"},
		"root not mapped":       {map[string]string{"a": `{"uidMappings":[{"hostId":131072,"containerId":1,"length":65536}],"gidMappings":[{"hostId":131072,"containerId":1,"length":65536}]}`}, "UID 0 must be mapped"},
		"wrong length":          {map[string]string{"a": valid(131072, 1000)}, "wrong user namespace length 1000"},
		"unaligned":             {map[string]string{"a": valid(131073, 65536)}, "wrong user namespace offset"},
		"outside the range":     {map[string]string{"a": valid(65536*100, 65536)}, "out of range"},
		"two pods, one block":   {map[string]string{"a": valid(131072, 65536), "b": valid(131072, 65536)}, "already taken"},
		"mapping of root block": {map[string]string{"a": valid(0, 65536)}, "out of range"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			for uid, content := range tc.files {
				podDir := filepath.Join(dir, "pods", uid)
				if err := os.MkdirAll(podDir, 0o750); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(podDir, "userns"), []byte(content), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			_, err := NewManager(Config{PodsDir: filepath.Join(dir, "pods"), Range: &IDRange{First: 131072, Length: 2 * 65536}})
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "record pod mappings for existing pod") {
				t.Errorf("err %v, want one about %q", err, tc.want)
			}
		})
	}
}

func TestPodDirsWithoutMappingsAreFine(t *testing.T) {
	dir := t.TempDir()
	for _, uid := range []string{"no-file", "empty-file"} {
		if err := os.MkdirAll(filepath.Join(dir, "pods", uid), 0o750); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "pods", "empty-file", "userns"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	m := newTestManager(t, dir, 1)
	if _, ok := m.Allocated("empty-file"); ok {
		t.Error("an empty mapping file took a block")
	}
	// No pods dir at all is a fresh node.
	if _, err := NewManager(Config{PodsDir: filepath.Join(dir, "nothing"), Range: &IDRange{First: 65536, Length: 65536}}); err != nil {
		t.Errorf("missing pods dir: %v", err)
	}
}

func TestUnwritableMappingFreesTheBlock(t *testing.T) {
	dir := t.TempDir()
	m := newTestManager(t, dir, 1)
	// The pod directory is /proc/self, where no file can be created, not even by root.
	if err := os.MkdirAll(filepath.Join(dir, "pods"), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/proc/self", filepath.Join(dir, "pods", "a")); err != nil {
		t.Fatal(err)
	}
	if _, err := m.GetOrCreateUserNamespaceMappings(context.Background(), pod("a", ptr(false)), ""); err == nil ||
		!strings.HasPrefix(err.Error(), "create user namespace: ") {
		t.Fatalf("err %v, want a create failure", err)
	}
	if _, ok := m.Allocated("a"); ok {
		t.Error("the failed pod keeps its block")
	}
	mustMap(t, m, pod("b", ptr(false))) // the only block is free again
}

func TestConfigValidation(t *testing.T) {
	cases := []struct {
		name string
		cfg  Config
		want string
	}{
		{"idsPerPod too small", Config{IDsPerPod: 1000}, "must not be less than 65536"},
		{"idsPerPod not a multiple", Config{IDsPerPod: 65536 + 1}, "must be a multiple of 65536"},
		{"idsPerPod too large", Config{IDsPerPod: 1 << 33}, "must not be more than 4294967295"},
		{"range start unaligned", Config{Range: &IDRange{First: 100000, Length: 65536}}, "kubelet user assigned ID 100000 is not a multiple of 65536"},
		{"range maps host root", Config{Range: &IDRange{First: 0, Length: 65536 * 4}}, "must be greater or equal to 65536"},
		{"range length unaligned", Config{Range: &IDRange{First: 65536, Length: 1000}}, "length 1000 is not a multiple of 65536"},
		{"too few blocks", Config{MaxPods: 3, Range: &IDRange{First: 65536, Length: 2 * 65536}}, "not enough to support 3 pods"},
		{"range includes ID 4294967295", Config{Range: &IDRange{First: 65535 * 65536, Length: 65536}}, "reach past ID 4294967294"},
		{"upstream's default range", Config{Range: &IDRange{First: 65536, Length: 65535 * 65536}}, "reach past ID 4294967294"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.PodsDir = t.TempDir()
			_, err := NewManager(tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err %v, want %q", err, tc.want)
			}
		})
	}
}

func TestDefaultRangeFitsTheKernelsLimits(t *testing.T) {
	for _, ids := range []uint32{65536, 2 * 65536, 3 * 65536} {
		r := DefaultRange(ids)
		if r.First != ids || r.Length%ids != 0 || uint64(r.First)+uint64(r.Length) > 1<<32-1 {
			t.Errorf("idsPerPod %d: range %+v", ids, r)
		}
		// The largest such range: one more block would include ID 4294967295.
		if uint64(r.First)+uint64(r.Length)+uint64(ids) <= 1<<32-1 {
			t.Errorf("idsPerPod %d: range %+v leaves a whole block out", ids, r)
		}
		if _, err := NewManager(Config{PodsDir: t.TempDir(), IDsPerPod: int64(ids), MaxPods: 110, Range: &r}); err != nil {
			t.Errorf("idsPerPod %d: default range refused: %v", ids, err)
		}
	}
	if r := DefaultRange(65536); r.Length/65536 != 65534 {
		t.Errorf("default range has %d blocks, want 65534", r.Length/65536)
	}
}

func TestLastBlockOfTheDefaultRange(t *testing.T) {
	r := DefaultRange(DefaultIDsPerPod)
	m, err := NewManager(Config{PodsDir: t.TempDir(), Handlers: supportsDefault, Range: &r})
	if err != nil {
		t.Fatal(err)
	}
	m.intN = func(n int) int { return n - 1 }
	if got, want := hostID(t, mustMap(t, m, pod("a", ptr(false)))), uint32(65534*65536); got != want {
		t.Errorf("last block starts at %d, want %d", got, want)
	}
}

func itoa(v uint32) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func TestConcurrentPodsGetDistinctBlocks(t *testing.T) {
	m := newTestManager(t, t.TempDir(), 64)
	firsts := make([]uint32, 64)
	done := make(chan struct{})
	for i := range firsts {
		go func() {
			defer func() { done <- struct{}{} }()
			u, err := m.GetOrCreateUserNamespaceMappings(context.Background(), pod(itoa(uint32(i)), ptr(false)), "")
			if err != nil {
				t.Error(err)
				return
			}
			firsts[i] = u.Uids[0].HostId
		}()
	}
	for range firsts {
		<-done
	}
	seen := map[uint32]bool{}
	for _, f := range firsts {
		if seen[f] {
			t.Errorf("host ID %d given twice", f)
		}
		seen[f] = true
	}
}
