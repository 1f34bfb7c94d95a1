package events

import (
	"bytes"
	"flag"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	clocktesting "k8s.io/utils/clock/testing"
)

func TestRepeatedEventsAreLoggedOncePerWindow(t *testing.T) {
	var buf bytes.Buffer
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	_ = fs.Set("logtostderr", "false")
	klog.SetOutput(&buf)
	defer klog.SetOutput(nil)

	clock := clocktesting.NewFakePassiveClock(time.Now())
	r := NewLoggingRecorder(clock)
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns"}}
	for i := 0; i < 5; i++ {
		r.Eventf(pod, v1.EventTypeWarning, "MissingClusterDNS", "no cluster DNS for %s", "web")
	}
	r.Event(pod, v1.EventTypeNormal, "Pulled", "image present")
	clock.SetTime(clock.Now().Add(repeatWindow))
	r.Eventf(pod, v1.EventTypeWarning, "MissingClusterDNS", "no cluster DNS for %s", "web")
	klog.Flush()
	out := buf.String()
	if n := strings.Count(out, `reason="MissingClusterDNS"`); n != 2 {
		t.Errorf("identical event logged %d times, want once per window (2):\n%s", n, out)
	}
	if !strings.Contains(out, `reason="Pulled" object="ns/web" kind="Pod" message="image present"`) {
		t.Errorf("a different event was not logged:\n%s", out)
	}
}

func TestContainerEventsNameThePodAndTheContainer(t *testing.T) {
	var buf bytes.Buffer
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	_ = fs.Set("logtostderr", "false")
	klog.SetOutput(&buf)
	defer klog.SetOutput(nil)

	r := NewLoggingRecorder(clocktesting.NewFakePassiveClock(time.Now()))
	ref := &v1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: "ns", Name: "web", UID: "u1", FieldPath: "spec.containers{app}"}
	r.Event(ref, v1.EventTypeNormal, "Pulled", "image present")
	r.Event(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, v1.EventTypeNormal, "Starting", "Starting kubelet.")
	klog.Flush()
	out := buf.String()
	if !strings.Contains(out, `reason="Pulled" object="ns/web spec.containers{app}" kind="Pod"`) {
		t.Errorf("container event lost its reference:\n%s", out)
	}
	if !strings.Contains(out, `reason="Starting" object="n1" kind="Node"`) {
		t.Errorf("node event not named:\n%s", out)
	}
}
