package credentialprovider

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	kubeletconfigv1 "k8s.io/kubelet/config/v1"
	kubeletconfigv1alpha1 "k8s.io/kubelet/config/v1alpha1"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/kubelet/pkg/apis/credentialprovider/install"
	credentialproviderv1 "k8s.io/kubelet/pkg/apis/credentialprovider/v1"
	credentialproviderv1alpha1 "k8s.io/kubelet/pkg/apis/credentialprovider/v1alpha1"
	credentialproviderv1beta1 "k8s.io/kubelet/pkg/apis/credentialprovider/v1beta1"
)

// scheme holds what upstream's plugin package registers in its one scheme: the three
// versions of kubelet.config.k8s.io (for the config) and the credentialprovider API
// (for requests and responses). Registering the same kinds makes decoding fail, or pick
// a kind, exactly where upstream's does.
var (
	scheme = runtime.NewScheme()
	codecs = serializer.NewCodecFactory(scheme, serializer.EnableStrict)
)

func init() {
	install.Install(scheme)
	utilruntime.Must(kubeletconfigv1alpha1.AddToScheme(scheme))
	utilruntime.Must(kubeletconfigv1beta1.AddToScheme(scheme))
	utilruntime.Must(kubeletconfigv1.AddToScheme(scheme))
}

// apiVersions are the CredentialProviderRequest versions a provider may ask for.
var apiVersions = map[string]schema.GroupVersion{
	credentialproviderv1alpha1.SchemeGroupVersion.String(): credentialproviderv1alpha1.SchemeGroupVersion,
	credentialproviderv1beta1.SchemeGroupVersion.String():  credentialproviderv1beta1.SchemeGroupVersion,
	credentialproviderv1.SchemeGroupVersion.String():       credentialproviderv1.SchemeGroupVersion,
}

// validCacheTypes are the tokenAttributes.cacheType values.
var validCacheTypes = sets.New(
	string(kubeletconfigv1.ServiceAccountServiceAccountTokenCacheType),
	string(kubeletconfigv1.TokenServiceAccountTokenCacheType),
)

// readConfig reads the config file at path or, when path is a directory, its *.json,
// *.yaml and *.yml files in lexical order, and returns their providers in order. It also
// returns the "sha256:<hex>" hash of the files' contents that
// kubelet_credential_provider_config_info reports (upstream's readCredentialProviderConfig).
func readConfig(path string) ([]kubeletconfigv1.CredentialProvider, string, error) {
	if path == "" {
		return nil, "", errors.New("credential provider config path is empty")
	}
	files, err := configFiles(path)
	if err != nil {
		return nil, "", err
	}
	hash := sha256.New()
	var perFile [][]kubeletconfigv1.CredentialProvider
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			return nil, "", fmt.Errorf("unable to read file %q: %w", file, err)
		}
		// Each file is prefixed with its length so that moving bytes from one file to the
		// next changes the hash.
		hash.Write(binary.BigEndian.AppendUint64(nil, uint64(len(data))))
		hash.Write(data)
		providers, err := decodeConfig(data)
		if err != nil {
			return nil, "", fmt.Errorf("error decoding config %q: %w", file, err)
		}
		perFile = append(perFile, providers)
	}
	// Every file is decoded before names are compared, so that a file that does not
	// decode is reported ahead of a duplicate, as upstream does.
	merged, err := mergeProviders(perFile)
	if err != nil {
		return nil, "", err
	}
	return merged, fmt.Sprintf("sha256:%x", hash.Sum(nil)), nil
}

// configFiles lists the files that make up the config at path.
func configFiles(path string) ([]string, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("unable to access path %q: %w", path, err)
	}
	if !info.IsDir() {
		return []string{path}, nil
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return nil, fmt.Errorf("unable to read directory %q: %w", path, err)
	}
	var files []string
	for _, e := range entries {
		switch filepath.Ext(e.Name()) {
		case ".json", ".yaml", ".yml":
			if !e.IsDir() {
				files = append(files, filepath.Join(path, e.Name()))
			}
		}
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no configuration files found in directory %q", path)
	}
	slices.Sort(files)
	return files, nil
}

// mergeProviders concatenates the providers of every file; a name may appear only once
// across all of them (and within one).
func mergeProviders(perFile [][]kubeletconfigv1.CredentialProvider) ([]kubeletconfigv1.CredentialProvider, error) {
	var merged []kubeletconfigv1.CredentialProvider
	seen := sets.New[string]()
	for _, providers := range perFile {
		for _, p := range providers {
			if seen.Has(p.Name) {
				return nil, fmt.Errorf("duplicate provider name %q found in configuration file(s)", p.Name)
			}
			seen.Insert(p.Name)
			merged = append(merged, p)
		}
	}
	return merged, nil
}

