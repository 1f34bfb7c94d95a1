package criconfig

import (
	"errors"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodelet/nodelet/pkg/kubetypes"
)

// masterServiceName is the API server's service in the default namespace:
// every pod gets its variables (KUBERNETES_SERVICE_HOST is what in-cluster
// clients read), even with enableServiceLinks: false.
const masterServiceName = "kubernetes"

// serviceEnv returns the service link variables of the pod's container:
// those of the master service and, with enableServiceLinks, of every service
// of the pod's namespace with a cluster IP. A namespace's own service named
// "kubernetes" wins over the master service.
func serviceEnv(pod *v1.Pod, opts ContainerOptions) (*orderedEnv, error) {
	env := newOrderedEnv()
	src := opts.EnvSources
	if src == nil {
		return env, nil
	}
	// A pod from the API server is started knowing the services exist: without
	// a first list, KUBERNETES_SERVICE_HOST would be silently missing. Static
	// pods may start before the API server does, so they make do.
	if !kubetypes.IsStaticPod(pod) && !src.ServicesSynced() {
		return nil, errors.New("services have not yet been read at least once, cannot construct envvars")
	}
	services, err := linkedServices(src, pod.Namespace, opts.EnableServiceLinks)
	if err != nil {
		return nil, errors.New("failed to list services when setting up env vars")
	}
	for _, s := range services {
		addServiceEnv(env, s)
	}
	return env, nil
}

// linkedServices picks the services whose variables a pod of namespace
// gets, sorted by name.
func linkedServices(src EnvSources, namespace string, enableServiceLinks bool) ([]*v1.Service, error) {
	byName := map[string]*v1.Service{}
	if namespace != metav1.NamespaceDefault || !enableServiceLinks {
		defaults, err := src.ListServices(metav1.NamespaceDefault)
		if err != nil {
			return nil, err
		}
		for _, s := range defaults {
			if s.Name == masterServiceName && isServiceIPSet(s) {
				byName[s.Name] = s
			}
		}
	}
	if enableServiceLinks {
		local, err := src.ListServices(namespace)
		if err != nil {
			return nil, err
		}
		for _, s := range local {
			if isServiceIPSet(s) {
				byName[s.Name] = s
			}
		}
	}
	names := slices.Sorted(maps.Keys(byName))
	out := make([]*v1.Service, len(names))
	for i, name := range names {
		out[i] = byName[name]
	}
	return out, nil
}

// isServiceIPSet excludes headless services (None) and those without a
// cluster IP (ExternalName).
func isServiceIPSet(s *v1.Service) bool {
	return s.Spec.ClusterIP != v1.ClusterIPNone && s.Spec.ClusterIP != ""
}

// addServiceEnv adds the variables of one service, named as upstream's (and
// Docker links'): <SVC>_SERVICE_HOST, <SVC>_SERVICE_PORT[_<PORTNAME>], and
// <SVC>_PORT, <SVC>_PORT_<port>_<PROTO>[_PROTO|_PORT|_ADDR].
func addServiceEnv(env *orderedEnv, s *v1.Service) {
	if len(s.Spec.Ports) == 0 {
		return // validation requires a port for a service with a cluster IP
	}
	prefix := envVarName(s.Name)
	ip := s.Spec.ClusterIP
	env.set(prefix+"_SERVICE_HOST", ip)
	env.set(prefix+"_SERVICE_PORT", strconv.Itoa(int(s.Spec.Ports[0].Port)))
	for _, p := range s.Spec.Ports {
		if p.Name != "" {
			env.set(prefix+"_SERVICE_PORT_"+envVarName(p.Name), strconv.Itoa(int(p.Port)))
		}
	}
	for i, p := range s.Spec.Ports {
		protocol := string(v1.ProtocolTCP)
		if p.Protocol != "" {
			protocol = string(p.Protocol)
		}
		port := strconv.Itoa(int(p.Port))
		url := strings.ToLower(protocol) + "://" + net.JoinHostPort(ip, port)
		if i == 0 {
			env.set(prefix+"_PORT", url)
		}
		portPrefix := prefix + "_PORT_" + port + "_" + strings.ToUpper(protocol)
		env.set(portPrefix, url)
		env.set(portPrefix+"_PROTO", strings.ToLower(protocol))
		env.set(portPrefix+"_PORT", port)
		env.set(portPrefix+"_ADDR", ip)
	}
}

// envVarName turns a service or port name into its variable form: "my-svc"
// → "MY_SVC".
func envVarName(name string) string {
	return strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}
