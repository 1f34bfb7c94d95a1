package config

import (
	"encoding/json"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	kc "k8s.io/kubelet/config/v1beta1"
)

// TestImplementedFieldsFollowTheCode keeps implementedFields true to the code: a field that
// code outside this package reads (nodelet acts on it) must be listed, or nodelet warns
// that a setting it honours has no effect; a listed field that nothing reads must go, or
// nodelet silently ignores a setting it claims to honour. Reads are found by type-checking
// nodelet's packages: every selection of a KubeletConfiguration field counts, wherever the
// configuration came from.
func TestImplementedFieldsFollowTheCode(t *testing.T) {
	used := kubeletConfigFieldsUsed(t)
	for _, field := range sortedStrings(used) {
		if _, partly := partlyImplemented[field]; !implementedFields[field] && !partly {
			t.Errorf("%s is used at %s but implementedFields does not list it: add it to implemented.go", field, used[field])
		}
	}
	for _, field := range sortedStrings(implementedFields) {
		if _, ok := used[field]; !ok {
			t.Errorf("implementedFields lists %s, but no code outside pkg/config reads it", field)
		}
		if _, partly := partlyImplemented[field]; partly {
			t.Errorf("%s is listed as both implemented and partly implemented", field)
		}
	}
	for field := range partlyImplemented {
		if _, ok := used[field]; !ok {
			t.Errorf("partlyImplemented lists %s, but no code outside pkg/config reads it", field)
		}
	}
}

// kubeletConfigFieldsUsed maps the JSON name of every top-level KubeletConfiguration field
// that nodelet's non-test code outside pkg/config selects to one place that does.
func kubeletConfigFieldsUsed(t *testing.T) map[string]string {
	t.Helper()
	pkgs := listPackages(t, "./cmd/...", "./pkg/...")
	fset := token.NewFileSet()
	exports := map[string]string{}
	for _, p := range pkgs {
		exports[p.ImportPath] = p.Export
	}
	imp := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		if exports[path] == "" {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(exports[path])
	})
	jsonNames := kubeletConfigJSONNames()
	self := reflect.TypeFor[Options]().PkgPath()
	module := ""
	for _, p := range pkgs {
		if p.ImportPath == self && p.Module != nil {
			module = p.Module.Path
		}
	}
	used := map[string]string{}
	for _, p := range pkgs {
		if p.Module == nil || p.Module.Path != module || p.ImportPath == self {
			continue // dependencies, and this package: defaults and validation read every field
		}
		for field, where := range configSelections(t, fset, imp, p) {
			if name := jsonNames[field]; name != "" {
				if _, seen := used[name]; !seen || where < used[name] {
					used[name] = where
				}
			}
		}
	}
	return used
}

// listedPackage is what `go list -json` says of a package that the test needs.
type listedPackage struct {
	ImportPath, Dir, Export string
	GoFiles                 []string
	Module                  *struct{ Path string }
}

// listPackages lists the patterns' packages and all their dependencies, with the export
// data (compiled type information) of each, building what is not in the cache.
func listPackages(t *testing.T, patterns ...string) []listedPackage {
	t.Helper()
	root, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	cmd := exec.Command("go", append([]string{"list", "-export", "-deps", "-json=ImportPath,Dir,Export,GoFiles,Module"}, patterns...)...)
	cmd.Dir = filepath.Dir(strings.TrimSpace(string(root)))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var pkgs []listedPackage
	for dec := json.NewDecoder(strings.NewReader(string(out))); dec.More(); {
		var p listedPackage
		if err := dec.Decode(&p); err != nil {
			t.Fatalf("go list output: %v", err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

// configSelections type-checks one package and returns the KubeletConfiguration fields it
// selects (Go names), each with the first file:line that does.
func configSelections(t *testing.T, fset *token.FileSet, imp types.Importer, p listedPackage) map[string]string {
	t.Helper()
	var files []*ast.File
	for _, name := range p.GoFiles {
		f, err := parser.ParseFile(fset, filepath.Join(p.Dir, name), nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	info := &types.Info{Selections: map[*ast.SelectorExpr]*types.Selection{}}
	if _, err := (&types.Config{Importer: imp}).Check(p.ImportPath, fset, files, info); err != nil {
		t.Fatalf("type-checking %s: %v", p.ImportPath, err)
	}
	found := map[string]string{}
	for expr, sel := range info.Selections {
		if sel.Kind() == types.FieldVal && isKubeletConfiguration(sel.Recv()) {
			pos := fset.Position(expr.Sel.Pos())
			where := fmt.Sprintf("%s:%d", filepath.Join(filepath.Base(p.Dir), filepath.Base(pos.Filename)), pos.Line)
			if prev, ok := found[sel.Obj().Name()]; !ok || where < prev {
				found[sel.Obj().Name()] = where
			}
		}
	}
	return found
}

func isKubeletConfiguration(t types.Type) bool {
	if p, ok := t.(*types.Pointer); ok {
		t = p.Elem()
	}
	named, ok := t.(*types.Named)
	if !ok || named.Obj().Pkg() == nil {
		return false
	}
	want := reflect.TypeFor[kc.KubeletConfiguration]()
	return named.Obj().Pkg().Path() == want.PkgPath() && named.Obj().Name() == want.Name()
}

// kubeletConfigJSONNames maps the Go name of each KubeletConfiguration field to its JSON name.
func kubeletConfigJSONNames() map[string]string {
	names := map[string]string{}
	typ := reflect.TypeFor[kc.KubeletConfiguration]()
	for i := range typ.NumField() {
		f := typ.Field(i)
		if name, _, _ := strings.Cut(f.Tag.Get("json"), ","); name != "" && !f.Anonymous {
			names[f.Name] = name
		}
	}
	return names
}

func sortedStrings[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// TestEveryFieldIsClassified: every field of KubeletConfiguration is either implemented or
// in notRead with what nodelet does instead, so that a field added upstream cannot be
// silently ignored.
func TestEveryFieldIsClassified(t *testing.T) {
	ty := reflect.TypeFor[kc.KubeletConfiguration]()
	fields := map[string]bool{}
	for i := 0; i < ty.NumField(); i++ {
		name := strings.Split(ty.Field(i).Tag.Get("json"), ",")[0]
		if name == "" || name == "-" || ty.Field(i).Anonymous {
			continue // TypeMeta
		}
		fields[name] = true
		_, notReadHere := notRead[name]
		if implementedFields[name] == notReadHere {
			t.Errorf("%s: implemented %v, in notRead %v; want exactly one", name, implementedFields[name], notReadHere)
		}
	}
	for name, f := range notRead {
		if !fields[name] {
			t.Errorf("notRead lists %s, which KubeletConfiguration does not have", name)
		}
		_, partly := partlyImplemented[name]
		if f.honoured == nil || (f.does == "") != partly {
			t.Errorf("%s: a predicate and a note (or partlyImplemented's) are needed", name)
		}
	}
	for name := range partlyImplemented {
		if _, ok := notRead[name]; !ok {
			t.Errorf("partly implemented %s is not in notRead", name)
		}
	}
}
