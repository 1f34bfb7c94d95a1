package kubeclient

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestClassify(t *testing.T) {
	refused := &url.Error{Op: "Get", URL: "https://127.0.0.1:6443/readyz", Err: &net.OpError{
		Op: "dial", Net: "tcp", Err: fmt.Errorf("connect: %w", syscall.ECONNREFUSED)}}
	for _, tc := range []struct {
		err       error
		want      Reason
		permanent bool
	}{
		{refused, ReasonUnreachable, false},
		{context.DeadlineExceeded, ReasonUnreachable, false},
		{apierrors.NewServiceUnavailable("not ready"), ReasonUnreachable, false},
		{apierrors.NewInternalError(errors.New("etcd")), ReasonUnreachable, false},
		{apierrors.NewUnauthorized("Unauthorized"), ReasonUnauthorized, true},
		{apierrors.NewForbidden(schema.GroupResource{Resource: "nodes"}, "n", errors.New("no")), ReasonOther, false},
		{errors.New("certificate signing request is denied, reason: X, message: Y"), ReasonCertificateDenied, true},
		{errors.New(`cannot create certificate signing request: Post "https://x/": tls: failed to verify certificate: x509: certificate has expired or is not yet valid`), ReasonUntrustedServer, true},
	} {
		if got := Classify(tc.err); got != tc.want || IsPermanent(tc.err) != tc.permanent {
			t.Errorf("Classify(%v) = %s permanent %v, want %s %v", tc.err, got, IsPermanent(tc.err), tc.want, tc.permanent)
		}
	}
	msg := Describe(&Error{Kubeconfig: "/k", Server: "https://s", Reason: ReasonUnreachable, Err: refused})
	if msg != "kubeconfig /k: server https://s: API server unreachable: "+refused.Error() {
		t.Errorf("Describe = %q", msg)
	}
	if got := Describe(errors.New("a\n  b")); got != "a b" {
		t.Errorf("Describe kept line breaks: %q", got)
	}
}

func TestBootstrapDeniedCSR(t *testing.T) {
	f := newFakeAPI(t)
	f.deny = true
	o := testOptions(t, f)
	start := time.Now()
	_, err := Build(testContext(t, 30*time.Second), o)
	checkOneLineError(t, err, ReasonCertificateDenied, o.BootstrapKubeconfig, f.url(), "denied")
	if !strings.Contains(Describe(err), "NotMyNode") || time.Since(start) > 5*time.Second {
		t.Errorf("denial reported after %v as %q", time.Since(start), Describe(err))
	}
}
