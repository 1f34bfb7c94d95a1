package config

// implementedFields are the configuration fields (JSON paths) that nodelet acts on today.
// A flag for any other field is accepted with a warning; extend this list as features land.
var implementedFields = map[string]bool{
	"containerRuntimeEndpoint":    true,
	"imageServiceEndpoint":        true,
	"runtimeRequestTimeout":       true,
	"healthzPort":                 true,
	"healthzBindAddress":          true,
	"podLogsDir":                  true,
	"staticPodPath":               true,
	"staticPodURL":                true,
	"staticPodURLHeader":          true,
	"fileCheckFrequency":          true,
	"httpCheckFrequency":          true,
	"syncFrequency":               true,
	"maxPods":                     true,
	"cgroupRoot":                  true,
	"cgroupsPerQOS":               true,
	"clusterDNS":                  true,
	"clusterDomain":               true,
	"resolvConf":                  true,
	"serializeImagePulls":         true,
	"maxParallelImagePulls":       true,
	"registryPullQPS":             true,
	"registryBurst":               true,
	"cpuCFSQuota":                 true,
	"cpuCFSQuotaPeriod":           true,
	"seccompDefault":              true,
	"containerLogMaxSize":         true,
	"containerLogMaxFiles":        true,
	"containerLogMonitorInterval": true,
}

// implementedCommandFlags are the command-only flags nodelet acts on today.
var implementedCommandFlags = map[string]bool{
	"root-dir":                              true,
	"lock-file":                             true,
	"exit-on-lock-contention":               true,
	"hostname-override":                     true,
	"node-ip":                               true,
	"minimum-container-ttl-duration":        true,
	"maximum-dead-containers-per-container": true,
	"maximum-dead-containers":               true,
	"v":                                     true,
	"vmodule":                               true,
}

func implementedFlag(spec flagSpec) bool {
	if spec.Kind == configFlag {
		return implementedFields[spec.Field]
	}
	return implementedCommandFlags[spec.Name]
}
