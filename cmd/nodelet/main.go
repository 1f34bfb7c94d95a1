// Command nodelet is a lean, drop-in Kubernetes node agent. This file only wires the
// command line to the start-up sequence in pkg/app.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/app"
	"github.com/nodelet/nodelet/pkg/config"
	"github.com/nodelet/nodelet/pkg/version"
)

func main() {
	if err := newCommand().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "Error:", err)
		klog.Flush()
		os.Exit(1)
	}
	klog.Flush()
}

func newCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "nodelet",
		Short: "nodelet: a lean, drop-in Kubernetes node agent (kubelet)",
		Long: `nodelet is a Kubernetes node agent that accepts the kubelet's command line and
KubeletConfiguration file and runs pods on a CRI v1 container runtime (containerd, CRI-O).`,
		// Flags are parsed by pkg/config so that the command line can be laid over the
		// config file, as upstream's kubelet does.
		DisableFlagParsing: true,
		SilenceUsage:       true,
		SilenceErrors:      true,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runNodelet(cmd, args)
		},
	}
	cmd.AddCommand(newPodsCommand(), newLogsCommand())
	return cmd
}

func runNodelet(cmd *cobra.Command, args []string) error {
	cl := config.NewCommandLine("nodelet")
	if err := cl.Parse(args); err != nil {
		return err
	}
	if cl.HelpRequested() {
		fmt.Fprintf(cmd.OutOrStdout(), "%s\n\nUsage:\n  nodelet [flags]\n\nFlags:\n%s", cmd.Long, cl.Usage())
		return nil
	}
	switch cl.VersionRequested() {
	case "":
	case "raw":
		fmt.Fprint(cmd.OutOrStdout(), version.Raw())
		return nil
	default:
		fmt.Fprintln(cmd.OutOrStdout(), version.Short())
		return nil
	}
	opts, err := cl.Options()
	if err != nil {
		return err
	}
	if err := app.ApplyLogging(opts); err != nil {
		return err
	}
	for _, w := range cl.Warnings() {
		klog.Warning(w)
	}
	klog.InfoS("Starting nodelet", "version", version.Nodelet, "kubeletVersion", version.KubeletVersion)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	err = app.Run(ctx, opts)
	if err != nil && ctx.Err() != nil {
		// A signal during start-up cancels whatever start-up was waiting for; the error
		// that follows is the stop that was asked for, not a failure (exit 0, as after
		// start-up).
		klog.InfoS("Stopped by a signal during start-up", "err", err)
		return nil
	}
	return err
}
