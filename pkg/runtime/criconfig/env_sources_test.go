package criconfig

import (
	"context"
	"errors"
	"testing"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodelet/nodelet/pkg/kubetypes"
)

// fakeSources is an EnvSources over fixed objects; it counts reads.
type fakeSources struct {
	secrets    []*v1.Secret
	configMaps []*v1.ConfigMap
	services   []*v1.Service
	unsynced   bool
	getErr     error // returned by every Get when set
	listErr    error
	gets       map[string]int // "secret/ns/name" → reads
}

func (f *fakeSources) count(kind, ns, name string) {
	if f.gets == nil {
		f.gets = map[string]int{}
	}
	f.gets[kind+"/"+ns+"/"+name]++
}

func (f *fakeSources) GetSecret(_ context.Context, ns, name string) (*v1.Secret, error) {
	f.count("secret", ns, name)
	if f.getErr != nil {
		return nil, f.getErr
	}
	for _, s := range f.secrets {
		if s.Namespace == ns && s.Name == name {
			return s, nil
		}
	}
	return nil, apierrors.NewNotFound(v1.Resource("secret"), name)
}

func (f *fakeSources) GetConfigMap(_ context.Context, ns, name string) (*v1.ConfigMap, error) {
	f.count("configmap", ns, name)
	if f.getErr != nil {
		return nil, f.getErr
	}
	for _, cm := range f.configMaps {
		if cm.Namespace == ns && cm.Name == name {
			return cm, nil
		}
	}
	return nil, apierrors.NewNotFound(v1.Resource("configmap"), name)
}

func (f *fakeSources) ListServices(ns string) ([]*v1.Service, error) {
	if f.listErr != nil {
		return nil, f.listErr
	}
	var out []*v1.Service
	for _, s := range f.services {
		if s.Namespace == ns {
			out = append(out, s)
		}
	}
	return out, nil
}

func (f *fakeSources) ServicesSynced() bool { return !f.unsynced }

func secretObj(ns, name string, data map[string]string) *v1.Secret {
	s := &v1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string][]byte{}}
	for k, v := range data {
		s.Data[k] = []byte(v)
	}
	return s
}

func configMapObj(ns, name string, data map[string]string) *v1.ConfigMap {
	return &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: data}
}

func service(ns, name, ip string, ports ...v1.ServicePort) *v1.Service {
	return &v1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1.ServiceSpec{ClusterIP: ip, Ports: ports}}
}

func port(name string, number int32, protocol v1.Protocol) v1.ServicePort {
	return v1.ServicePort{Name: name, Port: number, Protocol: protocol}
}

func secretKey(env, name, key string, optional bool) v1.EnvVar {
	return v1.EnvVar{Name: env, ValueFrom: &v1.EnvVarSource{SecretKeyRef: &v1.SecretKeySelector{
		LocalObjectReference: v1.LocalObjectReference{Name: name}, Key: key, Optional: &optional}}}
}

func configMapKey(env, name, key string, optional bool) v1.EnvVar {
	return v1.EnvVar{Name: env, ValueFrom: &v1.EnvVarSource{ConfigMapKeyRef: &v1.ConfigMapKeySelector{
		LocalObjectReference: v1.LocalObjectReference{Name: name}, Key: key, Optional: &optional}}}
}

func fromSecret(name, prefix string, optional bool) v1.EnvFromSource {
	return v1.EnvFromSource{Prefix: prefix, SecretRef: &v1.SecretEnvSource{
		LocalObjectReference: v1.LocalObjectReference{Name: name}, Optional: &optional}}
}

func fromConfigMap(name, prefix string, optional bool) v1.EnvFromSource {
	return v1.EnvFromSource{Prefix: prefix, ConfigMapRef: &v1.ConfigMapEnvSource{
		LocalObjectReference: v1.LocalObjectReference{Name: name}, Optional: &optional}}
}

// The API server's own service, present in every cluster.
var masterService = service("default", "kubernetes", "10.96.0.1", port("https", 443, v1.ProtocolTCP))

const masterEnv = "KUBERNETES_SERVICE_HOST=10.96.0.1 KUBERNETES_SERVICE_PORT=443 KUBERNETES_SERVICE_PORT_HTTPS=443 " +
	"KUBERNETES_PORT=tcp://10.96.0.1:443 KUBERNETES_PORT_443_TCP=tcp://10.96.0.1:443 KUBERNETES_PORT_443_TCP_PROTO=tcp " +
	"KUBERNETES_PORT_443_TCP_PORT=443 KUBERNETES_PORT_443_TCP_ADDR=10.96.0.1"

