package podvalidation

import (
	"testing"

	v1 "k8s.io/api/core/v1"
)

func TestAPIObjectReference(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(*v1.Pod)
		want   string
	}{
		{"none", func(*v1.Pod) {}, ""},
		{"hostPath is local", func(p *v1.Pod) {
			p.Spec.Volumes = append(p.Spec.Volumes, v1.Volume{Name: "h", VolumeSource: v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: "/x"}}})
		}, ""},
		{"service account", func(p *v1.Pod) { p.Spec.ServiceAccountName = "sa" }, "serviceaccounts"},
		{"image pull secret", func(p *v1.Pod) { p.Spec.ImagePullSecrets = []v1.LocalObjectReference{{Name: "s"}} }, "secrets"},
		{"env secret", func(p *v1.Pod) {
			p.Spec.Containers[0].Env = []v1.EnvVar{{Name: "P", ValueFrom: &v1.EnvVarSource{SecretKeyRef: &v1.SecretKeySelector{Key: "k"}}}}
		}, "secrets"},
		{"secret volume", func(p *v1.Pod) {
			p.Spec.Volumes = append(p.Spec.Volumes, v1.Volume{Name: "s", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: "s"}}})
		}, "secrets"},
		{"configmap envFrom in init container", func(p *v1.Pod) {
			c := container("setup")
			c.EnvFrom = []v1.EnvFromSource{{ConfigMapRef: &v1.ConfigMapEnvSource{}}}
			p.Spec.InitContainers = []v1.Container{c}
		}, "configmaps"},
		{"pvc volume", func(p *v1.Pod) {
			p.Spec.Volumes = append(p.Spec.Volumes, v1.Volume{Name: "c", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "c"}}})
		}, "persistentvolumeclaims"},
		{"projected token", func(p *v1.Pod) {
			p.Spec.Volumes = append(p.Spec.Volumes, v1.Volume{Name: "t", VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{
				Sources: []v1.VolumeProjection{{ServiceAccountToken: &v1.ServiceAccountTokenProjection{Path: "t"}}}}}})
		}, "serviceaccounts (via projected volumes)"},
		{"projected downward API is local", func(p *v1.Pod) {
			p.Spec.Volumes = append(p.Spec.Volumes, v1.Volume{Name: "d", VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{
				Sources: []v1.VolumeProjection{{DownwardAPI: &v1.DownwardAPIProjection{}}}}}})
		}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pod := validPod()
			tc.mutate(pod)
			got, err := APIObjectReference(pod)
			if err != nil || got != tc.want {
				t.Fatalf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}
