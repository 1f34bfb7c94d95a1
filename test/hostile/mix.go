// Package hostile writes the bad-input mix of issue 14 into a static pod directory and
// measures what it costs a running nodelet: the e2e test asserts on the figures and
// `make bench` prints them.
//
// The mix is what a broken config-management run or a disk full of junk leaves in a
// manifest directory: invalid YAML, binary garbage, files larger than the manifest size
// limit, a huge name just under it, wrong kinds, invalid and duplicate names, pods without
// containers, negative values, deep nesting and alias bombs, references to API objects,
// symlink loops and links to devices, subdirectories, and files removed right after they
// were written. Content is generated from a fixed seed, so every run writes the same bytes.
package hostile

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Entry is one directory entry the mix wrote.
type Entry struct {
	// Name is the entry's name in the directory.
	Name string
	// Kind says what is wrong with it.
	Kind string
	// Transient entries are removed right after being written: they may be reported
	// once, or not at all if they were gone before nodelet read them.
	Transient bool
}

// Path is the entry's path in dir.
func (e Entry) Path(dir string) string { return filepath.Join(dir, e.Name) }

// LargeSize is the size of the files written past the 3 MiB manifest limit.
const LargeSize = 5 << 20

// hugeNameSize is a pod name just under the limit: it is read, decoded and rejected by
// validation, whose message must not quote it in full.
const hugeNameSize = 2 << 20

// kind is one sort of bad entry: how many of every 1,000 entries it makes, and how to
// write entry i of it.
type kind struct {
	name      string
	perMille  int
	transient bool
	write     func(w *writer, path string, i int) error
}

// kinds make up the mix; their shares add up to 1,000.
var kinds = []kind{
	{"invalid-yaml", 140, false, writeInvalidYAML},
	{"binary", 140, false, writeBinary},
	{"large", 23, false, writeLarge},
	{"huge-name", 2, false, writeHugeName},
	{"wrong-kind", 100, false, writeWrongKind},
	{"invalid-name", 100, false, writeInvalidName},
	{"duplicate-name", 60, false, writeDuplicateName},
	{"no-containers", 90, false, writeNoContainers},
	{"negative", 100, false, writeNegative},
	{"deep-nesting", 50, false, writeDeepNesting},
	{"api-reference", 40, false, writeAPIReference},
	{"symlink-loop", 50, false, writeSymlinkLoop},
	{"device-link", 5, false, writeDeviceLink},
	{"directory", 20, false, writeDirectory},
	{"removed", 80, true, writeRemoved},
}

// Options says what to write and where.
type Options struct {
	// Dir is the static pod directory.
	Dir string
	// Count is the number of bad entries (1,000 in the issue).
	Count int
	// ValidNames are the names of the valid pods in Dir; duplicate-name entries reuse
	// them from files that sort first, so the valid pods keep winning.
	ValidNames []string
	// Image is the image of the pods that are otherwise valid.
	Image string
	// Over spreads the writes over this long (0: as fast as possible).
	Over time.Duration
}

// Write writes the mix and returns its entries, in the order written. Entry names are
// "bad-NNNN-<kind>", which sort before "valid-…".
func Write(o Options) ([]Entry, error) {
	w := &writer{o: o, rnd: rand.New(rand.NewPCG(14, 1000))}
	plan := w.plan()
	start := time.Now()
	for i, e := range plan {
		if o.Over > 0 {
			due := start.Add(o.Over * time.Duration(i) / time.Duration(len(plan)))
			time.Sleep(time.Until(due))
		}
		k := kindNamed(e.Kind)
		if err := k.write(w, e.Path(o.Dir), i); err != nil {
			return nil, fmt.Errorf("writing %s: %w", e.Name, err)
		}
	}
	return plan, nil
}

type writer struct {
	o   Options
	rnd *rand.Rand
}

// plan lists the entries: each kind's share of Count (at least one), then the kinds
// interleaved so that every stretch of time sees every kind.
func (w *writer) plan() []Entry {
	var queues [][]Entry
	total := 0
	for _, k := range kinds {
		n := max(1, w.o.Count*k.perMille/1000)
		var q []Entry
		for range n {
			q = append(q, Entry{Kind: k.name, Transient: k.transient})
		}
		queues = append(queues, q)
		total += n
	}
	// Trim or pad with invalid YAML so the mix has exactly Count entries.
	for total > w.o.Count && len(queues[0]) > 1 {
		queues[0] = queues[0][1:]
		total--
	}
	for total < w.o.Count {
		queues[0] = append(queues[0], Entry{Kind: kinds[0].name})
		total++
	}
	var plan []Entry
	for len(plan) < total {
		for qi := range queues {
			if len(queues[qi]) > 0 {
				plan = append(plan, queues[qi][0])
				queues[qi] = queues[qi][1:]
			}
		}
	}
	for i := range plan {
		plan[i].Name = fmt.Sprintf("bad-%04d-%s", i, plan[i].Kind)
	}
	for i := range plan {
		if plan[i].Kind != "symlink-loop" && plan[i].Kind != "directory" && plan[i].Kind != "device-link" {
			plan[i].Name += ext(i)
		}
	}
	return plan
}

