package probe

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nodelet/nodelet/pkg/runtime/container"
	"github.com/nodelet/nodelet/pkg/runtime/cri"
)

type stubRunner struct {
	out []byte
	err error

	gotTimeout time.Duration
	gotCmd     []string
}

func (r *stubRunner) RunInContainer(_ context.Context, _ container.ContainerID, cmd []string, timeout time.Duration) ([]byte, error) {
	r.gotCmd, r.gotTimeout = cmd, timeout
	return r.out, r.err
}

func TestExec(t *testing.T) {
	cmd := []string{"sh", "-c", "check"}
	for _, tc := range []struct {
		name       string
		out        []byte
		err        error
		want       Result
		wantOutput string
		wantErr    bool
	}{
		{"exit 0", []byte("ok\n"), nil, Success, "ok\n", false},
		{"exit 1 keeps output", []byte("broken\n"), &cri.ExecExitError{Cmd: cmd, Code: 1}, Failure, "broken\n", false},
		{"wrapped exit error", nil, fmt.Errorf("exec: %w", &cri.ExecExitError{Cmd: cmd, Code: 2}), Failure, "", false},
		{"timeout is a failure", nil, fmt.Errorf("%w: after 1s", cri.ErrCommandTimedOut), Failure, `command "sh -c check" timed out`, false},
		{"runtime error is unknown", nil, errors.New("container not found"), Unknown, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &stubRunner{out: tc.out, err: tc.err}
			got, output, err := Exec(context.Background(), r, container.ContainerID{Type: "containerd", ID: "abc"}, cmd, 3*time.Second)
			if got != tc.want || output != tc.wantOutput || (err != nil) != tc.wantErr {
				t.Errorf("Exec = %q, %q, %v; want %q, %q, error %v", got, output, err, tc.want, tc.wantOutput, tc.wantErr)
			}
			if r.gotTimeout != 3*time.Second {
				t.Errorf("runner got timeout %v, want 3s", r.gotTimeout)
			}
		})
	}
}

func TestExecTruncatesOutputTo10KiB(t *testing.T) {
	big := []byte(strings.Repeat("x", 30<<10))
	r := &stubRunner{out: big, err: &cri.ExecExitError{Code: 1}}
	got, output, err := Exec(context.Background(), r, container.ContainerID{ID: "abc"}, []string{"true"}, time.Second)
	if got != Failure || err != nil {
		t.Fatalf("Exec = %q, %v", got, err)
	}
	if len(output) != 10<<10 {
		t.Errorf("output is %d bytes, want %d", len(output), 10<<10)
	}
}
