package images

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
	kc "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/pkg/runtime/container"
)

// writeRecordWhileMatchingLimit is upstream's bound on the secrets a record collects
// while only being matched (not pulled with), against namespace churn.
const writeRecordWhileMatchingLimit = 100

// GetPodCredentials returns, when first needed, the credentials a pod brings for an image:
// the coordinates and hash of each pull secret credential matching the image, and the
// service account a credential provider was given a token of (nodelet runs no credential
// provider plugins, so it is nil).
type GetPodCredentials func() ([]kc.ImagePullSecret, *kc.ImagePullServiceAccount, error)

// ImagePullManager keeps the records of the image pulls the kubelet made, with the
// credentials that made them, and decides whether a pod must pull an image again to show
// it may use it (KEP-2535, feature KubeletEnsureSecretPulledImages; upstream's
// pullmanager.ImagePullManager). image arguments are the container's image field as
// written; imageRef is the image's ID as the runtime reports it.
type ImagePullManager interface {
	// RecordPullIntent records, before a pull, that the image is being pulled. Each call
	// is matched by one RecordImagePulled or RecordImagePullFailed.
	RecordPullIntent(image string) error
	// RecordImagePulled records that image was pulled as imageRef with credentials
	// (nil: unknown; the record then makes every pod verify).
	RecordImagePulled(ctx context.Context, image, imageRef string, credentials *kc.ImagePullCredentials)
	// RecordImagePullFailed ends a pull intent without a record.
	RecordImagePullFailed(ctx context.Context, image string)
	// MustAttemptImagePull says whether the pod must pull the present image imageRef to
	// use it: by the policy, and then by whether a record lets the pod's credentials (from
	// getPodCredentials, asked only when needed) use it. An error from getPodCredentials
	// is returned with true.
	MustAttemptImagePull(ctx context.Context, image, imageRef string, getPodCredentials GetPodCredentials) (bool, error)
	// PruneUnknownRecords deletes the pulled records of images that are not in
	// imageRefs and were last updated before until (a time taken before imageRefs was
	// listed). The image garbage collector calls it after a collection.
	PruneUnknownRecords(ctx context.Context, imageRefs []string, until time.Time)
}

// PullManagerOptions configure NewPullManager.
type PullManagerOptions struct {
	// RootDir is the kubelet's root directory: the records are under image_manager/.
	RootDir string
	// Policy is the credential verification policy (NewCredentialVerificationPolicy).
	Policy CredentialVerificationPolicy
	// Images lists the runtime's images at start, to turn the intents a previous run
	// left behind into records.
	Images container.ImageService
	// MaxPods and MaxParallelImagePulls size the in-memory caches as upstream: intents
	// max(2*MaxPods, 2*MaxParallelImagePulls) up to 1024, records 5*MaxPods up to 2000.
	MaxPods, MaxParallelImagePulls int32
	// Clock stamps the records' lastUpdatedTime; nil is the real clock.
	Clock clock.PassiveClock
}

// PullManager is the ImagePullManager over the records in <RootDir>/image_manager/
// (upstream's PullManager).
type PullManager struct {
	records pullRecordsAccessor
	policy  CredentialVerificationPolicy
	images  container.ImageService
	clock   clock.PassiveClock

	intentLocks *stripedLocks
	// intentCounts counts the pulls of each image in flight (image → int32).
	intentCounts sync.Map
	pulledLocks  *stripedLocks
}

var _ ImagePullManager = (*PullManager)(nil)