func ext(i int) string {
	if i%3 == 0 {
		return ".json"
	}
	return ".yaml"
}

func kindNamed(name string) kind {
	for _, k := range kinds {
		if k.name == name {
			return k
		}
	}
	panic("hostile: unknown kind " + name)
}

// pod is a pod manifest that is valid unless the caller changes a part of it.
func (w *writer) pod(name, spec string) string {
	if spec == "" {
		spec = fmt.Sprintf("  containers:\n  - name: app\n    image: %s\n    imagePullPolicy: IfNotPresent\n    command: [\"sleep\", \"3600\"]\n", w.o.Image)
	}
	return fmt.Sprintf("apiVersion: v1\nkind: Pod\nmetadata:\n  name: %s\nspec:\n%s", name, spec)
}

func writeFile(path, content string) error {
	return os.WriteFile(path, []byte(content), 0o644)
}

func writeInvalidYAML(w *writer, path string, i int) error {
	bad := []string{
		"apiVersion: v1\nkind: Pod\nmetadata:\n  name: [unclosed\n",
		"apiVersion: v1\nkind: Pod\n  metadata: wrongly indented\n name: x\n",
		"{\"apiVersion\": \"v1\", \"kind\": \"Pod\", \"metadata\": {\"name\": \"truncated\"",
		"apiVersion: v1\nkind: Pod\nmetadata:\n\tname: tabs-are-not-yaml\n",
		"- just\n- a\n- list\n",
		"plain text, not a manifest at all: " + strings.Repeat("lorem ipsum ", w.rnd.IntN(200)),
		"",
		"apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec: {containers: [{name: a, image: b}]}\n: : :\n",
	}
	return writeFile(path, bad[i%len(bad)])
}

func writeBinary(w *writer, path string, _ int) error {
	data := make([]byte, 1+w.rnd.IntN(64<<10))
	for j := range data {
		data[j] = byte(w.rnd.Uint32())
	}
	return os.WriteFile(path, data, 0o644)
}

// writeLarge writes a 5 MiB manifest (atomically, so the size is final when it appears):
// a pod with a 5 MiB name, or a 5 MiB YAML list, which is costly to decode.
func writeLarge(w *writer, path string, i int) error {
	if i%2 == 0 {
		return writeAtomically(path, w.pod(strings.Repeat("n", LargeSize), ""))
	}
	return writeAtomically(path, strings.Repeat("- x\n", LargeSize/4))
}

// writeHugeName writes a pod whose name is 2 MiB long: under the size limit, so it is
// decoded, and its validation error names a 2 MiB value.
func writeHugeName(w *writer, path string, _ int) error {
	return writeAtomically(path, w.pod(strings.Repeat("n", hugeNameSize), ""))
}

