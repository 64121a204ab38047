package credentialprovider

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	credentialproviderapi "k8s.io/kubelet/pkg/apis/credentialprovider"
	"k8s.io/kubelet/pkg/apis/credentialprovider/install"

	"github.com/enix/kuik/internal/credentials"
)

const (
	// maxStdout bounds what is read of a plugin's answer; a larger one is an invalid response.
	maxStdout = 1 << 20
	// maxStderr is how much of the end of a plugin's stderr an error carries.
	maxStderr = 4 << 10
	// waitDelay is how long Wait waits for the plugin's output once it has exited or been
	// killed, in case a child of its own still holds the pipes.
	waitDelay = 2 * time.Second
)

// execCodecs encode requests and decode responses of credentialprovider.kubelet.k8s.io v1,
// v1beta1 and v1alpha1 through the internal type, strictly, as the kubelet's.
var execCodecs = func() serializer.CodecFactory {
	s := runtime.NewScheme()
	install.Install(s)
	return serializer.NewCodecFactory(s, serializer.EnableStrict)
}()

// execRequest is what one exec sends.
type execRequest struct {
	image       string
	token       string
	annotations map[string]string
}

// exec runs the provider's plugin once and decodes its response. It reports the exec through
// Options.Observe.
func (p *Plugins) exec(ctx context.Context, prov *Provider, call execRequest) (*response, error) {
	start := time.Now()
	resp, result, err := p.run(ctx, prov, call)
	if p.opts.Observe != nil {
		p.opts.Observe(prov.Name, result, time.Since(start))
	}
	return resp, err
}

// run is exec without the observation; it returns the result to report.
func (p *Plugins) run(ctx context.Context, prov *Provider, call execRequest) (*response, string, error) {
	gv, err := schema.ParseGroupVersion(prov.APIVersion)
	if err != nil {
		return nil, ResultError, fmt.Errorf("apiVersion %q: %w", prov.APIVersion, err)
	}
	info, ok := runtime.SerializerInfoForMediaType(execCodecs.SupportedMediaTypes(), runtime.ContentTypeJSON)
	if !ok {
		return nil, ResultError, errors.New("no JSON serializer for the exec API")
	}
	stdin, err := runtime.Encode(execCodecs.EncoderForVersion(info.Serializer, gv), &credentialproviderapi.CredentialProviderRequest{
		Image:                     call.image,
		ServiceAccountToken:       call.token,
		ServiceAccountAnnotations: call.annotations,
	})
	if err != nil {
		return nil, ResultError, fmt.Errorf("encoding the request: %w", err)
	}

	ctx, cancel := context.WithTimeout(ctx, p.opts.Timeout)
	defer cancel()
	bin := filepath.Join(p.binDir, prov.Name)
	cmd := exec.CommandContext(ctx, bin, prov.Args...)
	cmd.Env = append(os.Environ(), prov.Env...)
	cmd.Stdin = bytes.NewReader(stdin)
	stdout := &limitedBuffer{max: maxStdout}
	stderr := &tailBuffer{max: maxStderr}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.WaitDelay = waitDelay
	killProcessGroup(cmd)

	obtainedAt := p.opts.Now()
	runErr := cmd.Run()
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return nil, ResultTimeout, fmt.Errorf("running %s: killed after %s: %w%s", bin, p.opts.Timeout, context.DeadlineExceeded, stderr.suffix())
	case ctx.Err() != nil:
		return nil, ResultError, fmt.Errorf("running %s: %w%s", bin, ctx.Err(), stderr.suffix())
	case runErr != nil:
		return nil, ResultError, fmt.Errorf("running %s: %w%s", bin, runErr, stderr.suffix())
	case stdout.overflow:
		return nil, ResultInvalidResponse, fmt.Errorf("%w: stdout exceeds %d bytes%s", ErrInvalidResponse, maxStdout, stderr.suffix())
	}
	resp, err := decodeResponse(stdout.buf.Bytes(), prov, call, obtainedAt)
	if err != nil {
		return nil, ResultInvalidResponse, fmt.Errorf("%w: %w%s", ErrInvalidResponse, err, stderr.suffix())
	}
	return resp, ResultSuccess, nil
}

