package sources

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/klog/v2"
	"k8s.io/utils/dump"

	"github.com/nodelet/nodelet/pkg/kubetypes"
	"github.com/nodelet/nodelet/pkg/pod/podvalidation"
	"github.com/nodelet/nodelet/pkg/pod/sources/internal/core"
)

// podDecoder decodes v1 Pods and PodLists only. It is lenient like upstream's decoder:
// unknown fields are dropped, a missing kind or an unknown apiVersion is an error.
var podDecoder = func() runtime.Decoder {
	scheme := runtime.NewScheme()
	if err := v1.AddToScheme(scheme); err != nil {
		panic(err)
	}
	return serializer.NewCodecFactory(scheme).UniversalDeserializer()
}()

// staticPodDefaulter fills in what the kubelet adds to a pod from a manifest: its name,
// namespace, node, UID and annotations (see applyDefaults).
type staticPodDefaulter func(pod *v1.Pod) error

// decodeSinglePod is upstream's tryDecodeSinglePod: parsed is false when data is not a
// Pod at all, true when it is one (err then says why it cannot be used).
func decodeSinglePod(data []byte, defaulter staticPodDefaulter) (parsed bool, pod *v1.Pod, err error) {
	obj, err := decodeObject(data)
	if err != nil {
		return false, nil, err
	}
	pod, ok := obj.(*v1.Pod)
	if !ok {
		return false, nil, fmt.Errorf("invalid pod: %s", notKind(obj, "Pod"))
	}
	// Upstream decodes to its internal pod, which keeps no kind or apiVersion (the items
	// of a PodList keep theirs); both enter the UID.
	pod.TypeMeta = metav1.TypeMeta{}
	if err := prepareStaticPod(pod, defaulter); err != nil {
		return true, nil, err
	}
	return true, pod, nil
}

// decodePodList is upstream's tryDecodePodList: one unusable pod rejects the list.
func decodePodList(data []byte, defaulter staticPodDefaulter) (parsed bool, pods []*v1.Pod, err error) {
	obj, err := decodeObject(data)
	if err != nil {
		return false, nil, err
	}
	list, ok := obj.(*v1.PodList)
	if !ok {
		return false, nil, fmt.Errorf("invalid pods list: %s", notKind(obj, "PodList"))
	}
	pods = make([]*v1.Pod, 0, len(list.Items))
	for i := range list.Items {
		pod := &list.Items[i]
		if err := prepareStaticPod(pod, defaulter); err != nil {
			return true, nil, err
		}
		pods = append(pods, pod)
	}
	return true, pods, nil
}

// decodeObject reads YAML or JSON into a v1 object. JSON is read as it is, not through
// YAML: "1e3" or "0.50" would come back from YAML as other numbers, and other quantities
// in the UID. An object of a kind
// the decoder does not know ("kind: Deployment" is a common mistake) comes back as its
// type alone, so that the caller can say which kind it got rather than the decoder's
// "no kind is registered"; a Pod or PodList of an unknown version stays an error.
func decodeObject(data []byte) (runtime.Object, error) {
	js, err := utilyaml.ToJSON(data)
	if err != nil {
		return nil, err
	}
	obj, gvk, err := podDecoder.Decode(js, nil, nil)
	if runtime.IsNotRegisteredError(err) && gvk != nil && gvk.Kind != "Pod" && gvk.Kind != "PodList" {
		apiVersion, kind := gvk.ToAPIVersionAndKind()
		return &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: apiVersion, Kind: kind}}, nil
	}
	return obj, err
}

// maxNameInError bounds a kind or apiVersion quoted from a manifest.
const maxNameInError = 64

// notKind says what a manifest holds instead of the wanted kind.
func notKind(obj runtime.Object, want string) string {
	apiVersion, kind := obj.GetObjectKind().GroupVersionKind().ToAPIVersionAndKind()
	return fmt.Sprintf("kind %s of apiVersion %s is not a v1 %s",
		podvalidation.QuoteBounded(kind, maxNameInError), podvalidation.QuoteBounded(apiVersion, maxNameInError), want)
}

// yamlDocuments counts the YAML documents in data that hold more than comments. The
// decoder, like upstream's, reads only the first of them.
func yamlDocuments(data []byte) int {
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	count := 0
	for {
		doc, err := reader.Read()
		if err != nil {
			return count // io.EOF, or a syntax error the decoder has judged already
		}
		if hasYAMLContent(doc) {
			count++
		}
	}
}

