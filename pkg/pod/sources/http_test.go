package sources

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/pkg/kubetypes"
)

// manifestServer serves whatever body and status the test sets.
type manifestServer struct {
	mu      sync.Mutex
	status  int
	body    string
	headers []http.Header
	*httptest.Server
}

func newManifestServer(t *testing.T) *manifestServer {
	m := &manifestServer{status: http.StatusOK}
	m.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m.mu.Lock()
		defer m.mu.Unlock()
		m.headers = append(m.headers, r.Header.Clone())
		w.WriteHeader(m.status)
		fmt.Fprint(w, m.body)
	}))
	t.Cleanup(m.Close)
	return m
}

func (m *manifestServer) serve(status int, body string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.status, m.body = status, body
}

func (m *manifestServer) requests() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.headers)
}

type logLine struct {
	verbosity int
	msg       string
}

type urlSourceTest struct {
	t       *testing.T
	updates chan interface{}
	mu      sync.Mutex
	logs    []logLine
}

func startURLSource(t *testing.T, url string, header http.Header) *urlSourceTest {
	ut := &urlSourceTest{t: t, updates: make(chan interface{}, 100)}
	s := newSourceURL(url, header, "node1", ut.updates)
	s.log = func(verbosity int, msg string, _ ...interface{}) {
		ut.mu.Lock()
		defer ut.mu.Unlock()
		ut.logs = append(ut.logs, logLine{verbosity, msg})
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.run(ctx, 10*time.Millisecond); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return ut
}

func (ut *urlSourceTest) nextSet() []*v1.Pod {
	ut.t.Helper()
	select {
	case u := <-ut.updates:
		update := u.(PodUpdate)
		if update.Op != SET || update.Source != kubetypes.HTTPSource || update.Pods == nil {
			ut.t.Fatalf("unexpected update %+v", update)
		}
		return update.Pods
	case <-time.After(waitTimeout):
		ut.t.Fatal("no SET arrived")
		return nil
	}
}

func (ut *urlSourceTest) expectNoSet(wait time.Duration) {
	ut.t.Helper()
	select {
	case u := <-ut.updates:
		ut.t.Fatalf("unexpected update %+v", u)
	default:
	}
	select {
	case u := <-ut.updates:
		ut.t.Fatalf("unexpected update %+v", u)
	case <-time.After(wait):
	}
}

func (ut *urlSourceTest) logLines() []logLine {
	ut.mu.Lock()
	defer ut.mu.Unlock()
	return append([]logLine(nil), ut.logs...)
}

// waitForPolls waits until the server has answered n more requests.
func waitForPolls(t *testing.T, m *manifestServer, n int) {
	t.Helper()
	target := m.requests() + n
	deadline := time.Now().Add(waitTimeout)
	for m.requests() < target {
		if time.Now().After(deadline) {
			t.Fatalf("only %d requests, want %d", m.requests(), target)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestURLSourceReadsOnePodWithHeaders(t *testing.T) {
	m := newManifestServer(t)
	m.serve(http.StatusOK, webYAML)
	ut := startURLSource(t, m.URL, http.Header{"Authorization": {"Bearer x"}})
	pods := ut.nextSet()
	if len(pods) != 1 || pods[0].Name != "web-node1" || pods[0].Spec.NodeName != "node1" {
		t.Fatalf("pods %v", podNames(pods))
	}
	if len(pods[0].Spec.Tolerations) != 0 {
		t.Errorf("URL pod got the static pod toleration")
	}
	m.mu.Lock()
	got := m.headers[0].Get("Authorization")
	m.mu.Unlock()
	if got != "Bearer x" {
		t.Fatalf("Authorization header %q", got)
	}
}

func TestURLSourceReadsAPodList(t *testing.T) {
	m := newManifestServer(t)
	m.serve(http.StatusOK, `{"apiVersion":"v1","kind":"PodList","items":[
{"metadata":{"name":"a"},"spec":{"containers":[{"name":"c","image":"busybox"}]}},
{"metadata":{"name":"b"},"spec":{"containers":[{"name":"c","image":"busybox"}]}}]}`)
	ut := startURLSource(t, m.URL, nil)
	if got := strings.Join(podNames(ut.nextSet()), ","); got != "a-node1,b-node1" {
		t.Fatalf("pods %s", got)
	}
}

func TestURLSourceKeepsLastGoodStateOnFailures(t *testing.T) {
	m := newManifestServer(t)
	m.serve(http.StatusOK, webYAML)
	ut := startURLSource(t, m.URL, nil)
	ut.nextSet()

	// An unchanged body is not sent again.
	waitForPolls(t, m, 3)
	ut.expectNoSet(0)

	// Errors: a non-200 answer, then content that is not a pod, then an invalid pod.
	for _, answer := range []struct {
		status int
		body   string
	}{
		{http.StatusInternalServerError, webYAML},
		{http.StatusOK, "{not yaml"},
		{http.StatusOK, strings.Replace(webYAML, "busybox:1.36", `""`, 1)},
	} {
		m.serve(answer.status, answer.body)
		waitForPolls(t, m, 2)
		ut.expectNoSet(0)
	}

	m.serve(http.StatusOK, strings.Replace(webYAML, "name: web", "name: api", 1))
	if got := podNames(ut.nextSet()); len(got) != 1 || got[0] != "api-node1" {
		t.Fatalf("pods %v after recovery", got)
	}
}

func TestURLSourceEmptyBodySendsEmptySet(t *testing.T) {
	m := newManifestServer(t)
	m.serve(http.StatusOK, "")
	ut := startURLSource(t, m.URL, nil)
	if pods := ut.nextSet(); len(pods) != 0 {
		t.Fatalf("pods %v from an empty body", podNames(pods))
	}
}

func TestURLSourceRateLimitsFailureLogs(t *testing.T) {
	m := newManifestServer(t)
	m.serve(http.StatusNotFound, "")
	ut := startURLSource(t, m.URL, nil)
	waitForPolls(t, m, 6)
	m.serve(http.StatusOK, webYAML)
	ut.nextSet()

	logs := ut.logLines()
	if len(logs) < 6 {
		t.Fatalf("only %d log lines: %v", len(logs), logs)
	}
	for i := 0; i < 3; i++ {
		if logs[i] != (logLine{0, "Failed to read pods from URL"}) {
			t.Errorf("log %d: %+v", i, logs[i])
		}
	}
	if logs[3] != (logLine{0, "Failed to read pods from URL. Dropping verbosity of this message to V(4)"}) {
		t.Errorf("log 3: %+v", logs[3])
	}
	if logs[4] != (logLine{4, "Failed to read pods from URL"}) {
		t.Errorf("log 4: %+v", logs[4])
	}
	deadline := time.Now().Add(waitTimeout)
	for ut.logLines()[len(ut.logLines())-1].msg != "Successfully read pods from URL" {
		if time.Now().After(deadline) {
			t.Fatalf("recovery not logged: %v", ut.logLines())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestURLSourceUnreachable(t *testing.T) {
	m := newManifestServer(t)
	url := m.URL
	m.Close()
	s := newSourceURL(url, nil, "node1", make(chan interface{}, 1))
	if err := s.extractFromURL(context.Background()); err == nil {
		t.Fatal("no error from an unreachable URL")
	}
}

func TestStartSourceURLFeedsConfigAndStops(t *testing.T) {
	m := newManifestServer(t)
	m.serve(http.StatusOK, webYAML)
	c := NewConfig(nil)
	ctx, cancel := context.WithCancel(context.Background())
	StartSourceURL(ctx, m.URL, nil, "node1", 10*time.Millisecond, c.Channel(ctx, kubetypes.HTTPSource))
	u := expectUpdate(t, c, ADD, kubetypes.HTTPSource, string(nextUID(t, m)))
	if src, _ := kubetypes.GetPodSource(u.Pods[0]); src != kubetypes.HTTPSource || !kubetypes.IsStaticPod(u.Pods[0]) {
		t.Fatalf("source %q", src)
	}
	cancel()
	time.Sleep(50 * time.Millisecond) // let a poll in flight finish
	before := m.requests()
	time.Sleep(100 * time.Millisecond)
	if after := m.requests(); after != before {
		t.Fatalf("%d requests after the context ended", after-before)
	}
}

// nextUID decodes what the server serves, as the source will.
func nextUID(t *testing.T, m *manifestServer) string {
	m.mu.Lock()
	body := m.body
	m.mu.Unlock()
	_, pod, err := decodeSinglePod([]byte(body), func(pod *v1.Pod) error { return applyDefaults(pod, m.URL, false, "node1") })
	if err != nil {
		t.Fatal(err)
	}
	return string(pod.UID)
}

// A body that stays bad is a failure on every poll, not only on the first: an unchanged
// body is not decoded again, but its error still stands.
func TestURLSourceUnchangedBadBodyStaysAFailure(t *testing.T) {
	m := newManifestServer(t)
	m.serve(http.StatusOK, strings.Replace(webYAML, "busybox:1.36", `""`, 1))
	ut := startURLSource(t, m.URL, nil)
	waitForPolls(t, m, 5)
	ut.expectNoSet(0)
	logs := ut.logLines()
	for _, l := range logs {
		if l.msg == "Successfully read pods from URL" {
			t.Fatalf("an unchanged invalid body was logged as a success: %v", logs)
		}
	}
	if len(logs) < 4 {
		t.Fatalf("only %d failures logged after 5 polls: %v", len(logs), logs)
	}
}

// An empty body empties the source; the same good body served again afterwards must
// bring its pods back, although it equals the last body decoded.
func TestURLSourceGoodBodyAfterAnEmptyOneIsSentAgain(t *testing.T) {
	m := newManifestServer(t)
	m.serve(http.StatusOK, webYAML)
	ut := startURLSource(t, m.URL, nil)
	if got := podNames(ut.nextSet()); len(got) != 1 {
		t.Fatalf("pods %v", got)
	}
	m.serve(http.StatusOK, "")
	if got := podNames(ut.nextSet()); len(got) != 0 {
		t.Fatalf("pods %v from an empty body", got)
	}
	m.serve(http.StatusOK, webYAML)
	deadline := time.Now().Add(waitTimeout)
	for {
		pods := ut.nextSet()
		if len(pods) == 1 && pods[0].Name == "web-node1" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pods %v after the good body came back", podNames(pods))
		}
	}
}

func TestURLSourceRefusesLargeBodies(t *testing.T) {
	body := strings.Repeat("x", maxManifestSize+1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/sized" {
			w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		} // else chunked, with no length: the limit is found while reading
		fmt.Fprint(w, body)
	}))
	t.Cleanup(srv.Close)
	for path, want := range map[string]string{
		"/sized":   "body is 3.0 MiB (3145729 bytes), larger than the 3 MiB limit for a manifest",
		"/chunked": "body is larger than the 3 MiB limit for a manifest",
	} {
		s := newSourceURL(srv.URL+path, nil, "node1", make(chan interface{}, 1))
		err := s.extractFromURL(context.Background())
		if err == nil || !strings.HasSuffix(err.Error(), want) {
			t.Errorf("%s: got %v, want …%s", path, err, want)
		}
	}
}

func TestURLSourceErrorsQuoteLittleOfTheBody(t *testing.T) {
	m := newManifestServer(t)
	m.serve(http.StatusOK, "just: "+strings.Repeat("text ", 100000))
	s := newSourceURL(m.URL, nil, "node1", make(chan interface{}, 1))
	err := s.extractFromURL(context.Background())
	if err == nil || len(err.Error()) > maxErrorBytes+40 || !strings.Contains(err.Error(), "received 'just: text text") {
		t.Fatalf("got %d bytes: %v", len(fmt.Sprint(err)), err)
	}
}
