package testutil

import (
	"bytes"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Kind is what a registry request addresses.
type Kind string

const (
	// KindManifest is /v2/<repo>/manifests/<ref>.
	KindManifest Kind = "manifest"
	// KindBlob is /v2/<repo>/blobs/<digest>.
	KindBlob Kind = "blob"
	// KindUpload is /v2/<repo>/blobs/uploads/…, a blob upload or mount.
	KindUpload Kind = "upload"
	// KindOther is anything else (/v2/, tags, referrers).
	KindOther Kind = "other"
)

// Request is one request a Front proxied, with the bytes it moved.
type Request struct {
	Method string
	Path   string
	Query  string
	Kind   Kind
	Status int
	// In counts request body bytes the front read; Out counts response body bytes it wrote.
	In, Out int64
}

// Front is a proxy in front of a Registry that logs every request, counts the bytes moved,
// and can stall or fail blob uploads or edit answers. Use Host in image references.
type Front struct {
	// Host is host:port of the front.
	Host string

	srv        *httptest.Server
	mu         sync.Mutex
	log        []*entry
	stallAfter atomic.Int64
	failUpload atomic.Bool
	refuseTags atomic.Bool
	stalled    atomic.Int64
	release    chan struct{}
	relMu      sync.Mutex
	closeOnce  sync.Once
	respond    atomic.Pointer[func(*http.Response)]
	intercept  atomic.Pointer[func(http.ResponseWriter, *http.Request) bool]
}

// NewFront starts a front for r on 127.0.0.1.
func NewFront(t testing.TB, r *Registry) *Front {
	t.Helper()
	target, err := url.Parse("http://" + r.Host)
	if err != nil {
		t.Fatal(err)
	}
	f := &Front{release: make(chan struct{})}
	proxy := &httputil.ReverseProxy{
		Rewrite:       func(pr *httputil.ProxyRequest) { pr.SetURL(target) },
		FlushInterval: -1,
		ErrorLog:      log.New(io.Discard, "", 0),
		ModifyResponse: func(resp *http.Response) error {
			if fn := f.respond.Load(); fn != nil {
				(*fn)(resp)
			}
			return nil
		},
	}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		// The entry is logged before the answer, so a client that got its answer sees it.
		e := &entry{req: Request{Method: req.Method, Path: req.URL.Path, Query: req.URL.RawQuery, Kind: kindOf(req.URL.Path)}}
		e.status.Store(http.StatusOK)
		f.mu.Lock()
		f.log = append(f.log, e)
		f.mu.Unlock()
		cw := &countingWriter{ResponseWriter: w, e: e}
		req.Body = &countingBody{rc: req.Body, n: &e.in}
		kind := e.req.Kind
		if fn := f.intercept.Load(); fn != nil && (*fn)(cw, req) {
			return
		}
		if kind == KindManifest && req.Method == http.MethodDelete && f.refuseTags.Load() && !strings.Contains(path.Base(req.URL.Path), ":") {
			cw.Header().Set("Content-Type", "application/json")
			cw.WriteHeader(http.StatusMethodNotAllowed)
			_, _ = cw.Write([]byte(`{"errors":[{"code":"UNSUPPORTED","message":"The operation is unsupported."}]}`))
			return
		}
		if kind == KindUpload && (req.Method == http.MethodPatch || req.Method == http.MethodPut) {
			if after := f.stallAfter.Load(); after > 0 && f.stall(cw, req, after) {
				return
			}
			if f.failUpload.Load() {
				_, _ = io.Copy(io.Discard, req.Body)
				http.Error(cw, `{"errors":[{"code":"UNKNOWN","message":"upload failed"}]}`, http.StatusInternalServerError)
				return
			}
		}
		proxy.ServeHTTP(cw, req)
	}))
	f.Host = strings.TrimPrefix(f.srv.URL, "http://")
	t.Cleanup(f.Close)
	return f
}

// stall reads after bytes of the upload body; a shorter body is put back for the proxy and
// stall reports false. Otherwise it holds the request until Unstall or Close and answers 500:
// a registry that stops reading mid-blob.
func (f *Front) stall(w http.ResponseWriter, req *http.Request, after int64) bool {
	var head bytes.Buffer
	if n, _ := io.CopyN(&head, req.Body, after); n < after {
		req.Body = io.NopCloser(&head)
		return false
	}
	f.stalled.Add(1)
	f.relMu.Lock()
	release := f.release
	f.relMu.Unlock()
	select {
	case <-release:
	case <-req.Context().Done():
	}
	w.WriteHeader(http.StatusInternalServerError)
	return true
}

// StallUploads makes blob uploads stop reading after n body bytes and hang (n ≤ 0: off).
func (f *Front) StallUploads(n int64) { f.stallAfter.Store(n) }

