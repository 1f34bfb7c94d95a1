package main

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"time"
)

// podStart is one "Pod started" line of nodelet's log: its start-up trace, from the pod
// seen to Ready, with the time spent in each phase ("other" is what no phase covers: the
// pod worker, the pod cgroup's set-up, status).
type podStart map[string]time.Duration

var logPair = regexp.MustCompile(`(\w+)=(?:"([^"]*)"|(\S+))`)

// podStarts reads the "Pod started" lines of the pods named from nodelet's log.
func podStarts(logPath string, pods []string) ([]podStart, error) {
	data, err := os.ReadFile(logPath)
	if err != nil {
		return nil, err
	}
	want := map[string]bool{}
	for _, p := range pods {
		want[p] = true
	}
	var out []podStart
	for _, line := range strings.Split(string(data), "\n") {
		_, rest, ok := strings.Cut(line, `"Pod started" `)
		if !ok {
			continue
		}
		s, pod := podStart{}, ""
		for _, m := range logPair.FindAllStringSubmatch(rest, -1) {
			val := m[2] + m[3]
			if m[1] == "pod" {
				_, pod, _ = strings.Cut(val, "/")
				continue
			}
			if d, err := time.ParseDuration(val); err == nil {
				s[m[1]] = d
			}
		}
		if want[pod] {
			out = append(out, s)
		}
	}
	if len(out) != len(pods) {
		return out, fmt.Errorf("%d \"Pod started\" lines for %d pods in %s", len(out), len(pods), logPath)
	}
	return out, nil
}
