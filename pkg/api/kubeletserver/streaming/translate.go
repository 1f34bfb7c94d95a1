//lint:file-ignore SA1019 apimachinery's httpstream packages are kept over their new home k8s.io/streaming, a module nodelet does not import directly.

package streaming

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/httpstream/wsstream"
	constants "k8s.io/apimachinery/pkg/util/remotecommand"
	restclient "k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/transport/spdy"
	"k8s.io/client-go/util/exec"
	"k8s.io/klog/v2"
)

const (
	// webSocketIdleTimeout closes a WebSocket session nothing was sent or received on
	// for this long, as upstream's translator and the runtimes' streaming servers do.
	webSocketIdleTimeout = 4 * time.Hour
	// statusWriteTimeout bounds writing the final status to a client that stopped reading.
	statusWriteTimeout = 10 * time.Second
)

// translateWebSocket serves a WebSocket v5 exec or attach client by running the session
// against the runtime's streaming URL u over SPDY (the only protocol the CRI streaming
// servers have for it): stdin, stdout, stderr and resize events are copied between the
// two, stdin's v5 close signal ends the SPDY stdin stream, and the command's exit is
// reported on the error channel as the API's Status, NonZeroExitCode carrying the code.
func translateWebSocket(w http.ResponseWriter, r *http.Request, u *url.URL, opts streamOptions) {
	logger := klog.FromContext(r.Context())
	session, err := openWebSocket(w, r, opts)
	if err != nil {
		// The WebSocket library has answered the client already.
		logger.V(4).Info("WebSocket upgrade failed", "err", err)
		return
	}
	defer session.conn.Close()

	// A hijacked connection's request context does not end when the client goes away;
	// a failed write to the client ends the session instead.
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	err = runSPDY(ctx, u, session.streamOptions(ctx, opts, cancel))
	if werr := session.writeStatus(statusFor(err)); werr != nil {
		logger.V(4).Info("Could not write the exec status to the client", "err", werr)
	}
}

// webSocketSession is the server side of a v5 remote command WebSocket: one channel per
// stream, numbered as in the SPDY protocols (stdin 0 … resize 4).
type webSocketSession struct {
	conn    *wsstream.Conn
	streams []io.ReadWriteCloser
}

// openWebSocket answers the upgrade, offering only v5, and tells the client the session
// is ready with an empty message on the lowest stream it can read.
func openWebSocket(w http.ResponseWriter, r *http.Request, opts streamOptions) (*webSocketSession, error) {
	channel := func(on bool, t wsstream.ChannelType) wsstream.ChannelType {
		if on {
			return t
		}
		return wsstream.IgnoreChannel
	}
	conn := wsstream.NewConn(map[string]wsstream.ChannelProtocolConfig{
		constants.StreamProtocolV5Name: {Binary: true, Channels: []wsstream.ChannelType{
			constants.StreamStdIn:  channel(opts.stdin, wsstream.ReadChannel),
			constants.StreamStdOut: channel(opts.stdout, wsstream.WriteChannel),
			constants.StreamStdErr: channel(opts.stderr, wsstream.WriteChannel),
			constants.StreamErr:    wsstream.WriteChannel,
			constants.StreamResize: wsstream.ReadChannel,
		}},
	})
	conn.SetIdleTimeout(webSocketIdleTimeout)
	_, streams, err := conn.Open(w, r)
	if err != nil {
		return nil, err
	}
	first := constants.StreamErr
	if opts.stdout {
		first = constants.StreamStdOut
	} else if opts.stderr {
		first = constants.StreamStdErr
	}
	if _, err := streams[first].Write(nil); err != nil {
		conn.Close()
		return nil, fmt.Errorf("write error during websocket server creation: %w", err)
	}
	return &webSocketSession{conn: conn, streams: streams}, nil
}

// streamOptions wires the session's channels to an SPDY client session; a failed write
// to the client calls cancel.
func (s *webSocketSession) streamOptions(ctx context.Context, opts streamOptions, cancel func()) remotecommand.StreamOptions {
	o := remotecommand.StreamOptions{Tty: opts.tty}
	if opts.stdin {
		o.Stdin = s.streams[constants.StreamStdIn]
	}
	if opts.stdout {
		o.Stdout = cancelOnError{s.streams[constants.StreamStdOut], cancel}
	}
	if opts.stderr {
		o.Stderr = cancelOnError{s.streams[constants.StreamStdErr], cancel}
	}
	if opts.tty {
		o.TerminalSizeQueue = newSizeQueue(ctx, s.streams[constants.StreamResize])
	}
	return o
}

// writeStatus sends the session's outcome on the error channel.
func (s *webSocketSession) writeStatus(status metav1.Status) error {
	data, err := json.Marshal(status)
	if err != nil {
		return err
	}
	s.conn.SetWriteDeadline(statusWriteTimeout)
	_, err = s.streams[constants.StreamErr].Write(data)
	return err
}

// runSPDY runs a remote command session against the runtime's streaming URL.
func runSPDY(ctx context.Context, u *url.URL, opts remotecommand.StreamOptions) error {
	transport, upgrader, err := spdy.RoundTripperFor(&restclient.Config{})
	if err != nil {
		return err
	}
	executor, err := remotecommand.NewSPDYExecutorRejectRedirects(transport, upgrader, http.MethodPost, u)
	if err != nil {
		return err
	}
	return executor.StreamWithContext(ctx, opts)
}

// statusFor is the Status a v5 client reads as the session's outcome: Success, the
// exit code of a command that failed, or the error.
func statusFor(err error) metav1.Status {
	var statusErr *apierrors.StatusError
	var exitErr exec.CodeExitError
	switch {
	case err == nil:
		return metav1.Status{Status: metav1.StatusSuccess}
	case errors.As(err, &statusErr):
		return statusErr.Status()
	case errors.As(err, &exitErr) && exitErr.Exited():
		return metav1.Status{
			Status:  metav1.StatusFailure,
			Reason:  constants.NonZeroExitCodeReason,
			Message: fmt.Sprintf("command terminated with non-zero exit code: %v", exitErr),
			Details: &metav1.StatusDetails{Causes: []metav1.StatusCause{
				{Type: constants.ExitCodeCauseType, Message: fmt.Sprintf("%d", exitErr.ExitStatus())},
			}},
		}
	default:
		return apierrors.NewInternalError(err).Status()
	}
}

// cancelOnError is a writer to the client that ends the session when the client is gone.
type cancelOnError struct {
	w      io.Writer
	cancel func()
}

func (c cancelOnError) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	if err != nil {
		c.cancel()
	}
	return n, err
}

// sizeQueue hands the client's terminal size events (JSON {"Width":…,"Height":…} on
// the resize channel) to the SPDY session until ctx ends.
type sizeQueue struct {
	sizes chan remotecommand.TerminalSize
}

func newSizeQueue(ctx context.Context, r io.Reader) *sizeQueue {
	q := &sizeQueue{sizes: make(chan remotecommand.TerminalSize)}
	go func() {
		defer close(q.sizes)
		dec := json.NewDecoder(r)
		for {
			var size remotecommand.TerminalSize
			if err := dec.Decode(&size); err != nil {
				return
			}
			select {
			case q.sizes <- size:
			case <-ctx.Done():
				return
			}
		}
	}()
	return q
}

// Next blocks until the next size event; nil when the client will send no more.
func (q *sizeQueue) Next() *remotecommand.TerminalSize {
	size, ok := <-q.sizes
	if !ok {
		return nil
	}
	return &size
}
