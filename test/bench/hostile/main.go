// Command hostile measures what a manifest directory full of junk costs nodelet (issue
// 14): it starts nodelet in standalone mode with five valid pods, measures its RSS and
// CPU per quiet minute, writes the bad-input mix of test/hostile (1,000 entries: invalid
// YAML, binary garbage, 5 MiB files, wrong kinds, bad names, symlink loops, …), and
// measures again while the bad entries sit unchanged, with the log bytes per bad entry.
//
//	go run ./test/bench/hostile -endpoint unix:///run/nodelet-e2e/containerd.sock
//
// The runtime must not run pods of anyone else: a kubelet removes pods it does not own.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/uuid"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/pkg/runtime/cri"
	"github.com/nodelet/nodelet/pkg/runtime/criconfig"
	"github.com/nodelet/nodelet/test/hostile"
)

const image = "docker.io/library/busybox:1.36"

func main() {
	endpoint := flag.String("endpoint", "", "CRI endpoint for nodelet")
	bin := flag.String("nodelet", "bin/nodelet", "nodelet binary")
	count := flag.Int("count", 1000, "bad entries")
	baseline := flag.Duration("baseline", 30*time.Second, "window for the baseline CPU figure")
	quiet := flag.Duration("quiet", time.Minute, "window for the CPU figure with the bad entries")
	flag.Parse()
	if err := run(*endpoint, *bin, *count, *baseline, *quiet); err != nil {
		fmt.Fprintln(os.Stderr, "hostile:", err)
		os.Exit(1)
	}
}

func run(endpoint, bin string, count int, baseline, quiet time.Duration) error {
	rs, err := cri.NewRemoteRuntimeService(context.Background(), endpoint, 3*time.Second, 2*time.Minute)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "nodelet-hostile-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	node := "hostile-" + string(uuid.NewUUID())[:6]
	manifests, logPath := filepath.Join(dir, "manifests"), filepath.Join(dir, "nodelet.log")
	cmd, err := startNodelet(bin, endpoint, dir, node, manifests, logPath)
	if err != nil {
		return err
	}
	defer stopNodelet(cmd, rs, node)

	var valid []string
	for i := range 5 {
		name := fmt.Sprintf("valid-%d", i)
		valid = append(valid, name)
		pod := fmt.Sprintf("apiVersion: v1\nkind: Pod\nmetadata:\n  name: %s\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: app\n    image: %s\n    imagePullPolicy: IfNotPresent\n    command: [\"sleep\", \"3600\"]\n", name, image)
		if err := os.WriteFile(filepath.Join(manifests, name+".yaml"), []byte(pod), 0o644); err != nil {
			return err
		}
	}
	if err := waitRunning(rs, node, len(valid), time.Minute); err != nil {
		return err
	}
	time.Sleep(5 * time.Second) // start-up done
	res, err := hostile.Run{
		PID:      cmd.Process.Pid,
		LogBytes: func() int64 { info, _ := os.Stat(logPath); return info.Size() },
		Mix:      hostile.Options{Dir: manifests, Count: count, ValidNames: valid, Image: image, Over: 10 * time.Second},
		Baseline: baseline,
		Settle:   10 * time.Second,
		Quiet:    quiet,
	}.Measure()
	if err != nil {
		return err
	}
	fmt.Printf("nodelet with 5 pods, then %d bad manifest entries written over 10 s (CPU windows %v and %v)\n", len(res.Entries), baseline, quiet)
	for _, line := range strings.Split(res.String(), "\n") {
		fmt.Println("  " + line)
	}
	return nil
}

func startNodelet(bin, endpoint, dir, node, manifests, logPath string) (*exec.Cmd, error) {
	logs := filepath.Join(dir, "logs")
	for _, d := range []string{manifests, logs} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	cfg := filepath.Join(dir, "config.yaml")
	body := fmt.Sprintf("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nstaticPodPath: %s\npodLogsDir: %s\nhealthzPort: 0\n", manifests, logs)
	if err := os.WriteFile(cfg, []byte(body), 0o644); err != nil {
		return nil, err
	}
	log, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "--config="+cfg, "--container-runtime-endpoint="+endpoint,
		"--root-dir="+filepath.Join(dir, "root"), "--hostname-override="+node)
	cmd.Stdout, cmd.Stderr = log, log
	return cmd, cmd.Start()
}

// stopNodelet stops nodelet, then removes every pod it ran.
func stopNodelet(cmd *exec.Cmd, rs internalapi.RuntimeService, node string) {
	_ = cmd.Process.Signal(syscall.SIGTERM)
	_ = cmd.Wait()
	ctx := context.Background()
	sandboxes, _ := rs.ListPodSandbox(ctx, nil)
	for _, sb := range sandboxes {
		if strings.HasSuffix(sb.Labels[criconfig.PodNameLabel], "-"+node) {
			_ = rs.StopPodSandbox(ctx, sb.Id)
			_ = rs.RemovePodSandbox(ctx, sb.Id)
		}
	}
}

func waitRunning(rs internalapi.RuntimeService, node string, want int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		cs, err := rs.ListContainers(context.Background(), &runtimeapi.ContainerFilter{State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING}})
		if err != nil {
			return err
		}
		n := 0
		for _, c := range cs {
			if strings.HasSuffix(c.Labels[criconfig.PodNameLabel], "-"+node) {
				n++
			}
		}
		if n >= want {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("%d valid pods not running after %v", want, timeout)
}
