// Package payload computes the files of configMap, secret, downwardAPI and
// projected volumes: the map of relative path to content, mode and owner
// that the atomic writer puts on disk. It follows the kubelet's volume
// plugins (MakePayload and CollectData in pkg/volume/{configmap,secret,
// downwardapi,projected}) and does no I/O of its own beyond its getters.
package payload

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/nodelet/nodelet/pkg/node/volumes/atomic"
)

// DefaultMode is the mode of a volume file when neither the item nor the
// volume sets one; the API server defaults defaultMode to it, static pods
// may leave it unset.
const DefaultMode int32 = 0o644

// Objects reads the configMaps and secrets a pod refers to. A missing object
// is an API NotFound error (pkg/api/apiobjects.Sources satisfies this).
type Objects interface {
	GetConfigMap(ctx context.Context, namespace, name string) (*v1.ConfigMap, error)
	GetSecret(ctx context.Context, namespace, name string) (*v1.Secret, error)
}

// Files is a volume's payload: relative path to file.
type Files = map[string]atomic.FileProjection

// ConfigMap returns the files of a configMap volume.
func ConfigMap(ctx context.Context, pod *v1.Pod, src *v1.ConfigMapVolumeSource, objs Objects) (Files, error) {
	return configMapFiles(ctx, pod.Namespace, src.Name, src.Items, isTrue(src.Optional), modeOr(src.DefaultMode, DefaultMode), objs)
}

// Secret returns the files of a secret volume.
func Secret(ctx context.Context, pod *v1.Pod, src *v1.SecretVolumeSource, objs Objects) (Files, error) {
	return secretFiles(ctx, pod.Namespace, src.SecretName, src.Items, isTrue(src.Optional), modeOr(src.DefaultMode, DefaultMode), objs)
}

// configMapFiles projects a configMap's data and binaryData keys. A missing
// optional configMap gives no files.
func configMapFiles(ctx context.Context, namespace, name string, items []v1.KeyToPath, optional bool, mode int32, objs Objects) (Files, error) {
	if objs == nil {
		return nil, fmt.Errorf("cannot get configmap %s/%s: no API server", namespace, name)
	}
	cm, err := objs.GetConfigMap(ctx, namespace, name)
	if err != nil {
		if optional && apierrors.IsNotFound(err) {
			return Files{}, nil
		}
		return nil, err
	}
	data := make(map[string][]byte, len(cm.Data)+len(cm.BinaryData))
	for k, v := range cm.Data {
		data[k] = []byte(v)
	}
	for k, v := range cm.BinaryData {
		data[k] = v
	}
	return keyFiles(data, items, mode, optional, func(key string) error {
		return fmt.Errorf("configmap references non-existent config key: %s", key)
	})
}

// secretFiles projects a secret's data keys. A missing optional secret gives
// no files.
func secretFiles(ctx context.Context, namespace, name string, items []v1.KeyToPath, optional bool, mode int32, objs Objects) (Files, error) {
	if objs == nil {
		return nil, fmt.Errorf("cannot get secret %s/%s: no API server", namespace, name)
	}
	secret, err := objs.GetSecret(ctx, namespace, name)
	if err != nil {
		if optional && apierrors.IsNotFound(err) {
			return Files{}, nil
		}
		return nil, err
	}
	return keyFiles(secret.Data, items, mode, optional, func(key string) error {
		return fmt.Errorf("references non-existent secret key: %s", key)
	})
}

// keyFiles turns an object's keys into files: every key at its own name
// with the default mode when items is empty, else only the listed keys at
// their paths, each with its own mode or the default. A listed key the
// object lacks is skipped when the source is optional and an error
// otherwise.
func keyFiles(data map[string][]byte, items []v1.KeyToPath, defaultMode int32, optional bool, missingKey func(string) error) (Files, error) {
	files := make(Files, len(data))
	if len(items) == 0 {
		for k, v := range data {
			files[k] = atomic.FileProjection{Data: v, Mode: defaultMode}
		}
		return files, nil
	}
	for _, item := range items {
		v, ok := data[item.Key]
		if !ok {
			if optional {
				continue
			}
			return nil, missingKey(item.Key)
		}
		files[item.Path] = atomic.FileProjection{Data: v, Mode: modeOr(item.Mode, defaultMode)}
	}
	return files, nil
}

func modeOr(mode *int32, def int32) int32 {
	if mode != nil {
		return *mode
	}
	return def
}

func isTrue(b *bool) bool { return b != nil && *b }
