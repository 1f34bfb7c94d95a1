//lint:file-ignore SA1019 apimachinery's httpstream packages are kept over their new home k8s.io/streaming, a module nodelet does not import directly.

package streaming

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/httpstream"
	restclient "k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
)

// dialer is how kubectl reaches the kubelet for port-forward: SPDY, or SPDY tunnelled
// through WebSocket.
type dialer func(t *testing.T, u *url.URL) httpstream.Dialer

func spdyDialer(t *testing.T, u *url.URL) httpstream.Dialer {
	transport, upgrader, err := spdy.RoundTripperFor(&restclient.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return spdy.NewDialer(upgrader, &http.Client{Transport: transport}, http.MethodPost, u)
}

func tunnelDialer(t *testing.T, u *url.URL) httpstream.Dialer {
	d, err := portforward.NewSPDYOverWebsocketDialer(u, &restclient.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

var dialers = map[string]dialer{"spdy": spdyDialer, "websocket-tunnel": tunnelDialer}

// forward starts kubectl's port forwarder for remote port 8080 and returns the local port.
func forward(t *testing.T, d httpstream.Dialer) int {
	t.Helper()
	stop, ready := make(chan struct{}), make(chan struct{})
	pf, err := portforward.New(d, []string{":8080"}, stop, ready, io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 1)
	go func() { errs <- pf.ForwardPorts() }()
	t.Cleanup(func() { close(stop) })
	select {
	case <-ready:
	case err := <-errs:
		t.Fatalf("ForwardPorts: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("port forwarder not ready")
	}
	ports, err := pf.GetPorts()
	if err != nil {
		t.Fatal(err)
	}
	return int(ports[0].Local)
}

func TestPortForwardCarriesConnections(t *testing.T) {
	for name, newDialer := range dialers {
		for _, path := range []string{"/portForward/ns/web", "/portForward/ns/web/uid-1"} {
			t.Run(name+path, func(t *testing.T) {
				env := newTestEnv(t, allFeatures)
				u, _ := url.Parse(env.server.URL + path)
				local := forward(t, newDialer(t, u))
				// Two connections in turn, each its own stream pair to the runtime.
				for i := range 2 {
					conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", local), 5*time.Second)
					if err != nil {
						t.Fatal(err)
					}
					_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
					fmt.Fprintf(conn, "ping %d\n", i)
					line, err := bufio.NewReader(conn).ReadString('\n')
					conn.Close()
					if want := fmt.Sprintf("8080:ping %d\n", i); err != nil || line != want {
						t.Fatalf("answer %q, %v; want %q", line, err, want)
					}
				}
				want := "portforward ns/web uid-1 []"
				if got := env.runtime.recorded(); len(got) != 1 || got[0] != want {
					t.Errorf("runtime calls = %q, want %q", got, want)
				}
			})
		}
	}
}

func TestPortForwardErrors(t *testing.T) {
	ws := http.Header{"Connection": {"Upgrade"}, "Upgrade": {"websocket"}}
	cases := []struct {
		name, path string
		header     http.Header
		setup      func(*fakeRuntime)
		code       int
		body       string
	}{
		{"no pod", "/portForward/ns/nope", nil, nil, 404, "pod does not exist"},
		{"uid mismatch", "/portForward/ns/web/uid-2", nil, nil, 404, "pod not found"},
		{"pod not running", "/portForward/ns/web", nil, func(f *fakeRuntime) { f.running = nil }, 500, `pod not found ("web_ns")`},
		{"websocket without ports", "/portForward/ns/web", ws, nil, 400, `query parameter "port" is required`},
		{"websocket bad port", "/portForward/ns/web?port=80,x", ws, nil, 400, `unable to parse "80,x" as a port`},
		{"websocket port 0", "/portForward/ns/web?port=0", ws, nil, 400, `port "0" must be > 0`},
		{"websocket empty port", "/portForward/ns/web?port=", ws, nil, 400, `query parameter "port" cannot be empty`},
		{"bad path", "/portForward/ns/web/uid-1/extra", nil, nil, 404, "404: Page Not Found"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env := newTestEnv(t, allFeatures)
			if tc.setup != nil {
				tc.setup(env.runtime)
			}
			req, _ := http.NewRequest(http.MethodGet, env.server.URL+tc.path, nil)
			for k, v := range tc.header {
				req.Header[k] = v
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.code || !strings.Contains(string(body), tc.body) {
				t.Errorf("got %d %q, want %d %q", resp.StatusCode, body, tc.code, tc.body)
			}
		})
	}
}

func TestWebSocketPortsAreParsed(t *testing.T) {
	env := newTestEnv(t, allFeatures)
	req, _ := http.NewRequest(http.MethodGet, env.server.URL+"/portForward/ns/web?port=80,443&port=8080", nil)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "websocket")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	// The runtime is asked for the ports; the fake's SPDY-only server then refuses the
	// WebSocket, which is the client's business.
	want := "portforward ns/web uid-1 [80 443 8080]"
	if got := env.runtime.recorded(); len(got) != 1 || got[0] != want {
		t.Errorf("runtime calls = %q, want %q", got, want)
	}
}

func TestTunnelPassesARefusalThrough(t *testing.T) {
	env := newTestEnv(t, allFeatures)
	env.runtime.streamURL += "/missing"
	u, _ := url.Parse(env.server.URL + "/portForward/ns/web")
	_, _, err := tunnelDialer(t, u).Dial(portforward.PortForwardProtocolV1Name)
	if err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("Dial error = %v, want the runtime's 404", err)
	}
}
