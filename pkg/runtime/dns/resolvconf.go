package dns

import (
	"fmt"
	"io"
	"os"
	"strings"

	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	utilio "k8s.io/utils/io"
)

// maxResolvConfBytes bounds how much of a resolv.conf is read, as upstream
// does, so a runaway file cannot exhaust the kubelet's memory.
const maxResolvConfBytes = 10 << 20

// resolvConf is what the kubelet takes from a resolv.conf file.
type resolvConf struct {
	nameservers []string
	searches    []string
	options     []string
}

// parseResolvConf reads a resolv.conf. Like upstream it understands only
// "nameserver" (accumulates), "search" and "options" (the last line wins);
// "domain" and every other keyword are ignored. Comment lines start with '#';
// text after the first field of a nameserver line is ignored. A nameserver
// line without an address is an error, reported after the whole file is read.
func parseResolvConf(r io.Reader) (resolvConf, error) {
	data, err := utilio.ReadAtMost(r, maxResolvConfBytes)
	if err != nil {
		return resolvConf{}, err
	}
	conf := resolvConf{nameservers: []string{}, searches: []string{}, options: []string{}}
	var errs []error
	for _, line := range strings.Split(string(data), "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 || strings.HasPrefix(fields[0], "#") {
			continue
		}
		switch fields[0] {
		case "nameserver":
			if len(fields) < 2 {
				errs = append(errs, fmt.Errorf("nameserver list is empty "))
				continue
			}
			conf.nameservers = append(conf.nameservers, fields[1])
		case "search":
			conf.searches = normalizeSearches(fields[1:])
		case "options":
			conf.options = fields[1:]
		}
	}
	return conf, utilerrors.NewAggregate(errs)
}

// normalizeSearches drops one trailing dot from each search domain so that
// "example.com." and "example.com" count once against the search limits.
// The root domain "." is kept as is: trimming it would leave an empty entry.
func normalizeSearches(domains []string) []string {
	out := make([]string, 0, len(domains))
	for _, d := range domains {
		if d != "." {
			d = strings.TrimSuffix(d, ".")
		}
		out = append(out, d)
	}
	return out
}

// readResolvConf opens and parses the file at path.
func readResolvConf(path string) (resolvConf, error) {
	f, err := os.Open(path)
	if err != nil {
		return resolvConf{}, err
	}
	defer f.Close()
	return parseResolvConf(f)
}

// hostDNSConfig is the node's own resolver configuration, or an empty one
// when no resolver file is configured.
func (c *Configurer) hostDNSConfig() (*runtimeapi.DNSConfig, error) {
	if c.ResolverConfig == "" {
		return &runtimeapi.DNSConfig{}, nil
	}
	conf, err := readResolvConf(c.ResolverConfig)
	if err != nil {
		return nil, err
	}
	return &runtimeapi.DNSConfig{Servers: conf.nameservers, Searches: conf.searches, Options: conf.options}, nil
}