// NewPullManager opens (creating) the record directories, migrates old records, warms the
// caches and turns the intents left by an interrupted run into records for the images
// the runtime has.
func NewPullManager(ctx context.Context, opts PullManagerOptions) (*PullManager, error) {
	if opts.Policy == nil {
		return nil, fmt.Errorf("images: a credential verification policy is required")
	}
	logger := klog.FromContext(ctx)
	fsRecords, err := newFSPullRecords(logger, opts.RootDir)
	if err != nil {
		return nil, fmt.Errorf("failed to setup the FSPullRecordsAccessor: %w", err)
	}
	locks := opts.MaxParallelImagePulls
	intentsSize := max(2*opts.MaxPods, 2*opts.MaxParallelImagePulls)
	pulledSize := 5 * opts.MaxPods
	return newPullManager(ctx, newCachedPullRecords(logger, fsRecords, intentsSize, pulledSize, locks), opts.Policy, opts.Images, opts.Clock, locks), nil
}

func newPullManager(ctx context.Context, records pullRecordsAccessor, policy CredentialVerificationPolicy, images container.ImageService, clk clock.PassiveClock, locks int32) *PullManager {
	if clk == nil {
		clk = clock.RealClock{}
	}
	m := &PullManager{
		records: records, policy: policy, images: images, clock: clk,
		intentLocks: newStripedLocks(locks), pulledLocks: newStripedLocks(locks),
	}
	m.initialize(ctx)
	return m
}

// RecordPullIntent implements ImagePullManager.
func (m *PullManager) RecordPullIntent(image string) error {
	m.intentLocks.Lock(image)
	defer m.intentLocks.Unlock(image)
	if err := m.records.WriteImagePullIntent(image); err != nil {
		return fmt.Errorf("failed to record image pull intent: %w", err)
	}
	m.intentCounts.Store(image, m.intentCount(image)+1)
	return nil
}

// RecordImagePulled implements ImagePullManager. When the record cannot be written the
// intent stays, so that the next start still counts the image as pulled by the kubelet.
func (m *PullManager) RecordImagePulled(ctx context.Context, image, imageRef string, credentials *kc.ImagePullCredentials) {
	if err := m.writePulledRecordIfChanged(ctx, image, imageRef, credentials); err != nil {
		klog.FromContext(ctx).Error(err, "failed to write image pulled record", "imageRef", imageRef)
		return
	}
	m.decrementIntent(ctx, image)
}

// RecordImagePullFailed implements ImagePullManager.
func (m *PullManager) RecordImagePullFailed(ctx context.Context, image string) {
	m.decrementIntent(ctx, image)
}

// decrementIntent ends one pull of image; the last one removes the intent file.
func (m *PullManager) decrementIntent(ctx context.Context, image string) {
	m.intentLocks.Lock(image)
	defer m.intentLocks.Unlock(image)
	if n := m.intentCount(image); n > 1 {
		m.intentCounts.Store(image, n-1)
		return
	}
	if err := m.records.DeleteImagePullIntent(image); err != nil {
		klog.FromContext(ctx).Error(err, "failed to remove image pull intent", "image", image)
		return
	}
	m.intentCounts.Delete(image)
}

func (m *PullManager) intentCount(image string) int32 {
	n, _ := m.intentCounts.Load(image)
	count, _ := n.(int32)
	return count
}

// writePulledRecordIfChanged creates imageRef's record, or merges credentials into it
// under image without tag or digest. A new record with nil credentials has no mapping for
// the image: it marks the image as pulled by the kubelet, and every pod must verify.
func (m *PullManager) writePulledRecordIfChanged(ctx context.Context, image, imageRef string, credentials *kc.ImagePullCredentials) error {
	m.pulledLocks.Lock(imageRef)
	defer m.pulledLocks.Unlock(imageRef)
	name, err := trimImageTagDigest(image)
	if err != nil {
		return fmt.Errorf("invalid image name %q: %w", image, err)
	}
	record, _, err := m.records.GetImagePulledRecord(imageRef)
	if err != nil {
		klog.FromContext(ctx).Info("failed to retrieve an ImagePulledRecord", "image", image, "err", err)
		record = nil
	}
	changed := true
	if record == nil {
		record = &kc.ImagePulledRecord{
			LastUpdatedTime:   metav1.NewTime(m.clock.Now()),
			ImageRef:          imageRef,
			CredentialMapping: map[string]kc.ImagePullCredentials{},
		}
		if credentials != nil {
			record.CredentialMapping[name] = *credentials
		}
	} else {
		record, changed = mergePulledRecordCredentials(record, name, credentials, m.clock.Now())
	}
	if !changed {
		return nil
	}
	return m.records.WriteImagePulledRecord(record)
}

