// Package mirror creates and deletes mirror pods: the API server's read-only copies of the
// static pods a node runs from files or a URL (upstream's pkg/kubelet/pod mirror client).
// A mirror pod carries the static pod's hash in kubernetes.io/config.mirror and is owned by
// the Node, so it disappears with the node.
package mirror

import (
	"context"
	"errors"
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/kubetypes"
)

// NodeUID returns the UID of this node's Node object, or an error wrapping ErrNoNode
// while there is none to own mirror pods (not registered yet, or being deleted).
type NodeUID func() (types.UID, error)

// ErrNoNode: no Node object can own a mirror pod now; static pods run without one until
// the node is registered.
var ErrNoNode = errors.New("no node object to own mirror pods")

// Client creates and deletes mirror pods.
type Client struct {
	client   kubernetes.Interface
	nodeName string
	nodeUID  NodeUID
}

// NewClient returns a mirror pod client for nodeName.
func NewClient(client kubernetes.Interface, nodeName string, nodeUID NodeUID) *Client {
	return &Client{client: client, nodeName: nodeName, nodeUID: nodeUID}
}

// CreateMirrorPod creates the mirror of a static pod. A mirror pod of the same hash that
// already exists is success.
func (c *Client) CreateMirrorPod(ctx context.Context, pod *v1.Pod) error {
	uid, err := c.nodeUID()
	if err != nil {
		return err
	}
	mirror := pod.DeepCopy()
	hash := pod.Annotations[kubetypes.ConfigHashAnnotationKey]
	mirror.Annotations[kubetypes.ConfigMirrorAnnotationKey] = hash
	mirror.UID, mirror.ResourceVersion = "", ""
	mirror.Status = v1.PodStatus{}
	controller := true
	mirror.OwnerReferences = []metav1.OwnerReference{{
		APIVersion: "v1", Kind: "Node", Name: c.nodeName, UID: uid, Controller: &controller,
	}}
	created, err := c.client.CoreV1().Pods(mirror.Namespace).Create(ctx, mirror, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		existing, getErr := c.client.CoreV1().Pods(mirror.Namespace).Get(ctx, mirror.Name, metav1.GetOptions{})
		if getErr == nil && existing.Annotations[kubetypes.ConfigMirrorAnnotationKey] == hash {
			return nil
		}
		return err
	}
	if err != nil {
		return err
	}
	klog.V(2).InfoS("Created mirror pod", "pod", klog.KObj(created), "podUID", created.UID)
	return nil
}

// DeleteMirrorPod deletes the mirror pod named by its full name ("name_namespace") at once;
// with uid set, only if it still is that pod. It reports whether a pod was deleted.
func (c *Client) DeleteMirrorPod(ctx context.Context, podFullName string, uid *types.UID) (bool, error) {
	name, namespace, err := parseFullName(podFullName)
	if err != nil {
		return false, err
	}
	zero := int64(0)
	opts := metav1.DeleteOptions{GracePeriodSeconds: &zero}
	if uid != nil {
		opts.Preconditions = metav1.NewUIDPreconditions(string(*uid))
	}
	klog.V(2).InfoS("Deleting a mirror pod", "pod", klog.KRef(namespace, name), "podUID", uid)
	err = c.client.CoreV1().Pods(namespace).Delete(ctx, name, opts)
	switch {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, err
	}
	return true, nil
}

// parseFullName splits upstream's pod full name, "name_namespace". Names and namespaces
// cannot contain "_", so the split is unambiguous.
func parseFullName(full string) (name, namespace string, err error) {
	parts := strings.Split(full, "_")
	if len(parts) != 2 || parts[0] == "" || parts[1] == "" {
		return "", "", fmt.Errorf("failed to parse the pod full name %q", full)
	}
	return parts[0], parts[1], nil
}
