package payload

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func fieldItem(path, fieldPath string) v1.DownwardAPIVolumeFile {
	return v1.DownwardAPIVolumeFile{Path: path, FieldRef: &v1.ObjectFieldSelector{FieldPath: fieldPath}}
}

func resourceItem(path, container, res, divisor string) v1.DownwardAPIVolumeFile {
	sel := &v1.ResourceFieldSelector{ContainerName: container, Resource: res}
	if divisor != "" {
		sel.Divisor = resource.MustParse(divisor)
	}
	return v1.DownwardAPIVolumeFile{Path: path, ResourceFieldRef: sel}
}

func TestDownwardAPIMetadata(t *testing.T) {
	pod := testPod()
	pod.Labels = map[string]string{"app": "web", "tier": "front"}
	pod.Annotations = map[string]string{"example.com/note": "say \"hi\"\nbye", "a": ""}
	files, err := DownwardAPI(pod, &v1.DownwardAPIVolumeSource{
		DefaultMode: ptr[int32](0o444),
		Items: []v1.DownwardAPIVolumeFile{
			fieldItem("name", "metadata.name"),
			fieldItem("namespace", "metadata.namespace"),
			fieldItem("uid", "metadata.uid"),
			fieldItem("labels", "metadata.labels"),
			fieldItem("annotations", "metadata.annotations"),
			fieldItem("app", "metadata.labels['app']"),
			fieldItem("note", "metadata.annotations['example.com/note']"),
			fieldItem("absent", "metadata.labels['absent']"),
			{Path: "./sub//mode", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.name"}, Mode: ptr[int32](0o400)},
			{Path: "empty"},
		},
	}, nil)
	expectFiles(t, files, err,
		`name 0444 "web"`,
		`namespace 0444 "ns"`,
		`uid 0444 "uid-1"`,
		`labels 0444 "app=\"web\"\ntier=\"front\""`,
		// Values are Go-quoted: an embedded quote and newline are escaped.
		`annotations 0444 "a=\"\"\nexample.com/note=\"say \\\"hi\\\"\\nbye\""`,
		`app 0444 "web"`,
		`note 0444 "say \"hi\"\nbye"`,
		`absent 0444 ""`,
		`sub/mode 0400 "web"`,
		`empty 0444 ""`,
	)
}

func TestDownwardAPIEmptyMapsAndDefaultMode(t *testing.T) {
	files, err := DownwardAPI(testPod(), &v1.DownwardAPIVolumeSource{Items: []v1.DownwardAPIVolumeFile{
		fieldItem("labels", "metadata.labels"),
	}}, nil)
	expectFiles(t, files, err, `labels 0644 ""`)
}

func TestDownwardAPIFieldErrors(t *testing.T) {
	for fieldPath, want := range map[string]string{
		"spec.nodeName":               "unsupported fieldPath: spec.nodeName",
		"metadata.name['x']":          `fieldPath "metadata.name['x']" does not support subscript`,
		"metadata.labels['bad key!']": "invalid key subscript in metadata.labels['bad key!']: ",
	} {
		files, err := DownwardAPI(testPod(), &v1.DownwardAPIVolumeSource{Items: []v1.DownwardAPIVolumeFile{
			fieldItem("f", fieldPath),
		}}, nil)
		if err == nil || len(err.Error()) < len(want) || err.Error()[:len(want)] != want {
			t.Errorf("%s: err = %v, want it to start with %q (files %v)", fieldPath, err, want, describe(files))
		}
	}
	// Annotation keys are validated lower-cased, so an upper-case key is fine.
	pod := testPod()
	pod.Annotations = map[string]string{"Example.com/Note": "n"}
	files, err := DownwardAPI(pod, &v1.DownwardAPIVolumeSource{Items: []v1.DownwardAPIVolumeFile{
		fieldItem("n", "metadata.annotations['Example.com/Note']"),
	}}, nil)
	expectFiles(t, files, err, `n 0644 "n"`)
}

func TestDownwardAPIReportsEveryError(t *testing.T) {
	files, err := DownwardAPI(testPod(), &v1.DownwardAPIVolumeSource{Items: []v1.DownwardAPIVolumeFile{
		fieldItem("ok", "metadata.name"),
		fieldItem("a", "spec.nodeName"),
		resourceItem("b", "ghost", "limits.cpu", ""),
	}}, nil)
	expectError(t, files, err, "[unsupported fieldPath: spec.nodeName, container ghost not found]")
	if files != nil {
		t.Errorf("files = %v, want none on error", describe(files))
	}
}

func resourcePod() *v1.Pod {
	pod := testPod()
	pod.Spec.InitContainers = []v1.Container{{
		Name: "init",
		Resources: v1.ResourceRequirements{
			Limits: v1.ResourceList{v1.ResourceCPU: resource.MustParse("250m")},
		},
	}}
	pod.Spec.Containers = []v1.Container{{
		Name: "app",
		Resources: v1.ResourceRequirements{
			Requests: v1.ResourceList{
				v1.ResourceCPU:              resource.MustParse("100m"),
				v1.ResourceMemory:           resource.MustParse("64Mi"),
				v1.ResourceEphemeralStorage: resource.MustParse("1Gi"),
				"hugepages-2Mi":             resource.MustParse("4Mi"),
			},
			Limits: v1.ResourceList{
				v1.ResourceCPU:  resource.MustParse("1500m"),
				"hugepages-2Mi": resource.MustParse("4Mi"),
				// A zero limit counts as unset.
				v1.ResourceMemory: resource.MustParse("0"),
			},
		},
	}}
	return pod
}

func TestDownwardAPIResources(t *testing.T) {
	allocatable := v1.ResourceList{
		v1.ResourceCPU:              resource.MustParse("4"),
		v1.ResourceMemory:           resource.MustParse("8Gi"),
		v1.ResourceEphemeralStorage: resource.MustParse("100Gi"),
	}
	files, err := DownwardAPI(resourcePod(), &v1.DownwardAPIVolumeSource{Items: []v1.DownwardAPIVolumeFile{
		resourceItem("cpu_limit", "app", "limits.cpu", ""),         // 1.5 cores rounded up
		resourceItem("cpu_limit_m", "app", "limits.cpu", "1m"),     // in millicores
		resourceItem("cpu_request_m", "app", "requests.cpu", "1m"), //
		resourceItem("mem_limit", "app", "limits.memory", "1Mi"),   // zero: node allocatable
		resourceItem("mem_request", "app", "requests.memory", ""),  // bytes
		resourceItem("eph_limit", "app", "limits.ephemeral-storage", "1Gi"),
		resourceItem("eph_request", "app", "requests.ephemeral-storage", "1M"), // 1073.7 rounded up
		resourceItem("huge_limit", "app", "limits.hugepages-2Mi", "1Mi"),
		resourceItem("init_cpu", "init", "limits.cpu", "1m"),
		resourceItem("init_mem", "init", "limits.memory", "1Gi"),
	}}, allocatable)
	expectFiles(t, files, err,
		`cpu_limit 0644 "2"`,
		`cpu_limit_m 0644 "1500"`,
		`cpu_request_m 0644 "100"`,
		`mem_limit 0644 "8192"`,
		`mem_request 0644 "67108864"`,
		`eph_limit 0644 "100"`,
		`eph_request 0644 "1074"`,
		`huge_limit 0644 "4"`,
		`init_cpu 0644 "250"`,
		`init_mem 0644 "8"`,
	)
}

func TestDownwardAPIResourcesWithoutAllocatable(t *testing.T) {
	files, err := DownwardAPI(resourcePod(), &v1.DownwardAPIVolumeSource{Items: []v1.DownwardAPIVolumeFile{
		resourceItem("mem_limit", "app", "limits.memory", ""),
		resourceItem("cpu_request", "app", "requests.cpu", ""),
	}}, nil)
	expectFiles(t, files, err, `mem_limit 0644 "0"`, `cpu_request 0644 "1"`)
}

func TestDownwardAPIUnsupportedResource(t *testing.T) {
	for _, res := range []string{"limits.gpu", "requests.pods", "usage.cpu"} {
		files, err := DownwardAPI(resourcePod(), &v1.DownwardAPIVolumeSource{Items: []v1.DownwardAPIVolumeFile{
			resourceItem("x", "app", res, ""),
		}}, nil)
		expectError(t, files, err, "unsupported container resource : "+res)
	}
}
