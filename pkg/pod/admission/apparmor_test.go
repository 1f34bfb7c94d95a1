package admission

import (
	"errors"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

func TestAppArmor(t *testing.T) {
	podProfile := func(typ v1.AppArmorProfileType) func(*v1.Pod) {
		return func(p *v1.Pod) {
			p.Spec.SecurityContext = &v1.PodSecurityContext{AppArmorProfile: &v1.AppArmorProfile{Type: typ}}
		}
	}
	containerProfile := func(profile *v1.AppArmorProfile) func(*v1.Pod) {
		return func(p *v1.Pod) { p.Spec.Containers[0].SecurityContext = &v1.SecurityContext{AppArmorProfile: profile} }
	}
	annotation := func(value string) func(*v1.Pod) {
		return func(p *v1.Pod) { p.Annotations[v1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix+"app"] = value }
	}
	running := func(p *v1.Pod) { p.Status.Phase = v1.PodRunning }
	disabled := errors.New("AppArmor is not enabled on the host")

	for _, tc := range []struct {
		name        string
		hostErr     error
		pod         *v1.Pod
		wantMessage string
	}{
		{"no profile, no AppArmor", disabled, apiPod("p"), ""},
		{"Unconfined needs no AppArmor", disabled, apiPod("p", podProfile(v1.AppArmorProfileTypeUnconfined)), ""},
		{"RuntimeDefault without AppArmor", disabled, apiPod("p", podProfile(v1.AppArmorProfileTypeRuntimeDefault)),
			"Cannot enforce AppArmor: AppArmor is not enabled on the host"},
		{"container profile without AppArmor", disabled,
			apiPod("p", containerProfile(&v1.AppArmorProfile{Type: v1.AppArmorProfileTypeRuntimeDefault})),
			"Cannot enforce AppArmor: AppArmor is not enabled on the host"},
		{"annotation without AppArmor", disabled, apiPod("p", annotation("runtime/default")),
			"Cannot enforce AppArmor: AppArmor is not enabled on the host"},
		{"unconfined annotation", disabled, apiPod("p", annotation("unconfined")), ""},
		{"running pods are not rechecked", disabled, apiPod("p", running, podProfile(v1.AppArmorProfileTypeRuntimeDefault)), ""},
		{"RuntimeDefault with AppArmor", nil, apiPod("p", podProfile(v1.AppArmorProfileTypeRuntimeDefault)), ""},
		{"Localhost with a name", nil, apiPod("p", containerProfile(&v1.AppArmorProfile{
			Type: v1.AppArmorProfileTypeLocalhost, LocalhostProfile: ptr.To("k8s-nginx")})), ""},
		{"Localhost with a blank name", nil, apiPod("p", containerProfile(&v1.AppArmorProfile{
			Type: v1.AppArmorProfileTypeLocalhost, LocalhostProfile: ptr.To("  ")})),
			`Cannot enforce AppArmor: invalid empty AppArmor profile name: "  "`},
		{"Localhost annotation without a name", nil, apiPod("p", annotation("localhost/")),
			`Cannot enforce AppArmor: invalid empty AppArmor profile name: ""`},
		{"container profile overrides the annotation", nil, apiPod("p", annotation("localhost/"),
			containerProfile(&v1.AppArmorProfile{Type: v1.AppArmorProfileTypeRuntimeDefault})), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newTestAdmitter(t, testNode(), Options{})
			a.appArmorHostErr = tc.hostErr
			got := a.Admit(tc.pod, nil)
			if tc.wantMessage == "" {
				checkResult(t, got, "", "")
			} else {
				checkResult(t, got, "AppArmor", tc.wantMessage)
			}
		})
	}
}
