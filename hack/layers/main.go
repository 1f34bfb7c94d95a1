// Command layers fails when a nodelet package imports against the directions of
// docs/architecture.md: a package may import the leaves (pkg/<name> outside the groups),
// its own group, and the groups below it, never a group above.
//
//	leaves < pkg/runtime < pkg/node < pkg/pod < pkg/api < pkg/app < cmd
//
// Test files are held to the same rule; an import only a test makes is named "(test)".
// Run from the module root: go run ./hack/layers
package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strings"
)

const module = "github.com/nodelet/nodelet/"

// groups in layer order; a package's layer is the first whose prefix it has.
var groups = []struct{ name, prefix string }{
	{"runtime", "pkg/runtime/"},
	{"node", "pkg/node/"},
	{"pod", "pkg/pod/"},
	{"api", "pkg/api/"},
	{"app", "pkg/app/"},
	{"cmd", "cmd/"},
}

// exceptions are the upward imports the code has a reason for, each written next to it.
// A new entry needs a reason in docs/architecture.md as well.
var exceptions = map[string]string{
	"pkg/runtime/kuberuntime -> pkg/pod/prober/results": "the runtime manager restarts containers on the prober's liveness and startup verdicts (upstream's kuberuntime reads the same results manager)",
	"pkg/runtime/kuberuntime -> pkg/pod/allocation":     "the runtime manager records the resources it actuated in the allocation store, which the pod loop's allocation manager owns",
	// Tests that check two layers agree, with the real code of both.
	"pkg/runtime/kuberuntime (test) -> pkg/pod/status": "the runtime manager's actions and the status manager's phase must agree on the same pod",
	"pkg/node/eviction (test) -> pkg/pod/admission":    "the eviction manager's pressure conditions drive upstream's eviction admit handler",
}

// layer returns the rank of a package of this module (0 for a leaf) and its group's name;
// ok is false for packages the rule does not cover (hack/, test/).
func layer(pkg string) (rank int, name string, ok bool) {
	dir := strings.TrimSuffix(pkg, " (test)") + "/"
	for i, g := range groups {
		if strings.HasPrefix(dir, g.prefix) {
			return i + 1, g.name, true
		}
	}
	if strings.HasPrefix(dir, "pkg/") {
		return 0, "leaf", true
	}
	return 0, "", false
}

// exception finds the reason-bearing entry that allows from -> to; a package's tests may
// make the imports its own code may.
func exception(from, to string) (edge string, ok bool) {
	for _, f := range []string{from, strings.TrimSuffix(from, " (test)")} {
		edge = f + " -> " + to
		if _, ok = exceptions[edge]; ok {
			return edge, true
		}
	}
	return "", false
}

// violations lists "from -> to" for every import of a lower layer into a higher one.
func violations(imports map[string][]string) (bad []string, used map[string]bool) {
	used = map[string]bool{}
	for from, tos := range imports {
		fromRank, fromName, ok := layer(from)
		if !ok {
			continue
		}
		for _, to := range tos {
			if strings.HasPrefix(to, "test/") || strings.HasPrefix(to, "hack/") {
				bad = append(bad, fmt.Sprintf("%s (%s) imports %s: nodelet's packages never import test or hack code", from, fromName, to))
				continue
			}
			toRank, toName, ok := layer(to)
			if !ok || toRank <= fromRank {
				continue
			}
			if edge, ok := exception(from, to); ok {
				used[edge] = true
				continue
			}
			bad = append(bad, fmt.Sprintf("%s (%s) imports %s (%s): an import against the layers", from, fromName, to, toName))
		}
	}
	sort.Strings(bad)
	return bad, used
}

// listImports runs go list over the module, with the e2e tag so tagged files count too.
func listImports() (map[string][]string, error) {
	cmd := exec.Command("go", "list", "-e", "-tags", "e2e", "-f",
		`{{.ImportPath}}|{{join .Imports ","}}`+"\n"+`{{.ImportPath}} (test)|{{join .TestImports ","}},{{join .XTestImports ","}}`, "./...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list: %v: %s", err, stderr.String())
	}
	return parseList(out), nil
}

func parseList(out []byte) map[string][]string {
	imports := map[string][]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		pkg, deps, ok := strings.Cut(sc.Text(), "|")
		if !ok {
			continue
		}
		pkg = strings.TrimPrefix(pkg, module)
		self := module + strings.TrimSuffix(pkg, " (test)")
		for _, d := range strings.Split(deps, ",") {
			if strings.HasPrefix(d, module) && d != self {
				imports[pkg] = append(imports[pkg], strings.TrimPrefix(d, module))
			}
		}
	}
	return imports
}

func main() {
	imports, err := listImports()
	if err != nil {
		fmt.Fprintln(os.Stderr, "layers:", err)
		os.Exit(2)
	}
	bad, used := violations(imports)
	for edge := range exceptions {
		if !used[edge] {
			bad = append(bad, fmt.Sprintf("exception %q is no longer needed: remove it from hack/layers and docs/architecture.md", edge))
		}
	}
	if len(bad) == 0 {
		return
	}
	for _, b := range bad {
		fmt.Fprintln(os.Stderr, "layers:", b)
	}
	fmt.Fprintln(os.Stderr, "layers: see docs/architecture.md for where a package goes and what it may import")
	os.Exit(1)
}
