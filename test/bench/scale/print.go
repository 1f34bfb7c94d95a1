package main

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"text/tabwriter"
)

// printResults prints, per node count, the nodes' request rate, the control plane's CPU
// and the kubelets' own, nodelet against upstream; then the requests itemised at the
// largest count.
func printResults(o options, nodelet, upstream []measurement) {
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(w, "nodes\tpods\trequests/min nodelet\tupstream\tratio\tcontrol plane CPU %% above idle, nodelet\tupstream\tratio\tkubelets' CPU %% nodelet\tupstream\tratio\t\n")
	for i := range nodelet {
		n, u := nodelet[i], upstream[i]
		nr, ur := perMinute(n.requests.Total(), n.window), perMinute(u.requests.Total(), u.window)
		ncp, ucp := n.cpCPU/n.window.Seconds()-n.cpIdle, u.cpCPU/u.window.Seconds()-u.cpIdle
		nk, uk := n.kubeletCPU/n.window.Seconds(), u.kubeletCPU/u.window.Seconds()
		fmt.Fprintf(w, "%d\t%d\t%.0f\t%.0f\t%s\t%.1f\t%.1f\t%s\t%.1f\t%.1f\t%s\t\n", n.nodes, n.running,
			nr, ur, ratio(nr, ur), 100*ncp, 100*ucp, ratio(ncp, ucp), 100*nk, 100*uk, ratio(nk, uk))
	}
	w.Flush()
	if len(nodelet) == 0 {
		return
	}
	n, u := nodelet[len(nodelet)-1], upstream[len(upstream)-1]
	fmt.Printf("\nrequests per node per minute, itemised, %d nodes with %d pods each (idle window %v):\n", n.nodes, o.pods, o.window)
	nk, uk := n.requests, u.requests
	kinds := sortedKeys(nk, uk)
	w = tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(w, "request\tnodelet\tupstream\t\n")
	for _, k := range kinds {
		fmt.Fprintf(w, "%s\t%.2f\t%.2f\t\n", k, perNodeMinute(nk[k], n), perNodeMinute(uk[k], u))
	}
	fmt.Fprintf(w, "total\t%.2f\t%.2f\t\n", perNodeMinute(n.requests.Total(), n), perNodeMinute(u.requests.Total(), u))
	w.Flush()
}

func perNodeMinute(count int, m measurement) float64 {
	return perMinute(count, m.window) / float64(m.nodes)
}

func ratio(a, b float64) string {
	if b <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", a/b)
}

// sortedKeys is every key of the maps, sorted.
func sortedKeys(ms ...map[string]int) []string {
	set := map[string]int{}
	for _, m := range ms {
		maps.Copy(set, m)
	}
	return slices.Sorted(maps.Keys(set))
}
