package apiobjects

import (
	"context"
	"reflect"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/pkg/runtime/criconfig"
)

// fullService is a service with every part the transform drops filled in.
func fullService() *v1.Service {
	return &v1.Service{
		TypeMeta: metav1.TypeMeta{Kind: "Service", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "prod", Name: "web", UID: "uid-1", ResourceVersion: "42", Generation: 3,
			Labels:          map[string]string{"app": "web"},
			Annotations:     map[string]string{v1.LastAppliedConfigAnnotation: `{"big":"json"}`},
			ManagedFields:   []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply}},
			OwnerReferences: []metav1.OwnerReference{{Kind: "Thing", Name: "owner"}},
			Finalizers:      []string{"service.kubernetes.io/load-balancer-cleanup"},
		},
		Spec: v1.ServiceSpec{
			Type:       v1.ServiceTypeLoadBalancer,
			ClusterIP:  "10.96.0.5",
			ClusterIPs: []string{"10.96.0.5", "fd00::5"},
			Selector:   map[string]string{"app": "web"},
			Ports: []v1.ServicePort{
				{Name: "http", Protocol: v1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080), NodePort: 30080, AppProtocol: ptr.To("http")},
				{Protocol: v1.ProtocolUDP, Port: 53, TargetPort: intstr.FromString("dns")},
			},
			ExternalIPs: []string{"192.0.2.1"},
		},
		Status: v1.ServiceStatus{LoadBalancer: v1.LoadBalancerStatus{Ingress: []v1.LoadBalancerIngress{{IP: "192.0.2.2"}}}},
	}
}

func TestServiceForEnvKeepsOnlyWhatEnvVarsRead(t *testing.T) {
	got, err := serviceForEnv(fullService())
	if err != nil {
		t.Fatal(err)
	}
	want := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "prod", Name: "web", UID: "uid-1", ResourceVersion: "42"},
		Spec: v1.ServiceSpec{
			ClusterIP: "10.96.0.5",
			Ports: []v1.ServicePort{
				{Name: "http", Protocol: v1.ProtocolTCP, Port: 80},
				{Protocol: v1.ProtocolUDP, Port: 53},
			},
		},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("transformed service\n got %#v\nwant %#v", got, want)
	}
}

func TestServiceForEnvWithoutPorts(t *testing.T) {
	svc := &v1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "external"},
		Spec: v1.ServiceSpec{Type: v1.ServiceTypeExternalName, ExternalName: "example.com"}}
	got, err := serviceForEnv(svc)
	if err != nil {
		t.Fatal(err)
	}
	kept := got.(*v1.Service)
	if kept.Spec.Ports != nil || kept.Spec.ClusterIP != "" || kept.Spec.ExternalName != "" || kept.Name != "external" {
		t.Errorf("transformed service %#v", kept)
	}
}

func TestServiceForEnvPassesOtherObjectsThrough(t *testing.T) {
	tombstone := cache.DeletedFinalStateUnknown{Key: "prod/web", Obj: fullService()}
	for _, obj := range []any{tombstone, &v1.Pod{}, nil} {
		got, err := serviceForEnv(obj)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, obj) {
			t.Errorf("%T changed to %#v", obj, got)
		}
	}
}

// The env vars of a service are the same before and after the transform.
func TestServiceForEnvKeepsTheEnvironment(t *testing.T) {
	envOf := func(svc *v1.Service) map[string]string {
		t.Helper()
		src := fakeEnvSources{svc}
		pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "prod", Name: "app"},
			Spec: v1.PodSpec{Containers: []v1.Container{{Name: "app"}}}}
		envs, err := criconfig.MakeEnvironmentVariables(context.Background(), pod, &pod.Spec.Containers[0],
			criconfig.ContainerOptions{EnvSources: src, EnableServiceLinks: true})
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for _, kv := range envs {
			got[kv.Key] = string(kv.Value)
		}
		return got
	}
	transformed, err := serviceForEnv(fullService())
	if err != nil {
		t.Fatal(err)
	}
	before, after := envOf(fullService()), envOf(transformed.(*v1.Service))
	if len(before) == 0 || !reflect.DeepEqual(before, after) {
		t.Errorf("env before the transform %v, after %v", before, after)
	}
}

// The informer stores what the transform keeps.
func TestServiceInformerStoresTransformedServices(t *testing.T) {
	svc := fullService()
	svc.Spec.Type = v1.ServiceTypeClusterIP
	s, _, _ := newSources(t, svc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s.Start(ctx)
	if !s.WaitForServices(ctx) {
		t.Fatal("services never synced")
	}
	got, err := s.ListServices("prod")
	if err != nil || len(got) != 1 {
		t.Fatalf("services %v, %v", got, err)
	}
	if got[0].ManagedFields != nil || got[0].Annotations != nil || got[0].Labels != nil || got[0].Spec.Selector != nil ||
		got[0].Status.LoadBalancer.Ingress != nil || got[0].Spec.ClusterIP != "10.96.0.5" || len(got[0].Spec.Ports) != 2 {
		t.Errorf("stored service %#v", got[0])
	}
}

type fakeEnvSources []*v1.Service

func (f fakeEnvSources) GetSecret(context.Context, string, string) (*v1.Secret, error) {
	return nil, nil
}

func (f fakeEnvSources) GetConfigMap(context.Context, string, string) (*v1.ConfigMap, error) {
	return nil, nil
}

func (f fakeEnvSources) ListServices(namespace string) ([]*v1.Service, error) {
	var out []*v1.Service
	for _, s := range f {
		if s.Namespace == namespace {
			out = append(out, s)
		}
	}
	return out, nil
}

func (f fakeEnvSources) ServicesSynced() bool { return true }
