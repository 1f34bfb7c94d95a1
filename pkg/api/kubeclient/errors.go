package kubeclient

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strings"
	"syscall"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// Reason says why talking to the API server failed, so a caller can tell a
// passing outage (retry) from a configuration mistake (stop and report it once).
type Reason string

const (
	// ReasonUnreachable: no answer at all (connection refused, timeout, DNS) or
	// a server-side error; retrying with back-off is the right thing to do.
	ReasonUnreachable Reason = "Unreachable"
	// ReasonUntrustedServer: the server's certificate does not verify against
	// the kubeconfig's certificate authority (wrong CA, wrong host name, expired).
	ReasonUntrustedServer Reason = "UntrustedServer"
	// ReasonUnauthorized: the server answered 401, it does not accept the
	// kubeconfig's credentials (bad token, client certificate from another CA).
	ReasonUnauthorized Reason = "Unauthorized"
	// ReasonCertificateDenied: the certificate signing request was denied or failed.
	ReasonCertificateDenied Reason = "CertificateDenied"
	// ReasonOther is any other failure.
	ReasonOther Reason = "Other"
)

// Error is a failure to use the API server named by a kubeconfig. Its message is
// one line that names the kubeconfig, the server and what went wrong.
type Error struct {
	Kubeconfig string
	Server     string
	Reason     Reason
	Err        error
}

func (e *Error) Error() string {
	return fmt.Sprintf("kubeconfig %s: server %s: %s", e.Kubeconfig, e.Server, explain(e.Reason, e.Err))
}

func (e *Error) Unwrap() error { return e.Err }

// Permanent reports whether retrying cannot help without a configuration change:
// the server is not trusted, the credentials are rejected, or the CSR was denied.
func (e *Error) Permanent() bool {
	switch e.Reason {
	case ReasonUntrustedServer, ReasonUnauthorized, ReasonCertificateDenied:
		return true
	}
	return false
}

// wrapError attaches the kubeconfig and server to err and classifies it.
func wrapError(kubeconfig, server string, err error) error {
	if err == nil {
		return nil
	}
	var known *Error
	if errors.As(err, &known) {
		return err
	}
	return &Error{Kubeconfig: kubeconfig, Server: server, Reason: Classify(err), Err: err}
}

// Classify tells why an API call failed.
func Classify(err error) Reason {
	var known *Error
	var unknownCA x509.UnknownAuthorityError
	var badHost x509.HostnameError
	var invalid x509.CertificateInvalidError
	var netErr net.Error
	switch {
	case err == nil:
		return ""
	case errors.As(err, &known):
		return known.Reason
	case errors.As(err, &unknownCA), errors.As(err, &badHost), errors.As(err, &invalid),
		x509Verdict(err) != "":
		return ReasonUntrustedServer
	case apierrors.IsUnauthorized(err):
		return ReasonUnauthorized
	case strings.Contains(err.Error(), "certificate signing request is denied"),
		strings.Contains(err.Error(), "certificate signing request failed"):
		return ReasonCertificateDenied
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH),
		errors.Is(err, context.DeadlineExceeded), errors.As(err, &netErr),
		apierrors.IsInternalError(err), apierrors.IsServiceUnavailable(err),
		apierrors.IsTimeout(err), apierrors.IsServerTimeout(err), apierrors.IsTooManyRequests(err),
		apierrors.IsUnexpectedServerError(err):
		return ReasonUnreachable
	}
	return ReasonOther
}

// IsPermanent reports whether err is a failure retrying cannot fix (see Error.Permanent).
func IsPermanent(err error) bool {
	var known *Error
	if errors.As(err, &known) {
		return known.Permanent()
	}
	return (&Error{Reason: Classify(err)}).Permanent()
}

// Describe renders err as one line for a log: errors from this package name the
// kubeconfig and server; any other error gets the same explanation without them.
func Describe(err error) string {
	if err == nil {
		return ""
	}
	var known *Error
	if errors.As(err, &known) {
		return oneLine(known.Error())
	}
	return oneLine(explain(Classify(err), err))
}

// explain turns a classified error into the words an operator needs.
func explain(reason Reason, err error) string {
	switch reason {
	case ReasonUntrustedServer:
		return "server certificate is not trusted by the kubeconfig's certificate-authority: " + innermostX509(err)
	case ReasonUnauthorized:
		return "credentials rejected (401 Unauthorized): check the token or client certificate"
	case ReasonUnreachable:
		return "API server unreachable: " + err.Error()
	case ReasonCertificateDenied:
		return "client certificate not issued: " + err.Error()
	}
	return err.Error()
}

// innermostX509 keeps only the x509 verdict, not the URL and TLS wrapping around it.
func innermostX509(err error) string {
	var unknownCA x509.UnknownAuthorityError
	var badHost x509.HostnameError
	var invalid x509.CertificateInvalidError
	switch {
	case errors.As(err, &unknownCA):
		return unknownCA.Error()
	case errors.As(err, &badHost):
		return badHost.Error()
	case errors.As(err, &invalid):
		return invalid.Error()
	case x509Verdict(err) != "":
		return x509Verdict(err)
	}
	return err.Error()
}

// x509Verdict finds a server-certificate verification failure in an error that
// lost its type on the way (client-go's CSR helpers format errors with %v).
func x509Verdict(err error) string {
	msg := err.Error()
	if !strings.Contains(msg, "tls: failed to verify certificate: ") {
		return ""
	}
	_, verdict, _ := strings.Cut(msg, "tls: failed to verify certificate: ")
	return verdict
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