// decodeConfig strictly decodes one CredentialProviderConfig (JSON or YAML) of any of
// kubelet.config.k8s.io/v1alpha1, v1beta1 and v1, and returns its providers as v1 ones.
func decodeConfig(data []byte) ([]kubeletconfigv1.CredentialProvider, error) {
	obj, gvk, err := codecs.UniversalDeserializer().Decode(data, nil, nil)
	if err != nil {
		return nil, err
	}
	if gvk.Kind != "CredentialProviderConfig" {
		return nil, fmt.Errorf("failed to decode %q (wrong Kind)", gvk.Kind)
	}
	if gvk.Group != kubeletconfigv1.GroupName {
		return nil, fmt.Errorf("failed to decode CredentialProviderConfig, unexpected Group: %s", gvk.Group)
	}
	switch c := obj.(type) {
	case *kubeletconfigv1.CredentialProviderConfig:
		return c.Providers, nil
	case *kubeletconfigv1beta1.CredentialProviderConfig:
		return convertProviders(c.Providers, fromV1beta1), nil
	case *kubeletconfigv1alpha1.CredentialProviderConfig:
		return convertProviders(c.Providers, fromV1alpha1), nil
	}
	return nil, fmt.Errorf("unable to convert %T to *CredentialProviderConfig", obj)
}

func convertProviders[T any](in []T, convert func(T) kubeletconfigv1.CredentialProvider) []kubeletconfigv1.CredentialProvider {
	if in == nil {
		return nil
	}
	out := make([]kubeletconfigv1.CredentialProvider, 0, len(in))
	for _, p := range in {
		out = append(out, convert(p))
	}
	return out
}

// fromV1beta1 and fromV1alpha1 copy an older provider into a v1 one; those versions have
// no tokenAttributes.
func fromV1beta1(p kubeletconfigv1beta1.CredentialProvider) kubeletconfigv1.CredentialProvider {
	out := kubeletconfigv1.CredentialProvider{Name: p.Name, MatchImages: p.MatchImages,
		DefaultCacheDuration: p.DefaultCacheDuration, APIVersion: p.APIVersion, Args: p.Args}
	for _, e := range p.Env {
		out.Env = append(out.Env, kubeletconfigv1.ExecEnvVar{Name: e.Name, Value: e.Value})
	}
	return out
}

func fromV1alpha1(p kubeletconfigv1alpha1.CredentialProvider) kubeletconfigv1.CredentialProvider {
	out := kubeletconfigv1.CredentialProvider{Name: p.Name, MatchImages: p.MatchImages,
		DefaultCacheDuration: p.DefaultCacheDuration, APIVersion: p.APIVersion, Args: p.Args}
	for _, e := range p.Env {
		out.Env = append(out.Env, kubeletconfigv1.ExecEnvVar{Name: e.Name, Value: e.Value})
	}
	return out
}

// validateProviders is upstream's validateCredentialProviderConfig, with its paths and
// messages. Paths carry no list index ("providers.name"), as upstream's do.
// serviceAccountTokens is the KubeletServiceAccountTokenForCredentialProviders gate.
func validateProviders(providers []kubeletconfigv1.CredentialProvider, serviceAccountTokens bool) field.ErrorList {
	var errs field.ErrorList
	path := field.NewPath("providers")
	if len(providers) == 0 {
		errs = append(errs, field.Required(path, "at least 1 item in plugins is required"))
	}
	seen := sets.New[string]()
	for i := range providers {
		p := &providers[i]
		errs = append(errs, validateName(path.Child("name"), p.Name, seen)...)
		errs = append(errs, validateAPIVersion(path.Child("apiVersion"), p.APIVersion)...)
		errs = append(errs, validateMatchImages(path.Child("matchImages"), p.MatchImages)...)
		errs = append(errs, validateDefaultCacheDuration(path.Child("defaultCacheDuration"), p)...)
		if p.TokenAttributes != nil {
			errs = append(errs, validateTokenAttributes(path.Child("tokenAttributes"), p, serviceAccountTokens)...)
		}
	}
	return errs
}

// validateName keeps the name a plain file name of the bin directory.
func validateName(path *field.Path, name string, seen sets.Set[string]) field.ErrorList {
	var errs field.ErrorList
	if strings.Contains(name, "/") {
		errs = append(errs, field.Invalid(path, name, "provider name cannot contain '/'"))
	}
	if strings.Contains(name, " ") {
		errs = append(errs, field.Invalid(path, name, "provider name cannot contain spaces"))
	}
	if name == "." {
		errs = append(errs, field.Invalid(path, name, "provider name cannot be '.'"))
	}
	if name == ".." {
		errs = append(errs, field.Invalid(path, name, "provider name cannot be '..'"))
	}
	if seen.Has(name) {
		errs = append(errs, field.Duplicate(path, name))
	}
	seen.Insert(name)
	return errs
}

