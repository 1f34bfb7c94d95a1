package app

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/pkg/api/apiobjects"
	"github.com/nodelet/nodelet/pkg/api/events"
	"github.com/nodelet/nodelet/pkg/api/kubeclient"
	"github.com/nodelet/nodelet/pkg/config"
	"github.com/nodelet/nodelet/pkg/node/nodestatus"
	"github.com/nodelet/nodelet/pkg/node/token"
	"github.com/nodelet/nodelet/pkg/node/volumes"
	"github.com/nodelet/nodelet/pkg/node/volumes/csi"
	"github.com/nodelet/nodelet/pkg/pod/mirror"
	"github.com/nodelet/nodelet/pkg/pod/podmanager"
	"github.com/nodelet/nodelet/pkg/pod/status"
	"github.com/nodelet/nodelet/pkg/runtime/criconfig"
	"github.com/nodelet/nodelet/pkg/runtime/kuberuntime"
	"github.com/nodelet/nodelet/pkg/runtime/runtimeclass"
)

// firstProbeTimeout bounds the start-up look at the API server.
const firstProbeTimeout = 2 * time.Second

// cluster is what a node joined to an API server adds to the pod loop (cluster mode):
// the clients, the secrets/config maps/services pods refer to, and the API event recorder.
// Standalone nodelet has none (a nil *cluster).
type cluster struct {
	clients *kubeclient.Clients
	objects *apiobjects.Sources
}

// connectCluster builds the API clients from --kubeconfig (bootstrapping a client
// certificate with --bootstrap-kubeconfig first when asked to, as upstream does). Without
// a kubeconfig nodelet runs standalone and this returns nil. An unreachable server is not
// an error: every client retries; a kubeconfig that cannot work (wrong CA, rejected
// credentials, unreadable) is one clear error.
func connectCluster(ctx context.Context, opts *config.Options, nodeName string, reg prometheus.Registerer) (*cluster, error) {
	if opts.KubeConfig == "" {
		if opts.BootstrapKubeconfig != "" {
			return nil, errors.New("--bootstrap-kubeconfig needs --kubeconfig: the path where the bootstrapped kubeconfig is written")
		}
		klog.InfoS("No kubeconfig given: running standalone, with pods from static sources only")
		return nil, nil
	}
	cfg := opts.Config
	clients, err := kubeclient.Build(ctx, kubeclient.Options{
		KubeConfig: opts.KubeConfig, BootstrapKubeconfig: opts.BootstrapKubeconfig, CertDir: opts.CertDirectory,
		NodeName: nodeName, RotateCertificates: cfg.RotateCertificates,
		QPS: float32(*cfg.KubeAPIQPS), Burst: int(cfg.KubeAPIBurst), ContentType: cfg.ContentType,
		EventQPS: float32(*cfg.EventRecordQPS), EventBurst: int(cfg.EventBurst),
		NodeStatusUpdateFrequency: cfg.NodeStatusUpdateFrequency.Duration,
		NodeLeaseDuration:         secondsDuration(cfg.NodeLeaseDurationSeconds),
		Registerer:                reg,
	})
	if err != nil {
		return nil, fmt.Errorf("%s", kubeclient.Describe(err))
	}
	klog.InfoS("Connecting to the API server", "server", clients.Server(), "kubeconfig", clients.Kubeconfig())
	// One look before anything starts, so that a kubeconfig that cannot work (untrusted
	// server, rejected credentials) stops nodelet with one line; an unreachable server
	// only costs this probe, and is waited for in the background.
	probeCtx, cancel := context.WithTimeout(ctx, firstProbeTimeout)
	err = clients.Probe(probeCtx)
	cancel()
	if kubeclient.IsPermanent(err) {
		clients.Stop()
		return nil, errors.New(kubeclient.Describe(err))
	}
	// "Get" reads every time; "Cache" reuses a read for a few seconds; "Watch"
	// (upstream's default) watches each object read, so that pods syncing every minute
	// do not read their volumes' objects again and again from the API server.
	strategy := cfg.ConfigMapAndSecretChangeDetectionStrategy
	objects := apiobjects.New(clients.Kube, apiobjects.Options{
		NoCache: strategy == kubeletconfigv1beta1.GetChangeDetectionStrategy,
		Watch:   strategy == kubeletconfigv1beta1.WatchChangeDetectionStrategy,
	})
	objects.Start(ctx)
	return &cluster{clients: clients, objects: objects}, nil
}

// recorder sends events to the API server in cluster mode, to the log standalone.
func (c *cluster) recorder(ctx context.Context, nodeName string) record.EventRecorder {
	if c == nil {
		return eventRecorder()
	}
	return events.NewAPIRecorder(ctx, c.clients.Events, nodeName)
}

// mirrorClient creates mirror pods for static pods, owned by this node's Node object.
func (c *cluster) mirrorClient(nodeName string, node *nodestatus.Controller) *mirror.Client {
	return mirror.NewClient(c.clients.Kube, nodeName, func() (types.UID, error) {
		n, err := node.Node(context.Background())
		if err != nil {
			return "", err
		}
		if n.UID == "" {
			return "", fmt.Errorf("%w: node %q is not registered yet", mirror.ErrNoNode, nodeName)
		}
		if n.DeletionTimestamp != nil {
			return "", fmt.Errorf("%w: node %q is being deleted", mirror.ErrNoNode, nodeName)
		}
		return n.UID, nil
	})
}

