package sources

import (
	"encoding/json"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// upstreamUIDs is testdata/staticuid/uids.json: the UIDs upstream's kubelet gave the
// manifests of testdata/staticuid and testdata/kubeadm, written by record.sh there.
type upstreamUIDs struct {
	Kubelet string         `json:"kubelet"`
	Node    types.NodeName `json:"node"`
	// Generated: the "Generated UID" log lines, by manifest path or URL.
	Generated []struct {
		Pod    string    `json:"pod"` // [namespace/]name, as in the manifest
		UID    types.UID `json:"uid"`
		Source string    `json:"source"`
	} `json:"generated"`
	// Sandboxes: the pods it ran, by the names it gave them.
	Sandboxes []struct {
		Namespace string    `json:"namespace"`
		Name      string    `json:"name"`
		UID       types.UID `json:"uid"`
	} `json:"sandboxes"`
}

// What record.sh served the manifests from: the UIDs hash these.
const (
	recordedManifestDir = "/var/lib/nodelet-uid/manifests"
	recordedURLBase     = "http://127.0.0.1:18089/"
)

// staticUIDPod is a pod nodelet decoded from a manifest, whether or not it accepted it.
type staticUIDPod struct {
	source    string // the recorded path or URL
	namespace string // as nodelet names it
	name      string
	manifest  string // [namespace/]name, as in the manifest (upstream's log line)
	uid       types.UID
	err       error // nodelet's verdict
}

// decodeAsRecorded decodes every recorded manifest as nodelet's file and URL sources do,
// under the recorded node name and paths, keeping the UID even of pods it rejects.
func decodeAsRecorded(t *testing.T, node types.NodeName) []staticUIDPod {
	t.Helper()
	var pods []staticUIDPod
	files, _ := filepath.Glob("testdata/staticuid/manifests/*")
	kubeadm, _ := filepath.Glob("testdata/kubeadm/*")
	for _, f := range append(files, kubeadm...) {
		pods = append(pods, decodeRecorded(t, f, path.Join(recordedManifestDir, filepath.Base(f)), true, node)...)
	}
	urls, _ := filepath.Glob("testdata/staticuid/url/*")
	for _, f := range urls {
		pods = append(pods, decodeRecorded(t, f, recordedURLBase+filepath.Base(f), false, node)...)
	}
	if len(pods) < 14 {
		t.Fatalf("decoded %d pods, want all the recorded manifests", len(pods))
	}
	return pods
}

func decodeRecorded(t *testing.T, file, source string, isFile bool, node types.NodeName) []staticUIDPod {
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var seen []staticUIDPod
	defaulter := func(pod *v1.Pod) error {
		manifest := pod.Name
		if pod.Namespace != "" {
			manifest = pod.Namespace + "/" + pod.Name
		}
		err := applyDefaults(pod, source, isFile, node)
		seen = append(seen, staticUIDPod{source: source, namespace: pod.Namespace, name: pod.Name, manifest: manifest, uid: pod.UID})
		return err
	}
	parsed, _, err := decodeSinglePod(data, defaulter)
	if !parsed && !isFile {
		parsed, _, err = decodePodList(data, defaulter)
	}
	if !parsed || len(seen) == 0 {
		t.Fatalf("%s: not decoded: %v", file, err)
	}
	for i := range seen {
		seen[i].err = err
	}
	return seen
}

// The UIDs nodelet gives static pods are upstream's, so that a switch from one kubelet
// to the other finds its pods: the same manifests under the same node name and paths.
func TestStaticPodUIDsMatchUpstream(t *testing.T) {
	data, err := os.ReadFile("testdata/staticuid/uids.json")
	if err != nil {
		t.Fatal(err)
	}
	var want upstreamUIDs
	if err := json.Unmarshal(data, &want); err != nil {
		t.Fatal(err)
	}
	pods := decodeAsRecorded(t, want.Node)

	covered := map[int]bool{}
	for _, g := range want.Generated {
		i := findPod(pods, func(p staticUIDPod) bool { return p.source == g.Source && p.manifest == g.Pod })
		if i < 0 {
			t.Errorf("upstream's pod %s from %s: not in nodelet's testdata", g.Pod, g.Source)
			continue
		}
		covered[i] = true
		if pods[i].uid != g.UID {
			t.Errorf("%s from %s: UID %s, upstream's %s", g.Pod, g.Source, pods[i].uid, g.UID)
		}
	}
	for _, sb := range want.Sandboxes {
		i := findPod(pods, func(p staticUIDPod) bool { return p.namespace == sb.Namespace && p.name == sb.Name })
		if i < 0 {
			t.Errorf("upstream's pod %s/%s: not in nodelet's testdata", sb.Namespace, sb.Name)
			continue
		}
		covered[i] = true
		if pods[i].uid != sb.UID {
			t.Errorf("%s/%s: UID %s, upstream's %s", sb.Namespace, sb.Name, pods[i].uid, sb.UID)
		}
		// upstream ran it, so nodelet must accept it
		if pods[i].err != nil {
			t.Errorf("%s/%s: upstream ran it, nodelet rejects it: %v", sb.Namespace, sb.Name, pods[i].err)
		}
	}
	for i, p := range pods {
		if !covered[i] {
			t.Errorf("%s from %s: no UID recorded from upstream (run record.sh)", p.manifest, p.source)
		}
	}
}

func findPod(pods []staticUIDPod, match func(staticUIDPod) bool) int {
	for i, p := range pods {
		if match(p) {
			return i
		}
	}
	return -1
}

// A change anywhere in the recorded UIDs' inputs changes the UID: the node, the path,
// the source kind and the content.
func TestStaticPodUIDInputs(t *testing.T) {
	data, err := os.ReadFile("testdata/staticuid/manifests/minimal.yaml")
	if err != nil {
		t.Fatal(err)
	}
	uid := func(data, source string, isFile bool, node types.NodeName) types.UID {
		t.Helper()
		_, pod, err := decodeSinglePod([]byte(data), func(pod *v1.Pod) error { return applyDefaults(pod, source, isFile, node) })
		if err != nil {
			t.Fatal(err)
		}
		return pod.UID
	}
	base := uid(string(data), "/m/minimal.yaml", true, "n1")
	others := map[string]types.UID{
		"node":    uid(string(data), "/m/minimal.yaml", true, "n2"),
		"path":    uid(string(data), "/m/other.yaml", true, "n1"),
		"url":     uid(string(data), "/m/minimal.yaml", false, "n1"),
		"content": uid(strings.Replace(string(data), "name: main", "name: other", 1), "/m/minimal.yaml", true, "n1"),
	}
	for what, other := range others {
		if other == base {
			t.Errorf("another %s gave the same UID", what)
		}
	}
	if again := uid("# comment\n"+string(data), "/m/minimal.yaml", true, "n1"); again != base {
		t.Errorf("a comment changed the UID")
	}
}

// A manifest file configured as the source itself is hashed under its path as given
// (less trailing slashes), as upstream does, not cleaned; a directory's entries under
// the joined, cleaned path.
func TestStaticPodUIDHashesSourcePathAsUpstream(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "web.yaml"), manifest("web", "busybox:1"))
	uidFrom := func(source string) types.UID {
		t.Helper()
		_, pod, err := decodeSinglePod([]byte(manifest("web", "busybox:1")), fileDefaulter(source, "node1"))
		if err != nil {
			t.Fatal(err)
		}
		return pod.UID
	}
	cases := map[string]string{ // configured path: the source upstream hashes
		dir + "/./web.yaml": dir + "/./web.yaml",
		dir + "//web.yaml/": dir + "//web.yaml",
		dir + "/./":         dir + "/web.yaml",
	}
	for configured, source := range cases {
		pods := startFileSource(t, configured, longPeriod, false).waitForNames("web-node1")
		if want := uidFrom(source); pods[0].UID != want {
			t.Errorf("source %q: UID %s, want %s (hashed under %q)", configured, pods[0].UID, want, source)
		}
	}
}
