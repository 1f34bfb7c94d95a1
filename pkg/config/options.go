package config

import (
	"flag"
	"fmt"
	"os"
	"reflect"
	"sort"
	"strconv"
	"strings"

	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	kc "k8s.io/kubelet/config/v1beta1"
)

// KubeletFlags are the settings only the command line carries (upstream's KubeletFlags).
// The json tags are the flag names, so flags bind to these fields by name.
type KubeletFlags struct {
	KubeConfig           string            `json:"kubeconfig"`
	BootstrapKubeconfig  string            `json:"bootstrap-kubeconfig"`
	HostnameOverride     string            `json:"hostname-override"`
	NodeIP               string            `json:"node-ip"`
	NodeLabels           map[string]string `json:"node-labels"`
	RootDirectory        string            `json:"root-dir"`
	CertDirectory        string            `json:"cert-dir"`
	LockFilePath         string            `json:"lock-file"`
	ExitOnLockContention bool              `json:"exit-on-lock-contention"`
	RuntimeCgroups       string            `json:"runtime-cgroups"`
	// CloudProvider is "" or "external" (an out-of-tree cloud controller manager).
	CloudProvider string `json:"cloud-provider"`
	// Image credential provider exec plugins: their config (a file or a directory of
	// them) and the directory of their binaries.
	ImageCredentialProviderConfigPath string `json:"image-credential-provider-config"`
	ImageCredentialProviderBinDir     string `json:"image-credential-provider-bin-dir"`
	// Container garbage collection (upstream's deprecated GC flags, still honoured).
	MinimumGCAge            metav1.Duration `json:"minimum-container-ttl-duration"`
	MaxPerPodContainerCount int32           `json:"maximum-dead-containers-per-container"`
	MaxContainerCount       int32           `json:"maximum-dead-containers"`
}

// Options is everything the command line and the configuration files decide.
type Options struct {
	ConfigFile string
	ConfigDir  string
	KubeletFlags
	// Config is the merged, defaulted and validated configuration.
	Config *kc.KubeletConfiguration
	// Flags are every command-line flag with its value (as given, else its default), what
	// upstream's /flagz lists.
	Flags map[string]string
}

// CommandLine parses nodelet's command line the way upstream's kubelet does: flags given
// on the command line win over the config file and its drop-ins.
type CommandLine struct {
	fs       *pflag.FlagSet
	flags    KubeletFlags
	fromFlag kc.KubeletConfiguration // config-backed flags land here first
	specs    map[string]flagSpec
	file     string
	dir      string
	version  string
	help     bool
	klogFS   *flag.FlagSet
	warnings []string
	// given are the values each flag was set to on the command line, in order.
	given map[string][]string
}

// NewCommandLine registers every upstream kubelet flag.
func NewCommandLine(name string) *CommandLine {
	c := &CommandLine{
		fs: pflag.NewFlagSet(name, pflag.ContinueOnError),
		flags: KubeletFlags{RootDirectory: DefaultRootDir, CertDirectory: "/var/lib/kubelet/pki",
			MaxPerPodContainerCount: 1, MaxContainerCount: -1},
		specs:  map[string]flagSpec{},
		klogFS: flag.NewFlagSet("klog", flag.ContinueOnError),
		given:  map[string][]string{},
	}
	c.fs.SortFlags = false
	c.fs.Usage = func() {}
	c.fs.SetOutput(os.Stderr)
	c.fs.StringVar(&c.file, "config", "", "Path to a KubeletConfiguration file (kubelet.config.k8s.io/v1beta1, YAML or JSON). Flags given on the command line override it.")
	c.fs.StringVar(&c.dir, "config-dir", "", "Directory of drop-in KubeletConfiguration files (*.conf), merged over --config in lexical order.")
	c.fs.StringVar(&c.version, "version", "false", "Print version information and quit; --version=raw prints more detail.")
	c.fs.Lookup("version").NoOptDefVal = "true"
	c.fs.BoolVarP(&c.help, "help", "h", false, "Show this help and quit.")
	klog.InitFlags(c.klogFS)
	for _, spec := range upstreamFlags {
		c.register(spec)
	}
	return c
}

