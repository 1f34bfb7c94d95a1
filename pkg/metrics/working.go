package metrics

// WorkingPod is one pod worker as kubelet_working_pods counts it (upstream's
// PodWorkerSync).
type WorkingPod struct {
	// Lifecycle is the worker's phase: "sync", "terminating" or "terminated".
	Lifecycle string
	// Orphan: no source wants the pod any more (removed from its source, or force
	// deleted in the API), or it is known only from the runtime.
	Orphan bool
	// HasConfig: the worker has the pod's spec; false for a pod known only from the
	// runtime.
	HasConfig bool
	// Static: the pod comes from a file or URL, not the API server.
	Static bool
}

// workingLifecycles are the worker phases, in upstream's order.
var workingLifecycles = []string{"sync", "terminating", "terminated"}

// RecordWorkingPods sets kubelet_working_pods from the pod workers, as upstream's
// housekeeping does: every valid combination of lifecycle, config (desired, orphan,
// runtime_only) and static ("true", "", or "unknown" for a pod known only from the
// runtime) gets a series, zero included.
func RecordWorkingPods(pods []WorkingPod) {
	counts := map[WorkingPod]int{}
	for _, p := range pods {
		if !p.HasConfig {
			p.Static = false // a runtime-only pod's static-ness is unknown
		}
		counts[p]++
	}
	for _, c := range []struct {
		sync   WorkingPod
		config string
	}{
		{WorkingPod{HasConfig: true, Static: true}, "desired"},
		{WorkingPod{HasConfig: true, Static: false}, "desired"},
		{WorkingPod{Orphan: true, HasConfig: true, Static: true}, "orphan"},
		{WorkingPod{Orphan: true, HasConfig: true, Static: false}, "orphan"},
		{WorkingPod{Orphan: true, HasConfig: false}, "runtime_only"},
	} {
		for _, lifecycle := range workingLifecycles {
			key := c.sync
			key.Lifecycle = lifecycle
			static := StaticLabel(key.Static)
			if !key.HasConfig {
				static = "unknown"
			}
			WorkingPodCount.WithLabelValues(lifecycle, c.config, static).Set(float64(counts[key]))
		}
	}
}
