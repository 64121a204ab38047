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
	stderr := &tailBuffer{max: maxStderr, headMax: maxFirstLine}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.WaitDelay = waitDelay
	killProcessGroup(cmd)

	obtainedAt := p.opts.Now()
	runErr := cmd.Run()
	fail := func(err error) error {
		return &PluginError{Bin: bin, err: err, FirstLine: redactLine(stderr.firstLine(), call.token), Stderr: stderr.String(),
			ran: !errors.Is(err, ErrInvalidResponse)}
	}
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return nil, ResultTimeout, fail(fmt.Errorf("killed after %s: %w", p.opts.Timeout, context.DeadlineExceeded))
	case ctx.Err() != nil:
		return nil, ResultError, fail(ctx.Err())
	case runErr != nil:
		return nil, ResultError, fail(runErr)
	case stdout.overflow:
		return nil, ResultInvalidResponse, fail(fmt.Errorf("%w: stdout exceeds %d bytes", ErrInvalidResponse, maxStdout))
	}
	resp, err := decodeResponse(stdout.buf.Bytes(), prov, call, obtainedAt)
	if err != nil {
		return nil, ResultInvalidResponse, fail(fmt.Errorf("%w: %w", ErrInvalidResponse, err))
	}
	return resp, ResultSuccess, nil
}

// PluginError is a plugin run that failed. Its message, which becomes the entry's condition
// message and event (readable by whoever reads routing resources), holds the binary, a fixed
// description (the exit status, the timeout, what is wrong with the response) and at most the
// first line of the plugin's stderr, redacted: the request's token, and every word holding a
// digit or longer than 24 characters, are replaced by [redacted], so that a plugin echoing its
// request leaks no token and a timestamp or request id does not change the message on every
// retry. Stderr, the last 4 KiB of it as written, is for logs only.
type PluginError struct {
	// Bin is the binary run.
	Bin string
	// FirstLine is the first line of the plugin's stderr, redacted; "" when it wrote none.
	FirstLine string
	// Stderr is the end of the plugin's stderr, as written: never in Error.
	Stderr string
	err    error
	// ran: the run failed (exit status, timeout), rather than its response.
	ran bool
}

func (e *PluginError) Error() string {
	msg := e.err.Error()
	if e.ran {
		msg = "running " + e.Bin + ": " + msg
	}
	if e.FirstLine != "" {
		msg += "; stderr: " + e.FirstLine
	}
	return msg
}

func (e *PluginError) Unwrap() error { return e.err }

const (
	// maxFirstLine is how much of a plugin's stderr is read for its first line.
	maxFirstLine = 512
	// maxFirstLineShown is how much of that line an error shows.
	maxFirstLineShown = 200
	// maxWordShown is the longest word of that line shown as written: anything longer may be
	// a token.
	maxWordShown = 24
)

// redactLine is a stderr line fit for status and events: token replaced, words holding a digit
// or longer than maxWordShown replaced by [redacted], at most maxFirstLineShown bytes.
func redactLine(line, token string) string {
	if token != "" {
		line = strings.ReplaceAll(line, token, "[redacted]")
	}
	words := strings.Fields(line)
	for i, w := range words {
		if len(w) > maxWordShown || strings.ContainsAny(w, "0123456789") {
			words[i] = "[redacted]"
		}
	}
	out := strings.Join(words, " ")
	if len(out) > maxFirstLineShown {
		out = strings.TrimSpace(strings.ToValidUTF8(out[:maxFirstLineShown], "")) + "..."
	}
	return out
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

// tailBuffer keeps the last max bytes written, and the first headMax.
type tailBuffer struct {
	buf       []byte
	max       int
	truncated bool
	head      []byte
	headMax   int
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	if room := b.headMax - len(b.head); room > 0 {
		b.head = append(b.head, p[:min(room, len(p))]...)
	}
	b.buf = append(b.buf, p...)
	if over := len(b.buf) - b.max; over > 0 {
		b.buf = append(b.buf[:0], b.buf[over:]...)
		b.truncated = true
	}
	return len(p), nil
}

// String is the stderr kept, "..." first when its start was dropped.
func (b *tailBuffer) String() string {
	s := strings.TrimSpace(string(b.buf))
	if b.truncated && s != "" {
		s = "..." + s
	}
	return s
}

// firstLine is the first non-blank line written (within the first headMax bytes).
func (b *tailBuffer) firstLine() string {
	for line := range strings.SplitSeq(string(b.head), "\n") {
		if l := strings.TrimSpace(line); l != "" {
			return strings.ToValidUTF8(l, "")
		}
	}
	return ""
}
