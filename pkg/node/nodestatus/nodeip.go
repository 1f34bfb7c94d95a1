package nodestatus

import (
	"errors"
	"fmt"
	"net"

	utilnet "k8s.io/apimachinery/pkg/util/net"
	nodeutil "k8s.io/component-helpers/node/util"
	netutils "k8s.io/utils/net"
)

// ParseNodeIPs parses --node-ip: empty, one address, or a dual-stack pair. "0.0.0.0" and
// "::" are kept: they ask for auto-detection in that address family.
func ParseNodeIPs(flag string) ([]net.IP, error) {
	if flag == "" {
		return nil, nil
	}
	ips, invalid, err := nodeutil.ParseNodeIPArgument(flag, "")
	if err != nil {
		return nil, err
	}
	if len(invalid) > 0 {
		return nil, fmt.Errorf("could not parse --node-ip %q", flag)
	}
	return ips, nil
}

// ValidateNodeIP checks that ip can be a node address: a unicast address that is
// configured on one of this host's interfaces (upstream's validateNodeIP).
func ValidateNodeIP(ip net.IP) error {
	switch {
	case ip.To4() == nil && ip.To16() == nil:
		return errors.New("nodeIP must be a valid IP address")
	case ip.IsLoopback():
		return errors.New("nodeIP can't be loopback address")
	case ip.IsMulticast():
		return errors.New("nodeIP can't be a multicast address")
	case ip.IsLinkLocalUnicast():
		return errors.New("nodeIP can't be a link-local unicast address")
	case ip.IsUnspecified():
		return errors.New("nodeIP can't be an all zeros address")
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return err
	}
	for _, a := range addrs {
		var local net.IP
		switch v := a.(type) {
		case *net.IPNet:
			local = v.IP
		case *net.IPAddr:
			local = v.IP
		}
		if local != nil && local.Equal(ip) {
			return nil
		}
	}
	return fmt.Errorf("node IP: %q not found in the host's network interfaces", ip.String())
}

// ipResolver finds the node's addresses; its functions are the host's in production and
// fakes in tests.
type ipResolver struct {
	validate func(net.IP) error
	lookup   func(host string) ([]net.IP, error)
	// hostInterface is utilnet.ResolveBindAddress: the default-route interface's address
	// of the family of its argument (IPv4 when nil).
	hostInterface func(net.IP) (net.IP, error)
}

func hostResolver() ipResolver {
	return ipResolver{validate: ValidateNodeIP, lookup: net.LookupIP, hostInterface: utilnet.ResolveBindAddress}
}

func specified(ip net.IP) bool { return ip != nil && !ip.IsUnspecified() }

// resolve returns the node's InternalIPs as upstream's NodeAddress setter picks them:
// both configured addresses of a dual-stack --node-ip; else the configured address;
// else hostname when it is an IP; else the node name's DNS addresses that belong to
// this host (preferring the configured family, IPv4 by default); else the address of
// the interface holding the default route.
func (r ipResolver) resolve(nodeName, hostname string, configured []net.IP) ([]net.IP, error) {
	if err := r.validateConfigured(configured); err != nil {
		return nil, err
	}
	return r.choose(nodeName, hostname, configured)
}

// validateConfigured checks the specified addresses of --node-ip.
func (r ipResolver) validateConfigured(configured []net.IP) error {
	primary, secondary := split(configured)
	if specified(primary) {
		if err := r.validate(primary); err != nil {
			return fmt.Errorf("failed to validate nodeIP: %v", err)
		}
	}
	if specified(secondary) {
		if err := r.validate(secondary); err != nil {
			return fmt.Errorf("failed to validate secondaryNodeIP: %v", err)
		}
	}
	return nil
}

func split(ips []net.IP) (primary, secondary net.IP) {
	if len(ips) > 0 {
		primary = ips[0]
	}
	if len(ips) > 1 {
		secondary = ips[1]
	}
	return primary, secondary
}

// choose picks the addresses once the configured ones are known to be valid.
func (r ipResolver) choose(nodeName, hostname string, configured []net.IP) ([]net.IP, error) {
	primary, secondary := split(configured)
	switch {
	case specified(primary) && specified(secondary):
		return []net.IP{primary, secondary}, nil
	case specified(primary):
		return []net.IP{primary}, nil
	}
	if ip := netutils.ParseIPSloppy(hostname); ip != nil {
		return []net.IP{ip}, nil
	}
	preferIPv4 := primary == nil || primary.To4() != nil
	var chosen net.IP
	var err error
	addrs, _ := r.lookup(nodeName)
	for _, a := range addrs {
		if err = r.validate(a); err != nil {
			continue
		}
		if (a.To4() != nil) == preferIPv4 {
			chosen = a
			break
		}
		if chosen == nil {
			chosen = a
		}
	}
	if chosen == nil {
		chosen, err = r.hostInterface(primary)
	}
	if chosen == nil {
		return nil, fmt.Errorf("can't get ip address of node %s. error: %v", nodeName, err)
	}
	return []net.IP{chosen}, nil
}

// HostIPs is the node's addresses for pods' status.hostIPs and DNS in any mode: the
// addresses node status reports; failing that the configured ones as given, or the
// loopback address when the host has no other.
func HostIPs(nodeName, hostname string, configured []net.IP) []net.IP {
	ips, err := hostResolver().resolve(nodeName, hostname, configured)
	if err == nil {
		return ips
	}
	var given []net.IP
	for _, ip := range configured {
		if specified(ip) {
			given = append(given, ip)
		}
	}
	if len(given) > 0 {
		return given
	}
	if len(configured) > 0 && configured[0].To4() == nil {
		return []net.IP{net.IPv6loopback}
	}
	return []net.IP{net.ParseIP("127.0.0.1")}
}