func writeAtomically(path, content string) error {
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err := writeFile(tmp, content); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func writeWrongKind(w *writer, path string, i int) error {
	docs := []string{
		"apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  replicas: 3\n",
		"apiVersion: v1\nkind: Service\nmetadata:\n  name: svc\nspec:\n  ports: [{port: 80}]\n",
		"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm\ndata:\n  a: b\n",
		"apiVersion: v2\nkind: Pod\nmetadata:\n  name: future\n",
		"metadata:\n  name: no-kind\nspec:\n  containers: [{name: a, image: b}]\n",
		"apiVersion: v1\nkind: PodList\nitems: []\n",
		"apiVersion: v1\nkind: " + strings.Repeat("K", 5000) + "\nmetadata:\n  name: long-kind\n",
	}
	return writeFile(path, docs[i%len(docs)])
}

func writeInvalidName(w *writer, path string, i int) error {
	names := []string{
		"UPPER-case",
		"under_score",
		strings.Repeat("long", 100),
		"-leading-dash",
		"dots..in..name",
		"\"\"",
		"\"sp ace\"",
	}
	return writeFile(path, w.pod(names[i%len(names)], ""))
}

// writeDuplicateName writes a valid pod named like one of the valid pods, from a file
// that sorts before theirs: it is ignored and reported, the valid pod stays.
func writeDuplicateName(w *writer, path string, i int) error {
	if len(w.o.ValidNames) == 0 {
		return writeFile(path, w.pod("twin", ""))
	}
	return writeFile(path, w.pod(w.o.ValidNames[i%len(w.o.ValidNames)], ""))
}

func writeNoContainers(w *writer, path string, i int) error {
	specs := []string{
		"  containers: []\n",
		"  restartPolicy: Always\n",
		"  containers:\n  - name: app\n",
		"  containers:\n  - image: " + w.o.Image + "\n",
	}
	return writeFile(path, w.pod(fmt.Sprintf("empty-%d", i), specs[i%len(specs)]))
}

func writeNegative(w *writer, path string, i int) error {
	c := fmt.Sprintf("  - name: app\n    image: %s\n", w.o.Image)
	specs := []string{
		// Not terminationGracePeriodSeconds: upstream's defaulting turns a negative one into 1.
		"  containers:\n" + c + "    startupProbe: {exec: {command: [\"true\"]}, initialDelaySeconds: -2}\n",
		"  activeDeadlineSeconds: -1\n  containers:\n" + c,
		"  containers:\n" + c + "    ports: [{containerPort: -80}]\n",
		"  containers:\n" + c + "    resources: {limits: {cpu: \"-1\", memory: \"-5Mi\"}}\n",
		"  containers:\n" + c + "    livenessProbe: {exec: {command: [\"true\"]}, periodSeconds: -3, failureThreshold: -1}\n",
		"  securityContext: {runAsUser: -1000}\n  containers:\n" + c,
	}
	return writeFile(path, w.pod(fmt.Sprintf("negative-%d", i), specs[i%len(specs)]))
}

// writeDeepNesting nests lists and maps thousands of levels deep where a pod has a list
// of strings, or defines an alias bomb.
func writeDeepNesting(w *writer, path string, i int) error {
	depth := 5000 + w.rnd.IntN(5000)
	switch i % 3 {
	case 0:
		nested := strings.Repeat("[", depth) + strings.Repeat("]", depth)
		return writeFile(path, w.pod("deep", fmt.Sprintf("  containers:\n  - name: app\n    image: %s\n    command: %s\n", w.o.Image, nested)))
	case 1:
		nested := strings.Repeat("{\"a\":", depth) + "1" + strings.Repeat("}", depth)
		return writeFile(path, fmt.Sprintf("{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"deep\",\"labels\":%s}}", nested))
	default:
		var b strings.Builder
		b.WriteString("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n")
		for l := 1; l < 10; l++ {
			fmt.Fprintf(&b, "a%d: &a%d [*a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d]\n", l, l, l-1, l-1, l-1, l-1, l-1, l-1, l-1, l-1, l-1, l-1)
		}
		b.WriteString("apiVersion: v1\nkind: Pod\nmetadata:\n  name: bomb\n  annotations: *a9\n")
		return writeFile(path, b.String())
	}
}

func writeAPIReference(w *writer, path string, i int) error {
	spec := fmt.Sprintf("  containers:\n  - name: app\n    image: %s\n    envFrom: [{secretRef: {name: creds}}]\n", w.o.Image)
	if i%2 == 0 {
		spec = fmt.Sprintf("  volumes: [{name: cfg, configMap: {name: settings}}]\n  containers:\n  - name: app\n    image: %s\n", w.o.Image)
	}
	return writeFile(path, w.pod(fmt.Sprintf("refs-%d", i), spec))
}

// writeSymlinkLoop makes a link to itself, or to a hidden link (ignored as a dot-file)
// that points back.
func writeSymlinkLoop(_ *writer, path string, i int) error {
	name := filepath.Base(path)
	if i%2 == 0 {
		return os.Symlink(name, path)
	}
	if err := os.Symlink(name, filepath.Join(filepath.Dir(path), "."+name)); err != nil {
		return err
	}
	return os.Symlink("."+name, path)
}

func writeDeviceLink(_ *writer, path string, i int) error {
	targets := []string{"/dev/zero", "/dev/null", "/dev/urandom", "/nonexistent/manifest.yaml"}
	return os.Symlink(targets[i%len(targets)], path)
}

func writeDirectory(w *writer, path string, _ int) error {
	if err := os.Mkdir(path, 0o755); err != nil {
		return err
	}
	return writeFile(filepath.Join(path, "inner.yaml"), w.pod("inner", ""))
}

// writeRemoved writes a valid-looking manifest and removes it within milliseconds, while
// nodelet may be reading it.
func writeRemoved(w *writer, path string, i int) error {
	if err := writeFile(path, w.pod(fmt.Sprintf("gone-%d", i), "")); err != nil {
		return err
	}
	time.Sleep(time.Duration(w.rnd.IntN(3000)) * time.Microsecond)
	return os.Remove(path)
}