// Unstall stops stalling new uploads and releases the held ones (they fail).
func (f *Front) Unstall() {
	f.stallAfter.Store(0)
	f.relMu.Lock()
	close(f.release)
	f.release = make(chan struct{})
	f.relMu.Unlock()
}

// Stalled counts uploads held by StallUploads so far.
func (f *Front) Stalled() int64 { return f.stalled.Load() }

// FailUploads makes blob uploads (PATCH and PUT) answer 500 after reading the body.
func (f *Front) FailUploads(on bool) { f.failUpload.Store(on) }

// RefuseTagDeletes makes DELETE of a manifest by tag answer 405 UNSUPPORTED, as distribution's
// registry:2 does; a DELETE by digest is still proxied.
func (f *Front) RefuseTagDeletes(on bool) { f.refuseTags.Store(on) }

// Respond sets a function that edits every proxied response (headers, status); nil removes it.
func (f *Front) Respond(fn func(*http.Response)) {
	if fn == nil {
		f.respond.Store(nil)
		return
	}
	f.respond.Store(&fn)
}

// Intercept sets a function that may answer a request itself (returning true) before it is
// proxied; nil removes it.
func (f *Front) Intercept(fn func(http.ResponseWriter, *http.Request) bool) {
	if fn == nil {
		f.intercept.Store(nil)
		return
	}
	f.intercept.Store(&fn)
}

// Requests returns the requests logged so far, oldest first.
func (f *Front) Requests() []Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]Request, 0, len(f.log))
	for _, e := range f.log {
		r := e.req
		r.Status, r.In, r.Out = int(e.status.Load()), e.in.Load(), e.out.Load()
		out = append(out, r)
	}
	return out
}

// Reset forgets the logged requests.
func (f *Front) Reset() {
	f.mu.Lock()
	f.log = nil
	f.mu.Unlock()
}

// Count counts logged requests of method ("" for any) and kind.
func (f *Front) Count(method string, kind Kind) int {
	n := 0
	for _, r := range f.Requests() {
		if (method == "" || r.Method == method) && r.Kind == kind {
			n++
		}
	}
	return n
}

// UploadedBytes sums the request body bytes of blob uploads.
func (f *Front) UploadedBytes() int64 {
	var n int64
	for _, r := range f.Requests() {
		if r.Kind == KindUpload {
			n += r.In
		}
	}
	return n
}

// DownloadedBytes sums the response body bytes of blob GETs.
func (f *Front) DownloadedBytes() int64 {
	var n int64
	for _, r := range f.Requests() {
		if r.Kind == KindBlob && r.Method == http.MethodGet {
			n += r.Out
		}
	}
	return n
}

// Close releases held uploads and stops the front.
func (f *Front) Close() {
	f.closeOnce.Do(func() {
		f.relMu.Lock()
		close(f.release)
		f.release = make(chan struct{})
		f.relMu.Unlock()
		f.srv.CloseClientConnections()
		f.srv.Close()
	})
}

// WaitStalled waits until n uploads are held by StallUploads, or the deadline.
func (f *Front) WaitStalled(n int64, deadline time.Duration) bool {
	end := time.Now().Add(deadline)
	for time.Now().Before(end) && f.stalled.Load() < n {
		time.Sleep(5 * time.Millisecond)
	}
	return f.stalled.Load() >= n
}

// kindOf classifies a registry API path.
func kindOf(path string) Kind {
	switch {
	case strings.Contains(path, "/manifests/"):
		return KindManifest
	case strings.Contains(path, "/blobs/uploads"):
		return KindUpload
	case strings.Contains(path, "/blobs/"):
		return KindBlob
	}
	return KindOther
}

// entry is a logged request whose status and byte counts fill in as it runs.
type entry struct {
	req     Request
	status  atomic.Int64
	in, out atomic.Int64
}

// countingWriter records the status and counts body bytes written.
type countingWriter struct {
	http.ResponseWriter
	e           *entry
	wroteHeader bool
}

func (w *countingWriter) WriteHeader(code int) {
	if !w.wroteHeader {
		w.e.status.Store(int64(code))
		w.wroteHeader = true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *countingWriter) Write(p []byte) (int, error) {
	w.wroteHeader = true
	n, err := w.ResponseWriter.Write(p)
	w.e.out.Add(int64(n))
	return n, err
}

// Flush lets the reverse proxy stream.
func (w *countingWriter) Flush() {
	if fl, ok := w.ResponseWriter.(http.Flusher); ok {
		fl.Flush()
	}
}

// countingBody counts bytes read from a request body.
type countingBody struct {
	rc io.ReadCloser
	n  *atomic.Int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	b.n.Add(int64(n))
	return n, err
}

func (b *countingBody) Close() error { return b.rc.Close() }
