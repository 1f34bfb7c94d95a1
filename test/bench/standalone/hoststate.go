package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Upstream's kubelet changes the host beyond its own directories: it sets kernel tunables
// (setupKernelTunables, unless protectKernelDefaults, with which it would refuse to start
// here) and adds iptables chains and rules (KUBE-IPTABLES-HINT, KUBE-FIREWALL and its
// jumps, KUBE-KUBELET-CANARY). The bench records them before upstream starts and puts back
// what it changed once upstream has stopped.

// kubeletSysctls are the tunables upstream's kubelet sets.
var kubeletSysctls = []string{
	"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
	"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes",
}

// ipRule is one iptables chain (rule empty) or one rule in a chain.
type ipRule struct {
	table, chain string
	rule         []string
}

// kubeletIPTables are the chains and rules upstream's kubelet adds, for IPv4 (IPv6 gets
// the same but KUBE-FIREWALL). Rules come before the chains they jump to, so that
// deleting in this order works.
var kubeletIPTables = []ipRule{
	{table: "filter", chain: "INPUT", rule: []string{"-j", "KUBE-FIREWALL"}},
	{table: "filter", chain: "OUTPUT", rule: []string{"-j", "KUBE-FIREWALL"}},
	{table: "filter", chain: "KUBE-FIREWALL"},
	{table: "mangle", chain: "KUBE-IPTABLES-HINT"},
	{table: "mangle", chain: "KUBE-KUBELET-CANARY"},
	{table: "nat", chain: "KUBE-KUBELET-CANARY"},
	{table: "filter", chain: "KUBE-KUBELET-CANARY"},
}

type hostState struct {
	sysctls map[string]string
	// existed holds, per iptables command, the chains and rules present before.
	existed map[string]map[int]bool
}

func recordHostState() (*hostState, error) {
	h := &hostState{sysctls: map[string]string{}, existed: map[string]map[int]bool{}}
	for _, k := range kubeletSysctls {
		v, err := os.ReadFile(filepath.Join("/proc/sys", k))
		if err != nil {
			return nil, err
		}
		h.sysctls[k] = strings.TrimSpace(string(v))
	}
	for _, ipt := range iptablesCommands() {
		h.existed[ipt] = map[int]bool{}
		for i, r := range kubeletIPTables {
			h.existed[ipt][i] = r.present(ipt)
		}
	}
	return h, nil
}

// restore puts the tunables back and removes the chains and rules that were not there
// before. Run it only once upstream's kubelet has stopped: its canary monitor re-adds them.
func (h *hostState) restore() error {
	var errs []error
	for k, v := range h.sysctls {
		if cur, err := os.ReadFile(filepath.Join("/proc/sys", k)); err == nil && strings.TrimSpace(string(cur)) == v {
			continue
		}
		if err := os.WriteFile(filepath.Join("/proc/sys", k), []byte(v), 0o644); err != nil {
			errs = append(errs, err)
		}
	}
	for ipt, existed := range h.existed {
		for i, r := range kubeletIPTables {
			if !existed[i] && r.present(ipt) {
				errs = append(errs, r.remove(ipt))
			}
		}
	}
	return errors.Join(errs...)
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

func (r ipRule) present(ipt string) bool {
	if r.rule == nil {
		return exec.Command(ipt, "-w", "-t", r.table, "-S", r.chain).Run() == nil
	}
	return exec.Command(ipt, append([]string{"-w", "-t", r.table, "-C", r.chain}, r.rule...)...).Run() == nil
}

func (r ipRule) remove(ipt string) error {
	var steps [][]string
	if r.rule != nil {
		steps = [][]string{append([]string{"-D", r.chain}, r.rule...)}
	} else {
		steps = [][]string{{"-F", r.chain}, {"-X", r.chain}}
	}
	for _, s := range steps {
		out, err := exec.Command(ipt, append([]string{"-w", "-t", r.table}, s...)...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%s -t %s %s: %v: %s", ipt, r.table, strings.Join(s, " "), err, out)
		}
	}
	return nil
}
