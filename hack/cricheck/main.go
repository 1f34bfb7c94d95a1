// Command cricheck asks a CRI runtime what it offers beyond the basics nodelet needs:
// its version, the RuntimeConfig call (cgroup driver) and the GetContainerEvents stream.
// With the stream open it runs one short-lived busybox container and reports the events
// that arrive for it and how long after the container's exit the exit event came.
//
//	go run ./hack/cricheck -endpoint unix:///run/nodelet-dev2/containerd.sock
//
// It exits 1 when a call fails, or when -require-events is set and the runtime does not
// stream events (containerd 1.6 answers Unimplemented; containerd 2.x streams them).
// hack/runtime.sh check runs it against the rig.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func main() {
	endpoint := flag.String("endpoint", os.Getenv("CONTAINER_RUNTIME_ENDPOINT"), "CRI socket (unix:///...)")
	image := flag.String("image", "docker.io/library/busybox:1.36", "image of the test container (must be present)")
	requireEvents := flag.Bool("require-events", false, "fail when the runtime does not stream container events")
	timeout := flag.Duration("timeout", 60*time.Second, "overall deadline")
	flag.Parse()
	if *endpoint == "" {
		fail(errors.New("no endpoint: pass -endpoint or set CONTAINER_RUNTIME_ENDPOINT"))
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if err := run(ctx, *endpoint, *image, *requireEvents); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "cricheck:", err)
	os.Exit(1)
}

func run(ctx context.Context, endpoint, image string, requireEvents bool) error {
	conn, err := grpc.NewClient(endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	rt := runtimeapi.NewRuntimeServiceClient(conn)

	v, err := rt.Version(ctx, &runtimeapi.VersionRequest{})
	if err != nil {
		return fmt.Errorf("version: %w", err)
	}
	fmt.Printf("runtime: %s %s, CRI %s\n", v.RuntimeName, v.RuntimeVersion, v.RuntimeApiVersion)

	if err := reportRuntimeConfig(ctx, rt); err != nil {
		return err
	}

	streamCtx, stopStream := context.WithCancel(ctx)
	defer stopStream()
	events, err := openEvents(streamCtx, rt)
	if err != nil {
		return err
	}
	if events == nil {
		fmt.Println("GetContainerEvents: unimplemented (a kubelet has to relist)")
		if requireEvents {
			return errors.New("the runtime does not stream container events")
		}
		return nil
	}
	return watchOneContainer(ctx, rt, events, image)
}

// reportRuntimeConfig prints the cgroup driver the runtime reports, if it implements the call.
func reportRuntimeConfig(ctx context.Context, rt runtimeapi.RuntimeServiceClient) error {
	rc, err := rt.RuntimeConfig(ctx, &runtimeapi.RuntimeConfigRequest{})
	if status.Code(err) == codes.Unimplemented {
		fmt.Println("RuntimeConfig: unimplemented (a kubelet has to be told the cgroup driver)")
		return nil
	}
	if err != nil {
		return fmt.Errorf("RuntimeConfig: %w", err)
	}
	fmt.Printf("RuntimeConfig: cgroup driver %s\n", rc.GetLinux().GetCgroupDriver())
	return nil
}

// openEvents opens the event stream and returns a channel of its events; nil when the
// runtime does not implement it. Errors of an open stream show up on the first Recv, so
// the first message (or error) is awaited briefly before declaring the stream open.
func openEvents(ctx context.Context, rt runtimeapi.RuntimeServiceClient) (<-chan *runtimeapi.ContainerEventResponse, error) {
	stream, err := rt.GetContainerEvents(ctx, &runtimeapi.GetEventsRequest{})
	if err != nil {
		return nil, fmt.Errorf("GetContainerEvents: %w", err)
	}
	ch := make(chan *runtimeapi.ContainerEventResponse, 64)
	errc := make(chan error, 1)
	go func() {
		defer close(ch)
		for {
			ev, err := stream.Recv()
			if err != nil {
				errc <- err
				return
			}
			ch <- ev
		}
	}()
	select {
	case err := <-errc:
		if status.Code(err) == codes.Unimplemented {
			return nil, nil
		}
		return nil, fmt.Errorf("GetContainerEvents: %w", err)
	case <-time.After(300 * time.Millisecond):
		// No error: the stream is open (and idle, or its events wait in ch).
		fmt.Println("GetContainerEvents: stream open")
		return ch, nil
	}
}

// watchOneContainer runs a pod whose container exits on its own with code 3 and waits
// for its created, started and stopped events.
func watchOneContainer(ctx context.Context, rt runtimeapi.RuntimeServiceClient, events <-chan *runtimeapi.ContainerEventResponse, image string) error {
	logDir, err := os.MkdirTemp("", "cricheck-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(logDir)
	uid := fmt.Sprintf("cricheck-%d-%d", os.Getpid(), time.Now().UnixNano())
	podConfig := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: "cricheck", Namespace: "default", Uid: uid},
		LogDirectory: logDir,
	}
	pod, err := rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: podConfig})
	if err != nil {
		return fmt.Errorf("RunPodSandbox: %w", err)
	}
	defer removePod(rt, pod.PodSandboxId)

	created, err := rt.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{
		PodSandboxId: pod.PodSandboxId,
		Config: &runtimeapi.ContainerConfig{
			Metadata: &runtimeapi.ContainerMetadata{Name: "exits"},
			Image:    &runtimeapi.ImageSpec{Image: image},
			// The container reports its own end time: the exit event's delay is measured from it.
			Command: []string{"sh", "-c", "sleep 0.5; exit 3"},
			LogPath: "exits.log",
		},
		SandboxConfig: podConfig,
	})
	if err != nil {
		return fmt.Errorf("CreateContainer: %w", err)
	}
	if _, err := rt.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: created.ContainerId}); err != nil {
		return fmt.Errorf("StartContainer: %w", err)
	}
	return awaitEvents(ctx, events, created.ContainerId)
}