// register adds one upstream flag, bound to the config scratch struct, to KubeletFlags,
// to klog, or (for the command-only flags nodelet has no use for yet) to a holder that
// only remembers the text.
func (c *CommandLine) register(spec flagSpec) {
	if c.fs.Lookup(spec.Name) != nil {
		return
	}
	c.specs[spec.Name] = spec
	var value pflag.Value
	switch {
	case spec.Kind == configFlag:
		value = c.boundValue(&c.fromFlag, spec.Field, spec)
	case c.klogFS.Lookup(spec.Name) != nil:
		value = &goFlagValue{fs: c.klogFS, name: spec.Name, typ: spec.Type}
	default:
		if _, ok := jsonField(reflect.ValueOf(&c.flags).Elem(), spec.Name); ok {
			value = c.boundValue(&c.flags, spec.Name, spec)
		} else {
			value = &textValue{typ: spec.Type}
		}
	}
	shorthand := ""
	if spec.Name == "v" {
		shorthand = "v"
	}
	usage := spec.Usage
	if spec.Deprecated != "" {
		usage += " (DEPRECATED: " + spec.Deprecated + ")"
	}
	f := c.fs.VarPF(givenValue{Value: value, given: c.given, name: spec.Name}, spec.Name, shorthand, usage)
	f.DefValue = spec.Default
	if spec.Type == "bool" {
		f.NoOptDefVal = "true"
	}
}

func (c *CommandLine) boundValue(root any, path string, spec flagSpec) pflag.Value {
	field, err := fieldByJSONPath(root, path)
	if err != nil {
		// The table is checked by a unit test; reaching this is a programming error.
		panic(fmt.Sprintf("flag --%s: %v", spec.Name, err))
	}
	return &fieldFlag{field: field, typ: spec.Type}
}

// Parse reads the arguments. Positional arguments are an error, as upstream.
func (c *CommandLine) Parse(args []string) error {
	if err := c.fs.Parse(args); err != nil {
		return err
	}
	if c.fs.NArg() > 0 {
		return fmt.Errorf("unknown command %q: nodelet takes flags only", c.fs.Arg(0))
	}
	c.warnings = c.flagWarnings()
	return nil
}

// HelpRequested and VersionRequested report the flags that make nodelet print and quit.
func (c *CommandLine) HelpRequested() bool { return c.help }

// VersionRequested returns "", "true" or "raw".
func (c *CommandLine) VersionRequested() string {
	if b, err := strconv.ParseBool(c.version); err == nil {
		if b {
			return "true"
		}
		return ""
	}
	return c.version
}

// Usage is the --help text.
func (c *CommandLine) Usage() string { return c.fs.FlagUsages() }

// Warnings lists one line per flag given that is deprecated upstream or that nodelet
// accepts but does not act on yet, and, once Options has run, one line naming the config
// fields whose effective value nodelet does not honour.
func (c *CommandLine) Warnings() []string { return c.warnings }

func (c *CommandLine) flagWarnings() []string {
	var out []string
	c.fs.Visit(func(f *pflag.Flag) {
		spec, ok := c.specs[f.Name]
		if !ok {
			return
		}
		var notes []string
		if spec.Deprecated != "" {
			notes = append(notes, "has been deprecated, "+spec.Deprecated)
		}
		// A config field's flag is judged with the field, by its effective value
		// (unhonouredFields); a command-only flag nodelet does not read is named here.
		if spec.Kind != configFlag && !implementedCommandFlags[spec.Name] {
			notes = append(notes, "is accepted for compatibility but not implemented by nodelet yet; it has no effect")
		}
		if len(notes) > 0 {
			out = append(out, fmt.Sprintf("Flag --%s %s", f.Name, strings.Join(notes, "; it ")))
		}
	})
	sort.Strings(out)
	return out
}

// legacyFlagDefaults are the kubelet API settings upstream's kubelet takes from its legacy
// flag defaults when it is started without a config file; nodelet keeps the
// KubeletConfiguration's secure defaults instead.
var legacyFlagDefaults = []struct{ flag, field, nodelet, upstream string }{
	{"read-only-port", "readOnlyPort", "0 (off)", "10255"},
	{"anonymous-auth", "authentication.anonymous.enabled", "false", "true"},
	{"authentication-token-webhook", "authentication.webhook.enabled", "true", "false"},
	{"authorization-mode", "authorization.mode", "Webhook", "AlwaysAllow"},
}

