// Package app is nodelet's start-up sequence (upstream's cmd/kubelet/app run): take the
// lock, connect to the runtime, prepare directories, serve healthz, run until stopped.
package app

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"
	kubeletconfig "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/pkg/api/kubeletserver"
	"github.com/nodelet/nodelet/pkg/api/server"
	"github.com/nodelet/nodelet/pkg/config"
	"github.com/nodelet/nodelet/pkg/lockfile"
	"github.com/nodelet/nodelet/pkg/metrics"
	"github.com/nodelet/nodelet/pkg/node/deviceplugin"
	"github.com/nodelet/nodelet/pkg/node/nodeshutdown"
	"github.com/nodelet/nodelet/pkg/node/sdnotify"
	"github.com/nodelet/nodelet/pkg/outage"
	"github.com/nodelet/nodelet/pkg/pod/kubelet"
	"github.com/nodelet/nodelet/pkg/pod/pleg"
	"github.com/nodelet/nodelet/pkg/runtime/cri"
	"github.com/nodelet/nodelet/pkg/runtime/imagegc"
)

const (
	// runtimeConnectTimeout bounds the first contact with the runtime, so a missing or
	// dead socket is reported within seconds rather than after runtimeRequestTimeout.
	runtimeConnectTimeout = 3 * time.Second
	// runtimeStatusPeriod is how often the runtime's health is polled.
	runtimeStatusPeriod = time.Second
	// legacyContainerLogsDir holds the /var/log/containers symlinks log shippers read.
	legacyContainerLogsDir = "/var/log/containers"
)

// Run starts nodelet and blocks until ctx ends or lock contention asks it to step aside.
// Containers are left running when it returns.
func Run(ctx context.Context, opts *config.Options) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	setGCPercent(os.Getenv)
	trimDelay, trim, err := binaryTrimDelay(os.Getenv(binaryTrimEnv))
	if err != nil {
		return err
	}
	if err := checkSwap(*opts.Config.FailSwapOn, "/proc/swaps"); err != nil {
		return err
	}
	ownProcess.apply(opts.Config)
	if opts.LockFilePath != "" {
		release, err := takeLock(opts, cancel)
		if err != nil {
			return err
		}
		defer release()
	}
	name, err := nodeName(opts)
	if err != nil {
		return err
	}
	// registries.Handler and ProbesHandler serve /metrics and /metrics/probes.
	registries, err := newRegistries(name)
	if err != nil {
		return err
	}
	tp, stopTracing, err := startTracing(ctx, opts, name)
	if err != nil {
		return err
	}
	defer stopTracing()
	runtime, images, err := connectRuntime(ctx, opts, registries.Kubelet, tp)
	if err != nil {
		return err
	}
	defer runtime.Close(context.Background())
	defer images.Close(context.Background())
	if err := makeDirectories(opts); err != nil {
		return err
	}
	state := kubelet.NewRuntimeState(runtime, outage.Default, runtimeStatusPeriod, opts.Config.RuntimeRequestTimeout.Duration)
	// One check before anything reads the state, so the loop does not start by reporting
	// a runtime that has simply not been asked yet.
	state.Update(ctx)
	go state.Run(ctx)
	if err := serveHealthz(ctx, opts, state); err != nil {
		return err
	}
	cl, err := connectCluster(ctx, opts, name, registries.Kubelet)
	if err != nil {
		return err
	}
	if cl != nil {
		defer cl.clients.Stop()
	}
	loop, err := startPodLoop(ctx, opts, name, runtime, images, state, registries, cl, tp)
	if err != nil {
		return err
	}
	klog.InfoS("nodelet started", "rootDir", opts.RootDirectory, "podLogsDir", opts.Config.PodLogsDir)
	if trim {
		scheduleBinaryTrim(ctx, trimDelay)
	}
	if err := notifyServiceManager(ctx, loop.SyncLoopHealthy); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
	case err := <-cl.credentialsRefused(ctx):
		klog.InfoS("nodelet stopping; containers are left running")
		return err
	}
	klog.InfoS("nodelet stopping; containers are left running")
	return nil
}

// newRegistries builds the /metrics, /metrics/probes and /metrics/slis registries with
// every family nodelet registers at start whatever its configuration, as upstream
// registers its own when it starts: pkg/metrics' kubelet_* metrics and collectors, the
// runtime client's, the evented PLEG's, the image garbage collector's, the graceful
// shutdown's, the device plugins', the pod-resources API's and the kubelet API's
// kubelet_http_*. The client and serving certificate metrics come later, with the
// certificate managers that feed them (rotateCertificates, serverTLSBootstrap), as
// upstream's do.
func newRegistries(nodeName string) (*metrics.Registries, error) {
	r, err := metrics.NewRegistries(nodeName)
	if err != nil {
		return nil, err
	}
	// connectRuntime's clients share these.
	if _, err := cri.NewMetrics(r.Kubelet); err != nil {
		return nil, err
	}
	collectors := append(append(pleg.EventedMetrics(), imagegc.ImageGarbageCollectedTotal), nodeshutdown.Collectors()...)
	collectors = append(append(collectors, deviceplugin.Collectors()...), podResourcesMetrics.Collectors()...)
	for _, c := range collectors {
		if err := r.Kubelet.Register(c); err != nil {
			return nil, err
		}
	}
	if err := kubeletserver.RegisterMetrics(r.Kubelet); err != nil {
		return nil, err
	}
	return r, nil
}

