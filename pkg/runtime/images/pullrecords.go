package images

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/klog/v2"
	kcv1alpha1 "k8s.io/kubelet/config/v1alpha1"
	kc "k8s.io/kubelet/config/v1beta1"
)

// The records of image pulls (KEP-2535) live where upstream's kubelet keeps them, in the
// same format, so that a node switched between the two keeps them both ways:
//
//	<root-dir>/image_manager/pulling/sha256-<hex SHA-256 of the container's image field>
//	<root-dir>/image_manager/pulled/sha256-<hex SHA-256 of the image ref from the CRI>
//
// Each file holds one JSON object of kubelet.config.k8s.io/v1beta1 (ImagePullIntent,
// ImagePulledRecord) as upstream's JSON serializer writes it: compact, with a trailing
// newline, kind and apiVersion first. v1alpha1 files (upstream before v1.35) are read
// and rewritten as v1beta1 at start, as upstream's recordsVersionMigration does. Files
// are written to "<name>.tmp" and renamed into place; files not named sha256-*, and
// *.tmp files, are ignored.
const (
	pullRecordsDir         = "image_manager"
	pullingDir             = "pulling"
	pulledDir              = "pulled"
	cacheFilesSHA256Prefix = "sha256-"
	tmpFilesSuffix         = ".tmp"
)

// pullRecordsAccessor reads and writes the pull intents (keyed by the container's image
// field) and pulled records (keyed by image ref); upstream's PullRecordsAccessor.
type pullRecordsAccessor interface {
	// ListImagePullIntents lists the intents that decode; an error says some did not.
	ListImagePullIntents() ([]*kc.ImagePullIntent, error)
	ImagePullIntentExists(image string) (bool, error)
	WriteImagePullIntent(image string) error
	DeleteImagePullIntent(image string) error

	// ListImagePulledRecords lists the records that decode; an error says some did not.
	ListImagePulledRecords() ([]*kc.ImagePulledRecord, error)
	// GetImagePulledRecord returns the record of imageRef. A file that does not decode
	// is exists=true with the error.
	GetImagePulledRecord(imageRef string) (record *kc.ImagePulledRecord, exists bool, err error)
	WriteImagePulledRecord(record *kc.ImagePulledRecord) error
	DeleteImagePulledRecord(imageRef string) error
}

// fsPullRecords keeps the records in files (upstream's fsPullRecordsAccessor).
type fsPullRecords struct {
	pullingDir, pulledDir string
	decoder               runtime.Decoder
}

var _ pullRecordsAccessor = (*fsPullRecords)(nil)

// newFSPullRecords makes the record directories under rootDir (0700, as upstream) and
// migrates v1alpha1 files to v1beta1.
func newFSPullRecords(logger klog.Logger, rootDir string) (*fsPullRecords, error) {
	f := &fsPullRecords{
		pullingDir: filepath.Join(rootDir, pullRecordsDir, pullingDir),
		pulledDir:  filepath.Join(rootDir, pullRecordsDir, pulledDir),
		decoder:    recordsDecoder(),
	}
	for _, dir := range []string{f.pullingDir, f.pulledDir} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, err
		}
	}
	f.migrate(logger)
	return f, nil
}

// recordsDecoder decodes both API versions strictly (unknown or duplicate fields are
// errors), as upstream's decoder with serializer.EnableStrict.
func recordsDecoder() runtime.Decoder {
	scheme := runtime.NewScheme()
	utilruntime.Must(kc.AddToScheme(scheme))
	utilruntime.Must(kcv1alpha1.AddToScheme(scheme))
	return serializer.NewCodecFactory(scheme, serializer.EnableStrict).UniversalDeserializer()
}

// migrate rewrites v1alpha1 intents and records as v1beta1.
func (f *fsPullRecords) migrate(logger klog.Logger) {
	err := processDirFiles(f.pullingDir, func(path string, content []byte) error {
		intent, current, err := f.decodeIntent(content)
		if err != nil {
			return fmt.Errorf("failed to decode ImagePullIntent from file %q: %w", path, err)
		}
		if !current {
			if err := f.WriteImagePullIntent(intent.Image); err != nil {
				return fmt.Errorf("failed to migrate ImagePullIntent for image %q to the current version: %w", intent.Image, err)
			}
		}
		return nil
	})
	if err != nil {
		logger.Error(err, "Error migrating image pull intents")
	}
	err = processDirFiles(f.pulledDir, func(path string, content []byte) error {
		record, current, err := f.decodePulledRecord(content)
		if err != nil {
			return fmt.Errorf("failed to decode ImagePulledRecord from file %q: %w", path, err)
		}
		if !current {
			if err := f.WriteImagePulledRecord(record); err != nil {
				return fmt.Errorf("failed to migrate ImagePulledRecord for image ref %q to the current version: %w", record.ImageRef, err)
			}
		}
		return nil
	})
	if err != nil {
		logger.Error(err, "Error migrating image pulled records")
	}
}

