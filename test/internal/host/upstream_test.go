package host

import (
	"reflect"
	"strings"
	"testing"
)

// The rules upstream's kubelet adds are deleted by replaying their -S line with -D: the
// quoted comment must come back as one argument, without its quotes.
func TestUnquoteRejoinsQuotedComment(t *testing.T) {
	line := `-A KUBE-FIREWALL ! -s 127.0.0.0/8 -d 127.0.0.0/8 -m comment --comment "block incoming localnet connections" -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP`
	got := unquote(strings.Fields(line)[1:])
	want := []string{"KUBE-FIREWALL", "!", "-s", "127.0.0.0/8", "-d", "127.0.0.0/8", "-m", "comment", "--comment",
		"block incoming localnet connections", "-m", "conntrack", "!", "--ctstate", "RELATED,ESTABLISHED,DNAT", "-j", "DROP"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("unquote:\n got %q\nwant %q", got, want)
	}
}

func TestUnquoteOneWordComment(t *testing.T) {
	got := unquote([]string{"INPUT", "-m", "comment", "--comment", `"canary"`, "-j", "KUBE-FIREWALL"})
	want := []string{"INPUT", "-m", "comment", "--comment", "canary", "-j", "KUBE-FIREWALL"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("unquote: got %q, want %q", got, want)
	}
}
