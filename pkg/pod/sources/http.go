package sources

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	utilio "k8s.io/utils/io"

	"github.com/nodelet/nodelet/pkg/kubetypes"
	"github.com/nodelet/nodelet/pkg/pod/podvalidation"
)

// httpTimeout bounds one GET; a timed out GET is simply retried next period.
const httpTimeout = 10 * time.Second

// maxBodyInError is how much of a body that is not a pod an error quotes.
const maxBodyInError = 200

// NewSourceURL starts reading static pods from url every period (upstream's http
// source): a GET with header, whose body is one Pod or a PodList, YAML or JSON. A body
// that decodes and validates is sent as the source's SET; a failed GET, a status other
// than 200, or a body that cannot be used is logged (the first three times at normal
// verbosity, then at V(4)) and the last good set stays in force. An empty body is an
// error too, but still sends an empty SET so that the source becomes ready. An unchanged
// body is not decoded again.
func NewSourceURL(url string, header http.Header, nodeName types.NodeName, period time.Duration, updates chan<- interface{}) {
	StartSourceURL(context.Background(), url, header, nodeName, period, updates)
}

// StartSourceURL is NewSourceURL with a context that stops its goroutine.
func StartSourceURL(ctx context.Context, url string, header http.Header, nodeName types.NodeName, period time.Duration, updates chan<- interface{}) {
	s := newSourceURL(url, header, nodeName, updates)
	klog.V(1).InfoS("Watching URL", "URL", url)
	go s.run(ctx, positiveOr(period, defaultCheckPeriod))
}

type sourceURL struct {
	url      string
	header   http.Header
	nodeName types.NodeName
	updates  chan<- interface{}
	client   *http.Client

	// data is the last body received, used or not, and dataErr why it could not be
	// used: an unchanged body is not decoded again, but it is no better than last time.
	data        []byte
	dataErr     error
	failureLogs int
	// log defaults to klog at the given verbosity; tests replace it.
	log func(verbosity int, msg string, keysAndValues ...interface{})
}

func newSourceURL(url string, header http.Header, nodeName types.NodeName, updates chan<- interface{}) *sourceURL {
	return &sourceURL{
		url:      url,
		header:   header,
		nodeName: nodeName,
		updates:  updates,
		client:   &http.Client{Timeout: httpTimeout},
		log: func(verbosity int, msg string, keysAndValues ...interface{}) {
			klog.V(klog.Level(verbosity)).InfoS(msg, keysAndValues...)
		},
	}
}

// run polls now and then period after each poll ends, until ctx ends.
func (s *sourceURL) run(ctx context.Context, period time.Duration) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		s.poll(ctx)
		timer.Reset(period)
	}
}

// poll reads the URL once and logs failures without flooding the log.
func (s *sourceURL) poll(ctx context.Context) {
	err := s.extractFromURL(ctx)
	if err == nil {
		if s.failureLogs > 0 {
			s.log(0, "Successfully read pods from URL")
			s.failureLogs = 0
		}
		return
	}
	switch {
	case s.failureLogs < 3:
		s.log(0, "Failed to read pods from URL", "err", err)
	case s.failureLogs == 3:
		s.log(0, "Failed to read pods from URL. Dropping verbosity of this message to V(4)", "err", err)
	default:
		s.log(4, "Failed to read pods from URL", "err", err)
	}
	s.failureLogs++
}

func (s *sourceURL) extractFromURL(ctx context.Context) error {
	data, err := s.get(ctx)
	if err != nil {
		return err
	}
	if len(data) == 0 {
		// The source now holds no pods, whatever body came before: that body, served
		// again, must be decoded and sent again.
		s.data, s.dataErr = nil, nil
		s.send(ctx, []*v1.Pod{})
		return fmt.Errorf("zero-length data received from %v", s.url)
	}
	if bytes.Equal(data, s.data) {
		return s.dataErr
	}
	s.data = data
	s.dataErr = boundError(s.sendPods(ctx, data))
	return s.dataErr
}

// sendPods decodes a body as one pod or a list of pods and sends them.
func (s *sourceURL) sendPods(ctx context.Context, data []byte) error {
	defaulter := func(pod *v1.Pod) error { return applyDefaults(pod, s.url, false, s.nodeName) }
	parsed, pod, singleErr := decodeSinglePod(data, defaulter)
	if parsed {
		if singleErr != nil {
			return singleErr
		}
		s.send(ctx, []*v1.Pod{pod})
		return nil
	}
	parsed, pods, listErr := decodePodList(data, defaulter)
	if parsed {
		if listErr != nil {
			return listErr
		}
		s.send(ctx, pods)
		return nil
	}
	return fmt.Errorf("%v: received '%v', but couldn't parse as single (%v) or multiple pods (%v)",
		s.url, podvalidation.Truncate(string(data), maxBodyInError), singleErr, listErr)
}

// get returns the body of a 200 response.
func (s *sourceURL) get(ctx context.Context) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.url, nil)
	if err != nil {
		return nil, err
	}
	if s.header != nil {
		req.Header = s.header.Clone()
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%v: %v", s.url, resp.Status)
	}
	if resp.ContentLength > maxManifestSize {
		return nil, fmt.Errorf("%v: %w", s.url, tooLarge("body", resp.ContentLength))
	}
	data, err := utilio.ReadAtMost(resp.Body, maxManifestSize)
	if errors.Is(err, utilio.ErrLimitReached) {
		return nil, fmt.Errorf("%v: body is %w", s.url, errTooLarge)
	}
	return data, err
}

func (s *sourceURL) send(ctx context.Context, pods []*v1.Pod) {
	select {
	case s.updates <- PodUpdate{Pods: pods, Op: SET, Source: kubetypes.HTTPSource}:
	case <-ctx.Done():
	}
}
