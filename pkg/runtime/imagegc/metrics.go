package imagegc

import "github.com/prometheus/client_golang/prometheus"

// ImageGarbageCollectedTotal is upstream's kubelet_image_garbage_collected_total, by
// reason ("age" for MaxAge, "space" for the thresholds and DeleteUnusedImages). Register
// it on the kubelet's /metrics registry.
var ImageGarbageCollectedTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
	Subsystem: "kubelet",
	Name:      "image_garbage_collected_total",
	Help:      "[ALPHA] Total number of images garbage collected by the kubelet, whether through disk usage or image age.",
}, []string{"reason"})
