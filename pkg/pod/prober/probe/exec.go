package probe

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	utilexec "k8s.io/utils/exec"

	"github.com/nodelet/nodelet/pkg/runtime/container"
	"github.com/nodelet/nodelet/pkg/runtime/cri"
)

// Exec runs cmd in the container: exit code 0 passes, any other fails, and so does running
// past timeout. Any other error (the container is gone, the runtime does not answer) is
// Unknown. The output, stdout then stderr, is cut to 10 KiB.
func Exec(ctx context.Context, runner container.CommandRunner, id container.ContainerID, cmd []string, timeout time.Duration) (Result, string, error) {
	out, err := runner.RunInContainer(ctx, id, cmd, timeout)
	output := truncate(out)
	if err == nil {
		return Success, output, nil
	}
	var exit utilexec.ExitError
	if errors.As(err, &exit) {
		if exit.ExitStatus() == 0 {
			return Success, output, nil
		}
		return Failure, output, nil
	}
	if errors.Is(err, cri.ErrCommandTimedOut) {
		// A timed-out command leaves no output; say what happened instead, as upstream does.
		return Failure, fmt.Sprintf("command %q timed out", strings.Join(cmd, " ")), nil
	}
	return Unknown, "", err
}
