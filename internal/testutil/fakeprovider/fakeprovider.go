// Package fakeprovider is a real kubelet credential-provider exec plugin for tests, and the
// helpers to build it, drive it and check what it minted.
//
// The plugin (the main package in ./plugin, built by [Build]) reads a CredentialProviderRequest
// of credentialprovider.kubelet.k8s.io v1, v1beta1 or v1alpha1 on stdin and answers in the same
// version with one credential: username [Username], password a token minted by [Mint] that
// [Verify] accepts until it expires, so a test registry (testutil.NewRegistryFunc) can accept
// only unexpired credentials. It is driven by environment variables, set through the
// configuration's env as real configurations do:
//
//   - FAKE_PROVIDER_KEY: the HMAC key of the minted tokens (default [DefaultKey]);
//   - FAKE_PROVIDER_TTL: a Go duration, the cacheDuration answered and, unless
//     FAKE_PROVIDER_VALIDITY is set, the validity of the credential (default 1h); "absent"
//     answers no cacheDuration (the credential is then valid for 1h);
//   - FAKE_PROVIDER_VALIDITY: a Go duration, the validity of the credential;
//   - FAKE_PROVIDER_CACHE_KEY_TYPE: the cacheKeyType answered (default Registry);
//   - FAKE_PROVIDER_AUTH_KEY: the auth map keys answered, comma-separated (default the request
//     image's registry host);
//   - FAKE_PROVIDER_RESPONSE_API_VERSION, FAKE_PROVIDER_RESPONSE_KIND: answer with that
//     apiVersion or kind instead (to test that they are checked);
//   - FAKE_PROVIDER_ECHO_TOKEN: when set, the password answered is the request's token;
//   - FAKE_PROVIDER_PAD: a number of bytes of padding appended to the minted password (after a
//     '.', which [Verify] ignores), for credentials as large as real ones or larger;
//   - FAKE_PROVIDER_RECORD_ENV: names of environment variables, comma-separated, whose
//     values each request record holds;
//   - FAKE_PROVIDER_CHECK_URL: an https:// URL the plugin GETs (User-Agent [CheckUserAgent]) with
//     Go's default TLS settings before it answers, failing when the call fails: proof that the
//     plugin, as started, verifies a server's certificate with the roots it finds;
//   - FAKE_PROVIDER_STATE_DIR: where the plugin appends each request it receives as a JSON line
//     to requests.jsonl ([Requests]) and reads the file mode ([SetMode]): [ModeOK] (the default),
//     [ModeFail], [ModeHang], [ModeGarbage], [ModeFlood], [ModeBlock], [ModeEcho].
package fakeprovider

