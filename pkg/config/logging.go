package config

import (
	"fmt"
	"time"

	logsapi "k8s.io/component-base/logs/api/v1"
)

// layLoggingFlags writes the logging flags given on the command line (-v, --vmodule,
// --log-flush-frequency) into the configuration's logging section: upstream registers
// them on that section, so they win over the file.
func (c *CommandLine) layLoggingFlags(lc *logsapi.LoggingConfiguration) error {
	if v := c.lastGiven("v"); v != "" {
		if err := logsapi.VerbosityLevelPflag(&lc.Verbosity).Set(v); err != nil {
			return fmt.Errorf("invalid value %q for flag -v: %w", v, err)
		}
	}
	// Each --vmodule adds its patterns after the file's, as upstream's flag (parsed again
	// over the file's configuration) does.
	for _, v := range c.given["vmodule"] {
		if err := logsapi.VModuleConfigurationPflag(&lc.VModule).Set(v); err != nil {
			return fmt.Errorf("invalid value %q for flag --vmodule: %w", v, err)
		}
	}
	if v := c.lastGiven("log-flush-frequency"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			return fmt.Errorf("invalid value %q for flag --log-flush-frequency: %w", v, err)
		}
		lc.FlushFrequency.Duration.Duration = d
		lc.FlushFrequency.SerializeAsString = true
	}
	return nil
}

func (c *CommandLine) lastGiven(name string) string {
	if vs := c.given[name]; len(vs) > 0 {
		return vs[len(vs)-1]
	}
	return ""
}
