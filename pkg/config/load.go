package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"

	kc "k8s.io/kubelet/config/v1beta1"
	"sigs.k8s.io/yaml"
)

const (
	configAPIVersion = "kubelet.config.k8s.io/v1beta1"
	configKind       = "KubeletConfiguration"
	dropInSuffix     = ".conf"
)

// LoadFiles reads the --config file and the --config-dir drop-ins (either may be empty)
// and returns the merged, not yet defaulted configuration. Drop-ins are applied in lexical
// order over the main file as JSON merge patches (KEP-3983): maps merge, lists replace.
func LoadFiles(configFile, configDir string) (*kc.KubeletConfiguration, error) {
	merged, err := mergedDocument(configFile, configDir)
	if err != nil {
		return nil, err
	}
	return decodeStrict(merged)
}

// mergedDocument reads the main file and the drop-ins into one generic document.
func mergedDocument(configFile, configDir string) (map[string]any, error) {
	merged := map[string]any{}
	if configFile != "" {
		doc, err := readConfigDocument(configFile)
		if err != nil {
			return nil, fmt.Errorf("failed to load kubelet config file %q: %w", configFile, err)
		}
		merged = doc
	}
	if configDir != "" {
		files, err := dropInFiles(configDir)
		if err != nil {
			return nil, fmt.Errorf("failed to read kubelet config directory %q: %w", configDir, err)
		}
		for _, f := range files {
			doc, err := readConfigDocument(f)
			if err != nil {
				return nil, fmt.Errorf("failed to load kubelet config drop-in %q: %w", f, err)
			}
			merged = mergePatch(merged, doc).(map[string]any)
		}
	}
	return merged, nil
}

// readConfigDocument parses one YAML or JSON file into a generic document after checking
// that it is a KubeletConfiguration of the version we understand.
func readConfigDocument(path string) (map[string]any, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, fmt.Errorf("the file is empty")
	}
	// YAMLToJSONStrict rejects duplicate keys; JSON is valid YAML so both formats work.
	js, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return nil, fmt.Errorf("failed to parse: %w", err)
	}
	var doc map[string]any
	if err := json.Unmarshal(js, &doc); err != nil || doc == nil {
		return nil, fmt.Errorf("failed to parse: the document is not an object")
	}
	if err := checkTypeMeta(doc); err != nil {
		return nil, err
	}
	// Decode on its own too, so a strict-decoding error names the file it came from.
	if _, err := decodeStrict(doc); err != nil {
		return nil, err
	}
	return doc, nil
}

func checkTypeMeta(doc map[string]any) error {
	apiVersion, _ := doc["apiVersion"].(string)
	kind, _ := doc["kind"].(string)
	if kind != configKind {
		return fmt.Errorf("kind: must be %q (got %q)", configKind, kind)
	}
	if apiVersion != configAPIVersion {
		return fmt.Errorf("apiVersion: must be %q (got %q)", configAPIVersion, apiVersion)
	}
	return nil
}

// decodeStrict turns a generic document into the typed configuration, rejecting fields
// the type does not have, as upstream's strict decoder does.
func decodeStrict(doc map[string]any) (*kc.KubeletConfiguration, error) {
	js, err := json.Marshal(doc)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	cfg := &kc.KubeletConfiguration{}
	if err := dec.Decode(cfg); err != nil {
		if serr := strictError(doc, err); serr != err {
			return nil, serr
		}
		return nil, decodeError(doc, err)
	}
	cfg.APIVersion, cfg.Kind = configAPIVersion, configKind
	return cfg, nil
}

// strictError words unknown-field errors the way upstream's strict decoder does, with the
// field's full path.
func strictError(doc map[string]any, err error) error {
	if !strings.HasPrefix(err.Error(), "json: unknown field ") {
		return err
	}
	if path := unknownFieldPath(doc, reflect.TypeOf(kc.KubeletConfiguration{}), ""); path != "" {
		return fmt.Errorf("strict decoding error: unknown field %q", path)
	}
	return fmt.Errorf("strict decoding error: %s", strings.TrimPrefix(err.Error(), "json: "))
}

// unknownFieldPath walks a generic document alongside the struct type it decodes into and
// returns the dotted path of the first key the type does not have.
func unknownFieldPath(doc any, t reflect.Type, prefix string) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch d := doc.(type) {
	case map[string]any:
		if t.Kind() == reflect.Map {
			for k, v := range d {
				if p := unknownFieldPath(v, t.Elem(), prefix+k+"."); p != "" {
					return p
				}
			}
			return ""
		}
		if t.Kind() != reflect.Struct {
			return ""
		}
		keys := sortedKeys(d)
		for _, k := range keys {
			f, ok := jsonField(reflect.New(t).Elem(), k)
			if !ok {
				return prefix + k
			}
			if p := unknownFieldPath(d[k], f.Type(), prefix+k+"."); p != "" {
				return p
			}
		}
	case []any:
		if t.Kind() == reflect.Slice {
			for i, v := range d {
				if p := unknownFieldPath(v, t.Elem(), fmt.Sprintf("%s[%d].", strings.TrimSuffix(prefix, "."), i)); p != "" {
					return p
				}
			}
		}
	}
	return ""
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// decodeError finds the top-level field whose value failed to decode, so the message names
// it even when the error came from a custom unmarshaller (a bad duration, say).
func decodeError(doc map[string]any, err error) error {
	for _, k := range sortedKeys(doc) {
		js, _ := json.Marshal(map[string]any{k: doc[k]})
		if ferr := json.Unmarshal(js, &kc.KubeletConfiguration{}); ferr != nil {
			return fmt.Errorf("%s: %s", k, strings.TrimPrefix(ferr.Error(), "json: "))
		}
	}
	return fmt.Errorf("failed to decode: %w", err)
}

// dropInFiles lists the *.conf files of dir in lexical order; other files are ignored.
func dropInFiles(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var files []string
	for _, e := range entries {
		if e.Type().IsRegular() && strings.HasSuffix(e.Name(), dropInSuffix) {
			files = append(files, filepath.Join(dir, e.Name()))
		}
	}
	sort.Strings(files)
	return files, nil
}

// mergePatch applies an RFC 7386 JSON merge patch: objects merge recursively, null deletes,
// anything else replaces.
func mergePatch(target, patch any) any {
	p, ok := patch.(map[string]any)
	if !ok {
		return patch
	}
	t, ok := target.(map[string]any)
	if !ok {
		t = map[string]any{}
	}
	for k, v := range p {
		if v == nil {
			delete(t, k)
			continue
		}
		t[k] = mergePatch(t[k], v)
	}
	return t
}
