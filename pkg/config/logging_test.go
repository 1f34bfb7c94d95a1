package config

import (
	"testing"
	"time"
)

// -v, --vmodule and --log-flush-frequency write the logging section over the file's
// values (--vmodule adds patterns after the file's, as upstream); --logging-format is a
// config flag like any other.
func TestLoggingFlagsOverTheFile(t *testing.T) {
	dir := t.TempDir()
	cfgFile := writeFile(t, dir, "config.yaml", header+"logging:\n  format: json\n  verbosity: 2\n  vmodule:\n  - {filePattern: pod*, verbosity: 5}\n")
	_, opts, err := parse(t, "--config="+cfgFile)
	if err != nil {
		t.Fatal(err)
	}
	l := opts.Config.Logging
	if l.Format != "json" || l.Verbosity != 2 || len(l.VModule) != 1 || l.VModule[0].FilePattern != "pod*" {
		t.Errorf("from the file: %+v", l)
	}
	_, opts, err = parse(t, "--config="+cfgFile, "-v=4", "--vmodule=sync*=6", "--log-flush-frequency=2s", "--logging-format=text")
	if err != nil {
		t.Fatal(err)
	}
	l = opts.Config.Logging
	if l.Format != "text" || l.Verbosity != 4 || len(l.VModule) != 2 || l.VModule[1].FilePattern != "sync*" || l.VModule[1].Verbosity != 6 {
		t.Errorf("with flags: %+v", l)
	}
	if l.FlushFrequency.Duration.Duration != 2*time.Second {
		t.Errorf("flush frequency %v, want 2s", l.FlushFrequency.Duration.Duration)
	}
	if _, _, err := parse(t, "--config="+cfgFile, "--vmodule=nonsense"); err == nil {
		t.Error("--vmodule=nonsense was accepted")
	}
}
