package cri

import (
	"errors"
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	crierrors "k8s.io/cri-api/pkg/errors"
	utilexec "k8s.io/utils/exec"
)

// Causes carried by InvalidResponseError. Match them with errors.Is.
var (
	ErrMissingPodSandboxID      = errors.New("pod sandbox ID is not set")
	ErrMissingContainerID       = errors.New("container ID is not set")
	ErrIncompleteVersion        = errors.New("not all fields are set in VersionResponse")
	ErrMissingRuntimeConditions = errors.New("RuntimeReady or NetworkReady condition is not set")
	ErrIncompleteImage          = errors.New("image Id or size is not set")
	ErrMissingImageRef          = errors.New("image ref is not set")
	ErrMissingURL               = errors.New("URL is not set")
	ErrContainerStatusNil       = errors.New("container status is nil")
	ErrPodSandboxStatusNil      = errors.New("pod sandbox status is nil")
	ErrStatusIDMismatch         = errors.New("status is for a different ID than requested")
	ErrIncompleteStatus         = errors.New("required status fields are not set")
)

// ErrCommandTimedOut is wrapped by ExecSync when the runtime answers
// DeadlineExceeded, so probes can tell a timeout from other failures.
var ErrCommandTimedOut = errors.New("command timed out")

// ErrInvalidEndpoint is wrapped by every endpoint parsing error.
var ErrInvalidEndpoint = errors.New("invalid CRI endpoint")

// ErrNotSupported is wrapped by the error of an optional CRI call that the runtime does
// not implement (it answered gRPC Unimplemented), e.g. RuntimeConfig or
// GetContainerEvents on containerd 1.6. The gRPC status stays in the chain, so
// status.Code still reports Unimplemented.
var ErrNotSupported = errors.New("not supported by the container runtime")

// IsNotSupported reports whether err says the runtime lacks the call: an error from
// this package wrapping ErrNotSupported, or a bare gRPC Unimplemented.
func IsNotSupported(err error) bool {
	return errors.Is(err, ErrNotSupported) || status.Code(err) == codes.Unimplemented
}

// notSupported words an Unimplemented answer to method; any other error is returned as
// it is.
func notSupported(method string, err error) error {
	if status.Code(err) != codes.Unimplemented {
		return err
	}
	return fmt.Errorf("%s: %w: %w", method, ErrNotSupported, err)
}

// InvalidResponseError reports an answer from the runtime that breaks the CRI
// contract, for example a RunPodSandbox reply without a sandbox ID. Err is one
// of the Err* causes above; Detail says what exactly was wrong.
type InvalidResponseError struct {
	Method string // CRI method, e.g. "RunPodSandbox"
	Err    error
	Detail string
}

func (e *InvalidResponseError) Error() string {
	msg := fmt.Sprintf("invalid %s response from runtime: %v", e.Method, e.Err)
	if e.Detail != "" {
		msg += ": " + e.Detail
	}
	return msg
}

func (e *InvalidResponseError) Unwrap() error { return e.Err }

func invalidResponse(method string, cause error, detailFormat string, args ...any) error {
	return &InvalidResponseError{Method: method, Err: cause, Detail: fmt.Sprintf(detailFormat, args...)}
}

// ExecExitError is returned by ExecSync when the command ran but exited with
// a non-zero code. It implements k8s.io/utils/exec.ExitError, the interface
// kubelet-style probe code checks for.
type ExecExitError struct {
	Cmd    []string
	Code   int
	Stderr []byte
}

var _ utilexec.ExitError = (*ExecExitError)(nil)

func (e *ExecExitError) Error() string {
	return fmt.Sprintf("command '%s' exited with %d: %s", strings.Join(e.Cmd, " "), e.Code, e.Stderr)
}

// String is part of utilexec.ExitError.
func (e *ExecExitError) String() string { return e.Error() }

// Exited is part of utilexec.ExitError: the command always ran to its end.
func (e *ExecExitError) Exited() bool { return true }

// ExitStatus returns the command's exit code.
func (e *ExecExitError) ExitStatus() int { return e.Code }

// IsNotFound reports whether err is a gRPC NotFound answer from the runtime,
// e.g. ContainerStatus for a container that was already removed.
func IsNotFound(err error) bool {
	return crierrors.IsNotFound(err)
}