// MustAttemptImagePull implements ImagePullManager.
func (m *PullManager) MustAttemptImagePull(ctx context.Context, image, imageRef string, getPodCredentials GetPodCredentials) (bool, error) {
	if imageRef == "" {
		return true, nil
	}
	logger := klog.FromContext(ctx)
	record, pulledByKubelet, err := m.pulledState(image, imageRef)
	if err != nil {
		logger.Error(err, "Unable to access cache records about image pulls")
		return true, nil
	}
	if !m.policy.RequireCredentialVerificationForImage(image, pulledByKubelet) {
		return false, nil
	}
	if record == nil {
		// Verification is required and nothing says who may use the image.
		return true, nil
	}
	name, err := trimImageTagDigest(image)
	if err != nil {
		logger.Error(err, "failed to parse image name, forcing image credentials reverification", "image", image)
		return true, nil
	}
	cached, ok := record.CredentialMapping[name]
	if !ok {
		return true, nil
	}
	if cached.NodePodsAccessible {
		return false, nil
	}
	if len(cached.KubernetesSecrets) == 0 && len(cached.KubernetesServiceAccounts) == 0 {
		return true, nil
	}
	podSecrets, podServiceAccount, err := getPodCredentials()
	if err != nil {
		return true, err
	}
	for _, podSecret := range podSecrets {
		for _, cachedSecret := range cached.KubernetesSecrets {
			// An empty hash (hashing failed when the record was written) matches nothing.
			hashesMatch := cachedSecret.CredentialHash != "" && podSecret.CredentialHash == cachedSecret.CredentialHash
			coordinatesMatch := podSecret.UID == cachedSecret.UID && podSecret.Namespace == cachedSecret.Namespace && podSecret.Name == cachedSecret.Name
			if hashesMatch {
				// The same credential in another secret: remember that secret too.
				if !coordinatesMatch && len(cached.KubernetesSecrets) < writeRecordWhileMatchingLimit {
					m.rememberSecret(ctx, image, imageRef, podSecret)
				}
				return false, nil
			}
			if coordinatesMatch {
				// The secret that pulled the image, since rotated: remember its new hash.
				if len(cached.KubernetesSecrets) < writeRecordWhileMatchingLimit {
					m.rememberSecret(ctx, image, imageRef, podSecret)
					return false, nil
				}
			}
		}
	}
	if podServiceAccount != nil && slices.Contains(cached.KubernetesServiceAccounts, *podServiceAccount) {
		return false, nil
	}
	return true, nil
}

// pulledState reads imageRef's record and whether the kubelet pulled image: a record, or
// a pull of it in flight, or an intent left by an earlier run.
func (m *PullManager) pulledState(image, imageRef string) (*kc.ImagePulledRecord, bool, error) {
	m.pulledLocks.Lock(imageRef)
	defer m.pulledLocks.Unlock(imageRef)
	m.intentLocks.Lock(image)
	defer m.intentLocks.Unlock(image)
	record, exists, err := m.records.GetImagePulledRecord(imageRef)
	switch {
	case err != nil:
		return nil, false, err
	case exists || record != nil:
		return record, true, nil
	case m.intentCount(image) > 0:
		return nil, true, nil
	}
	exists, err = m.records.ImagePullIntentExists(image)
	if err != nil {
		return nil, false, fmt.Errorf("failed to check existence of an image pull intent: %w", err)
	}
	return nil, exists, nil
}

