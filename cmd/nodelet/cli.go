package main

import (
	"time"

	"github.com/spf13/cobra"

	"github.com/nodelet/nodelet/pkg/api/cli"
	"github.com/nodelet/nodelet/pkg/config"
)

// newPodsCommand: `nodelet pods` lists the pods a running nodelet has.
func newPodsCommand() *cobra.Command {
	rootDir := config.DefaultRootDir
	cmd := &cobra.Command{
		Use:   "pods",
		Short: "List the pods of a running nodelet (standalone mode, no kubectl needed)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return cli.Pods(cmd.OutOrStdout(), cli.SocketPath(rootDir), time.Now())
		},
	}
	cmd.Flags().StringVar(&rootDir, "root-dir", rootDir, "the --root-dir of the nodelet to ask")
	return cmd
}

// newLogsCommand: `nodelet logs POD [CONTAINER]` prints a container's log.
func newLogsCommand() *cobra.Command {
	rootDir := config.DefaultRootDir
	o := cli.LogOptions{Namespace: "default", Tail: -1}
	cmd := &cobra.Command{
		Use:   "logs POD [CONTAINER]",
		Short: "Print a container's log from a running nodelet",
		Args:  cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			container := ""
			if len(args) == 2 {
				container = args[1]
			}
			return cli.Logs(cmd.OutOrStdout(), cli.SocketPath(rootDir), args[0], container, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&rootDir, "root-dir", rootDir, "the --root-dir of the nodelet to ask")
	f.StringVarP(&o.Namespace, "namespace", "n", o.Namespace, "the pod's namespace")
	f.BoolVarP(&o.Follow, "follow", "f", false, "stream new lines until the container stops")
	f.BoolVarP(&o.Previous, "previous", "p", false, "the previous instance of the container")
	f.BoolVar(&o.Timestamps, "timestamps", false, "prefix each line with its RFC3339 timestamp")
	f.Int64Var(&o.Tail, "tail", o.Tail, "lines from the end to show; -1 shows all")
	return cmd
}
