package prober

import (
	"context"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/outage"
	"github.com/nodelet/nodelet/pkg/pod/prober/probe"
	"github.com/nodelet/nodelet/pkg/pod/prober/results"
	"github.com/nodelet/nodelet/pkg/runtime/container"
	"github.com/nodelet/nodelet/pkg/runtime/criconfig"
)

// maxProbeRetries is how often a probe that errors (could not be run at all) is tried
// before the attempt is given up, as upstream.
const maxProbeRetries = 3

// Event reasons, as upstream's pkg/kubelet/events.
const (
	eventUnhealthy    = "Unhealthy"
	eventProbeWarning = "ProbeWarning"
)

// prober runs the probes of all workers and records their events.
type prober struct {
	runner   container.CommandRunner
	http     *probe.HTTPProber
	recorder record.EventRecorder
}

func newProber(runner container.CommandRunner, recorder record.EventRecorder) *prober {
	return &prober{runner: runner, http: probe.NewHTTPProber(), recorder: recorder}
}

// probe runs spec, the worker's copy of the container's probe of the given kind (API
// defaults applied, exec command expanded), and turns the outcome into a result, recording
// an Unhealthy event for a failure. An error means the probe could not be run; the worker
// then ignores the attempt. It logs through ctx's logger, which names the pod, container
// and probe type.
func (pb *prober) probe(ctx context.Context, kind probeType, spec *v1.Probe, pod *v1.Pod, status *v1.PodStatus, c *v1.Container, id container.ContainerID) (results.Result, error) {
	logger := klog.FromContext(ctx)
	result, output, err := pb.runWithRetries(ctx, spec, pod, status, c, id)
	if err != nil {
		if spec.Exec != nil && outage.Down() {
			// The runtime went down under the probe: the gate has said so, once.
			logger.V(3).Info("Probe errored while the container runtime is down", "err", err)
			return results.Failure, err
		}
		logger.V(1).Info("Probe errored", "probeResult", result, "err", err)
		pb.event(pod, c, v1.EventTypeWarning, eventUnhealthy, fmt.Sprintf("%s probe errored and resulted in %s state: %s", kind, result, err))
		return results.Failure, err
	}
	switch result {
	case probe.Success:
		logger.V(3).Info("Probe succeeded")
		return results.Success, nil
	case probe.Warning:
		logger.V(3).Info("Probe succeeded with a warning", "output", output)
		pb.event(pod, c, v1.EventTypeWarning, eventProbeWarning, fmt.Sprintf("%s probe warning: %s", kind, output))
		return results.Success, nil
	case probe.Failure:
		logger.V(1).Info("Probe failed", "output", output)
		pb.event(pod, c, v1.EventTypeWarning, eventUnhealthy, fmt.Sprintf("%s probe failed: %s", kind, output))
		return results.Failure, nil
	default:
		logger.V(1).Info("Probe unknown without error", "probeResult", result)
		return results.Failure, nil
	}
}

func (pb *prober) runWithRetries(ctx context.Context, spec *v1.Probe, pod *v1.Pod, status *v1.PodStatus, c *v1.Container, id container.ContainerID) (probe.Result, string, error) {
	var (
		result probe.Result
		output string
		err    error
	)
	for range maxProbeRetries {
		result, output, err = pb.run(ctx, spec, pod, status, c, id)
		if err == nil {
			break
		}
	}
	return result, output, err
}

// run runs the probe's handler once. Hosts default to the pod IP.
func (pb *prober) run(ctx context.Context, spec *v1.Probe, pod *v1.Pod, status *v1.PodStatus, c *v1.Container, id container.ContainerID) (probe.Result, string, error) {
	timeout := time.Duration(spec.TimeoutSeconds) * time.Second
	switch {
	case spec.Exec != nil:
		return probe.Exec(ctx, pb.runner, id, spec.Exec.Command, timeout)
	case spec.HTTPGet != nil:
		req, err := probe.NewHTTPRequest(spec.HTTPGet, c, status.PodIP)
		if err != nil {
			return probe.Unknown, "", err
		}
		return pb.http.Probe(ctx, req, timeout)
	case spec.TCPSocket != nil:
		port, err := probe.ResolvePort(spec.TCPSocket.Port, c)
		if err != nil {
			return probe.Unknown, "", err
		}
		host := spec.TCPSocket.Host
		if host == "" {
			host = status.PodIP
		}
		return probe.TCP(ctx, host, port, timeout)
	case spec.GRPC != nil:
		service := ""
		if spec.GRPC.Service != nil {
			service = *spec.GRPC.Service
		}
		return probe.GRPC(ctx, status.PodIP, service, int(spec.GRPC.Port), timeout)
	default:
		return probe.Unknown, "", fmt.Errorf("missing probe handler for %s_%s(%s):%s", pod.Name, pod.Namespace, pod.UID, c.Name)
	}
}

// expandStatic expands $(VAR) in cmd with the container's literal env values (upstream's
// ExpandContainerCommandOnlyStatic).
func expandStatic(cmd []string, env []v1.EnvVar) []string {
	values := make(map[string]string, len(env))
	for _, e := range env {
		values[e.Name] = e.Value
	}
	mapping := criconfig.MappingFuncFor(values)
	out := make([]string, len(cmd))
	for i, s := range cmd {
		out[i] = criconfig.Expand(s, mapping)
	}
	return out
}

// event records an event on the container, referenced as upstream's GenerateContainerRef does.
func (pb *prober) event(pod *v1.Pod, c *v1.Container, eventType, reason, message string) {
	if pb.recorder == nil {
		return
	}
	pb.recorder.Event(container.ContainerRef(pod, c), eventType, reason, message)
}