func (m *PullManager) rememberSecret(ctx context.Context, image, imageRef string, secret kc.ImagePullSecret) {
	creds := &kc.ImagePullCredentials{KubernetesSecrets: []kc.ImagePullSecret{secret}}
	if err := m.writePulledRecordIfChanged(ctx, image, imageRef, creds); err != nil {
		klog.FromContext(ctx).Error(err, "failed to write an image pulled record", "image", image, "imageRef", imageRef)
	}
}

// PruneUnknownRecords implements ImagePullManager.
func (m *PullManager) PruneUnknownRecords(ctx context.Context, imageRefs []string, until time.Time) {
	m.pulledLocks.GlobalLock()
	defer m.pulledLocks.GlobalUnlock()
	logger := klog.FromContext(ctx)
	records, err := m.records.ListImagePulledRecords()
	if err != nil {
		logger.Error(err, "there were errors listing ImagePulledRecords, garbage collection will proceed with incomplete records list")
	}
	present := sets.New(imageRefs...)
	for _, r := range records {
		if !r.LastUpdatedTime.Time.Before(until) || present.Has(r.ImageRef) {
			continue
		}
		if err := m.records.DeleteImagePulledRecord(r.ImageRef); err != nil {
			logger.Error(err, "failed to remove an ImagePulledRecord", "imageRef", r.ImageRef)
		}
	}
}

// initialize turns the intents a previous run left (a pull it did not see end) into
// records without credentials, for the images the runtime has by one of the intents'
// names (a tag or digest reference, compared as written); their intents go. Intents of
// images the runtime does not have stay: they still mark the image as pulled by the
// kubelet.
func (m *PullManager) initialize(ctx context.Context) {
	logger := klog.FromContext(ctx)
	intents, err := m.records.ListImagePullIntents()
	if err != nil {
		logger.Error(err, "there were errors listing ImagePullIntents, continuing with an incomplete records list")
	}
	if len(intents) == 0 || m.images == nil {
		return
	}
	images, err := m.images.ListImages(ctx)
	if err != nil {
		logger.Error(err, "failed to list images")
	}
	inFlight := sets.New[string]()
	for _, intent := range intents {
		inFlight.Insert(intent.Image)
	}
	for _, img := range images {
		found := sets.New[string]()
		for _, name := range append(slices.Clone(img.RepoDigests), img.RepoTags...) {
			if inFlight.Has(name) {
				found.Insert(name)
			}
		}
		for _, image := range sets.List(found) {
			if err := m.writePulledRecordIfChanged(ctx, image, img.ID, nil); err != nil {
				logger.Error(err, "failed to write an image pull record", "imageRef", img.ID)
				continue
			}
			if err := m.records.DeleteImagePullIntent(image); err != nil {
				logger.V(2).Info("failed to remove image pull intent file", "imageName", image, "error", err)
			}
		}
	}
}

// mergePulledRecordCredentials merges creds into the record's entry for image (without
// tag or digest) and says whether the record changed (upstream's
// pulledRecordMergeNewCreds): node-wide access absorbs everything; otherwise secrets merge
// by coordinates (a new hash replaces the old) and service accounts as a set, both kept
// sorted by namespace, name, UID.
func mergePulledRecordCredentials(orig *kc.ImagePulledRecord, image string, creds *kc.ImagePullCredentials, now time.Time) (*kc.ImagePulledRecord, bool) {
	if creds == nil || (!creds.NodePodsAccessible && len(creds.KubernetesSecrets) == 0 && len(creds.KubernetesServiceAccounts) == 0) {
		return orig, false
	}
	selected, found := orig.CredentialMapping[image]
	if found && selected.NodePodsAccessible {
		return orig, false
	}
	switch {
	case !found:
		selected = *creds
	case creds.NodePodsAccessible:
		selected = kc.ImagePullCredentials{NodePodsAccessible: true}
	case len(creds.KubernetesSecrets) > 0:
		var changed bool
		if selected.KubernetesSecrets, changed = mergePullSecrets(selected.KubernetesSecrets, creds.KubernetesSecrets); !changed {
			return orig, false
		}
	default:
		var changed bool
		if selected.KubernetesServiceAccounts, changed = mergePullServiceAccounts(selected.KubernetesServiceAccounts, creds.KubernetesServiceAccounts); !changed {
			return orig, false
		}
	}
	out := orig.DeepCopy()
	if out.CredentialMapping == nil {
		out.CredentialMapping = map[string]kc.ImagePullCredentials{}
	}
	out.CredentialMapping[image] = selected
	out.LastUpdatedTime = metav1.NewTime(now)
	return out, true
}