// awaitEvents prints the events for containerID until its stopped event arrives.
func awaitEvents(ctx context.Context, events <-chan *runtimeapi.ContainerEventResponse, containerID string) error {
	var seen []string
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("no stopped event for container %s (saw: %s): %w", containerID, strings.Join(seen, ", "), ctx.Err())
		case ev, ok := <-events:
			if !ok {
				return fmt.Errorf("the event stream ended (saw: %s)", strings.Join(seen, ", "))
			}
			if ev.ContainerId != containerID {
				continue
			}
			seen = append(seen, ev.ContainerEventType.String())
			if ev.ContainerEventType != runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT {
				continue
			}
			fmt.Printf("events for the test container: %s\n", strings.Join(seen, ", "))
			return reportExit(ev, containerID)
		}
	}
}

// reportExit checks the stopped event's container status and prints the exit-to-event delay.
func reportExit(ev *runtimeapi.ContainerEventResponse, containerID string) error {
	received := time.Now()
	for _, st := range ev.ContainersStatuses {
		if st.Id != containerID {
			continue
		}
		if st.State != runtimeapi.ContainerState_CONTAINER_EXITED || st.ExitCode != 3 {
			return fmt.Errorf("stopped event: state %s exit code %d, want CONTAINER_EXITED 3", st.State, st.ExitCode)
		}
		delay := received.Sub(time.Unix(0, st.FinishedAt))
		fmt.Printf("exit code %d, stopped event received %v after the exit\n", st.ExitCode, delay.Round(time.Millisecond))
		return nil
	}
	return errors.New("the stopped event carries no status for the container")
}

// removePod stops and removes the test pod with a fresh deadline, so that cleanup also
// runs after the overall deadline has passed.
func removePod(rt runtimeapi.RuntimeServiceClient, id string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id}); err != nil {
		fmt.Fprintln(os.Stderr, "cricheck: StopPodSandbox:", err)
	}
	if _, err := rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id}); err != nil {
		fmt.Fprintln(os.Stderr, "cricheck: RemovePodSandbox:", err)
	}
}
