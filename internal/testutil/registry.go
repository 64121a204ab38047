// Package testutil holds builders and real test servers shared by kuik's tests.
package testutil

import (
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// Behavior is how a Registry answers.
type Behavior int32

const (
	// Serve answers as an OCI registry.
	Serve Behavior = iota
	// RateLimit answers every request with 429.
	RateLimit
	// Hang holds every request until the client gives up or the registry is closed.
	Hang
	// Fail answers every request with 503.
	Fail
)

// Registry is a real OCI registry (go-containerregistry's) on 127.0.0.1, optionally behind
// basic authentication, whose behaviour a test can switch.
type Registry struct {
	// Host is host:port, the registry part of image references.
	Host string
	// Username and Password are required when set (and check is nil). With check, they are only
	// the credential Push uses: set them to one that check accepts.
	Username, Password string

	// check, when set, decides which basic-auth credentials are accepted.
	check func(user, pass string) bool

	srv       *httptest.Server
	behavior  atomic.Int32
	manifests atomic.Int64
	refused   atomic.Int64
	hung      atomic.Int64
	release   chan struct{}
	closeOnce sync.Once
}

// NewRegistry starts a registry on 127.0.0.1; with a username it refuses requests without that
// credential.
func NewRegistry(t testing.TB, username, password string) *Registry {
	t.Helper()
	return NewRegistryAt(t, "127.0.0.1:0", username, password)
}

// NewRegistryAt is NewRegistry listening on addr (a node's address, for instance).
func NewRegistryAt(t testing.TB, addr, username, password string) *Registry {
	t.Helper()
	return newRegistry(t, addr, &Registry{Username: username, Password: password})
}

// NewRegistryFunc starts a registry on addr ("127.0.0.1:0" for any port) that accepts only the
// basic-auth credentials check accepts, such as the unexpired ones of a fake credential
// provider (fakeprovider.Verify). Push uses Username and Password: set them first.
func NewRegistryFunc(t testing.TB, addr string, check func(user, pass string) bool) *Registry {
	t.Helper()
	return newRegistry(t, addr, &Registry{check: check})
}

// newRegistry starts r on addr.
func newRegistry(t testing.TB, addr string, r *Registry) *Registry {
	t.Helper()
	r.release = make(chan struct{})
	inner := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	r.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if strings.Contains(req.URL.Path, "/manifests/") {
			r.manifests.Add(1)
		}
		switch Behavior(r.behavior.Load()) {
		case RateLimit:
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusTooManyRequests)
			_, _ = w.Write([]byte(`{"errors":[{"code":"TOOMANYREQUESTS","message":"slow down"}]}`))
			return
		case Hang:
			r.hung.Add(1)
			select {
			case <-req.Context().Done():
			case <-r.release:
			}
			return
		case Fail:
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		if r.check != nil || r.Username != "" {
			u, p, ok := req.BasicAuth()
			if !ok || !r.accepts(u, p) {
				r.refused.Add(1)
				w.Header().Set("WWW-Authenticate", `Basic realm="kuik-test"`)
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusUnauthorized)
				_, _ = w.Write([]byte(`{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`))
				return
			}
		}
		inner.ServeHTTP(w, req)
	}))
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("registry: listening on %s: %v", addr, err)
	}
	r.srv.Listener.Close()
	r.srv.Listener = l
	r.srv.Start()
	r.Host = strings.TrimPrefix(r.srv.URL, "http://")
	t.Cleanup(r.Close)
	return r
}

// accepts reports whether a basic-auth credential is accepted.
func (r *Registry) accepts(user, pass string) bool {
	if r.check != nil {
		return r.check(user, pass)
	}
	return user == r.Username && pass == r.Password
}

// Close releases hung requests and stops the server.
func (r *Registry) Close() {
	r.closeOnce.Do(func() {
		close(r.release)
		r.srv.Close()
	})
}

// SetBehavior switches how the registry answers from now on.
func (r *Registry) SetBehavior(b Behavior) { r.behavior.Store(int32(b)) }

// ManifestRequests counts requests for manifests received so far.
func (r *Registry) ManifestRequests() int64 { return r.manifests.Load() }

// Unauthorized counts requests refused with 401 so far.
func (r *Registry) Unauthorized() int64 { return r.refused.Load() }

// Hung counts requests currently or ever held by Hang.
func (r *Registry) Hung() int64 { return r.hung.Load() }

// Push writes a small random image at host/repoAndTag and returns its full reference.
func (r *Registry) Push(t testing.TB, repoAndTag string) string {
	t.Helper()
	img, err := random.Image(256, 1)
	if err != nil {
		t.Fatal(err)
	}
	return r.PushImage(t, repoAndTag, img)
}

// PushImage writes img at host/repoAndTag and returns its full reference.
func (r *Registry) PushImage(t testing.TB, repoAndTag string, img v1.Image) string {
	t.Helper()
	ref, err := name.ParseReference(r.Host + "/" + repoAndTag)
	if err != nil {
		t.Fatal(err)
	}
	auth := authn.Anonymous
	if r.Username != "" {
		auth = authn.FromConfig(authn.AuthConfig{Username: r.Username, Password: r.Password})
	}
	if err := remote.Write(ref, img, remote.WithAuth(auth)); err != nil {
		t.Fatalf("pushing %s: %v", ref, err)
	}
	return ref.Name()
}

// WaitHung waits until n requests are held by Hang, or the deadline.
func (r *Registry) WaitHung(n int64, deadline time.Duration) bool {
	end := time.Now().Add(deadline)
	for time.Now().Before(end) {
		if r.hung.Load() >= n {
			return true
		}
		time.Sleep(5 * time.Millisecond)
	}
	return r.hung.Load() >= n
}
