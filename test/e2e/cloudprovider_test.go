//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net"
	"slices"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
)

// hostUnicastIPv4 is an IPv4 address configured on one of this host's interfaces that a
// node may use (not loopback, not link-local).
func hostUnicastIPv4(t *testing.T) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() && !n.IP.IsLinkLocalUnicast() {
			return n.IP.String()
		}
	}
	t.Skip("no non-loopback IPv4 address on this host")
	return ""
}

// With --cloud-provider=external the node registers tainted uninitialized and announces the
// IP it was given for the cloud controller manager; once a CCM (played by the test) has
// removed the taint and set the addresses and provider ID, nodelet's status updates keep
// them.
func TestClusterExternalCloudProvider(t *testing.T) {
	ip := hostUnicastIPv4(t)
	c := startClusterNode(t, clusterOptions{args: []string{"--cloud-provider=external", "--node-ip=" + ip},
		config: "nodeStatusUpdateFrequency: 1s\n"})
	ctx := context.Background()
	const taint = "node.cloudprovider.kubernetes.io/uninitialized"
	eventually(t, 20*time.Second, "node registered", func() error { _, err := c.node(t); return err })
	node, err := c.node(t)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(node.Spec.Taints, func(tt v1.Taint) bool {
		return tt.Key == taint && tt.Value == "true" && tt.Effect == v1.TaintEffectNoSchedule
	}) {
		t.Errorf("taints %v, want %s=true:NoSchedule", node.Spec.Taints, taint)
	}
	eventually(t, 20*time.Second, "the provided-node-ip annotation", func() error {
		n, err := c.node(t)
		if err != nil {
			return err
		}
		if got := n.Annotations["alpha.kubernetes.io/provided-node-ip"]; got != ip {
			return fmt.Errorf("annotation %q, want %q", got, ip)
		}
		return nil
	})

	// The CCM initialises the node.
	ccmAddresses := []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: ip}, {Type: v1.NodeExternalIP, Address: "203.0.113.7"},
		{Type: v1.NodeHostName, Address: c.name}}
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := c.node(t)
		if err != nil {
			return err
		}
		n.Spec.Taints = slices.DeleteFunc(n.Spec.Taints, func(tt v1.Taint) bool { return tt.Key == taint })
		n.Spec.ProviderID = "test://" + c.name
		_, err = c.admin.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := c.node(t)
		if err != nil {
			return err
		}
		n.Status.Addresses = ccmAddresses
		_, err = c.admin.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	// Several status updates (every second) later, nothing the CCM set has been undone.
	time.Sleep(5 * time.Second)
	n, err := c.node(t)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(n.Status.Addresses, ccmAddresses) {
		t.Errorf("addresses %v, want the CCM's %v", n.Status.Addresses, ccmAddresses)
	}
	if n.Spec.ProviderID != "test://"+c.name || slices.ContainsFunc(n.Spec.Taints, func(tt v1.Taint) bool { return tt.Key == taint }) {
		t.Errorf("providerID %q, taints %v: the CCM's changes were undone", n.Spec.ProviderID, n.Spec.Taints)
	}
	if err := c.nodeReady(t); err != nil {
		t.Errorf("node not Ready: %v", err)
	}
}
