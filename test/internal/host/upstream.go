package host

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Upstream's kubelet changes the host beyond its own directories: at start it sets the
// kernel tunables of its container manager (setupKernelTunables), and it adds iptables
// chains and rules named KUBE-* (KUBE-IPTABLES-HINT, KUBE-FIREWALL with jumps from INPUT
// and OUTPUT, KUBE-KUBELET-CANARY). Benches and tests that run it record both before it
// starts (RecordUpstreamKubeletState) and, once it has stopped, put the tunables back and
// remove the KUBE-* chains and rules that were not there before (Restore). Other rules
// (other rigs' FORWARD rules, say) are never touched.

// kubeletSysctls are the tunables upstream's setupKernelTunables sets.
var kubeletSysctls = []string{
	"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
	"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes",
}

// iptablesTables are the tables upstream's kubelet writes to.
var iptablesTables = []string{"filter", "mangle", "nat"}

// UpstreamKubeletState is what upstream's kubelet may change on the host, as it was.
type UpstreamKubeletState struct {
	sysctls map[string]string
	// rules holds, per "iptables -t TABLE" command, the -S lines present before.
	rules map[[2]string]map[string]bool
}

// RecordUpstreamKubeletState records the tunables and iptables rules upstream's kubelet
// changes.
func RecordUpstreamKubeletState() (*UpstreamKubeletState, error) {
	h := &UpstreamKubeletState{sysctls: map[string]string{}, rules: map[[2]string]map[string]bool{}}
	for _, k := range kubeletSysctls {
		v, err := os.ReadFile(filepath.Join("/proc/sys", k))
		if err != nil {
			return nil, err
		}
		h.sysctls[k] = strings.TrimSpace(string(v))
	}
	for _, ipt := range iptablesCommands() {
		for _, table := range iptablesTables {
			lines, err := listRules(ipt, table)
			if err != nil {
				return nil, err
			}
			h.rules[[2]string{ipt, table}] = toSet(lines)
		}
	}
	return h, nil
}

// Restore undoes upstream's changes. Run it only once upstream's kubelet has stopped:
// its canary monitor re-adds the chains.
func (h *UpstreamKubeletState) Restore() error {
	var errs []error
	for k, v := range h.sysctls {
		path := filepath.Join("/proc/sys", k)
		if cur, err := os.ReadFile(path); err == nil && strings.TrimSpace(string(cur)) == v {
			continue
		}
		errs = append(errs, os.WriteFile(path, []byte(v), 0o644))
	}
	for key, before := range h.rules {
		errs = append(errs, removeNewKubeRules(key[0], key[1], before))
	}
	return errors.Join(errs...)
}

// removeNewKubeRules deletes the KUBE-* rules, then the KUBE-* chains, of one table that
// were not in before.
func removeNewKubeRules(ipt, table string, before map[string]bool) error {
	lines, err := listRules(ipt, table)
	if err != nil {
		return err
	}
	var rules, chains [][]string
	for _, l := range lines {
		if before[l] || !strings.Contains(l, "KUBE-") {
			continue
		}
		f := strings.Fields(l)
		switch {
		case f[0] == "-A":
			rules = append(rules, append([]string{"-D"}, unquote(f[1:])...))
		case f[0] == "-N" && strings.HasPrefix(f[1], "KUBE-"):
			chains = append(chains, []string{"-F", f[1]}, []string{"-X", f[1]})
		}
	}
	var errs []error
	for _, args := range append(rules, chains...) {
		out, err := exec.Command(ipt, append([]string{"-w", "-t", table}, args...)...).CombinedOutput()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s -t %s %s: %v: %s", ipt, table, strings.Join(args, " "), err, out))
		}
	}
	return errors.Join(errs...)
}

// unquote drops the quotes iptables -S puts around comments; the words of a quoted
// comment are joined back into one argument.
func unquote(fields []string) []string {
	var out []string
	for i := 0; i < len(fields); i++ {
		f := fields[i]
		if !strings.HasPrefix(f, `"`) {
			out = append(out, f)
			continue
		}
		words := []string{f}
		for !strings.HasSuffix(words[len(words)-1], `"`) && i+1 < len(fields) {
			i++
			words = append(words, fields[i])
		}
		out = append(out, strings.Trim(strings.Join(words, " "), `"`))
	}
	return out
}

func listRules(ipt, table string) ([]string, error) {
	out, err := exec.Command(ipt, "-w", "-t", table, "-S").Output()
	if err != nil {
		return nil, fmt.Errorf("%s -t %s -S: %w", ipt, table, err)
	}
	return strings.Split(strings.TrimSpace(string(out)), "\n"), nil
}

func toSet(lines []string) map[string]bool {
	s := make(map[string]bool, len(lines))
	for _, l := range lines {
		s[l] = true
	}
	return s
}

// iptablesCommands are the iptables front ends installed (ip6tables may be missing).
func iptablesCommands() []string {
	var cmds []string
	for _, c := range []string{"iptables", "ip6tables"} {
		if _, err := exec.LookPath(c); err == nil {
			cmds = append(cmds, c)
		}
	}
	return cmds
}