func TestEnvFromSources(t *testing.T) {
	objects := &fakeSources{
		secrets: []*v1.Secret{
			secretObj("prod", "creds", map[string]string{"user": "admin", "password": "s3cret", "1st.key": "odd"}),
			secretObj("other", "creds", map[string]string{"user": "wrong namespace"}),
		},
		configMaps: []*v1.ConfigMap{
			configMapObj("prod", "conf", map[string]string{"MODE": "fast", "LEVEL": "3", "user": "from-config"}),
			configMapObj("prod", "more", map[string]string{"MODE": "slow"}),
		},
		services: []*v1.Service{masterService},
	}
	tests := []struct {
		name    string
		envFrom []v1.EnvFromSource
		env     []v1.EnvVar
		want    string
	}{
		{name: "envFrom keys sorted within a source, later source wins, keys not filtered",
			envFrom: []v1.EnvFromSource{fromConfigMap("conf", "", false), fromSecret("creds", "", false), fromConfigMap("more", "", false)},
			want:    "LEVEL=3 MODE=slow user=admin 1st.key=odd password=s3cret"},
		{name: "prefixes",
			envFrom: []v1.EnvFromSource{fromSecret("creds", "DB_", false), fromConfigMap("conf", "CFG_", false)},
			want:    "DB_1st.key=odd DB_password=s3cret DB_user=admin CFG_LEVEL=3 CFG_MODE=fast CFG_user=from-config"},
		{name: "env overrides envFrom and keeps the first position",
			envFrom: []v1.EnvFromSource{fromConfigMap("conf", "", false)},
			env:     []v1.EnvVar{{Name: "FIRST", Value: "1"}, {Name: "MODE", Value: "$(MODE)-$(LEVEL)"}},
			want:    "LEVEL=3 MODE=fast-3 user=from-config FIRST=1"},
		{name: "key refs and expansion of earlier values",
			env: []v1.EnvVar{
				secretKey("PASS", "creds", "password", false),
				configMapKey("MODE", "conf", "MODE", false),
				{Name: "DSN", Value: "$(MODE)://admin:$(PASS)@db $(LATER)"},
				{Name: "LATER", Value: "x"},
			},
			want: "PASS=s3cret MODE=fast DSN=fast://admin:s3cret@db $(LATER) LATER=x"},
		{name: "optional missing objects and keys are skipped",
			envFrom: []v1.EnvFromSource{fromSecret("absent", "", true), fromConfigMap("absent", "", true)},
			env: []v1.EnvVar{
				secretKey("A", "absent", "k", true),
				configMapKey("B", "absent", "k", true),
				secretKey("C", "creds", "nokey", true),
				configMapKey("D", "conf", "nokey", true),
				{Name: "E", Value: "$(A)$(C)"},
			},
			want: "E=$(A)$(C)"},
		{name: "empty value",
			env:  []v1.EnvVar{{Name: "EMPTY"}},
			want: "EMPTY="},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := envPod(tt.env...)
			pod.Spec.Containers[0].EnvFrom = tt.envFrom
			opts := envOpts
			opts.EnvSources = objects
			envs, err := MakeEnvironmentVariables(context.Background(), pod, &pod.Spec.Containers[0], opts)
			if err != nil {
				t.Fatal(err)
			}
			want := tt.want + " " + masterEnv
			if got := envString(envs); got != want {
				t.Errorf("env\n got %q\nwant %q", got, want)
			}
		})
	}
}

func TestEnvFromSourcesErrors(t *testing.T) {
	forbidden := apierrors.NewForbidden(v1.Resource("secrets"), "creds", errors.New("no relationship found between node and this object"))
	tests := []struct {
		name    string
		objects *fakeSources
		envFrom []v1.EnvFromSource
		env     []v1.EnvVar
		want    string
	}{
		{name: "missing secret", env: []v1.EnvVar{secretKey("S", "creds", "k", false)}, want: `secret "creds" not found`},
		{name: "missing config map", env: []v1.EnvVar{configMapKey("C", "conf", "k", false)}, want: `configmap "conf" not found`},
		{name: "missing envFrom secret", envFrom: []v1.EnvFromSource{fromSecret("creds", "", false)}, want: `secret "creds" not found`},
		{name: "missing envFrom config map", envFrom: []v1.EnvFromSource{fromConfigMap("conf", "P_", false)}, want: `configmap "conf" not found`},
		{name: "missing secret key",
			objects: &fakeSources{secrets: []*v1.Secret{secretObj("prod", "creds", map[string]string{"a": "1"})}},
			env:     []v1.EnvVar{secretKey("S", "creds", "k", false)}, want: "couldn't find key k in Secret prod/creds"},
		{name: "missing config map key",
			objects: &fakeSources{configMaps: []*v1.ConfigMap{configMapObj("prod", "conf", map[string]string{"a": "1"})}},
			env:     []v1.EnvVar{configMapKey("C", "conf", "k", false)}, want: "couldn't find key k in ConfigMap prod/conf"},
		{name: "an optional source still fails on other errors",
			objects: &fakeSources{getErr: forbidden},
			envFrom: []v1.EnvFromSource{fromSecret("creds", "", true)}, want: forbidden.Error()},
		{name: "an optional missing object does not excuse a required key of it",
			envFrom: []v1.EnvFromSource{fromSecret("creds", "", true)},
			env:     []v1.EnvVar{secretKey("S", "creds", "k", false)}, want: `secret "creds" not found`},
		{name: "services not read yet", objects: &fakeSources{unsynced: true},
			want: "services have not yet been read at least once, cannot construct envvars"},
		{name: "services cannot be listed", objects: &fakeSources{listErr: errors.New("boom")},
			want: "failed to list services when setting up env vars"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := envPod(tt.env...)
			pod.Spec.Containers[0].EnvFrom = tt.envFrom
			opts := envOpts
			opts.EnvSources = &fakeSources{}
			if tt.objects != nil {
				opts.EnvSources = tt.objects
			}
			_, err := MakeEnvironmentVariables(context.Background(), pod, &pod.Spec.Containers[0], opts)
			if err == nil || err.Error() != tt.want {
				t.Fatalf("error %v, want %q", err, tt.want)
			}
			if errors.Is(err, ErrNeedsClusterMode) {
				t.Error("a cluster-mode error wraps ErrNeedsClusterMode")
			}
		})
	}
}