func validateAPIVersion(path *field.Path, apiVersion string) field.ErrorList {
	if apiVersion == "" {
		return field.ErrorList{field.Required(path, "")}
	}
	if _, ok := apiVersions[apiVersion]; !ok {
		return field.ErrorList{field.NotSupported(path, apiVersion, sets.List(sets.KeySet(apiVersions)))}
	}
	return nil
}

// validateMatchImages checks only that each pattern parses as a schemeless URL: a bad
// glob in a host label (say "[") is not caught here, and never matches.
func validateMatchImages(path *field.Path, matchImages []string) field.ErrorList {
	var errs field.ErrorList
	if len(matchImages) == 0 {
		errs = append(errs, field.Required(path, "at least 1 item in matchImages is required"))
	}
	for _, m := range matchImages {
		if _, err := parseSchemelessURL(m); err != nil {
			errs = append(errs, field.Invalid(path, m, fmt.Sprintf("match image is invalid: %s", err.Error())))
		}
	}
	return errs
}

func validateDefaultCacheDuration(path *field.Path, p *kubeletconfigv1.CredentialProvider) field.ErrorList {
	switch {
	case p.DefaultCacheDuration == nil:
		return field.ErrorList{field.Required(path, "")}
	case p.DefaultCacheDuration.Duration < 0:
		return field.ErrorList{field.Invalid(path, p.DefaultCacheDuration, "must be greater than or equal to 0")}
	}
	return nil
}

func validateTokenAttributes(path *field.Path, p *kubeletconfigv1.CredentialProvider, serviceAccountTokens bool) field.ErrorList {
	var errs field.ErrorList
	ta := p.TokenAttributes
	if !serviceAccountTokens {
		errs = append(errs, field.Forbidden(path, "tokenAttributes is not supported when KubeletServiceAccountTokenForCredentialProviders feature gate is disabled"))
	}
	if ta.ServiceAccountTokenAudience == "" {
		errs = append(errs, field.Required(path.Child("serviceAccountTokenAudience"), ""))
	}
	if ta.RequireServiceAccount == nil {
		errs = append(errs, field.Required(path.Child("requireServiceAccount"), ""))
	}
	if v1 := credentialproviderv1.SchemeGroupVersion.String(); p.APIVersion != v1 {
		errs = append(errs, field.Forbidden(path, fmt.Sprintf("tokenAttributes is only supported for %s API version", v1)))
	}
	if ta.RequireServiceAccount != nil && !*ta.RequireServiceAccount && len(ta.RequiredServiceAccountAnnotationKeys) > 0 {
		errs = append(errs, field.Forbidden(path.Child("requiredServiceAccountAnnotationKeys"), "requireServiceAccount cannot be false when requiredServiceAccountAnnotationKeys is set"))
	}
	errs = append(errs, validateAnnotationKeys(path.Child("requiredServiceAccountAnnotationKeys"), ta.RequiredServiceAccountAnnotationKeys)...)
	errs = append(errs, validateAnnotationKeys(path.Child("optionalServiceAccountAnnotationKeys"), ta.OptionalServiceAccountAnnotationKeys)...)
	both := sets.New(ta.RequiredServiceAccountAnnotationKeys...).Intersection(sets.New(ta.OptionalServiceAccountAnnotationKeys...))
	if both.Len() > 0 {
		errs = append(errs, field.Invalid(path, sets.List(both), "annotation keys cannot be both required and optional"))
	}
	return append(errs, validateCacheType(path.Child("cacheType"), ta.CacheType)...)
}

func validateCacheType(path *field.Path, cacheType kubeletconfigv1.ServiceAccountTokenCacheType) field.ErrorList {
	switch {
	case cacheType == "":
		return field.ErrorList{field.Required(path, fmt.Sprintf("cacheType is required to be set when tokenAttributes is specified. Supported values are: %s", strings.Join(sets.List(validCacheTypes), ", ")))}
	case !validCacheTypes.Has(string(cacheType)):
		return field.ErrorList{field.NotSupported(path, cacheType, sets.List(validCacheTypes))}
	}
	return nil
}

// validateAnnotationKeys checks the keys as annotation keys (qualified names, case
// ignored) and for repeats.
func validateAnnotationKeys(path *field.Path, keys []string) field.ErrorList {
	var errs field.ErrorList
	seen := sets.New[string]()
	for _, k := range keys {
		for _, msg := range validation.IsQualifiedName(strings.ToLower(k)) {
			errs = append(errs, field.Invalid(path, k, msg))
		}
		if seen.Has(k) {
			errs = append(errs, field.Duplicate(path, k))
		}
		seen.Insert(k)
	}
	return errs
}
