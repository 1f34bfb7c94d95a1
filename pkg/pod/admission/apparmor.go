package admission

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"

	v1 "k8s.io/api/core/v1"
)

// ReasonAppArmor rejects a pod whose AppArmor profile the node cannot enforce.
const ReasonAppArmor = "AppArmor"

// appArmorHostError says why the host cannot enforce AppArmor profiles, nil if it can.
// Like upstream it is read once: enabling AppArmor needs a kubelet restart.
func appArmorHostError() error {
	if runtime.GOOS != "linux" {
		return errors.New("binary not compiled for linux")
	}
	if _, err := os.Stat("/sys/kernel/security/apparmor"); err == nil {
		enabled, err := os.ReadFile("/sys/module/apparmor/parameters/enabled")
		if err == nil && len(enabled) > 1 && enabled[0] == 'Y' {
			return nil
		}
	}
	return errors.New("AppArmor is not enabled on the host")
}

// admitAppArmor is upstream's AppArmor admit handler: a pending pod that asks for a
// confining profile needs AppArmor on the host, and a Localhost profile needs a name.
func (a *Admitter) admitAppArmor(pod *v1.Pod, _ []*v1.Pod) Result {
	if pod.Status.Phase != v1.PodPending || !appArmorRequired(pod) {
		return admitted()
	}
	if err := a.validateAppArmor(pod); err != nil {
		return reject(ReasonAppArmor, fmt.Sprintf("Cannot enforce AppArmor: %v", err))
	}
	return admitted()
}

func (a *Admitter) validateAppArmor(pod *v1.Pod) error {
	if a.appArmorHostErr != nil {
		return a.appArmorHostErr
	}
	for _, c := range allContainers(pod) {
		p := appArmorProfile(pod, c)
		if p != nil && p.Type == v1.AppArmorProfileTypeLocalhost &&
			(p.LocalhostProfile == nil || strings.TrimSpace(*p.LocalhostProfile) == "") {
			name := ""
			if p.LocalhostProfile != nil {
				name = *p.LocalhostProfile
			}
			return fmt.Errorf("invalid empty AppArmor profile name: %q", name)
		}
	}
	return nil
}

// appArmorRequired: any profile other than Unconfined, in the pod or container security
// contexts or in the deprecated per-container annotations.
func appArmorRequired(pod *v1.Pod) bool {
	confining := func(p *v1.AppArmorProfile) bool { return p != nil && p.Type != v1.AppArmorProfileTypeUnconfined }
	if sc := pod.Spec.SecurityContext; sc != nil && confining(sc.AppArmorProfile) {
		return true
	}
	for _, c := range allContainers(pod) {
		if c.SecurityContext != nil && confining(c.SecurityContext.AppArmorProfile) {
			return true
		}
	}
	for key, value := range pod.Annotations {
		if strings.HasPrefix(key, v1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix) &&
			value != v1.DeprecatedAppArmorBetaProfileNameUnconfined {
			return true
		}
	}
	return false
}

// appArmorProfile is the container's effective profile: its own, else the deprecated
// annotation (static pods may still use it), else the pod's.
func appArmorProfile(pod *v1.Pod, c *v1.Container) *v1.AppArmorProfile {
	if c.SecurityContext != nil && c.SecurityContext.AppArmorProfile != nil {
		return c.SecurityContext.AppArmorProfile
	}
	if value, ok := pod.Annotations[v1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix+c.Name]; ok {
		switch {
		case value == v1.DeprecatedAppArmorBetaProfileRuntimeDefault:
			return &v1.AppArmorProfile{Type: v1.AppArmorProfileTypeRuntimeDefault}
		case value == v1.DeprecatedAppArmorBetaProfileNameUnconfined:
			return &v1.AppArmorProfile{Type: v1.AppArmorProfileTypeUnconfined}
		case strings.HasPrefix(value, v1.DeprecatedAppArmorBetaProfileNamePrefix):
			name := strings.TrimPrefix(value, v1.DeprecatedAppArmorBetaProfileNamePrefix)
			return &v1.AppArmorProfile{Type: v1.AppArmorProfileTypeLocalhost, LocalhostProfile: &name}
		}
		// An invalid annotation value falls through, as upstream.
	}
	if sc := pod.Spec.SecurityContext; sc != nil {
		return sc.AppArmorProfile
	}
	return nil
}

// allContainers lists init, regular and ephemeral containers.
func allContainers(pod *v1.Pod) []*v1.Container {
	var out []*v1.Container
	for i := range pod.Spec.InitContainers {
		out = append(out, &pod.Spec.InitContainers[i])
	}
	for i := range pod.Spec.Containers {
		out = append(out, &pod.Spec.Containers[i])
	}
	for i := range pod.Spec.EphemeralContainers {
		out = append(out, (*v1.Container)(&pod.Spec.EphemeralContainers[i].EphemeralContainerCommon))
	}
	return out
}
