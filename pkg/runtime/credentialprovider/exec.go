package credentialprovider

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/klog/v2"
	kubeletconfigv1 "k8s.io/kubelet/config/v1"
	credentialproviderapi "k8s.io/kubelet/pkg/apis/credentialprovider"
)

const (
	// defaultExecTimeout is upstream's catch-all limit on one plugin run: room for a
	// plugin to retry a failed request, but no run lasts forever.
	defaultExecTimeout = time.Minute
	// execWaitDelay bounds the wait, once a timed-out plugin is killed, for its output
	// pipes to close (a process it started could otherwise hold them open for ever).
	execWaitDelay = time.Second
)

// execPlugin runs one provider's executable: the CredentialProviderRequest goes to its
// stdin, the CredentialProviderResponse comes from its stdout.
type execPlugin struct {
	name       string
	path       string
	apiVersion string
	args       []string
	// env are the config's variables as NAME=value.
	env     []string
	environ func() []string
	timeout time.Duration
	encoder runtime.Encoder
	metrics *metrics
}

func newExecPlugin(binDir string, cfg *kubeletconfigv1.CredentialProvider, o *options, m *metrics) *execPlugin {
	e := &execPlugin{
		name:       cfg.Name,
		path:       filepath.Join(binDir, cfg.Name),
		apiVersion: cfg.APIVersion,
		args:       cfg.Args,
		environ:    o.environ,
		timeout:    o.execTimeout,
		metrics:    m,
	}
	for _, v := range cfg.Env {
		e.env = append(e.env, v.Name+"="+v.Value)
	}
	info, _ := runtime.SerializerInfoForMediaType(codecs.SupportedMediaTypes(), runtime.ContentTypeJSON)
	e.encoder = codecs.EncoderForVersion(info.Serializer, apiVersions[cfg.APIVersion])
	return e
}

// run asks the plugin for image's credentials. token and annotations are those of the
// pod's service account in service-account token mode, empty otherwise; the request's
// version (v1alpha1 and v1beta1 have no such fields) drops them.
func (e *execPlugin) run(ctx context.Context, image, token string, annotations map[string]string) (*credentialproviderapi.CredentialProviderResponse, error) {
	klog.FromContext(ctx).V(5).Info("Getting image credentials from external exec plugin", "pluginName", e.name, "image", image)
	request, err := runtime.Encode(e.encoder, &credentialproviderapi.CredentialProviderRequest{
		Image: image, ServiceAccountToken: token, ServiceAccountAnnotations: annotations,
	})
	if err != nil {
		return nil, fmt.Errorf("failed to encode auth request: error encoding request: %w", err)
	}
	stdout, stderr, err := e.exec(ctx, image, request)
	if err != nil {
		return nil, fmt.Errorf("%w: %s", err, stderr)
	}
	return e.decodeResponse(stdout)
}

// exec runs the plugin with request on stdin, killing it at the timeout, and returns
// its stdout, or its stderr with the error.
func (e *execPlugin) exec(ctx context.Context, image string, request []byte) (stdout []byte, stderr string, err error) {
	ctx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	var out, errOut bytes.Buffer
	cmd := exec.CommandContext(ctx, e.path, e.args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = bytes.NewReader(request), &out, &errOut
	// The kubelet's environment is passed on (plugins may need it, kubernetes#102750);
	// the config's variables come last and so win, os/exec keeping the last duplicate.
	cmd.Env = slices.Concat(e.environ(), e.env)
	killGroupOnCancel(cmd)

	start := time.Now()
	err = cmd.Run()
	e.metrics.pluginDuration.WithLabelValues(e.name).Observe(time.Since(start).Seconds())
	if ctx.Err() != nil {
		// Killed at the timeout: say so rather than "signal: killed".
		err = ctx.Err()
	}
	if err != nil {
		e.metrics.pluginErrors.WithLabelValues(e.name).Inc()
		return nil, errOut.String(), fmt.Errorf("error execing credential provider plugin %s for image %s: %w", e.name, image, err)
	}
	return out.Bytes(), "", nil
}

// killGroupOnCancel runs the plugin in its own process group and kills the whole group
// at the timeout, so that nothing the plugin started outlives it; upstream kills only the
// plugin. Run returns at most execWaitDelay after the kill even if pipes stay open.
func killGroupOnCancel(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		if errors.Is(err, syscall.ESRCH) {
			return os.ErrProcessDone
		}
		return err
	}
	cmd.WaitDelay = execWaitDelay
}

// decodeResponse strictly decodes the plugin's stdout, which must be a
// CredentialProviderResponse of the version the provider is configured with.
func (e *execPlugin) decodeResponse(data []byte) (*credentialproviderapi.CredentialProviderResponse, error) {
	gvk, err := json.DefaultMetaFactory.Interpret(data)
	if err != nil {
		return nil, fmt.Errorf("error reading GVK from response: %w", err)
	}
	if got := gvk.GroupVersion().String(); got != e.apiVersion {
		return nil, fmt.Errorf("apiVersion from credential plugin response did not match expected apiVersion:%s, actual apiVersion:%s", e.apiVersion, got)
	}
	obj, _, err := codecs.UniversalDecoder().Decode(data, nil, nil)
	response, ok := obj.(*credentialproviderapi.CredentialProviderResponse)
	if err != nil || !ok {
		// The decoding error is not passed on: it may quote the credentials.
		return nil, errors.New("error decoding credential provider plugin response from stdout")
	}
	return response, nil
}