// WriteImagePullIntent implements pullRecordsAccessor.
func (f *fsPullRecords) WriteImagePullIntent(image string) error {
	data, err := encodeRecord(&kc.ImagePullIntent{TypeMeta: typeMeta("ImagePullIntent"), Image: image})
	if err != nil {
		return err
	}
	return writeFileAtomic(f.pullingDir, cacheFilename(image), data)
}

// ListImagePullIntents implements pullRecordsAccessor.
func (f *fsPullRecords) ListImagePullIntents() ([]*kc.ImagePullIntent, error) {
	var intents []*kc.ImagePullIntent
	err := processDirFiles(f.pullingDir, func(path string, content []byte) error {
		intent, _, err := f.decodeIntent(content)
		if err != nil {
			return fmt.Errorf("failed to deserialize content of file %q into ImagePullIntent: %w", path, err)
		}
		intents = append(intents, intent)
		return nil
	})
	return intents, err
}

// ImagePullIntentExists implements pullRecordsAccessor: the file must name the image
// itself (not only hash to the same name).
func (f *fsPullRecords) ImagePullIntentExists(image string) (bool, error) {
	content, err := os.ReadFile(filepath.Join(f.pullingDir, cacheFilename(image)))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	} else if err != nil {
		return false, err
	}
	intent, _, err := f.decodeIntent(content)
	if err != nil {
		return false, err
	}
	return intent.Image == image, nil
}

// DeleteImagePullIntent implements pullRecordsAccessor; a missing file is no error.
func (f *fsPullRecords) DeleteImagePullIntent(image string) error {
	return removeIfExists(filepath.Join(f.pullingDir, cacheFilename(image)))
}

// GetImagePulledRecord implements pullRecordsAccessor.
func (f *fsPullRecords) GetImagePulledRecord(imageRef string) (*kc.ImagePulledRecord, bool, error) {
	content, err := os.ReadFile(filepath.Join(f.pulledDir, cacheFilename(imageRef)))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	} else if err != nil {
		return nil, false, err
	}
	record, _, err := f.decodePulledRecord(content)
	if err != nil {
		return nil, true, err
	}
	if record.ImageRef != imageRef {
		return nil, false, nil
	}
	return record, true, nil
}

// ListImagePulledRecords implements pullRecordsAccessor.
func (f *fsPullRecords) ListImagePulledRecords() ([]*kc.ImagePulledRecord, error) {
	var records []*kc.ImagePulledRecord
	err := processDirFiles(f.pulledDir, func(path string, content []byte) error {
		record, _, err := f.decodePulledRecord(content)
		if err != nil {
			return fmt.Errorf("failed to deserialize content of file %q into ImagePulledRecord: %w", path, err)
		}
		records = append(records, record)
		return nil
	})
	return records, err
}

// WriteImagePulledRecord implements pullRecordsAccessor.
func (f *fsPullRecords) WriteImagePulledRecord(record *kc.ImagePulledRecord) error {
	out := record.DeepCopy()
	out.TypeMeta = typeMeta("ImagePulledRecord")
	data, err := encodeRecord(out)
	if err != nil {
		return fmt.Errorf("failed to serialize ImagePulledRecord: %w", err)
	}
	return writeFileAtomic(f.pulledDir, cacheFilename(record.ImageRef), data)
}

// DeleteImagePulledRecord implements pullRecordsAccessor; a missing file is no error.
func (f *fsPullRecords) DeleteImagePulledRecord(imageRef string) error {
	return removeIfExists(filepath.Join(f.pulledDir, cacheFilename(imageRef)))
}

