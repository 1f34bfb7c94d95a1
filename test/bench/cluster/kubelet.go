package main

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nodelet/nodelet/test/internal/host"
)

// kubelet is one kubelet under test, nodelet or upstream's, with what it owns: a rig
// (containerd), a Node of the control plane, a namespace for its pods, a directory (root
// dir, logs, config, kubeconfig) and a cgroup root.
type kubelet struct {
	name      string // "nodelet" or "upstream"
	bin       string
	node      string
	namespace string
	rig       *rig
	dir       string
	// cgroupRoot is the kubelet's cgroupRoot, without the leading slash.
	cgroupRoot string
	// port is where it serves the kubelet API (HTTPS), picked free at start.
	port int
	cmd  *exec.Cmd
	done chan struct{}
}

func (k *kubelet) rootDir() string    { return filepath.Join(k.dir, "root") }
func (k *kubelet) logsDir() string    { return filepath.Join(k.dir, "logs") }
func (k *kubelet) logFile() string    { return filepath.Join(k.dir, k.name+".log") }
func (k *kubelet) configFile() string { return filepath.Join(k.dir, "config.yaml") }
func (k *kubelet) kubeconfig() string { return filepath.Join(k.dir, "kubelet.kubeconfig") }

// config is the KubeletConfiguration both kubelets get, with their own paths and ports.
// The fields nodelet does not act on (failCgroupV1, ...) it accepts with a warning; they
// are there so that both read the same file. The kubelet API trusts client certificates
// of the control plane's CA (clientCAFile) and asks the API server about bearer tokens
// and every request's authorization: the v1beta1 defaults, written out.
func (k *kubelet) config(enableServer bool, clientCAFile string) (string, error) {
	ports, err := freePorts(2)
	if err != nil {
		return "", err
	}
	k.port = ports[0]
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
containerRuntimeEndpoint: %s
cgroupRoot: /%s
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
enableServer: %t
port: %d
readOnlyPort: 0
healthzPort: %d
podLogsDir: %s
volumePluginDir: %s
authentication:
  x509:
    clientCAFile: %s
  webhook:
    enabled: true
  anonymous:
    enabled: false
authorization:
  mode: Webhook
`, k.rig.endpoint, k.cgroupRoot, enableServer, ports[0], ports[1], k.logsDir(),
		filepath.Join(k.rootDir(), "volume-plugins"), clientCAFile), nil
}

// freePorts asks the kernel for n unused loopback ports: the machine runs other
// kubelets, and upstream's defaults (10248, 10250) may be taken.
func freePorts(n int) ([]int, error) {
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// start writes the config and runs the kubelet with the command line both accept.
func (k *kubelet) start(enableServer bool, clientCAFile string, verbosity int, extraArgs []string) error {
	for _, d := range []string{k.rootDir(), k.logsDir()} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	if err := host.MakeCgroupRoot(k.cgroupRoot); err != nil {
		return err
	}
	cfg, err := k.config(enableServer, clientCAFile)
	if err != nil {
		return err
	}
	if err := os.WriteFile(k.configFile(), []byte(cfg), 0o644); err != nil {
		return err
	}
	log, err := os.Create(k.logFile())
	if err != nil {
		return err
	}
	defer log.Close()
	k.cmd = exec.Command(k.bin, "--config="+k.configFile(), "--kubeconfig="+k.kubeconfig(),
		"--root-dir="+k.rootDir(), "--cert-dir="+filepath.Join(k.rootDir(), "pki"),
		"--hostname-override="+k.node, "--v="+strconv.Itoa(verbosity))
	k.cmd.Args = append(k.cmd.Args, extraArgs...)
	k.cmd.Stdout, k.cmd.Stderr = log, log
	// Its own process group: a Ctrl-C reaches the bench only, which then stops the
	// kubelets and cleans up after them.
	k.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := k.cmd.Start(); err != nil {
		return err
	}
	k.done = make(chan struct{})
	go func() { _ = k.cmd.Wait(); close(k.done) }()
	return nil
}

// exited reports an error if the kubelet has exited.
func (k *kubelet) exited() error {
	select {
	case <-k.done:
		return fmt.Errorf("%s exited (%v); see %s", k.name, k.cmd.ProcessState, k.logFile())
	default:
		return nil
	}
}

// stop stops the kubelet process (SIGTERM, SIGKILL after 15 s). Its pods keep running.
func (k *kubelet) stop() {
	if k.cmd == nil || k.cmd.Process == nil {
		return
	}
	_ = k.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-k.done:
	case <-time.After(15 * time.Second):
		_ = k.cmd.Process.Kill()
		<-k.done
	}
}

// usage is a process's CPU time and resident memory at one moment.
type usage struct {
	at            time.Time
	cpu, children time.Duration // utime+stime; cutime+cstime of waited-for children
	rssMiB        float64
	// anonMiB and fileMiB split rssMiB into heap/stacks and mapped files (the binary).
	anonMiB, fileMiB float64
}

func (k *kubelet) usage() (usage, error) { return processUsage(k.cmd.Process.Pid) }

func processUsage(pid int) (usage, error) {
	u := usage{at: time.Now()}
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return u, err
	}
	// Fields after the command name, which is in parentheses and may contain spaces;
	// utime is field 14 of the line, the 12th after the name.
	f := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+2:]))
	ticks := func(i int) time.Duration {
		n, _ := strconv.ParseInt(f[i], 10, 64)
		const userHZ = 100
		return time.Duration(n) * time.Second / userHZ
	}
	u.cpu, u.children = ticks(11)+ticks(12), ticks(13)+ticks(14)
	u.rssMiB, u.anonMiB, u.fileMiB, err = memoryMiB(pid)
	return u, err
}

// memoryMiB reads VmRSS and its anonymous and file-backed parts (RssAnon, RssFile: the
// latter is mostly the binary's own pages) from /proc/<pid>/status.
func memoryMiB(pid int) (rss, anon, file float64, err error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, 0, err
	}
	defer f.Close()
	fields := map[string]*float64{"VmRSS:": &rss, "RssAnon:": &anon, "RssFile:": &file}
	found := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.Fields(sc.Text())
		if len(line) < 2 || fields[line[0]] == nil {
			continue
		}
		kb, err := strconv.ParseFloat(line[1], 64)
		if err != nil {
			return 0, 0, 0, err
		}
		*fields[line[0]] = kb / 1024
		found++
	}
	if found != len(fields) {
		return 0, 0, 0, fmt.Errorf("/proc/%d/status: no VmRSS, RssAnon or RssFile", pid)
	}
	return rss, anon, file, sc.Err()
}
