// Command plugin is the fake kubelet credential provider of package fakeprovider: see its
// documentation for the environment it reads and the modes it has.
package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	credentialproviderapi "k8s.io/kubelet/pkg/apis/credentialprovider"
	"k8s.io/kubelet/pkg/apis/credentialprovider/install"

	"github.com/enix/kuik/internal/testutil/fakeprovider"
)

// envChild marks the child process of ModeHang.
const envChild = "FAKE_PROVIDER_HANG_CHILD"

func main() {
	if err := run(); err != nil {
		_, _ = os.Stderr.WriteString(err.Error() + "\n")
		os.Exit(1)
	}
}

func run() error {
	stateDir := os.Getenv(fakeprovider.EnvStateDir)
	if os.Getenv(envChild) != "" {
		if stateDir != "" {
			_ = os.WriteFile(filepath.Join(stateDir, fakeprovider.ChildPIDFile), []byte(strconv.Itoa(os.Getpid())), 0o600)
		}
		select {}
	}

	scheme := runtime.NewScheme()
	install.Install(scheme)
	codecs := serializer.NewCodecFactory(scheme, serializer.EnableStrict)

	in, err := io.ReadAll(os.Stdin)
	if err != nil {
		return fmt.Errorf("reading stdin: %w", err)
	}
	obj, gvk, err := codecs.UniversalDecoder().Decode(in, nil, nil)
	if err != nil {
		return fmt.Errorf("decoding the request: %w", err)
	}
	req, ok := obj.(*credentialproviderapi.CredentialProviderRequest)
	if !ok {
		return fmt.Errorf("the request is a %s, not a CredentialProviderRequest", gvk.Kind)
	}

	if stateDir != "" {
		if err := record(stateDir, gvk.GroupVersion().String(), req); err != nil {
			return err
		}
	}
	if u := os.Getenv(fakeprovider.EnvCheckURL); u != "" {
		if err := check(u); err != nil {
			return err
		}
	}
	switch mode := fakeprovider.Mode(stateDir); mode {
	case fakeprovider.ModeOK:
	case fakeprovider.ModeFail:
		if _, err := os.Stdout.WriteString(fakeprovider.FailStdoutSecret + "\n"); err != nil {
			return err
		}
		return errors.New(fakeprovider.FailStderr)
	case fakeprovider.ModeEcho:
		fmt.Fprintf(os.Stderr, "%s got %s\n", time.Now().Format(time.RFC3339Nano), strings.TrimSpace(string(in)))
		return errors.New(fakeprovider.FailStderr)
	case fakeprovider.ModeHang:
		self, err := os.Executable()
		if err != nil {
			return err
		}
		child := exec.Command(self)
		child.Env = append(os.Environ(), envChild+"=1")
		// The child holds the plugin's output pipes, as a helper process of a real plugin may.
		child.Stdout, child.Stderr = os.Stdout, os.Stderr
		if err := child.Start(); err != nil {
			return fmt.Errorf("starting the hanging child: %w", err)
		}
		fmt.Fprintln(os.Stderr, fakeprovider.HangStderr)
		select {}
	case fakeprovider.ModeFlood:
		blank := make([]byte, 64<<10)
		for i := range blank {
			blank[i] = ' '
		}
		for range 20 {
			if _, err := os.Stdout.Write(blank); err != nil {
				return err
			}
		}
	case fakeprovider.ModeBlock:
		for {
			if _, err := os.Stat(filepath.Join(stateDir, fakeprovider.ReleaseFile)); err == nil {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	case fakeprovider.ModeGarbage:
		_, err := os.Stdout.WriteString(`{"apiVersion": "credentialprovider.kubelet.k8s.io/v1", "kind": `)
		return err
	default:
		return fmt.Errorf("unknown mode %q", mode)
	}

	key := []byte(fakeprovider.DefaultKey)
	if k := os.Getenv(fakeprovider.EnvKey); k != "" {
		key = []byte(k)
	}
	resp := &credentialproviderapi.CredentialProviderResponse{
		CacheKeyType: credentialproviderapi.RegistryPluginCacheKeyType,
	}
	if t := os.Getenv(fakeprovider.EnvCacheKeyType); t != "" {
		resp.CacheKeyType = credentialproviderapi.PluginCacheKeyType(t)
	}
	validity := time.Hour
	switch ttl := os.Getenv(fakeprovider.EnvTTL); ttl {
	case fakeprovider.TTLAbsent:
	case "":
		resp.CacheDuration = &metav1.Duration{Duration: validity}
	default:
		d, err := time.ParseDuration(ttl)
		if err != nil {
			return fmt.Errorf("%s: %w", fakeprovider.EnvTTL, err)
		}
		resp.CacheDuration = &metav1.Duration{Duration: d}
		if d > 0 {
			validity = d
		}
	}
	if v := os.Getenv(fakeprovider.EnvValidity); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			return fmt.Errorf("%s: %w", fakeprovider.EnvValidity, err)
		}
		validity = d
	}
	password := fakeprovider.Mint(key, time.Now().Add(validity))
	if pad := os.Getenv(fakeprovider.EnvPad); pad != "" {
		n, err := strconv.Atoi(pad)
		if err != nil {
			return fmt.Errorf("%s: %w", fakeprovider.EnvPad, err)
		}
		password += "." + strings.Repeat("p", n)
	}
	keys := []string{registryOf(req.Image)}
	if k := os.Getenv(fakeprovider.EnvAuthKey); k != "" {
		keys = strings.Split(k, ",")
	}
	resp.Auth = make(map[string]credentialproviderapi.AuthConfig, len(keys))
	if os.Getenv(fakeprovider.EnvEchoToken) != "" {
		password = req.ServiceAccountToken
	}
	for _, k := range keys {
		resp.Auth[k] = credentialproviderapi.AuthConfig{Username: fakeprovider.Username, Password: password}
	}

	info, ok := runtime.SerializerInfoForMediaType(codecs.SupportedMediaTypes(), runtime.ContentTypeJSON)
	if !ok {
		return errors.New("no JSON serializer")
	}
	out, err := runtime.Encode(codecs.EncoderForVersion(info.Serializer, gvk.GroupVersion()), resp)
	if err != nil {
		return fmt.Errorf("encoding the response: %w", err)
	}
	apiVersion, kind := os.Getenv(fakeprovider.EnvResponseAPIVersion), os.Getenv(fakeprovider.EnvResponseKind)
	if apiVersion != "" || kind != "" {
		var m map[string]any
		if err := json.Unmarshal(out, &m); err != nil {
			return err
		}
		if apiVersion != "" {
			m["apiVersion"] = apiVersion
		}
		if kind != "" {
			m["kind"] = kind
		}
		if out, err = json.Marshal(m); err != nil {
			return err
		}
	}
	_, err = os.Stdout.Write(out)
	return err
}

