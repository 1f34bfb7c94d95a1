package eviction

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kc "k8s.io/kubelet/config/v1beta1"
)

func TestParseThresholds(t *testing.T) {
	ts, err := ParseThresholds([]string{"pods"},
		map[string]string{"memory.available": "100Mi", "nodefs.available": "10%", "imagefs.available": "0%", "pid.available": "100%"},
		map[string]string{"nodefs.inodesFree": "10%"},
		map[string]string{"nodefs.inodesFree": "1m30s"},
		map[string]string{"memory.available": "500Mi", "nodefs.available": "5%"})
	if err != nil {
		t.Fatal(err)
	}
	got := make([]string, len(ts))
	for i, th := range ts {
		got[i] = th.String()
		if th.MinReclaim != nil {
			got[i] += " min " + th.MinReclaim.String()
		}
	}
	want := []string{
		"memory.available<100Mi (hard) min 500Mi",
		"nodefs.available<10% (hard) min 5%",
		"nodefs.inodesFree<10% (soft, grace period 1m30s)",
		"allocatableMemory.available<100Mi (hard) min 500Mi",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("thresholds:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestParseThresholdsErrors(t *testing.T) {
	for name, c := range map[string]struct{ hard, soft, grace, reclaim map[string]string }{
		"unknown signal":       {hard: map[string]string{"memory.free": "1Gi"}},
		"negative quantity":    {hard: map[string]string{"memory.available": "-1Gi"}},
		"zero quantity":        {hard: map[string]string{"memory.available": "0"}},
		"percentage over 100":  {hard: map[string]string{"nodefs.available": "101%"}},
		"soft without grace":   {soft: map[string]string{"memory.available": "1Gi"}},
		"negative grace":       {soft: map[string]string{"memory.available": "1Gi"}, grace: map[string]string{"memory.available": "-1s"}},
		"zero reclaim percent": {reclaim: map[string]string{"memory.available": "0%"}},
		"unknown reclaim":      {reclaim: map[string]string{"disk": "1Gi"}},
		"bad quantity":         {hard: map[string]string{"memory.available": "lots"}},
	} {
		if _, err := ParseThresholds(nil, c.hard, c.soft, c.grace, c.reclaim); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestPercentageThresholdIsOfCapacity(t *testing.T) {
	ts := mustThresholds(t, map[string]string{"nodefs.available": "10%"}, nil, nil, nil)
	// Upstream keeps the fraction as a float32: 10% of 100Gi is not 10Gi.
	got := ts[0].Value.Of(resource.NewQuantity(int64(100*Gi), resource.BinarySI))
	if want := int64(float64(100*Gi) * float64(float32(10)/100)); got.Value() != want {
		t.Errorf("10%% of 100Gi = %d, want %d", got.Value(), want)
	}
}

func TestConfigFromKubelet(t *testing.T) {
	isolation := false
	c := &kc.KubeletConfiguration{
		EvictionHard:                     map[string]string{"memory.available": "200Mi"},
		EvictionSoft:                     map[string]string{"memory.available": "1Gi"},
		EvictionSoftGracePeriod:          map[string]string{"memory.available": "2m"},
		EvictionPressureTransitionPeriod: metav1.Duration{Duration: 3 * time.Minute},
		EvictionMaxPodGracePeriod:        45,
		KernelMemcgNotification:          true,
		LocalStorageCapacityIsolation:    &isolation,
	}
	cfg, err := ConfigFromKubelet(c, "/kubepods")
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Thresholds) != 2 || cfg.Thresholds[1].GracePeriod != 2*time.Minute || cfg.PressureTransitionPeriod != 3*time.Minute ||
		cfg.MaxPodGracePeriodSeconds != 45 || !cfg.KernelMemcgNotification || cfg.LocalStorageCapacityIsolation || cfg.PodCgroupRoot != "/kubepods" {
		t.Errorf("config %+v", cfg)
	}
}

func TestContainerFsThresholdsFollowTheirFilesystem(t *testing.T) {
	in := mustThresholds(t, map[string]string{"nodefs.available": "10%", "imagefs.available": "15%", "containerfs.available": "50%"}, nil, nil, nil)
	value := func(ts []Threshold, s Signal) string {
		for _, th := range ts {
			if th.Signal == s {
				return th.Value.String()
			}
		}
		return "none"
	}
	if v := value(withContainerFsThresholds(in, false), SignalContainerFsAvailable); v != "10%" {
		t.Errorf("one filesystem: containerfs.available<%s, want nodefs' 10%%", v)
	}
	if v := value(withContainerFsThresholds(in, true), SignalContainerFsAvailable); v != "15%" {
		t.Errorf("dedicated imagefs: containerfs.available<%s, want imagefs' 15%%", v)
	}
	if v := value(withContainerFsThresholds(in, true), SignalContainerFsInodesFree); v != "none" {
		t.Errorf("containerfs.inodesFree<%s without an imagefs.inodesFree threshold", v)
	}
}
