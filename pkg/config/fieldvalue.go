package config

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// fieldByJSONPath returns the field of the struct that root points to, named by its JSON
// path ("authentication.anonymous.enabled"), allocating nil pointers on the way.
func fieldByJSONPath(root any, path string) (reflect.Value, error) {
	v := reflect.ValueOf(root).Elem()
	for _, name := range strings.Split(path, ".") {
		v = allocate(v)
		if v.Kind() != reflect.Struct {
			return reflect.Value{}, fmt.Errorf("%s: %q is not an object", path, name)
		}
		f, ok := jsonField(v, name)
		if !ok {
			return reflect.Value{}, fmt.Errorf("%s: no field %q", path, name)
		}
		v = f
	}
	return v, nil
}

// allocate dereferences v, creating the pointee when the pointer is nil.
func allocate(v reflect.Value) reflect.Value {
	for v.Kind() == reflect.Pointer {
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		}
		v = v.Elem()
	}
	return v
}

// jsonField finds the field whose JSON name is name, looking into inlined structs too.
func jsonField(v reflect.Value, name string) (reflect.Value, bool) {
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		tag := t.Field(i).Tag.Get("json")
		tagName, opts, _ := strings.Cut(tag, ",")
		if tagName == name {
			return v.Field(i), true
		}
		if strings.Contains(opts, "inline") || (tagName == "" && t.Field(i).Anonymous) {
			if f, ok := jsonField(v.Field(i), name); ok {
				return f, true
			}
		}
	}
	return reflect.Value{}, false
}

var (
	durationType = reflect.TypeOf(metav1.Duration{})
	taintType    = reflect.TypeOf(v1.Taint{})
)

// setFromString parses s as the command line spells values of the field's type and
// stores it. When merge is set, list and map values add to what the field holds, so a
// repeated flag accumulates as pflag's own list flags do.
func setFromString(field reflect.Value, s string, merge bool) error {
	field = allocate(field)
	if field.Type() == durationType {
		d, err := time.ParseDuration(s)
		if err != nil {
			return err
		}
		field.Set(reflect.ValueOf(metav1.Duration{Duration: d}))
		return nil
	}
	switch field.Kind() {
	case reflect.String:
		field.SetString(s)
	case reflect.Bool:
		b, err := strconv.ParseBool(s)
		if err != nil {
			return err
		}
		field.SetBool(b)
	case reflect.Int32, reflect.Int64, reflect.Int:
		n, err := strconv.ParseInt(s, 10, field.Type().Bits())
		if err != nil {
			return err
		}
		field.SetInt(n)
	case reflect.Float64, reflect.Float32:
		f, err := strconv.ParseFloat(s, field.Type().Bits())
		if err != nil {
			return err
		}
		field.SetFloat(f)
	case reflect.Slice:
		return setSlice(field, s, merge)
	case reflect.Map:
		return setMap(field, s, merge)
	default:
		return fmt.Errorf("unsupported flag type %s", field.Type())
	}
	return nil
}

func splitList(s string) []string {
	var out []string
	for _, item := range strings.Split(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

func setSlice(field reflect.Value, s string, merge bool) error {
	out := reflect.MakeSlice(field.Type(), 0, 0)
	if merge {
		out = field
	}
	for _, item := range splitList(s) {
		elem := reflect.New(field.Type().Elem()).Elem()
		var err error
		if field.Type().Elem() == taintType {
			err = parseTaint(item, elem.Addr().Interface().(*v1.Taint))
		} else {
			err = setFromString(elem, item, false)
		}
		if err != nil {
			return fmt.Errorf("%q: %w", item, err)
		}
		out = reflect.Append(out, elem)
	}
	field.Set(out)
	return nil
}

// setMap parses "k=v,k2=v2". Eviction thresholds are written "signal<value" upstream, so
// '<' also separates; map-of-list values (HTTP headers) are written "name:value".
func setMap(field reflect.Value, s string, merge bool) error {
	if !merge || field.IsNil() {
		field.Set(reflect.MakeMap(field.Type()))
	}
	listValues := field.Type().Elem().Kind() == reflect.Slice
	for _, item := range splitList(s) {
		sep := "="
		if listValues {
			sep = ":"
		} else if i := strings.IndexAny(item, "<="); i >= 0 {
			sep = item[i : i+1]
		}
		k, val, ok := strings.Cut(item, sep)
		if !ok || strings.TrimSpace(k) == "" {
			return fmt.Errorf("%q: want key%svalue", item, sep)
		}
		key := reflect.ValueOf(strings.TrimSpace(k)).Convert(field.Type().Key())
		elem := reflect.New(field.Type().Elem()).Elem()
		if listValues {
			if existing := field.MapIndex(key); existing.IsValid() {
				elem = existing
			}
			elem = reflect.Append(elem, reflect.ValueOf(strings.TrimSpace(val)))
		} else if err := setFromString(elem, strings.TrimSpace(val), false); err != nil {
			return fmt.Errorf("%q: %w", item, err)
		}
		field.SetMapIndex(key, elem)
	}
	return nil
}

// parseTaint reads "key=value:Effect" or "key:Effect".
func parseTaint(s string, t *v1.Taint) error {
	kv, effect, ok := strings.Cut(s, ":")
	if !ok {
		return fmt.Errorf("want key=value:Effect")
	}
	switch e := v1.TaintEffect(effect); e {
	case v1.TaintEffectNoSchedule, v1.TaintEffectPreferNoSchedule, v1.TaintEffectNoExecute:
		t.Effect = e
	default:
		return fmt.Errorf("invalid taint effect %q", effect)
	}
	t.Key, t.Value, _ = strings.Cut(kv, "=")
	return nil
}

// copyField copies the field at path from src to dst (both pointers to the same struct type).
func copyField(dst, src any, path string) error {
	from, err := fieldByJSONPath(src, path)
	if err != nil {
		return err
	}
	to, err := fieldByJSONPath(dst, path)
	if err != nil {
		return err
	}
	to.Set(from)
	return nil
}
