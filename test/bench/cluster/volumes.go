package main

// The volumes scenario: the pod real workloads run, with its configuration and identity
// mounted: one configMap volume, one secret volume and the projected kube-api-access-*
// volume (service-account token through the TokenRequest API, kube-root-ca.crt, the
// namespace) that the ServiceAccount admission plugin adds to every pod that does not opt
// out. The container checks that a file of each is there before it sleeps, so a pod is
// Ready only with all three mounted. Two figures:
//
//   - API create → Ready of one such pod, median of -volume-rounds, alternating which
//     kubelet goes first (after one uncounted pod each: the first TokenRequest, the
//     first reads of the configMap and secret, the caches behind them);
//   - each kubelet's RSS with -volume-pods such pods running on it (created at once, all
//     Ready, settled for -idle-settle), the median of samples every 5 s over
//     -volume-window.

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const (
	volumeConfigMap = "bench-config"
	volumeSecret    = "bench-secret"
	configDir       = "/etc/bench/config"
	secretDir       = "/etc/bench/secret"
	// tokenFile is where the kube-api-access-* volume puts the token (upstream's path).
	tokenFile = "/var/run/secrets/kubernetes.io/serviceaccount/token"
	// rootCAConfigMap is what kube-controller-manager's root-ca-cert-publisher puts in every
	// namespace; the kube-api-access-* volume projects its ca.crt.
	rootCAConfigMap = "kube-root-ca.crt"
)

// volumeScript exits (the pod is then never Ready) unless the three volumes' files are
// there, and otherwise sleeps as containerScript does.
var volumeScript = fmt.Sprintf(`test -s %s/app.conf && test -s %s/password && test -s %s || exit 1; %s`,
	configDir, secretDir, tokenFile, containerScript)

// volumePod is benchPod with a configMap volume, a secret volume and the default
// service-account token (AutomountServiceAccountToken left unset).
func volumePod(runID, namespace, name, node string) *v1.Pod {
	pod := benchPod(runID, namespace, name, node)
	pod.Spec.AutomountServiceAccountToken = nil
	pod.Spec.Volumes = []v1.Volume{
		{Name: "config", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{
			LocalObjectReference: v1.LocalObjectReference{Name: volumeConfigMap}}}},
		{Name: "secret", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: volumeSecret}}},
	}
	c := &pod.Spec.Containers[0]
	c.Command = []string{"sh", "-c", volumeScript}
	c.VolumeMounts = []v1.VolumeMount{
		{Name: "config", MountPath: configDir, ReadOnly: true},
		{Name: "secret", MountPath: secretDir, ReadOnly: true},
	}
	return pod
}

// volumeResults are the volumes scenario's samples, per kubelet name.
type volumeResults struct {
	create1, delete1 map[string][]time.Duration
	// createN and deleteN: the -volume-pods pods created at once → all Ready, deleted → gone.
	createN, deleteN map[string]time.Duration
	// rss is the sample of median RSS with -volume-pods pods.
	rss map[string]usage
	// load is the load average once the pods are up, before the RSS window.
	load string
}

func newVolumeResults() volumeResults {
	return volumeResults{create1: map[string][]time.Duration{}, delete1: map[string][]time.Duration{},
		createN: map[string]time.Duration{}, deleteN: map[string]time.Duration{}, rss: map[string]usage{}}
}

// volumes runs the volumes scenario: the objects the pods mount, one uncounted pod each,
// the single-pod rounds, then the RSS with -volume-pods pods.
func (b *bench) volumes(ctx context.Context) error {
	for _, k := range b.kubelets() {
		if err := b.createVolumeObjects(ctx, k.namespace); err != nil {
			return err
		}
	}
	for _, k := range b.kubelets() {
		if err := b.warmVolumePod(ctx, k); err != nil {
			return err
		}
	}
	if err := b.volumeRounds(ctx); err != nil {
		return err
	}
	return b.volumeRSS(ctx)
}

