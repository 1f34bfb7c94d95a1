package criconfig

import (
	"reflect"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestVerifyRunAsNonRoot(t *testing.T) {
	pod := func(podSC *v1.PodSecurityContext, sc *v1.SecurityContext) (*v1.Pod, *v1.Container) {
		p := &v1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "prod", UID: "u-1"},
			Spec:       v1.PodSpec{SecurityContext: podSC, Containers: []v1.Container{{Name: "app", SecurityContext: sc}}},
		}
		return p, &p.Spec.Containers[0]
	}
	nonRoot := &v1.PodSecurityContext{RunAsNonRoot: ptrTo(true)}
	const where = `(pod: "web_prod(u-1)", container: app)`
	tests := []struct {
		name     string
		podSC    *v1.PodSecurityContext
		sc       *v1.SecurityContext
		uid      *int64
		username string
		want     string // "" for no error
	}{
		{name: "not requested", uid: ptrTo[int64](0)},
		{name: "explicitly false", podSC: &v1.PodSecurityContext{RunAsNonRoot: ptrTo(false)}, uid: ptrTo[int64](0)},
		{name: "container turns it off", podSC: nonRoot, sc: &v1.SecurityContext{RunAsNonRoot: ptrTo(false)}, uid: ptrTo[int64](0)},
		{name: "runAsUser root", podSC: nonRoot, sc: &v1.SecurityContext{RunAsUser: ptrTo[int64](0)}, uid: ptrTo[int64](1000),
			want: "container's runAsUser breaks non-root policy " + where},
		{name: "pod runAsUser root", podSC: &v1.PodSecurityContext{RunAsNonRoot: ptrTo(true), RunAsUser: ptrTo[int64](0)},
			want: "container's runAsUser breaks non-root policy " + where},
		{name: "runAsUser overrides root image", podSC: nonRoot, sc: &v1.SecurityContext{RunAsUser: ptrTo[int64](1000)}, uid: ptrTo[int64](0)},
		{name: "image root", podSC: nonRoot, uid: ptrTo[int64](0),
			want: "container has runAsNonRoot and image will run as root " + where},
		{name: "image named user", podSC: nonRoot, username: "nobody",
			want: "container has runAsNonRoot and image has non-numeric user (nobody), cannot verify user is non-root " + where},
		{name: "image non-root", podSC: nonRoot, uid: ptrTo[int64](65534)},
		{name: "container-level request", sc: &v1.SecurityContext{RunAsNonRoot: ptrTo(true)}, uid: ptrTo[int64](0),
			want: "container has runAsNonRoot and image will run as root " + where},
		{name: "image invalid uid", podSC: nonRoot, uid: ptrTo[int64](1 << 40),
			want: "container has runAsNonRoot and image has an invalid user id (1099511627776). (Must be 1-(2147483647)): must be between 0 and 2147483647, inclusive " + where},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, c := pod(tt.podSC, tt.sc)
			err := VerifyRunAsNonRoot(p, c, tt.uid, tt.username)
			got := ""
			if err != nil {
				got = err.Error()
			}
			if got != tt.want {
				t.Errorf("error\n got %q\nwant %q", got, tt.want)
			}
		})
	}
}

func TestDetermineEffectiveSecurityContext(t *testing.T) {
	pod := &v1.Pod{Spec: v1.PodSpec{
		SecurityContext: &v1.PodSecurityContext{
			RunAsUser: ptrTo[int64](1), RunAsGroup: ptrTo[int64](2), RunAsNonRoot: ptrTo(true),
			SELinuxOptions: &v1.SELinuxOptions{Level: "s0:c1"},
			SeccompProfile: &v1.SeccompProfile{Type: v1.SeccompProfileTypeRuntimeDefault},
			FSGroup:        ptrTo[int64](99),
		},
		Containers: []v1.Container{{Name: "c", SecurityContext: &v1.SecurityContext{
			RunAsUser: ptrTo[int64](10), Privileged: ptrTo(true), AllowPrivilegeEscalation: ptrTo(true),
		}}},
	}}
	got := DetermineEffectiveSecurityContext(pod, &pod.Spec.Containers[0])
	want := &v1.SecurityContext{
		RunAsUser: ptrTo[int64](10), RunAsGroup: ptrTo[int64](2), RunAsNonRoot: ptrTo(true),
		SELinuxOptions: &v1.SELinuxOptions{Level: "s0:c1"},
		SeccompProfile: &v1.SeccompProfile{Type: v1.SeccompProfileTypeRuntimeDefault},
		Privileged:     ptrTo(true), AllowPrivilegeEscalation: ptrTo(true),
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("effective context\n got %+v\nwant %+v", got, want)
	}
	*got.RunAsGroup = 7
	if *pod.Spec.SecurityContext.RunAsGroup != 2 {
		t.Error("the effective context shares pointers with the pod")
	}
	if got := DetermineEffectiveSecurityContext(&v1.Pod{}, &v1.Container{}); got == nil || !reflect.DeepEqual(*got, v1.SecurityContext{}) {
		t.Errorf("no contexts give %+v, want an empty one", got)
	}
}
