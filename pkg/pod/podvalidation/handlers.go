package podvalidation

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// handler is the union of probe and lifecycle actions; exactly one must be set.
type handler struct {
	exec      *v1.ExecAction
	httpGet   *v1.HTTPGetAction
	tcpSocket *v1.TCPSocketAction
	grpc      *v1.GRPCAction
	sleep     *v1.SleepAction
}

func probeHandler(p *v1.ProbeHandler) handler {
	return handler{exec: p.Exec, httpGet: p.HTTPGet, tcpSocket: p.TCPSocket, grpc: p.GRPC}
}

func lifecycleHandler(h *v1.LifecycleHandler) handler {
	return handler{exec: h.Exec, httpGet: h.HTTPGet, tcpSocket: h.TCPSocket, sleep: h.Sleep}
}

// validateLifecycleAndProbes covers what regular containers and sidecars may carry.
func validateLifecycleAndProbes(ctr *v1.Container, gracePeriod *int64, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	if lc := ctr.Lifecycle; lc != nil {
		if lc.PostStart != nil {
			allErrs = append(allErrs, validateHandler(lifecycleHandler(lc.PostStart), gracePeriod, fldPath.Child("lifecycle", "postStart"))...)
		}
		if lc.PreStop != nil {
			allErrs = append(allErrs, validateHandler(lifecycleHandler(lc.PreStop), gracePeriod, fldPath.Child("lifecycle", "preStop"))...)
		}
	}
	if p := ctr.LivenessProbe; p != nil {
		allErrs = append(allErrs, validateProbe(p, gracePeriod, fldPath.Child("livenessProbe"))...)
		allErrs = append(allErrs, requireSuccessThresholdOne(p, fldPath.Child("livenessProbe"))...)
	}
	if p := ctr.ReadinessProbe; p != nil {
		allErrs = append(allErrs, validateProbe(p, gracePeriod, fldPath.Child("readinessProbe"))...)
		if p.TerminationGracePeriodSeconds != nil {
			allErrs = append(allErrs, field.Invalid(fldPath.Child("readinessProbe", "terminationGracePeriodSeconds"), p.TerminationGracePeriodSeconds, "must not be set for readinessProbes"))
		}
	}
	if p := ctr.StartupProbe; p != nil {
		allErrs = append(allErrs, validateProbe(p, gracePeriod, fldPath.Child("startupProbe"))...)
		allErrs = append(allErrs, requireSuccessThresholdOne(p, fldPath.Child("startupProbe"))...)
	}
	return allErrs
}

// requireSuccessThresholdOne: liveness and startup probes act on the first success.
func requireSuccessThresholdOne(p *v1.Probe, fldPath *field.Path) field.ErrorList {
	if p.SuccessThreshold != 1 {
		return field.ErrorList{field.Invalid(fldPath.Child("successThreshold"), p.SuccessThreshold, "must be 1")}
	}
	return nil
}

func validateProbe(p *v1.Probe, gracePeriod *int64, fldPath *field.Path) field.ErrorList {
	allErrs := validateHandler(probeHandler(&p.ProbeHandler), gracePeriod, fldPath)
	allErrs = append(allErrs, apivalidation.ValidateNonnegativeField(int64(p.InitialDelaySeconds), fldPath.Child("initialDelaySeconds"))...)
	allErrs = append(allErrs, apivalidation.ValidateNonnegativeField(int64(p.TimeoutSeconds), fldPath.Child("timeoutSeconds"))...)
	allErrs = append(allErrs, apivalidation.ValidateNonnegativeField(int64(p.PeriodSeconds), fldPath.Child("periodSeconds"))...)
	allErrs = append(allErrs, apivalidation.ValidateNonnegativeField(int64(p.SuccessThreshold), fldPath.Child("successThreshold"))...)
	allErrs = append(allErrs, apivalidation.ValidateNonnegativeField(int64(p.FailureThreshold), fldPath.Child("failureThreshold"))...)
	if p.TerminationGracePeriodSeconds != nil && *p.TerminationGracePeriodSeconds <= 0 {
		allErrs = append(allErrs, field.Invalid(fldPath.Child("terminationGracePeriodSeconds"), *p.TerminationGracePeriodSeconds, "must be greater than 0"))
	}
	return allErrs
}