// takeLock holds --lock-file and, with --exit-on-lock-contention, stops nodelet when
// another process opens the file.
func takeLock(opts *config.Options, stop context.CancelFunc) (func(), error) {
	klog.InfoS("Acquiring lock file", "path", opts.LockFilePath)
	lock, err := lockfile.Acquire(opts.LockFilePath)
	if err != nil {
		return nil, err
	}
	if opts.ExitOnLockContention {
		contended, err := lockfile.WatchContention(opts.LockFilePath)
		if err != nil {
			lock.Release()
			return nil, err
		}
		go func() {
			<-contended
			klog.InfoS("Lock file contention detected, stepping aside", "path", opts.LockFilePath)
			stop()
		}()
	}
	return func() { lock.Release() }, nil
}

// makeDirectories creates the kubelet's directory tree, as upstream's setupDataDirs does.
func makeDirectories(opts *config.Options) error {
	root := opts.RootDirectory
	dirs := []struct {
		path string
		mode os.FileMode
	}{
		{root, 0o750},
		{filepath.Join(root, "pods"), 0o750},
		{filepath.Join(root, "plugins"), 0o750},
		{filepath.Join(root, "plugins_registry"), 0o750},
		{filepath.Join(root, "pod-resources"), 0o750},
		{opts.Config.PodLogsDir, 0o755},
		{legacyContainerLogsDir, 0o755},
	}
	for _, d := range dirs {
		if err := os.MkdirAll(d.path, d.mode); err != nil {
			return fmt.Errorf("create directory %q: %w", d.path, err)
		}
	}
	return nil
}

// serveHealthz binds the healthz port (0 disables it) and serves it in the background.
func serveHealthz(ctx context.Context, opts *config.Options, state *kubelet.RuntimeState) error {
	port := *opts.Config.HealthzPort
	if port == 0 {
		return nil
	}
	srv, err := server.ListenHealthz(opts.Config.HealthzBindAddress, port,
		server.HealthCheck{Name: "runtime", Check: state.RuntimeErr})
	if err != nil {
		return err
	}
	klog.InfoS("Serving healthz", "address", srv.Addr())
	go srv.Serve(ctx)
	return nil
}

// notifyServiceManager tells systemd (a Type=notify unit) that nodelet runs, and keeps its
// watchdog fed while the sync loop is healthy when the unit sets WatchdogSec, as upstream.
func notifyServiceManager(ctx context.Context, syncLoopHealthy func() error) error {
	if _, err := sdnotify.Notify(sdnotify.Ready); err != nil {
		klog.ErrorS(err, "Failed to notify systemd that nodelet is ready")
	}
	interval, err := sdnotify.WatchdogInterval()
	if err != nil {
		return err
	}
	if interval == 0 {
		klog.V(2).InfoS("Systemd watchdog is not enabled")
		return nil
	}
	go sdnotify.RunWatchdog(ctx, interval, syncLoopHealthy)
	return nil
}

// processLimits are where nodelet sets its own OOM score and open-file limit.
type processLimits struct {
	oomScoreAdjPath string
	setMaxOpenFiles func(n uint64) error
}

// ownProcess is nodelet's own process.
var ownProcess = processLimits{
	oomScoreAdjPath: "/proc/self/oom_score_adj",
	setMaxOpenFiles: func(n uint64) error {
		return unix.Setrlimit(unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: n, Max: n})
	},
}

// apply gives the process oomScoreAdj (default -999: under memory pressure the kernel kills
// pods before the agent that protects them) and maxOpenFiles (default 1000000), as
// upstream's kubelet does at start. A kernel that refuses (no CAP_SYS_RESOURCE) costs an
// error line, not the start.
func (p processLimits) apply(cfg *kubeletconfig.KubeletConfiguration) {
	score := strconv.Itoa(int(ptr.Deref(cfg.OOMScoreAdj, -999)))
	if err := os.WriteFile(p.oomScoreAdjPath, []byte(score), 0o644); err != nil {
		klog.InfoS("Failed to ApplyOOMScoreAdj", "oomScoreAdj", score, "err", err)
	}
	if cfg.MaxOpenFiles > 0 {
		if err := p.setMaxOpenFiles(uint64(cfg.MaxOpenFiles)); err != nil {
			klog.ErrorS(err, "Failed to set rlimit on max file handles", "maxOpenFiles", cfg.MaxOpenFiles)
		}
	}
}

// checkSwap refuses to start with swap enabled unless failSwapOn is false, as upstream.
func checkSwap(failSwapOn bool, procSwaps string) error {
	data, err := os.ReadFile(procSwaps)
	if err != nil {
		return nil // no swap accounting: nothing to check
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) <= 1 {
		return nil // header only: swap is off
	}
	if failSwapOn {
		return fmt.Errorf("running with swap on is not supported, please disable swap or set --fail-swap-on flag to false; /proc/swaps contained: %v", lines[1:])
	}
	klog.InfoS("Swap is on; continuing because failSwapOn is false")
	return nil
}

// nodeName is --hostname-override or the host name, lower-cased as upstream.
func nodeName(opts *config.Options) (string, error) {
	name := opts.HostnameOverride
	if name == "" {
		h, err := os.Hostname()
		if err != nil {
			return "", fmt.Errorf("could not determine the node name: %w", err)
		}
		name = h
	}
	return strings.ToLower(strings.TrimSpace(name)), nil
}
