package app

import (
	"fmt"

	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/component-base/featuregate"
	logsapi "k8s.io/component-base/logs/api/v1"
	// The json format, as upstream's kubelet registers it.
	_ "k8s.io/component-base/logs/json/register"

	"github.com/nodelet/nodelet/pkg/config"
)

// ApplyLogging sets up the process's logging from the configuration's logging section
// (format text or json, verbosity, vmodule, flush frequency, format options; the
// command line's logging flags are already laid over it), as upstream's kubelet does once
// its configuration is loaded. It may be called once per process.
func ApplyLogging(opts *config.Options) error {
	gates, err := loggingGates(opts.Config.FeatureGates)
	if err != nil {
		return err
	}
	if err := logsapi.ValidateAndApplyAsField(&opts.Config.Logging, gates, field.NewPath("logging")); err != nil {
		return err
	}
	return nil
}

// loggingGates is a feature gate holding the logging features (LoggingAlphaOptions,
// LoggingBetaOptions, ContextualLogging) with the values featureGates gives them.
func loggingGates(featureGates map[string]bool) (featuregate.FeatureGate, error) {
	fg := featuregate.NewFeatureGate()
	if err := logsapi.AddFeatureGates(fg); err != nil {
		return nil, err
	}
	known := fg.GetAll()
	set := map[string]bool{}
	for name, on := range featureGates {
		if _, ok := known[featuregate.Feature(name)]; ok {
			set[name] = on
		}
	}
	if err := fg.SetFromMap(set); err != nil {
		return nil, fmt.Errorf("featureGates: %w", err)
	}
	return fg, nil
}
