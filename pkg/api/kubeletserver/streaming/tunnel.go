//lint:file-ignore SA1019 apimachinery's httpstream packages are kept over their new home k8s.io/streaming, a module nodelet does not import directly.

package streaming

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	gwebsocket "github.com/gorilla/websocket"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/apimachinery/pkg/util/httpstream/spdy"
	pfconstants "k8s.io/apimachinery/pkg/util/portforward"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/klog/v2"
)

// dialTimeout bounds connecting to the runtime's streaming server and its answer to
// the upgrade request.
const dialTimeout = 30 * time.Second

// tunnelSPDY serves port-forward to a WebSocket client that tunnels SPDY
// ("SPDY/3.1+portforward.k8s.io"): it upgrades to SPDY at the runtime's streaming URL
// u, answers the WebSocket upgrade with the protocol the runtime chose, then copies the
// client's binary messages to the runtime and the runtime's bytes back as messages.
// The SPDY session itself runs end to end between the client and the runtime. A
// runtime that refuses the upgrade has its answer passed to the client.
func tunnelSPDY(w http.ResponseWriter, r *http.Request, u *url.URL) {
	logger := klog.FromContext(r.Context())
	protocols := tunneledSPDYProtocols(r)
	if len(protocols) == 0 {
		http.Error(w, "unable to upgrade: no tunneling spdy protocols provided", http.StatusBadRequest)
		return
	}
	backend, err := dialSPDY(r.Context(), u, protocols)
	if err != nil {
		proxyErrorResponder{}.Error(w, r, err)
		return
	}
	defer backend.conn.Close()
	resp := backend.resp
	if resp.StatusCode != http.StatusSwitchingProtocols {
		logger.Error(nil, "SPDY upgrade failed", "status", resp.Status)
		relayResponse(w, resp)
		return
	}
	if !isSPDYUpgrade(resp) {
		http.Error(w, "unable to upgrade: missing upgrade headers in response", http.StatusInternalServerError)
		return
	}
	var offered []string
	if chosen := strings.TrimSpace(resp.Header.Get(httpstream.HeaderProtocolVersion)); chosen != "" {
		offered = []string{pfconstants.WebsocketsSPDYTunnelingPrefix + chosen}
	}
	upgrader := gwebsocket.Upgrader{CheckOrigin: func(*http.Request) bool { return true }, Subprotocols: offered}
	ws, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		// Upgrade has answered the client.
		logger.Error(err, "Error upgrading websocket connection")
		return
	}
	client := portforward.NewTunnelingConnection("server", ws)
	copyBothWays(client, backend.conn, backend.reader)
}

// tunneledSPDYProtocols are the SPDY protocols a client offers as WebSocket
// subprotocols "SPDY/3.1+<protocol>.k8s.io", without the prefix.
func tunneledSPDYProtocols(r *http.Request) []string {
	var protocols []string
	for _, p := range gwebsocket.Subprotocols(r) {
		if strings.HasPrefix(p, pfconstants.WebsocketsSPDYTunnelingPrefix) && strings.HasSuffix(p, pfconstants.KubernetesSuffix) {
			protocols = append(protocols, strings.TrimPrefix(p, pfconstants.WebsocketsSPDYTunnelingPrefix))
		}
	}
	return protocols
}

// spdyBackend is an upgrade request's connection to the runtime and its answer; reader
// holds whatever the runtime sent after the answer's headers.
type spdyBackend struct {
	conn   net.Conn
	reader *bufio.Reader
	resp   *http.Response
}

// dialSPDY asks the streaming server at u to upgrade to SPDY with one of protocols.
func dialSPDY(ctx context.Context, u *url.URL, protocols []string) (*spdyBackend, error) {
	conn, err := dialURL(ctx, u)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), nil)
	if err != nil {
		conn.Close()
		return nil, err
	}
	req.Header.Set(httpstream.HeaderConnection, httpstream.HeaderUpgrade)
	req.Header.Set(httpstream.HeaderUpgrade, spdy.HeaderSpdy31)
	for _, p := range protocols {
		req.Header.Add(httpstream.HeaderProtocolVersion, p)
	}
	_ = conn.SetDeadline(time.Now().Add(dialTimeout))
	reader := bufio.NewReader(conn)
	if err := req.Write(conn); err != nil {
		conn.Close()
		return nil, fmt.Errorf("error sending request: %w", err)
	}
	resp, err := http.ReadResponse(reader, req)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("error reading response: %w", err)
	}
	_ = conn.SetDeadline(time.Time{})
	return &spdyBackend{conn: conn, reader: reader, resp: resp}, nil
}

// dialURL connects to u's host, over TLS for https.
func dialURL(ctx context.Context, u *url.URL) (net.Conn, error) {
	host, port := u.Hostname(), u.Port()
	if port == "" {
		port = "80"
		if u.Scheme == "https" {
			port = "443"
		}
	}
	addr := net.JoinHostPort(host, port)
	dialer := &net.Dialer{Timeout: dialTimeout}
	switch u.Scheme {
	case "http":
		return dialer.DialContext(ctx, "tcp", addr)
	case "https":
		tlsDialer := &tls.Dialer{NetDialer: dialer, Config: &tls.Config{ServerName: host}}
		return tlsDialer.DialContext(ctx, "tcp", addr)
	default:
		return nil, fmt.Errorf("unknown scheme: %s", u.Scheme)
	}
}

// isSPDYUpgrade checks that a 101 answer really switched to SPDY.
func isSPDYUpgrade(resp *http.Response) bool {
	connection := strings.ToLower(resp.Header.Get(httpstream.HeaderConnection))
	upgrade := strings.ToLower(resp.Header.Get(httpstream.HeaderUpgrade))
	return strings.Contains(connection, "upgrade") && strings.Contains(upgrade, strings.ToLower(spdy.HeaderSpdy31))
}

// relayResponse passes the runtime's non-upgrade answer to the client.
func relayResponse(w http.ResponseWriter, resp *http.Response) {
	defer resp.Body.Close()
	for k, vs := range resp.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}

// copyBothWays copies between the client and the runtime until either side ends, then
// closes both.
func copyBothWays(client, backend net.Conn, fromBackend io.Reader) {
	done := make(chan struct{}, 2)
	go func() {
		_, _ = io.Copy(backend, client)
		done <- struct{}{}
	}()
	go func() {
		_, _ = io.Copy(client, fromBackend)
		done <- struct{}{}
	}()
	<-done
	client.Close()
	backend.Close()
	<-done
}