// decodeIntent decodes a v1beta1 or v1alpha1 intent; current says it was v1beta1.
func (f *fsPullRecords) decodeIntent(content []byte) (intent *kc.ImagePullIntent, current bool, err error) {
	obj, _, err := f.decoder.Decode(content, nil, nil)
	if err != nil {
		return nil, false, err
	}
	switch o := obj.(type) {
	case *kc.ImagePullIntent:
		return o, true, nil
	case *kcv1alpha1.ImagePullIntent:
		return &kc.ImagePullIntent{TypeMeta: typeMeta("ImagePullIntent"), Image: o.Image}, false, nil
	}
	return nil, false, fmt.Errorf("failed to convert object to *ImagePullIntent: %T", obj)
}

// decodePulledRecord decodes a v1beta1 or v1alpha1 record; current says it was v1beta1.
func (f *fsPullRecords) decodePulledRecord(content []byte) (record *kc.ImagePulledRecord, current bool, err error) {
	obj, _, err := f.decoder.Decode(content, nil, nil)
	if err != nil {
		return nil, false, err
	}
	switch o := obj.(type) {
	case *kc.ImagePulledRecord:
		return o, true, nil
	case *kcv1alpha1.ImagePulledRecord:
		return pulledRecordFromV1alpha1(o), false, nil
	}
	return nil, false, fmt.Errorf("failed to convert object to *ImagePulledRecord: %T", obj)
}

// pulledRecordFromV1alpha1 converts a v1alpha1 record; the two versions have the same
// fields.
func pulledRecordFromV1alpha1(in *kcv1alpha1.ImagePulledRecord) *kc.ImagePulledRecord {
	out := &kc.ImagePulledRecord{TypeMeta: typeMeta("ImagePulledRecord"), LastUpdatedTime: in.LastUpdatedTime, ImageRef: in.ImageRef}
	if in.CredentialMapping != nil {
		out.CredentialMapping = make(map[string]kc.ImagePullCredentials, len(in.CredentialMapping))
	}
	for image, creds := range in.CredentialMapping {
		var c kc.ImagePullCredentials
		c.NodePodsAccessible = creds.NodePodsAccessible
		for _, s := range creds.KubernetesSecrets {
			c.KubernetesSecrets = append(c.KubernetesSecrets, kc.ImagePullSecret{UID: s.UID, Namespace: s.Namespace, Name: s.Name, CredentialHash: s.CredentialHash})
		}
		for _, sa := range creds.KubernetesServiceAccounts {
			c.KubernetesServiceAccounts = append(c.KubernetesServiceAccounts, kc.ImagePullServiceAccount{UID: sa.UID, Namespace: sa.Namespace, Name: sa.Name})
		}
		out.CredentialMapping[image] = c
	}
	return out
}

func typeMeta(kind string) metav1.TypeMeta {
	return metav1.TypeMeta{Kind: kind, APIVersion: kc.SchemeGroupVersion.String()}
}

// encodeRecord writes obj as upstream's JSON serializer does (json.Encoder: compact, HTML
// escaped, newline-terminated).
func encodeRecord(obj any) ([]byte, error) {
	var buf bytes.Buffer
	if err := json.NewEncoder(&buf).Encode(obj); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// cacheFilename is the file name of a record: "sha256-" and the hex SHA-256 of key.
func cacheFilename(key string) string {
	return fmt.Sprintf("%s%x", cacheFilesSHA256Prefix, sha256.Sum256([]byte(key)))
}

// writeFileAtomic writes content to dir/name through a temporary file and a rename.
func writeFileAtomic(dir, name string, content []byte) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("failed to create directory %q: %w", dir, err)
	}
	target := filepath.Join(dir, name)
	tmp := target + tmpFilesSuffix
	if err := os.WriteFile(tmp, content, 0o600); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("failed to create temporary file %q: %w", tmp, err)
	}
	if err := os.Rename(tmp, target); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return nil
}

func removeIfExists(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// processDirFiles calls action on each record file directly in dir, collecting errors.
func processDirFiles(dir string, action func(path string, content []byte) error) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasPrefix(name, cacheFilesSHA256Prefix) || strings.HasSuffix(name, tmpFilesSuffix) {
			continue
		}
		path := filepath.Join(dir, name)
		content, err := os.ReadFile(path)
		if err != nil {
			errs = append(errs, fmt.Errorf("failed to read %q: %w", path, err))
			continue
		}
		if err := action(path, content); err != nil {
			errs = append(errs, err)
		}
	}
	return utilerrors.NewAggregate(errs)
}