func hasYAMLContent(doc []byte) bool {
	for _, line := range strings.Split(string(doc), "\n") {
		line = strings.TrimSpace(line)
		if line != "" && !strings.HasPrefix(line, "#") && !strings.HasPrefix(line, "---") && line != "..." {
			return true
		}
	}
	return false
}

// prepareStaticPod does what upstream does after decoding: the API defaults (upstream's
// decoder applies them), the name check, the static pod defaults, validation, and the
// refusal of pods that need API objects.
func prepareStaticPod(pod *v1.Pod, defaulter staticPodDefaulter) error {
	setPodDefaults(pod)
	if pod.Name == "" {
		return errors.New("invalid pod: name is needed for the pod")
	}
	if err := defaulter(pod); err != nil {
		return err
	}
	if errs := podvalidation.ValidatePod(pod); len(errs) > 0 {
		return fmt.Errorf("invalid pod: %s", podvalidation.Summary(errs))
	}
	resource, err := podvalidation.APIObjectReference(pod)
	if err != nil {
		return err
	}
	if resource != "" {
		return fmt.Errorf("static pods may not reference %s", resource)
	}
	return nil
}

// generatePodName makes a static pod's name unique among nodes.
func generatePodName(name string, nodeName types.NodeName) string {
	return fmt.Sprintf("%s-%s", name, strings.ToLower(string(nodeName)))
}

// applyDefaults is upstream's applyDefaults for static pods. source is the manifest file
// path or the URL. When the manifest sets no UID, the UID is a hash of the decoded,
// API-defaulted pod plus the node name and the file path (or the URL): an unchanged
// manifest keeps its UID across restarts, while any change to its content gives the pod
// a new UID, so the kubelet replaces the old pod with a new one. The UID is upstream's
// to the byte, so that either kubelet adopts the other's static pods.
func applyDefaults(pod *v1.Pod, source string, isFile bool, nodeName types.NodeName) error {
	if pod.UID == "" {
		pod.UID = staticPodUID(pod, source, isFile, nodeName)
		klog.V(5).InfoS("Generated UID", "pod", klog.KObj(pod), "podUID", pod.UID, "source", source)
	}
	pod.Name = generatePodName(pod.Name, nodeName)
	if pod.Namespace == "" {
		pod.Namespace = metav1.NamespaceDefault
	}
	pod.Spec.NodeName = string(nodeName)
	if pod.Annotations == nil {
		pod.Annotations = make(map[string]string)
	}
	pod.Annotations[kubetypes.ConfigHashAnnotationKey] = string(pod.UID)
	if isFile {
		// Static pods from files tolerate every NoExecute taint, so node problems do not
		// evict them.
		addOrUpdateToleration(pod, v1.Toleration{Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoExecute})
	}
	pod.Status.Phase = v1.PodPending
	return nil
}

// staticPodUID is upstream's: FNV-128a over a dump (k8s.io/utils/dump.ForHash, spew
// printing every field with its type) of the pod as upstream's internal API type, then
// over "host:<node>file:<path>" or "url:<url>". core mirrors the internal types, so the
// dump names them as upstream's does.
func staticPodUID(pod *v1.Pod, source string, isFile bool, nodeName types.NodeName) types.UID {
	hasher := fnv.New128a()
	fmt.Fprintf(hasher, "%v", dump.ForHash(core.FromV1(pod)))
	if isFile {
		fmt.Fprintf(hasher, "host:%s", nodeName)
		fmt.Fprintf(hasher, "file:%s", source)
	} else {
		fmt.Fprintf(hasher, "url:%s", source)
	}
	return types.UID(hex.EncodeToString(hasher.Sum(nil)))
}

// addOrUpdateToleration adds t, or replaces a toleration with the same key, operator,
// value and effect (upstream's AddOrUpdateTolerationInPod).
func addOrUpdateToleration(pod *v1.Pod, t v1.Toleration) {
	for i := range pod.Spec.Tolerations {
		old := &pod.Spec.Tolerations[i]
		if old.Key == t.Key && old.Operator == t.Operator && old.Value == t.Value && old.Effect == t.Effect {
			*old = t
			return
		}
	}
	pod.Spec.Tolerations = append(pod.Spec.Tolerations, t)
}
