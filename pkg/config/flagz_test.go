package config

import "testing"

// Options.Flags lists every flag, as upstream's /flagz does: what the command line gave
// (a repeated flag's values joined), else the flag's default.
func TestFlagValues(t *testing.T) {
	cl := NewCommandLine("nodelet")
	if err := cl.Parse([]string{"--max-pods=42", "--node-labels=a=1", "--node-labels=b=2", "-v=3", "--fail-swap-on=false",
		"--root-dir=" + t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	opts, err := cl.Options()
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{
		"max-pods": "42", "node-labels": "a=1,b=2", "v": "3", "fail-swap-on": "false",
		"sync-frequency": "1m0s", "config": "", "help": "false",
	} {
		if got, ok := opts.Flags[name]; !ok || got != want {
			t.Errorf("--%s = %q (listed %v), want %q", name, got, ok, want)
		}
	}
	if len(opts.Flags) < 100 {
		t.Errorf("%d flags listed, want every kubelet flag", len(opts.Flags))
	}
}
