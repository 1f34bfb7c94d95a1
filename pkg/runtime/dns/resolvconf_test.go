package dns

import (
	"reflect"
	"strings"
	"testing"
)

func TestParseResolvConf(t *testing.T) {
	tests := []struct {
		name        string
		data        string
		nameservers []string
		searches    []string
		options     []string
		wantErr     bool
	}{
		{name: "empty", data: ""},
		{name: "blank lines", data: " \n\t\n\n"},
		{name: "comments", data: "#comment\n  # indented comment\n#nameserver 1.1.1.1"},
		{name: "one nameserver", data: "nameserver 1.2.3.4", nameservers: []string{"1.2.3.4"}},
		{name: "tab and leading space", data: "\t nameserver \t 1.2.3.4", nameservers: []string{"1.2.3.4"}},
		{name: "nameservers accumulate", data: "nameserver 1.2.3.4\nnameserver 5.6.7.8\nnameserver 9.9.9.9\nnameserver 8.8.8.8",
			nameservers: []string{"1.2.3.4", "5.6.7.8", "9.9.9.9", "8.8.8.8"}},
		{name: "trailing comment on nameserver", data: "nameserver 1.2.3.4 #comment", nameservers: []string{"1.2.3.4"}},
		{name: "empty nameserver is an error", data: "#comment\nnameserver", wantErr: true},
		{name: "empty nameserver and search", data: "nameserver\nsearch", wantErr: true},
		{name: "empty search", data: "nameserver 1.2.3.4\nsearch", nameservers: []string{"1.2.3.4"}},
		{name: "search", data: "search foo bar bat\n", searches: []string{"foo", "bar", "bat"}},
		{name: "last search wins", data: "search foo\nsearch bar", searches: []string{"bar"}},
		{name: "trailing dots trimmed", data: "search foo. bar.example.com. baz", searches: []string{"foo", "bar.example.com", "baz"}},
		{name: "root domain kept", data: "search .", searches: []string{"."}},
		{name: "root domain among others", data: "search foo. . bar", searches: []string{"foo", ".", "bar"}},
		{name: "domain is ignored", data: "domain corp.example\nnameserver 1.2.3.4", nameservers: []string{"1.2.3.4"}},
		{name: "unknown keywords ignored", data: "sortlist 130.155.160.0/255.255.240.0\nlookup file bind\ncomment"},
		{name: "options", data: "options ndots:5 attempts:2", options: []string{"ndots:5", "attempts:2"}},
		{name: "last options wins", data: "options ndots:1\noptions ndots:5 attempts:3", options: []string{"ndots:5", "attempts:3"}},
		{name: "everything", data: "nameserver 1.2.3.4\nsearch foo\nnameserver 5.6.7.8\nsearch bar\noptions ndots:5 attempts:4",
			nameservers: []string{"1.2.3.4", "5.6.7.8"}, searches: []string{"bar"}, options: []string{"ndots:5", "attempts:4"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conf, err := parseResolvConf(strings.NewReader(tt.data))
			if tt.wantErr {
				if err == nil {
					t.Fatalf("parseResolvConf(%q) = %+v, want an error", tt.data, conf)
				}
				return
			}
			if err != nil {
				t.Fatalf("parseResolvConf(%q): %v", tt.data, err)
			}
			assertStrings(t, "nameservers", conf.nameservers, tt.nameservers)
			assertStrings(t, "searches", conf.searches, tt.searches)
			assertStrings(t, "options", conf.options, tt.options)
		})
	}
}

func TestParseResolvConfRejectsHugeFile(t *testing.T) {
	huge := strings.Repeat("#", maxResolvConfBytes+1)
	if _, err := parseResolvConf(strings.NewReader(huge)); err == nil {
		t.Fatal("parsing a file over the size limit succeeded")
	}
	if _, err := parseResolvConf(strings.NewReader(huge[2:])); err != nil {
		t.Fatalf("parsing a file just under the size limit: %v", err)
	}
}

// assertStrings compares string slices, treating nil and empty as equal.
func assertStrings(t *testing.T, what string, got, want []string) {
	t.Helper()
	if len(got) == 0 && len(want) == 0 {
		return
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s = %q, want %q", what, got, want)
	}
}