import (
	"bufio"
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Environment variables the plugin reads.
const (
	EnvKey                = "FAKE_PROVIDER_KEY"
	EnvTTL                = "FAKE_PROVIDER_TTL"
	EnvValidity           = "FAKE_PROVIDER_VALIDITY"
	EnvCacheKeyType       = "FAKE_PROVIDER_CACHE_KEY_TYPE"
	EnvAuthKey            = "FAKE_PROVIDER_AUTH_KEY"
	EnvResponseAPIVersion = "FAKE_PROVIDER_RESPONSE_API_VERSION"
	EnvResponseKind       = "FAKE_PROVIDER_RESPONSE_KIND"
	EnvRecordEnv          = "FAKE_PROVIDER_RECORD_ENV"
	EnvStateDir           = "FAKE_PROVIDER_STATE_DIR"
	EnvEchoToken          = "FAKE_PROVIDER_ECHO_TOKEN" //nolint:gosec // an environment variable's name, no credential
	EnvCheckURL           = "FAKE_PROVIDER_CHECK_URL"
	EnvPad                = "FAKE_PROVIDER_PAD"
)

// CheckUserAgent is the User-Agent of the plugin's FAKE_PROVIDER_CHECK_URL call.
const CheckUserAgent = "kuik-fake-provider-check"

// TTLAbsent as FAKE_PROVIDER_TTL makes the plugin answer without cacheDuration.
const TTLAbsent = "absent"

// Username is the username of every credential the plugin mints.
const Username = "kuik-fake"

// DefaultKey is the HMAC key without FAKE_PROVIDER_KEY.
const DefaultKey = "kuik-fake-provider-key"

// Modes of the plugin, written to STATE_DIR/mode by [SetMode].
const (
	// ModeOK answers with a credential.
	ModeOK = "ok"
	// ModeFail writes a credential-looking secret ([FailStdoutSecret]) to stdout, a message
	// ([FailStderr]) to stderr, and exits 1.
	ModeFail = "fail"
	// ModeHang starts a child process that records its pid in STATE_DIR/child.pid, writes
	// [HangStderr] to stderr, and sleeps forever, as does the child.
	ModeHang = "hang"
	// ModeGarbage writes invalid JSON to stdout and exits 0.
	ModeGarbage = "garbage"
	// ModeFlood writes more than a MiB of blanks to stdout before its answer.
	ModeFlood = "flood"
	// ModeBlock waits until [Release] creates STATE_DIR/release, then answers as ModeOK.
	ModeBlock = "block"
	// ModeEcho writes a line starting with the time (RFC 3339, nanoseconds) and holding the
	// request as it read it (token included) to stderr, as a plugin logging its input would,
	// then [FailStderr] on a line of its own, and exits 1.
	ModeEcho = "echo"
)

const (
	// FailStdoutSecret is what ModeFail writes on stdout: it must never appear in an error.
	FailStdoutSecret = "stdout-secret-7f3a9c" //nolint:gosec // a marker the tests look for, no credential
	// FailStderr is what ModeFail writes on stderr.
	FailStderr = "fake provider: failing as told"
	// HangStderr is what ModeHang writes on stderr before sleeping.
	HangStderr = "fake provider: hanging as told"
)

// File names in the state directory.
const (
	RequestsFile = "requests.jsonl"
	ModeFile     = "mode"
	ChildPIDFile = "child.pid"
	ReleaseFile  = "release"
)

// RecordedRequest is one request the plugin received, as it recorded it.
type RecordedRequest struct {
	Time        time.Time         `json:"time"`
	APIVersion  string            `json:"apiVersion"`
	Image       string            `json:"image"`
	Token       string            `json:"token,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
	// Audiences are the aud claim of the token's JWT payload (its signature is not checked).
	Audiences []string `json:"audiences,omitempty"`
	Args      []string `json:"args,omitempty"`
	// Env holds the variables named by FAKE_PROVIDER_RECORD_ENV that were set.
	Env map[string]string `json:"env,omitempty"`
}

// Mint returns a token that [Verify] accepts with the same key until exp: the expiry in Unix
// seconds, a dot, and the hex HMAC-SHA256 of that expiry.
func Mint(key []byte, exp time.Time) string {
	e := strconv.FormatInt(exp.Unix(), 10)
	return e + "." + sign(key, e)
}

// Verify reports whether password was minted with key and has not expired at now.
func Verify(key []byte, password string, now time.Time) bool {
	e, mac, ok := strings.Cut(password, ".")
	if !ok {
		return false
	}
	mac, _, _ = strings.Cut(mac, ".") // the padding
	exp, err := strconv.ParseInt(e, 10, 64)
	if err != nil {
		return false
	}
	want := sign(key, e)
	return hmac.Equal([]byte(mac), []byte(want)) && now.Before(time.Unix(exp, 0))
}

// Check returns a basic-auth check, for testutil.NewRegistryFunc, accepting only the
// unexpired credentials the plugin mints with key, at the time now gives (nil: time.Now).
func Check(key []byte, now func() time.Time) func(user, pass string) bool {
	if now == nil {
		now = time.Now
	}
	return func(user, pass string) bool {
		return user == Username && Verify(key, pass, now())
	}
}

// Expiry returns the expiry a minted password carries (without checking it).
func Expiry(password string) (time.Time, bool) {
	e, _, _ := strings.Cut(password, ".")
	exp, err := strconv.ParseInt(e, 10, 64)
	if err != nil {
		return time.Time{}, false
	}
	return time.Unix(exp, 0), true
}

func sign(key []byte, s string) string {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(s))
	return hex.EncodeToString(h.Sum(nil))
}

// Requests returns the requests the plugin recorded in stateDir, oldest first; none when it
// recorded nothing yet.
func Requests(stateDir string) ([]RecordedRequest, error) {
	f, err := os.Open(filepath.Join(stateDir, RequestsFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the fake provider's requests: %w", err)
	}
	defer f.Close()
	var out []RecordedRequest
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var r RecordedRequest
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return nil, fmt.Errorf("reading the fake provider's requests: line %d: %w", len(out)+1, err)
		}
		out = append(out, r)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading the fake provider's requests: %w", err)
	}
	return out, nil
}

// MustRequests is Requests, failing the test on error.
func MustRequests(t testing.TB, stateDir string) []RecordedRequest {
	t.Helper()
	r, err := Requests(stateDir)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// SetMode makes the plugin behave as mode from its next request on.
func SetMode(t testing.TB, stateDir, mode string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(stateDir, ModeFile), []byte(mode), 0o600); err != nil {
		t.Fatalf("setting the fake provider's mode: %v", err)
	}
}

// Release lets the plugins waiting in [ModeBlock] answer.
func Release(t testing.TB, stateDir string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(stateDir, ReleaseFile), nil, 0o600); err != nil {
		t.Fatalf("releasing the fake provider: %v", err)
	}
}

// Mode returns the plugin's mode in stateDir ([ModeOK] when none is set).
func Mode(stateDir string) string {
	b, err := os.ReadFile(filepath.Join(stateDir, ModeFile))
	if err != nil {
		return ModeOK
	}
	if m := strings.TrimSpace(string(b)); m != "" {
		return m
	}
	return ModeOK
}

var built struct {
	once sync.Once
	dir  string
	path string
	err  error
}

// Build compiles the plugin (once per test process) and installs it as binDir/name, the
// provider name being the binary's; it returns that path. The compiled binary lives in a
// temporary directory that [CleanupBuild] removes: call it from TestMain after m.Run.
func Build(t testing.TB, binDir, name string) string {
	t.Helper()
	built.once.Do(func() {
		built.dir, built.err = os.MkdirTemp("", "kuik-fakeprovider-")
		if built.err != nil {
			return
		}
		built.path = filepath.Join(built.dir, "fake-credential-provider")
		_, self, _, _ := runtime.Caller(0)
		cmd := exec.Command("go", "build", "-o", built.path, "./plugin")
		cmd.Dir = filepath.Dir(self)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			built.err = fmt.Errorf("go build ./plugin: %w\n%s", err, out.String())
		}
	})
	if built.err != nil {
		t.Fatalf("building the fake credential provider: %v", built.err)
	}
	dst := filepath.Join(binDir, name)
	if err := os.MkdirAll(binDir, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(built.path, dst); err != nil {
		if err := copyFile(built.path, dst); err != nil {
			t.Fatalf("installing the fake credential provider as %s: %v", dst, err)
		}
	}
	return dst
}

// CleanupBuild removes the binary [Build] compiled, if any.
func CleanupBuild() {
	if built.dir != "" {
		_ = os.RemoveAll(built.dir)
	}
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o755) //nolint:gosec // an executable for the test's bin dir
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