type secretCoordinates struct{ uid, namespace, name string }

func mergePullSecrets(orig, added []kc.ImagePullSecret) ([]kc.ImagePullSecret, bool) {
	hashes := map[secretCoordinates]string{}
	for _, s := range orig {
		hashes[secretCoordinates{s.UID, s.Namespace, s.Name}] = s.CredentialHash
	}
	changed := false
	for _, s := range added {
		key := secretCoordinates{s.UID, s.Namespace, s.Name}
		if hash, ok := hashes[key]; !ok || hash != s.CredentialHash {
			hashes[key] = s.CredentialHash
			changed = true
		}
	}
	if !changed {
		return orig, false
	}
	out := make([]kc.ImagePullSecret, 0, len(hashes))
	for k, hash := range hashes {
		out = append(out, kc.ImagePullSecret{UID: k.uid, Namespace: k.namespace, Name: k.name, CredentialHash: hash})
	}
	slices.SortFunc(out, func(a, b kc.ImagePullSecret) int {
		return compareCoordinates(a.Namespace, a.Name, a.UID, b.Namespace, b.Name, b.UID)
	})
	return out, true
}

func mergePullServiceAccounts(orig, added []kc.ImagePullServiceAccount) ([]kc.ImagePullServiceAccount, bool) {
	set := sets.New(orig...)
	changed := false
	for _, sa := range added {
		if !set.Has(sa) {
			set.Insert(sa)
			changed = true
		}
	}
	if !changed {
		return orig, false
	}
	out := set.UnsortedList()
	slices.SortFunc(out, func(a, b kc.ImagePullServiceAccount) int {
		return compareCoordinates(a.Namespace, a.Name, a.UID, b.Namespace, b.Name, b.UID)
	})
	return out, true
}

func compareCoordinates(ns1, name1, uid1, ns2, name2, uid2 string) int {
	if c := strings.Compare(ns1, ns2); c != 0 {
		return c
	}
	if c := strings.Compare(name1, name2); c != 0 {
		return c
	}
	return strings.Compare(uid1, uid2)
}

// credentialsOfPull is what a record keeps of the credential that pulled an image
// (upstream's trackedToImagePullCreds): an anonymous pull or the node's own credentials
// let every pod of the node use it; a pull secret or service account, that one.
func credentialsOfPull(used *TrackedAuthConfig) *kc.ImagePullCredentials {
	switch {
	case used == nil, used.Source == nil:
		return &kc.ImagePullCredentials{NodePodsAccessible: true}
	case used.Source.Secret != nil:
		s := used.Source.Secret
		return &kc.ImagePullCredentials{KubernetesSecrets: []kc.ImagePullSecret{{UID: s.UID, Namespace: s.Namespace, Name: s.Name, CredentialHash: used.AuthConfigHash}}}
	case used.Source.ServiceAccount != nil:
		sa := used.Source.ServiceAccount
		return &kc.ImagePullCredentials{KubernetesServiceAccounts: []kc.ImagePullServiceAccount{{UID: sa.UID, Namespace: sa.Namespace, Name: sa.Name}}}
	}
	return &kc.ImagePullCredentials{}
}