func TestEnvObjectsReadOncePerContainer(t *testing.T) {
	objects := &fakeSources{secrets: []*v1.Secret{secretObj("prod", "creds", map[string]string{"a": "1", "b": "2"})}}
	pod := envPod(secretKey("A", "creds", "a", false), secretKey("B", "creds", "b", false))
	pod.Spec.Containers[0].EnvFrom = []v1.EnvFromSource{fromSecret("creds", "ALL_", false)}
	opts := envOpts
	opts.EnvSources = objects
	envs, err := MakeEnvironmentVariables(context.Background(), pod, &pod.Spec.Containers[0], opts)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := envString(envs), "ALL_a=1 ALL_b=2 A=1 B=2"; got != want {
		t.Errorf("env %q, want %q", got, want)
	}
	if n := objects.gets["secret/prod/creds"]; n != 1 {
		t.Errorf("secret read %d times, want once", n)
	}
}

func TestServiceLinks(t *testing.T) {
	prodServices := []*v1.Service{
		masterService,
		service("prod", "web-front", "10.96.5.5", port("", 80, ""), port("metrics-port", 9090, v1.ProtocolTCP)),
		service("prod", "dns", "fd00::a", port("dns", 53, v1.ProtocolUDP)),
		service("prod", "headless", v1.ClusterIPNone, port("", 80, "")),
		{ObjectMeta: metav1.ObjectMeta{Namespace: "prod", Name: "external"},
			Spec: v1.ServiceSpec{Type: v1.ServiceTypeExternalName, ExternalName: "example.com"}},
		service("default", "other-default", "10.96.0.9", port("", 80, "")),
		service("elsewhere", "db", "10.96.7.7", port("", 5432, "")),
	}
	const prodEnv = "DNS_SERVICE_HOST=fd00::a DNS_SERVICE_PORT=53 DNS_SERVICE_PORT_DNS=53 DNS_PORT=udp://[fd00::a]:53 " +
		"DNS_PORT_53_UDP=udp://[fd00::a]:53 DNS_PORT_53_UDP_PROTO=udp DNS_PORT_53_UDP_PORT=53 DNS_PORT_53_UDP_ADDR=fd00::a " +
		masterEnv + " " +
		"WEB_FRONT_SERVICE_HOST=10.96.5.5 WEB_FRONT_SERVICE_PORT=80 WEB_FRONT_SERVICE_PORT_METRICS_PORT=9090 " +
		"WEB_FRONT_PORT=tcp://10.96.5.5:80 WEB_FRONT_PORT_80_TCP=tcp://10.96.5.5:80 WEB_FRONT_PORT_80_TCP_PROTO=tcp " +
		"WEB_FRONT_PORT_80_TCP_PORT=80 WEB_FRONT_PORT_80_TCP_ADDR=10.96.5.5 " +
		"WEB_FRONT_PORT_9090_TCP=tcp://10.96.5.5:9090 WEB_FRONT_PORT_9090_TCP_PROTO=tcp " +
		"WEB_FRONT_PORT_9090_TCP_PORT=9090 WEB_FRONT_PORT_9090_TCP_ADDR=10.96.5.5"
	tests := []struct {
		name      string
		services  []*v1.Service
		namespace string
		links     bool
		env       []v1.EnvVar
		want      string
	}{
		{name: "namespace services and the master service", services: prodServices, namespace: "prod", links: true, want: prodEnv},
		{name: "links disabled: the master service only", services: prodServices, namespace: "prod", links: false, want: masterEnv},
		{name: "default namespace gets all its services", services: prodServices, namespace: "default", links: true,
			want: masterEnv + " OTHER_DEFAULT_SERVICE_HOST=10.96.0.9 OTHER_DEFAULT_SERVICE_PORT=80 OTHER_DEFAULT_PORT=tcp://10.96.0.9:80 " +
				"OTHER_DEFAULT_PORT_80_TCP=tcp://10.96.0.9:80 OTHER_DEFAULT_PORT_80_TCP_PROTO=tcp OTHER_DEFAULT_PORT_80_TCP_PORT=80 " +
				"OTHER_DEFAULT_PORT_80_TCP_ADDR=10.96.0.9"},
		{name: "default namespace without links: the master service only", services: prodServices, namespace: "default", links: false, want: masterEnv},
		{name: "a namespace's own kubernetes service wins", namespace: "prod", links: true,
			services: []*v1.Service{masterService, service("prod", "kubernetes", "10.96.9.9", port("", 8080, v1.ProtocolSCTP))},
			want: "KUBERNETES_SERVICE_HOST=10.96.9.9 KUBERNETES_SERVICE_PORT=8080 KUBERNETES_PORT=sctp://10.96.9.9:8080 " +
				"KUBERNETES_PORT_8080_SCTP=sctp://10.96.9.9:8080 KUBERNETES_PORT_8080_SCTP_PROTO=sctp " +
				"KUBERNETES_PORT_8080_SCTP_PORT=8080 KUBERNETES_PORT_8080_SCTP_ADDR=10.96.9.9"},
		{name: "no master service", services: prodServices[1:2], namespace: "prod", links: false, want: ""},
		{name: "env overrides and expands service links", services: []*v1.Service{masterService}, namespace: "prod", links: true,
			env: []v1.EnvVar{
				{Name: "API", Value: "https://$(KUBERNETES_SERVICE_HOST):$(KUBERNETES_SERVICE_PORT)"},
				{Name: "KUBERNETES_SERVICE_PORT", Value: "6443"},
				{Name: "AGAIN", Value: "$(KUBERNETES_SERVICE_PORT)"},
				secretKey("KUBERNETES_PORT", "absent", "k", true), // skipped: the link stays
			},
			want: "API=https://10.96.0.1:443 KUBERNETES_SERVICE_PORT=6443 AGAIN=6443 KUBERNETES_SERVICE_HOST=10.96.0.1 " +
				"KUBERNETES_SERVICE_PORT_HTTPS=443 KUBERNETES_PORT=tcp://10.96.0.1:443 KUBERNETES_PORT_443_TCP=tcp://10.96.0.1:443 " +
				"KUBERNETES_PORT_443_TCP_PROTO=tcp KUBERNETES_PORT_443_TCP_PORT=443 KUBERNETES_PORT_443_TCP_ADDR=10.96.0.1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := envPod(tt.env...)
			pod.Namespace = tt.namespace
			opts := envOpts
			opts.EnableServiceLinks = tt.links
			opts.EnvSources = &fakeSources{services: tt.services}
			envs, err := MakeEnvironmentVariables(context.Background(), pod, &pod.Spec.Containers[0], opts)
			if err != nil {
				t.Fatal(err)
			}
			if got := envString(envs); got != tt.want {
				t.Errorf("env\n got %q\nwant %q", got, tt.want)
			}
		})
	}
}

