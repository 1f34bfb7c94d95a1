package probe

import (
	"context"
	"net"
	"strconv"
	"time"

	"k8s.io/klog/v2"
)

// TCP passes when a connection to host:port opens within timeout.
func TCP(ctx context.Context, host string, port int, timeout time.Duration) (Result, string, error) {
	conn, err := dialer(timeout).DialContext(ctx, "tcp", net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		// Refused, unreachable and timed out all mean the container is not listening.
		return Failure, err.Error(), nil
	}
	if err := conn.Close(); err != nil {
		klog.V(4).InfoS("Closing TCP probe socket failed", "err", err)
	}
	return Success, "", nil
}
