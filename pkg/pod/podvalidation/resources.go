package podvalidation

import (
	"fmt"
	"sort"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/nodelet/nodelet/pkg/resourcename"
)

// validateResources checks resource names and quantities and that each request fits its
// limit. Quantities that do not parse never get here: the decoder rejects them.
func validateResources(req *v1.ResourceRequirements, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	limPath := fldPath.Child("limits")
	reqPath := fldPath.Child("requests")
	hasCPUOrMemory, hasHugePages := false, false

	for _, name := range sortedNames(req.Limits) {
		qty := req.Limits[name]
		keyPath := limPath.Key(string(name))
		allErrs = append(allErrs, validateContainerResourceName(name, keyPath)...)
		allErrs = append(allErrs, validateQuantity(name, qty, keyPath)...)
		hasCPUOrMemory = hasCPUOrMemory || name == v1.ResourceCPU || name == v1.ResourceMemory
		hasHugePages = hasHugePages || isHugePages(name)
	}
	for _, name := range sortedNames(req.Requests) {
		qty := req.Requests[name]
		keyPath := reqPath.Key(string(name))
		allErrs = append(allErrs, validateContainerResourceName(name, keyPath)...)
		allErrs = append(allErrs, validateQuantity(name, qty, keyPath)...)
		allErrs = append(allErrs, validateRequestAgainstLimit(name, qty, req.Limits, reqPath, limPath)...)
		hasCPUOrMemory = hasCPUOrMemory || name == v1.ResourceCPU || name == v1.ResourceMemory
		hasHugePages = hasHugePages || isHugePages(name)
	}
	if hasHugePages && !hasCPUOrMemory {
		allErrs = append(allErrs, field.Forbidden(fldPath, "HugePages require cpu or memory"))
	}
	return allErrs
}

// validateRequestAgainstLimit: a request may not exceed its limit, and resources that
// cannot be overcommitted (hugepages, extended resources) need request == limit.
func validateRequestAgainstLimit(name v1.ResourceName, qty resource.Quantity, limits v1.ResourceList, reqPath, limPath *field.Path) field.ErrorList {
	limit, ok := limits[name]
	switch {
	case ok && qty.Cmp(limit) != 0 && !overcommitAllowed(name):
		return field.ErrorList{field.Invalid(reqPath, qty.String(), fmt.Sprintf("must be equal to %s limit of %s", name, limit.String()))}
	case ok && qty.Cmp(limit) > 0:
		return field.ErrorList{field.Invalid(reqPath, qty.String(), fmt.Sprintf("must be less than or equal to %s limit of %s", name, limit.String()))}
	case !ok && !overcommitAllowed(name):
		return field.ErrorList{field.Required(limPath, "Limit must be set for non overcommitable resources")}
	}
	return nil
}

func validateQuantity(name v1.ResourceName, qty resource.Quantity, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	if qty.Cmp(resource.Quantity{}) < 0 {
		allErrs = append(allErrs, field.Invalid(fldPath, qty.String(), apivalidation.IsNegativeErrorMsg))
	}
	if resourcename.IsExtended(name) && qty.MilliValue()%1000 != 0 {
		allErrs = append(allErrs, field.Invalid(fldPath, qty, "must be an integer"))
	}
	return allErrs
}

// standardResources are the unprefixed names the API knows; only some of them make
// sense on a container (standardContainerResources).
var standardResources = sets.New(
	"cpu", "memory", "ephemeral-storage", "storage", "pods", "services", "replicationcontrollers",
	"resourcequotas", "secrets", "configmaps", "persistentvolumeclaims",
	"services.nodeports", "services.loadbalancers",
	"requests.cpu", "requests.memory", "requests.ephemeral-storage", "requests.storage",
	"limits.cpu", "limits.memory", "limits.ephemeral-storage",
)

var standardContainerResources = sets.New("cpu", "memory", "ephemeral-storage")

func validateContainerResourceName(name v1.ResourceName, fldPath *field.Path) field.ErrorList {
	s := string(name)
	if errs := validateQualifiedName(s, fldPath); len(errs) != 0 {
		return errs
	}
	if !strings.Contains(s, "/") {
		switch {
		case !standardResources.Has(s) && !isHugePages(name) && !strings.HasPrefix(s, "requests.hugepages-"):
			return field.ErrorList{field.Invalid(fldPath, s, "must be a standard resource type or fully qualified")}
		case !standardContainerResources.Has(s) && !isHugePages(name):
			return field.ErrorList{field.Invalid(fldPath, s, "must be a standard resource for containers")}
		}
		return nil
	}
	if !resourcename.IsNative(name) && !resourcename.IsExtended(name) {
		return field.ErrorList{field.Invalid(fldPath, s, "doesn't follow extended resource name standard")}
	}
	return nil
}

func isHugePages(name v1.ResourceName) bool {
	return strings.HasPrefix(string(name), v1.ResourceHugePagesPrefix)
}

func overcommitAllowed(name v1.ResourceName) bool {
	return resourcename.IsNative(name) && !isHugePages(name)
}

func sortedNames(list v1.ResourceList) []v1.ResourceName {
	names := make([]v1.ResourceName, 0, len(list))
	for name := range list {
		names = append(names, name)
	}
	sort.Slice(names, func(i, j int) bool { return names[i] < names[j] })
	return names
}
