// Package probe runs a single container probe — exec, HTTP GET, TCP or gRPC — and says
// whether it passed. It is nodelet's version of upstream's pkg/probe and its exec, http, tcp
// and grpc packages; retries, thresholds and events are the prober's business.
package probe

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"syscall"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nodelet/nodelet/pkg/version"
)

// Result is the outcome of one probe run.
type Result string

const (
	// Success: the container passed.
	Success Result = "success"
	// Warning: the container passed, with something worth an event (an HTTP redirect to
	// another host that was not followed).
	Warning Result = "warning"
	// Failure: the container failed the probe.
	Failure Result = "failure"
	// Unknown: the probe could not be run; it always comes with an error.
	Unknown Result = "unknown"
)

// maxOutput is how much command output or response body a probe keeps (upstream: 10 KiB).
const maxOutput = 10 << 10

// truncate keeps the first maxOutput bytes of out.
func truncate(out []byte) string {
	if len(out) > maxOutput {
		out = out[:maxOutput]
	}
	return string(out)
}

// UserAgent is what HTTP and gRPC probes send, "kube-probe/<major>.<minor>" of the kubelet
// release nodelet stands in for.
func UserAgent() string {
	v := strings.TrimPrefix(version.KubeletVersion, "v")
	parts := strings.SplitN(v, ".", 3)
	if len(parts) >= 2 {
		v = parts[0] + "." + parts[1]
	}
	return "kube-probe/" + v
}

// dialer connects with the given timeout. Probe connections linger for 1 s instead of
// sitting in TIME-WAIT for 60 s: a node probing hundreds of containers every few seconds
// would otherwise run out of ephemeral ports (upstream issue 89898). Not 0, which would
// reset the connection instead of closing it cleanly.
func dialer(timeout time.Duration) *net.Dialer {
	return &net.Dialer{
		Timeout: timeout,
		Control: func(_, _ string, c syscall.RawConn) error {
			return c.Control(func(fd uintptr) {
				_ = syscall.SetsockoptLinger(int(fd), syscall.SOL_SOCKET, syscall.SO_LINGER, &syscall.Linger{Onoff: 1, Linger: 1})
			})
		},
	}
}

// ResolvePort turns a probe's port, a number or the name of one of the container's ports,
// into a port number.
func ResolvePort(port intstr.IntOrString, c *v1.Container) (int, error) {
	var n int
	switch port.Type {
	case intstr.Int:
		n = port.IntValue()
	case intstr.String:
		var err error
		if n, err = portByName(c, port.StrVal); err != nil {
			// A number stored as a string (a static pod skips validation), as upstream.
			if n, err = strconv.Atoi(port.StrVal); err != nil {
				return 0, fmt.Errorf("port %q not found", port.StrVal)
			}
		}
	default:
		return 0, fmt.Errorf("intOrString had no kind: %+v", port)
	}
	if n <= 0 || n >= 65536 {
		return 0, fmt.Errorf("invalid port number: %v", n)
	}
	return n, nil
}

func portByName(c *v1.Container, name string) (int, error) {
	for _, p := range c.Ports {
		if p.Name == name {
			return int(p.ContainerPort), nil
		}
	}
	return 0, fmt.Errorf("port %q not found", name)
}
