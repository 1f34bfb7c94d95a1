// Package cli is the standalone command line for people without kubectl: `nodelet pods`
// and `nodelet logs`, reading a running nodelet's local API socket.
package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/duration"

	"github.com/nodelet/nodelet/pkg/api/server"
)

// SocketPath is where a nodelet with this root directory serves its local API.
func SocketPath(rootDir string) string { return filepath.Join(rootDir, "nodelet.sock") }

// Pods prints NAME, PHASE, READY, RESTARTS, AGE, IP for every pod, like `kubectl get pods -o wide`.
func Pods(out io.Writer, socket string, now time.Time) error {
	resp, err := server.LocalClient(socket).Get(server.LocalURL("/pods"))
	if err != nil {
		return fmt.Errorf("cannot reach nodelet at %s: %w", socket, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("nodelet answered %s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	var list v1.PodList
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		return fmt.Errorf("decoding pod list: %w", err)
	}
	tw := tabwriter.NewWriter(out, 0, 4, 3, ' ', 0)
	fmt.Fprintln(tw, "NAMESPACE\tNAME\tPHASE\tREADY\tRESTARTS\tAGE\tIP")
	for _, p := range list.Items {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", p.Namespace, p.Name, phase(&p), ready(&p), restarts(&p), age(&p, now), p.Status.PodIP)
	}
	return tw.Flush()
}

// phase is the pod phase, or the waiting/terminated reason kubectl would show instead.
func phase(p *v1.Pod) string {
	for _, cs := range p.Status.InitContainerStatuses {
		if w := cs.State.Waiting; w != nil && w.Reason != "" && w.Reason != "PodInitializing" {
			return "Init:" + w.Reason
		}
	}
	for _, cs := range p.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil && w.Reason != "" && w.Reason != "ContainerCreating" {
			return w.Reason
		}
	}
	if p.Status.Phase == "" {
		return "Pending"
	}
	return string(p.Status.Phase)
}

func ready(p *v1.Pod) string {
	n := 0
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Ready {
			n++
		}
	}
	return fmt.Sprintf("%d/%d", n, len(p.Spec.Containers))
}

func restarts(p *v1.Pod) int32 {
	var n int32
	for _, cs := range p.Status.ContainerStatuses {
		n += cs.RestartCount
	}
	return n
}

func age(p *v1.Pod, now time.Time) string {
	start := p.CreationTimestamp.Time
	if p.Status.StartTime != nil {
		start = p.Status.StartTime.Time
	}
	if start.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(now.Sub(start))
}

// LogOptions are `nodelet logs` flags.
type LogOptions struct {
	Namespace  string
	Follow     bool
	Previous   bool
	Timestamps bool
	Tail       int64 // -1: all
}

// Logs copies a container's log to out. With no container name the pod must have exactly
// one container, as kubectl requires.
func Logs(out io.Writer, socket, pod, containerName string, o LogOptions) error {
	if containerName == "" {
		name, err := onlyContainer(socket, o.Namespace, pod)
		if err != nil {
			return err
		}
		containerName = name
	}
	q := url.Values{}
	if o.Follow {
		q.Set("follow", "true")
	}
	if o.Previous {
		q.Set("previous", "true")
	}
	if o.Timestamps {
		q.Set("timestamps", "true")
	}
	if o.Tail >= 0 {
		q.Set("tailLines", strconv.FormatInt(o.Tail, 10))
	}
	path := fmt.Sprintf("/containerLogs/%s/%s/%s?%s", o.Namespace, pod, containerName, q.Encode())
	resp, err := server.LocalClient(socket).Get(server.LocalURL(path))
	if err != nil {
		return fmt.Errorf("cannot reach nodelet at %s: %w", socket, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("%s", strings.TrimSpace(string(body)))
	}
	_, err = io.Copy(out, resp.Body)
	return err
}

func onlyContainer(socket, namespace, pod string) (string, error) {
	resp, err := server.LocalClient(socket).Get(server.LocalURL("/pods"))
	if err != nil {
		return "", fmt.Errorf("cannot reach nodelet at %s: %w", socket, err)
	}
	defer resp.Body.Close()
	var list v1.PodList
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		return "", err
	}
	for _, p := range list.Items {
		if p.Name != pod || p.Namespace != namespace {
			continue
		}
		if len(p.Spec.Containers) != 1 {
			names := make([]string, 0, len(p.Spec.Containers))
			for _, c := range p.Spec.Containers {
				names = append(names, c.Name)
			}
			return "", fmt.Errorf("a container name must be specified for pod %s, choose one of: %v", pod, names)
		}
		return p.Spec.Containers[0].Name, nil
	}
	return "", fmt.Errorf("pod %q not found in namespace %q", pod, namespace)
}
