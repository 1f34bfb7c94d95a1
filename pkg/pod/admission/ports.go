package admission

import (
	v1 "k8s.io/api/core/v1"
)

// bindAll is the host IP a hostPort without hostIP binds: every address.
const bindAll = "0.0.0.0"

type protocolPort struct {
	protocol v1.Protocol
	port     int32
}

// hostPorts are the host ports in use, by host IP.
type hostPorts map[string]map[protocolPort]bool

// podHostPorts lists the ports a pod binds on the host for its whole life: those of its
// containers and of its restartable (sidecar) init containers. Other init containers
// exit before the pod runs, so their ports are not held.
func podHostPorts(pod *v1.Pod) []v1.ContainerPort {
	var ports []v1.ContainerPort
	add := func(c *v1.Container) {
		for _, p := range c.Ports {
			if p.HostPort > 0 {
				ports = append(ports, p)
			}
		}
	}
	for i := range pod.Spec.InitContainers {
		if c := &pod.Spec.InitContainers[i]; c.RestartPolicy != nil && *c.RestartPolicy == v1.ContainerRestartPolicyAlways {
			add(c)
		}
	}
	for i := range pod.Spec.Containers {
		add(&pod.Spec.Containers[i])
	}
	return ports
}

// key fills upstream's defaults: no hostIP is every address, no protocol is TCP.
func key(p v1.ContainerPort) (string, protocolPort) {
	ip, proto := p.HostIP, p.Protocol
	if ip == "" {
		ip = bindAll
	}
	if proto == "" {
		proto = v1.ProtocolTCP
	}
	return ip, protocolPort{proto, p.HostPort}
}

func (h hostPorts) add(p v1.ContainerPort) {
	ip, pp := key(p)
	if h[ip] == nil {
		h[ip] = map[protocolPort]bool{}
	}
	h[ip][pp] = true
}

// conflicts: binding every address clashes with the port on any address; binding one
// address clashes with the same address and with every-address.
func (h hostPorts) conflicts(p v1.ContainerPort) bool {
	ip, pp := key(p)
	if ip == bindAll {
		for _, used := range h {
			if used[pp] {
				return true
			}
		}
		return false
	}
	return h[bindAll][pp] || h[ip][pp]
}

// hostPortsConflict is the scheduler's NodePorts predicate: does the pod want a host port
// (protocol, port, address) another active pod holds? Clashes within the pod itself are
// not checked, as upstream.
func hostPortsConflict(pod *v1.Pod, others []*v1.Pod) bool {
	want := podHostPorts(pod)
	if len(want) == 0 {
		return false
	}
	used := hostPorts{}
	for _, o := range others {
		for _, p := range podHostPorts(o) {
			used.add(p)
		}
	}
	for _, p := range want {
		if used.conflicts(p) {
			return true
		}
	}
	return false
}