// secureDefaultsWarning names, when no config file is given, the kubelet API settings in
// which nodelet differs from upstream's kubelet started the same way; flags given on the
// command line are not differences.
func (c *CommandLine) secureDefaultsWarning() string {
	if c.file != "" || c.dir != "" {
		return ""
	}
	var diffs []string
	for _, d := range legacyFlagDefaults {
		if f := c.fs.Lookup(d.flag); f == nil || !f.Changed {
			diffs = append(diffs, fmt.Sprintf("%s %s (upstream: %s)", d.field, d.nodelet, d.upstream))
		}
	}
	if len(diffs) == 0 {
		return ""
	}
	return "No --config file: nodelet keeps the KubeletConfiguration's secure defaults where upstream's kubelet applies its legacy flag defaults: " +
		strings.Join(diffs, ", ") + "; set the flags to get upstream's values"
}

// Options loads the files, lays the command-line flags over them, applies upstream's
// defaults and validates the result.
func (c *CommandLine) Options() (*Options, error) {
	doc, err := mergedDocument(c.file, c.dir)
	if err != nil {
		return nil, err
	}
	cfg, err := decodeStrict(doc)
	if err != nil {
		return nil, err
	}
	SetDefaults(cfg)
	var errs []string
	c.fs.Visit(func(f *pflag.Flag) {
		if spec, ok := c.specs[f.Name]; ok && spec.Kind == configFlag {
			if err := copyField(cfg, &c.fromFlag, spec.Field); err != nil {
				errs = append(errs, err.Error())
			}
		}
	})
	if len(errs) > 0 {
		return nil, fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	if err := c.layLoggingFlags(&cfg.Logging); err != nil {
		return nil, err
	}
	if err := Validate(cfg); err != nil {
		return nil, err
	}
	if w := unhonouredFields(cfg); w != "" {
		c.warnings = append(c.warnings, w)
	}
	if w := c.secureDefaultsWarning(); w != "" {
		c.warnings = append(c.warnings, w)
	}
	if err := ValidateKubeletFlags(&c.flags); err != nil {
		return nil, err
	}
	return &Options{ConfigFile: c.file, ConfigDir: c.dir, KubeletFlags: c.flags, Config: cfg, Flags: c.flagValues()}, nil
}

// flagValues are every flag with its value: the text given on the command line (a
// repeated flag's values joined with commas), else the flag's default.
func (c *CommandLine) flagValues() map[string]string {
	out := map[string]string{}
	c.fs.VisitAll(func(f *pflag.Flag) {
		switch given, ok := c.given[f.Name]; {
		case ok:
			out[f.Name] = strings.Join(given, ",")
		case f.Changed:
			out[f.Name] = f.Value.String()
		default:
			out[f.Name] = f.DefValue
		}
	})
	return out
}

// givenValue remembers the text each flag is set to.
type givenValue struct {
	pflag.Value
	given map[string][]string
	name  string
}

func (g givenValue) Set(s string) error {
	if err := g.Value.Set(s); err != nil {
		return err
	}
	g.given[g.name] = append(g.given[g.name], s)
	return nil
}

// fieldFlag is a pflag.Value writing straight into a struct field.
type fieldFlag struct {
	field   reflect.Value
	typ     string
	changed bool
}

func (f *fieldFlag) Set(s string) error {
	err := setFromString(f.field, s, f.changed)
	f.changed = true
	return err
}

func (f *fieldFlag) String() string {
	v := allocateCopy(f.field)
	if !v.IsValid() {
		return ""
	}
	return fmt.Sprint(v.Interface())
}

func (f *fieldFlag) Type() string { return f.typ }

// allocateCopy dereferences without allocating, so printing a flag changes nothing.
func allocateCopy(v reflect.Value) reflect.Value {
	for v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return reflect.Value{}
		}
		v = v.Elem()
	}
	return v
}

// goFlagValue forwards to a klog flag.
type goFlagValue struct {
	fs   *flag.FlagSet
	name string
	typ  string
}

func (g *goFlagValue) Set(s string) error { return g.fs.Set(g.name, s) }
func (g *goFlagValue) String() string     { return g.fs.Lookup(g.name).Value.String() }
func (g *goFlagValue) Type() string       { return g.typ }

// textValue holds the text of a flag nodelet accepts but has no field for yet.
type textValue struct {
	text string
	typ  string
}

func (t *textValue) Set(s string) error { t.text = s; return nil }
func (t *textValue) String() string     { return t.text }
func (t *textValue) Type() string       { return t.typ }