// nodeOf wraps the node status controller for admission: the Node as the API server has
// it, or the node nodelet would register (standalone, and before registration).
func nodeOf(ctx context.Context, node *nodestatus.Controller) func() (*v1.Node, error) {
	return func() (*v1.Node, error) { return node.Node(ctx) }
}

// nodeAllocatable is the node's allocatable resources, for downward-API limits a
// container leaves unset; nil while the node cannot be described.
func nodeAllocatable(ctx context.Context, node *nodestatus.Controller) func() v1.ResourceList {
	return func() v1.ResourceList {
		n, err := node.Node(ctx)
		if err != nil {
			return nil
		}
		return n.Status.Allocatable
	}
}

// envSources are the API objects container environments refer to; nil standalone (a nil
// interface, never a nil *Sources).
func (c *cluster) envSources() criconfig.EnvSources {
	if c == nil {
		return nil
	}
	return c.objects
}

// runtimeClasses resolves pods' RuntimeClasses: watched from the API server until ctx
// ends, or, standalone, refused (no API server to read them from).
func (c *cluster) runtimeClasses(ctx context.Context) kuberuntime.RuntimeClassLookup {
	if c == nil {
		return runtimeclass.Standalone{}
	}
	m := runtimeclass.NewManager(c.clients.Kube)
	m.Start(ctx.Done())
	return m
}

// volumeAPI serves the volume types made of API objects: config maps, secrets, claims
// and service-account tokens (whose expired entries are dropped until ctx ends).
// Standalone, only the downward API's node allocatable is known.
func (c *cluster) volumeAPI(ctx context.Context, nodeAllocatable func() v1.ResourceList, recorder record.EventRecorder) volumes.API {
	api := volumes.API{NodeAllocatable: nodeAllocatable, Recorder: recorder}
	if c == nil {
		return api
	}
	tokens := token.NewManagerForClient(c.clients.Kube, clock.RealClock{})
	go tokens.RunCleanup(ctx)
	api.Objects, api.Tokens, api.Claims, api.ClaimStatus = c.objects, tokens, c.objects, c.objects
	return api
}

// csiDrivers is the node's CSI driver registry. In cluster mode the drivers' volumes
// are published through it and it keeps the node's CSINode object, which it creates at
// start (upstream's InitializeCSINode); standalone drivers register but publish nothing.
func (c *cluster) csiDrivers(ctx context.Context, rootDir, nodeName string, vols *volumes.Manager) *csi.Manager {
	if c == nil {
		return csi.New(csi.Config{RootDir: rootDir, NodeName: nodeName})
	}
	drivers := csi.New(csi.Config{RootDir: rootDir, NodeName: nodeName, Client: c.clients.Kube})
	vols.SetCSI(drivers, csiObjects{c.clients.Kube}, nodeName)
	go func() {
		if err := drivers.InitializeNode(ctx); err != nil && ctx.Err() == nil {
			klog.ErrorS(err, "Failed to initialize the CSINode object")
		}
	}()
	return drivers
}

// csiObjects reads the CSIDriver and VolumeAttachment objects CSI volumes need.
type csiObjects struct{ client kubernetes.Interface }

func (o csiObjects) GetCSIDriver(ctx context.Context, name string) (*storagev1.CSIDriver, error) {
	d, err := o.client.StorageV1().CSIDrivers().Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return d, err
}

func (o csiObjects) GetVolumeAttachment(ctx context.Context, name string) (*storagev1.VolumeAttachment, error) {
	return o.client.StorageV1().VolumeAttachments().Get(ctx, name, metav1.GetOptions{})
}

// AttachedVolumes is the node's status.volumesAttached, read from the API server as
// upstream's VerifyControllerAttachedVolume does.
func (o csiObjects) AttachedVolumes(ctx context.Context, nodeName string) ([]v1.AttachedVolume, error) {
	node, err := o.client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	return node.Status.VolumesAttached, nil
}

// statusSyncer writes pod statuses to the API server; nil standalone.
func (c *cluster) statusSyncer(pods *podmanager.Manager, state *podStateProxy) status.PodStatusSyncer {
	if c == nil {
		return nil
	}
	return status.NewAPISyncer(c.clients.Kube, pods, state.CouldHaveRunningContainers)
}

func secondsDuration(s int32) time.Duration { return time.Duration(s) * time.Second }

// credentialsRefused delivers the error when the first contact with the API server shows
// that the kubeconfig cannot work (the server's certificate is not trusted, the credentials
// are rejected, the certificate request is denied): nodelet then stops with that one clear
// line rather than retrying forever. An unreachable server is waited for with back-off.
// Standalone, nothing is ever delivered.
func (c *cluster) credentialsRefused(ctx context.Context) <-chan error {
	refused := make(chan error, 1)
	if c == nil {
		return refused
	}
	go func() {
		if err := c.clients.WaitForServer(ctx); err != nil && kubeclient.IsPermanent(err) {
			refused <- errors.New(kubeclient.Describe(err))
		}
	}()
	return refused
}
