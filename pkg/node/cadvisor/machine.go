package cadvisor

import (
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"
)

// cAdvisor's machine metrics that nodelet's machine facts cover, labelled as cAdvisor
// labels them.
var (
	machineLabels     = []string{"machine_id", "system_uuid", "boot_id"}
	machineCoresDesc  = prometheus.NewDesc("machine_cpu_cores", "Number of logical CPU cores.", machineLabels, nil)
	machineMemoryDesc = prometheus.NewDesc("machine_memory_bytes", "Amount of memory installed on the machine.", machineLabels, nil)
	machineSwapDesc   = prometheus.NewDesc("machine_swap_bytes", "Amount of swap memory available on the machine.", machineLabels, nil)
	machineErrorDesc  = prometheus.NewDesc("machine_scrape_error", "1 if there was an error while getting machine metrics, 0 otherwise.", nil, nil)
)

// machineCollector serves the machine metrics, and machine_scrape_error 1 with none of
// them when the machine's facts cannot be read.
type machineCollector struct {
	machine func() (*Machine, error)
}

func newMachineCollector(machine func() (*Machine, error)) *machineCollector {
	return &machineCollector{machine: machine}
}

func (c *machineCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{machineCoresDesc, machineMemoryDesc, machineSwapDesc, machineErrorDesc} {
		ch <- d
	}
}

func (c *machineCollector) Collect(ch chan<- prometheus.Metric) {
	m, err := c.machine()
	if err != nil {
		klog.InfoS("Couldn't get machine info", "err", err)
		ch <- prometheus.MustNewConstMetric(machineErrorDesc, prometheus.GaugeValue, 1)
		return
	}
	labels := []string{m.MachineID, m.SystemUUID, m.BootID}
	ch <- prometheus.MustNewConstMetric(machineCoresDesc, prometheus.GaugeValue, float64(m.NumCores), labels...)
	ch <- prometheus.MustNewConstMetric(machineMemoryDesc, prometheus.GaugeValue, float64(m.MemoryBytes), labels...)
	ch <- prometheus.MustNewConstMetric(machineSwapDesc, prometheus.GaugeValue, float64(m.SwapBytes), labels...)
	ch <- prometheus.MustNewConstMetric(machineErrorDesc, prometheus.GaugeValue, 0)
}