// validateHandler requires exactly one action; every action after the first is reported
// as forbidden on its own path, as upstream does.
func validateHandler(h handler, gracePeriod *int64, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	count := 0
	check := func(set bool, name string, validate func(*field.Path) field.ErrorList) {
		if !set {
			return
		}
		if count > 0 {
			allErrs = append(allErrs, field.Forbidden(fldPath.Child(name), "may not specify more than 1 handler type"))
			return
		}
		count++
		allErrs = append(allErrs, validate(fldPath.Child(name))...)
	}
	check(h.exec != nil, "exec", func(p *field.Path) field.ErrorList { return validateExec(h.exec, p) })
	check(h.httpGet != nil, "httpGet", func(p *field.Path) field.ErrorList { return validateHTTPGet(h.httpGet, p) })
	check(h.tcpSocket != nil, "tcpSocket", func(p *field.Path) field.ErrorList { return validatePortNumOrName(h.tcpSocket.Port, p.Child("port")) })
	check(h.grpc != nil, "grpc", func(p *field.Path) field.ErrorList {
		return validatePortNumOrName(intstr.FromInt32(h.grpc.Port), p.Child("port"))
	})
	check(h.sleep != nil, "sleep", func(p *field.Path) field.ErrorList { return validateSleep(h.sleep, gracePeriod, p) })
	if count == 0 {
		allErrs = append(allErrs, field.Required(fldPath, "must specify a handler type"))
	}
	return allErrs
}

func validateExec(exec *v1.ExecAction, fldPath *field.Path) field.ErrorList {
	if len(exec.Command) == 0 {
		return field.ErrorList{field.Required(fldPath.Child("command"), "")}
	}
	return nil
}

var supportedHTTPSchemes = sets.New(v1.URISchemeHTTP, v1.URISchemeHTTPS)

func validateHTTPGet(get *v1.HTTPGetAction, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	if get.Path == "" {
		allErrs = append(allErrs, field.Required(fldPath.Child("path"), ""))
	}
	allErrs = append(allErrs, validatePortNumOrName(get.Port, fldPath.Child("port"))...)
	if !supportedHTTPSchemes.Has(get.Scheme) {
		allErrs = append(allErrs, field.NotSupported(fldPath.Child("scheme"), get.Scheme, sets.List(supportedHTTPSchemes)))
	}
	for _, h := range get.HTTPHeaders {
		allErrs = append(allErrs, invalidEach(fldPath.Child("httpHeaders"), h.Name, validation.IsHTTPHeaderName(h.Name))...)
	}
	return allErrs
}

func validatePortNumOrName(port intstr.IntOrString, fldPath *field.Path) field.ErrorList {
	if port.Type == intstr.String {
		return invalidEach(fldPath, port.StrVal, validation.IsValidPortName(port.StrVal))
	}
	return invalidEach(fldPath, port.IntValue(), validation.IsValidPortNum(port.IntValue()))
}

// validateSleep follows upstream with zero-second sleeps allowed
// (PodLifecycleSleepActionAllowZero, on by default).
func validateSleep(sleep *v1.SleepAction, gracePeriod *int64, fldPath *field.Path) field.ErrorList {
	if gracePeriod != nil && (sleep.Seconds < 0 || sleep.Seconds > *gracePeriod) {
		msg := fmt.Sprintf("must be non-negative and less than terminationGracePeriodSeconds (%d)", *gracePeriod)
		return field.ErrorList{field.Invalid(fldPath, sleep.Seconds, msg)}
	}
	return nil
}