// createVolumeObjects creates the configMap and the secret the pods mount in ns, and
// waits for kube-root-ca.crt there: without it the token volume fails its first mount and
// the pod waits out a retry.
func (b *bench) createVolumeObjects(ctx context.Context, ns string) error {
	cm := &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: volumeConfigMap},
		Data: map[string]string{"app.conf": "listen = :8080\nlog-level = info\n"}}
	if _, err := b.client.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		return err
	}
	secret := &v1.Secret{ObjectMeta: metav1.ObjectMeta{Name: volumeSecret},
		StringData: map[string]string{"password": "not-a-real-password"}}
	if _, err := b.client.CoreV1().Secrets(ns).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		return err
	}
	for start := time.Now(); time.Since(start) < time.Minute; {
		if _, err := b.client.CoreV1().ConfigMaps(ns).Get(ctx, rootCAConfigMap, metav1.GetOptions{}); err == nil {
			return nil
		}
		if err := b.sleep(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
	return fmt.Errorf("namespace %s: no %s config map within a minute (is kube-controller-manager up?)", ns, rootCAConfigMap)
}

// warmVolumePod runs one volume pod on k, not counted, and checks that the API server
// gave it the projected token volume: without it the scenario would not measure tokens.
func (b *bench) warmVolumePod(ctx context.Context, k *kubelet) error {
	names := []string{"vol-warm"}
	if _, err := b.createAllReady(ctx, k, volumePod, names); err != nil {
		return err
	}
	pod, err := b.client.CoreV1().Pods(k.namespace).Get(ctx, names[0], metav1.GetOptions{})
	if err != nil {
		return err
	}
	if !hasTokenVolume(pod) {
		return fmt.Errorf("pod %s/%s has no projected service-account token volume: is the ServiceAccount admission plugin on?", k.namespace, names[0])
	}
	if err := b.pause(ctx); err != nil {
		return err
	}
	if _, err := b.deleteAllGone(ctx, k, names); err != nil {
		return err
	}
	return b.pause(ctx)
}

// hasTokenVolume reports whether pod has a projected volume with a service-account token.
func hasTokenVolume(pod *v1.Pod) bool {
	for _, v := range pod.Spec.Volumes {
		if v.Projected == nil {
			continue
		}
		for _, s := range v.Projected.Sources {
			if s.ServiceAccountToken != nil {
				return true
			}
		}
	}
	return false
}

// volumeRounds runs -volume-rounds create/delete cycles of one volume pod on each
// kubelet, in turn.
func (b *bench) volumeRounds(ctx context.Context) error {
	r := &b.results.volumes
	for round := range b.o.volumeRounds {
		names := []string{fmt.Sprintf("vol-one-%d", round)}
		single := func(k *kubelet) func() error {
			return func() error {
				created, deleted, err := b.cycle(ctx, k, volumePod, names)
				r.create1[k.name] = append(r.create1[k.name], created)
				r.delete1[k.name] = append(r.delete1[k.name], deleted)
				return err
			}
		}
		if err := inTurn(round, single(b.nodelet), single(b.upstream)); err != nil {
			return err
		}
	}
	return nil
}

// volumeRSS starts -volume-pods volume pods on each kubelet, lets them settle, samples
// both kubelets' RSS over -volume-window, and deletes the pods.
func (b *bench) volumeRSS(ctx context.Context) error {
	r := &b.results.volumes
	names := podNames("vol", b.o.volumePods)
	for _, k := range b.kubelets() {
		d, err := b.createAllReady(ctx, k, volumePod, names)
		if err != nil {
			return err
		}
		r.createN[k.name] = d
	}
	if err := b.sleep(ctx, b.o.idleSettle); err != nil {
		return err
	}
	r.load = loadAverage()
	samples, err := b.sampleUsage(ctx, b.o.volumeWindow, b.kubelets()...)
	if err != nil {
		return err
	}
	for name, s := range samples {
		r.rss[name] = medianRSS(s)
	}
	for _, k := range b.kubelets() {
		d, err := b.deleteAllGone(ctx, k, names)
		if err != nil {
			return err
		}
		r.deleteN[k.name] = d
	}
	return nil
}

// volumeRows are the table's rows of the volumes scenario.
func (b *bench) volumeRows() []row {
	r := b.results.volumes
	med := func(m map[string][]time.Duration, name string) float64 { return median(m[name]).Seconds() }
	return []row{
		{what: fmt.Sprintf("volumes: API create → Ready, 1 pod with configMap + secret + token (median of %d)", b.o.volumeRounds),
			n: med(r.create1, "nodelet"), u: med(r.create1, "upstream"), aim: 0.6, duration: true},
		{what: fmt.Sprintf("volumes: 1 pod deleted → gone (median of %d)", b.o.volumeRounds),
			n: med(r.delete1, "nodelet"), u: med(r.delete1, "upstream"), duration: true},
		{what: fmt.Sprintf("volumes: kubelet RSS with %d such pods (median)", b.o.volumePods),
			n: r.rss["nodelet"].rssMiB, u: r.rss["upstream"].rssMiB, unit: "MiB", aim: 0.5},
	}
}

// printVolumeContext prints the volumes scenario's samples and what its RSS is made of.
func (b *bench) printVolumeContext(out *os.File) {
	r := b.results.volumes
	fmt.Fprintf(out, "\nvolumes: pods with a configMap volume, a secret volume and the default projected kube-api-access-* token volume; the container checks a file of each before it sleeps\n")
	fmt.Fprintf(out, "  samples in round order (s): create → Ready nodelet %s | upstream %s; delete → gone nodelet %s | upstream %s\n",
		seconds(r.create1["nodelet"]), seconds(r.create1["upstream"]), seconds(r.delete1["nodelet"]), seconds(r.delete1["upstream"]))
	fmt.Fprintf(out, "  %d pods created at once → all Ready (1 sample): nodelet %.1f s, upstream %.1f s; deleted → all gone: nodelet %.1f s, upstream %.1f s\n",
		b.o.volumePods, r.createN["nodelet"].Seconds(), r.createN["upstream"].Seconds(), r.deleteN["nodelet"].Seconds(), r.deleteN["upstream"].Seconds())
	var split []string
	for _, name := range []string{"nodelet", "upstream"} {
		u := r.rss[name]
		split = append(split, fmt.Sprintf("%s %.1f MiB anonymous + %.1f MiB file-backed", name, u.anonMiB, u.fileMiB))
	}
	fmt.Fprintf(out, "  RSS with %d pods each (over %.0f s, after %.0f s settling; load average %s): %s\n",
		b.o.volumePods, b.o.volumeWindow.Seconds(), b.o.idleSettle.Seconds(), r.load, strings.Join(split, "; "))
}
