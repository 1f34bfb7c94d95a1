package metrics

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// The families upstream's volume stats and log metrics collectors
// (pkg/kubelet/metrics/collectors) report from the stats summary's pods.
var (
	volumeLabels                 = []string{"namespace", "persistentvolumeclaim"}
	volumeStatsCapacityBytesDesc = prometheus.NewDesc("kubelet_volume_stats_capacity_bytes",
		alpha("Capacity in bytes of the volume"), volumeLabels, nil)
	volumeStatsAvailableBytesDesc = prometheus.NewDesc("kubelet_volume_stats_available_bytes",
		alpha("Number of available bytes in the volume"), volumeLabels, nil)
	volumeStatsUsedBytesDesc = prometheus.NewDesc("kubelet_volume_stats_used_bytes",
		alpha("Number of used bytes in the volume"), volumeLabels, nil)
	volumeStatsInodesDesc = prometheus.NewDesc("kubelet_volume_stats_inodes",
		alpha("Maximum number of inodes in the volume"), volumeLabels, nil)
	volumeStatsInodesFreeDesc = prometheus.NewDesc("kubelet_volume_stats_inodes_free",
		alpha("Number of free inodes in the volume"), volumeLabels, nil)
	volumeStatsInodesUsedDesc = prometheus.NewDesc("kubelet_volume_stats_inodes_used",
		alpha("Number of used inodes in the volume"), volumeLabels, nil)

	containerLogSizeDesc = prometheus.NewDesc("kubelet_container_log_filesystem_used_bytes",
		alpha("Bytes used by the container's logs on the filesystem."), []string{"uid", "namespace", "pod", "container"}, nil)
)

// PodStatsFunc lists the pods' stats as the summary has them (the stats provider's
// ListPodStats).
type PodStatsFunc func(ctx context.Context) ([]statsapi.PodStats, error)

// podStatsReuse is how long one listing of the pods' stats serves the collectors: the
// volume and log collectors run side by side in one scrape and share it.
const podStatsReuse = time.Second

// podStatsSource is the pods' stats the collectors read; nothing until set.
type podStatsSource struct {
	mu    sync.Mutex
	list  PodStatsFunc
	at    time.Time
	stats []statsapi.PodStats
	err   error
}

func (s *podStatsSource) set(f PodStatsFunc) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.list, s.at, s.stats, s.err = f, time.Time{}, nil, nil
}

// get lists the pods' stats, or returns the listing made less than podStatsReuse ago.
func (s *podStatsSource) get() ([]statsapi.PodStats, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.list == nil {
		return nil, nil
	}
	if s.at.IsZero() || time.Since(s.at) >= podStatsReuse {
		s.stats, s.err = s.list(context.TODO())
		s.at = time.Now()
	}
	return s.stats, s.err
}

// podStats is the source of the /metrics registry's collectors: the stats provider, set
// by pkg/app once it exists (SetPodStats). The families are registered from the start,
// as upstream's are, and report nothing until then.
var podStats = &podStatsSource{}

// SetPodStats makes the volume and log collectors on /metrics report from list.
func SetPodStats(list PodStatsFunc) { podStats.set(list) }

// volumeStatsCollector is upstream's volume stats collector: the capacity, usage and
// inodes of every volume backed by a persistent volume claim, once per claim.
type volumeStatsCollector struct{ source *podStatsSource }

func (c volumeStatsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{volumeStatsCapacityBytesDesc, volumeStatsAvailableBytesDesc, volumeStatsUsedBytesDesc,
		volumeStatsInodesDesc, volumeStatsInodesFreeDesc, volumeStatsInodesUsedDesc} {
		ch <- d
	}
}

func (c volumeStatsCollector) Collect(ch chan<- prometheus.Metric) {
	pods, err := c.source.get()
	if err != nil {
		return // as upstream: no volume series this scrape
	}
	seen := map[statsapi.PVCReference]bool{}
	for _, ps := range pods {
		for _, vs := range ps.VolumeStats {
			ref := vs.PVCRef
			if ref == nil || seen[*ref] {
				continue
			}
			seen[*ref] = true
			for _, g := range []struct {
				desc  *prometheus.Desc
				value *uint64
			}{
				{volumeStatsCapacityBytesDesc, vs.CapacityBytes},
				{volumeStatsAvailableBytesDesc, vs.AvailableBytes},
				{volumeStatsUsedBytesDesc, vs.UsedBytes},
				{volumeStatsInodesDesc, vs.Inodes},
				{volumeStatsInodesFreeDesc, vs.InodesFree},
				{volumeStatsInodesUsedDesc, vs.InodesUsed},
			} {
				if g.value != nil {
					ch <- prometheus.MustNewConstMetric(g.desc, prometheus.GaugeValue, float64(*g.value), ref.Namespace, ref.Name)
				}
			}
		}
	}
}

// logMetricsCollector is upstream's log metrics collector: the bytes every container's
// logs use.
type logMetricsCollector struct{ source *podStatsSource }

func (c logMetricsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- containerLogSizeDesc }

func (c logMetricsCollector) Collect(ch chan<- prometheus.Metric) {
	pods, err := c.source.get()
	if err != nil {
		klog.ErrorS(err, "Failed to get pod stats")
		return
	}
	for _, ps := range pods {
		for _, cs := range ps.Containers {
			if cs.Logs == nil || cs.Logs.UsedBytes == nil {
				continue
			}
			ch <- prometheus.MustNewConstMetric(containerLogSizeDesc, prometheus.GaugeValue, float64(*cs.Logs.UsedBytes),
				ps.PodRef.UID, ps.PodRef.Namespace, ps.PodRef.Name, cs.Name)
		}
	}
}