func TestStaticPodsDoNotWaitForServices(t *testing.T) {
	pod := envPod(v1.EnvVar{Name: "A", Value: "1"})
	pod.Annotations[kubetypes.ConfigSourceAnnotationKey] = "file"
	opts := envOpts
	opts.EnvSources = &fakeSources{unsynced: true}
	envs, err := MakeEnvironmentVariables(context.Background(), pod, &pod.Spec.Containers[0], opts)
	if err != nil || envString(envs) != "A=1" {
		t.Fatalf("got %q, %v; want A=1 and no error", envString(envs), err)
	}
	pod.Annotations[kubetypes.ConfigSourceAnnotationKey] = kubetypes.APIServerSource
	if _, err := MakeEnvironmentVariables(context.Background(), pod, &pod.Spec.Containers[0], opts); err == nil {
		t.Fatal("an API pod started before services were read")
	}
}

func TestStandaloneHasNoServiceLinks(t *testing.T) {
	pod := envPod(v1.EnvVar{Name: "A", Value: "$(KUBERNETES_SERVICE_HOST)"})
	opts := envOpts
	opts.EnableServiceLinks = true
	envs, err := MakeEnvironmentVariables(context.Background(), pod, &pod.Spec.Containers[0], opts)
	if err != nil || envString(envs) != "A=$(KUBERNETES_SERVICE_HOST)" {
		t.Fatalf("got %q, %v", envString(envs), err)
	}
}