// check GETs u with http.DefaultTransport: the system roots as Go finds them, nothing set.
func check(u string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil) //nolint:gosec // the test's own URL, from the plugin's configuration
	if err != nil {
		return fmt.Errorf("%s: %w", fakeprovider.EnvCheckURL, err)
	}
	req.Header.Set("User-Agent", fakeprovider.CheckUserAgent)
	resp, err := http.DefaultClient.Do(req) //nolint:gosec // the test's own URL, from the plugin's configuration
	if err != nil {
		return fmt.Errorf("checking %s: %w", u, err)
	}
	_ = resp.Body.Close()
	return nil
}

// record appends the request to STATE_DIR/requests.jsonl.
func record(stateDir, apiVersion string, req *credentialproviderapi.CredentialProviderRequest) error {
	r := fakeprovider.RecordedRequest{
		Time:        time.Now(),
		APIVersion:  apiVersion,
		Image:       req.Image,
		Token:       req.ServiceAccountToken,
		Annotations: req.ServiceAccountAnnotations,
		Audiences:   audiences(req.ServiceAccountToken),
		Args:        os.Args[1:],
	}
	if names := os.Getenv(fakeprovider.EnvRecordEnv); names != "" {
		r.Env = map[string]string{}
		for _, n := range strings.Split(names, ",") {
			if v, ok := os.LookupEnv(n); ok {
				r.Env[n] = v
			}
		}
	}
	line, err := json.Marshal(r)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(stateDir, fakeprovider.RequestsFile), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("recording the request: %w", err)
	}
	// O_APPEND and one write per line keep the lines of concurrent plugins whole.
	if _, err := f.Write(append(line, '\n')); err != nil {
		f.Close()
		return fmt.Errorf("recording the request: %w", err)
	}
	return f.Close()
}

// audiences reads the aud claim of a JWT's payload, without checking its signature.
func audiences(token string) []string {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return nil
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return nil
	}
	var claims struct {
		Aud json.RawMessage `json:"aud"`
	}
	if json.Unmarshal(payload, &claims) != nil || len(claims.Aud) == 0 {
		return nil
	}
	var one string
	if json.Unmarshal(claims.Aud, &one) == nil {
		return []string{one}
	}
	var many []string
	_ = json.Unmarshal(claims.Aud, &many)
	return many
}

// registryOf is the registry host of the request's image.
func registryOf(image string) string {
	host, _, _ := strings.Cut(image, "/")
	return host
}