// decodeResponse checks and decodes a plugin's stdout as the kubelet does. Its errors never
// hold the response's content (it holds credentials): only field paths of a strict decoding
// error.
func decodeResponse(data []byte, prov *Provider, call execRequest, obtainedAt time.Time) (*response, error) {
	gvk, err := json.DefaultMetaFactory.Interpret(data)
	if err != nil {
		return nil, errors.New("stdout is not a JSON object with apiVersion and kind")
	}
	if got := gvk.GroupVersion().String(); got != prov.APIVersion {
		return nil, fmt.Errorf("apiVersion from credential plugin response did not match expected apiVersion:%s, actual apiVersion:%s", prov.APIVersion, got)
	}
	if gvk.Kind != "CredentialProviderResponse" {
		return nil, fmt.Errorf("unexpected kind %q, want CredentialProviderResponse", gvk.Kind)
	}
	obj, _, err := execCodecs.UniversalDecoder().Decode(data, nil, nil)
	if err != nil {
		if runtime.IsStrictDecodingError(err) {
			return nil, fmt.Errorf("decoding the response: %w", err)
		}
		return nil, errors.New("error decoding credential provider plugin response from stdout")
	}
	r, ok := obj.(*credentialproviderapi.CredentialProviderResponse)
	if !ok {
		return nil, fmt.Errorf("unable to convert %T to *CredentialProviderResponse", obj)
	}
	switch r.CacheKeyType {
	case credentialproviderapi.ImagePluginCacheKeyType, credentialproviderapi.RegistryPluginCacheKeyType, credentialproviderapi.GlobalPluginCacheKeyType:
	default:
		return nil, fmt.Errorf("credential provider plugin did not return a valid cacheKeyType: %q (want Image, Registry or Global)", r.CacheKeyType)
	}
	auths := make(map[string]credentials.AuthEntry, len(r.Auth))
	for k, a := range r.Auth {
		if call.token != "" && a.Password == call.token && prov.TokenAttributes.CacheType != CacheTypeToken {
			return nil, errors.New("credential provider plugin returned the service account token as the password which is not allowed when service account cache type is not set to 'Token'")
		}
		auths[k] = credentials.AuthEntry{Username: a.Username, Password: a.Password}
	}
	resp := &response{auth: credentials.NewDockerConfig(auths), cacheKeyType: string(r.CacheKeyType), obtainedAt: obtainedAt}
	d := prov.DefaultCacheDuration
	if r.CacheDuration != nil {
		d = r.CacheDuration.Duration
	}
	if d > 0 {
		resp.expiresAt = obtainedAt.Add(d)
	}
	return resp, nil
}

// limitedBuffer keeps the first max bytes written and notes whether more came; it never fails
// a write, so the plugin is not stopped by a broken pipe. (It has no ReadFrom, so that io.Copy
// goes through Write.)
type limitedBuffer struct {
	buf      bytes.Buffer
	max      int
	overflow bool
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if room := b.max - b.buf.Len(); len(p) > room {
		b.overflow = true
		if room > 0 {
			b.buf.Write(p[:room])
		}
		return len(p), nil
	}
	b.buf.Write(p)
	return len(p), nil
}

// tailBuffer keeps the last max bytes written.
type tailBuffer struct {
	buf       []byte
	max       int
	truncated bool
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.buf = append(b.buf, p...)
	if over := len(b.buf) - b.max; over > 0 {
		b.buf = append(b.buf[:0], b.buf[over:]...)
		b.truncated = true
	}
	return len(p), nil
}

// suffix is the stderr to append to an error: "; stderr: ..." or nothing.
func (b *tailBuffer) suffix() string {
	s := strings.TrimSpace(string(b.buf))
	if s == "" {
		return ""
	}
	if b.truncated {
		s = "..." + s
	}
	return "; stderr: " + s
}
