package core

import (
	"reflect"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/dump"
)

// Every type a Pod reaches must have the shape of its v1 counterpart, or FromV1 fails on
// pods that use it: checked here for all of them, not only the fields a test pod sets.
func TestMirrorHasTheShapeOfV1(t *testing.T) {
	seen := map[reflect.Type]bool{}
	var walk func(mirror, api reflect.Type, path string)
	walk = func(mirror, api reflect.Type, path string) {
		if mirror == api || seen[mirror] {
			return
		}
		seen[mirror] = true
		if mirror.Kind() != api.Kind() {
			t.Errorf("%s: %s is a %s, v1's %s a %s", path, mirror, mirror.Kind(), api, api.Kind())
			return
		}
		if mirror.PkgPath() != "" && mirror.PkgPath() != reflect.TypeOf(Pod{}).PkgPath() {
			t.Errorf("%s: %s is not v1's %s", path, mirror, api)
		}
		switch mirror.Kind() {
		case reflect.Struct:
			if mirror.NumField() != api.NumField() {
				t.Errorf("%s: %s has %d fields, v1's %s %d", path, mirror, mirror.NumField(), api, api.NumField())
				return
			}
			for i := 0; i < mirror.NumField(); i++ {
				m, a := mirror.Field(i), api.Field(i)
				if m.Name != a.Name || m.Anonymous != a.Anonymous {
					t.Errorf("%s: field %d is %s, v1's is %s", path, i, m.Name, a.Name)
					continue
				}
				walk(m.Type, a.Type, path+"."+m.Name)
			}
		case reflect.Pointer, reflect.Slice:
			walk(mirror.Elem(), api.Elem(), path+"[]")
		case reflect.Map:
			walk(mirror.Key(), api.Key(), path+" key")
			walk(mirror.Elem(), api.Elem(), path+"[]")
		}
	}
	walk(reflect.TypeOf(Pod{}), reflect.TypeOf(v1.Pod{}), "Pod")
	if len(seen) < 170 {
		t.Errorf("walked %d types, want the ~180 a pod reaches", len(seen))
	}
}

// The dump of a converted pod names the mirrored types as upstream's internal ones, and
// the shared ones (metav1, resource) by their own packages.
func TestDumpNamesInternalTypes(t *testing.T) {
	pod := &v1.Pod{Spec: v1.PodSpec{Containers: []v1.Container{{
		Name:      "c",
		Resources: v1.ResourceRequirements{Limits: v1.ResourceList{v1.ResourceCPU: resource.MustParse("500m")}},
	}}}}
	d := dump.ForHash(FromV1(pod))
	for _, want := range []string{
		"(*core.Pod){TypeMeta:(v1.TypeMeta){",
		"Spec:(core.PodSpec){Volumes:([]core.Volume)<nil> ",
		"Containers:([]core.Container)[{Name:(string)c ",
		"Limits:(core.ResourceList)map[cpu:{i:(resource.int64Amount){value:(int64)500 ",
	} {
		if !strings.Contains(d, want) {
			t.Errorf("dump lacks %q", want)
		}
	}
}
