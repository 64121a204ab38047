package transfer

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/enix/kuik/internal/testutil"
)

// rawManifest is a manifest pushed as these exact bytes.
type rawManifest struct {
	b  []byte
	mt types.MediaType
}

func (r rawManifest) RawManifest() ([]byte, error)        { return r.b, nil }
func (r rawManifest) MediaType() (types.MediaType, error) { return r.mt, nil }

// side is a registry with a logging front; tests push straight to the registry, copies go
// through the front.
type regSide struct {
	reg   *testutil.Registry
	front *testutil.Front
	auth  authn.Authenticator
}

func newSide(t testing.TB, user string) *regSide {
	reg := testutil.NewRegistry(t, user, "pw-"+user)
	return &regSide{reg: reg, front: testutil.NewFront(t, reg), auth: authn.FromConfig(authn.AuthConfig{Username: user, Password: "pw-" + user})}
}

func (s *regSide) ref(t testing.TB, repoRef string) name.Reference {
	t.Helper()
	ref, err := name.ParseReference(s.front.Host + "/" + repoRef)
	if err != nil {
		t.Fatal(err)
	}
	return ref
}

// blob pushes data into repo and returns its descriptor.
func (s *regSide) blob(t testing.TB, repo string, data []byte, mt types.MediaType) v1.Descriptor {
	t.Helper()
	r, err := name.NewRepository(s.reg.Host + "/" + repo)
	if err != nil {
		t.Fatal(err)
	}
	l := static.NewLayer(data, mt)
	if err := remote.WriteLayer(r, l, remote.WithAuth(s.auth)); err != nil {
		t.Fatal(err)
	}
	d, _ := l.Digest()
	return v1.Descriptor{MediaType: mt, Size: int64(len(data)), Digest: d}
}

// manifest pushes raw at repo:tag (or by digest when tag is "") and returns its descriptor.
func (s *regSide) manifest(t testing.TB, repo, tag string, mt types.MediaType, raw []byte, platform *v1.Platform) v1.Descriptor {
	t.Helper()
	h, n, _ := v1.SHA256(bytes.NewReader(raw))
	id := "@" + h.String()
	if tag != "" {
		id = ":" + tag
	}
	ref, err := name.ParseReference(s.reg.Host + "/" + repo + id)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Put(ref, rawManifest{raw, mt}, remote.WithAuth(s.auth)); err != nil {
		t.Fatal(err)
	}
	return v1.Descriptor{MediaType: mt, Size: n, Digest: h, Platform: platform}
}

func random(t testing.TB, n int) []byte {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

func js(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// image pushes a single-platform image (Docker schema 2 or OCI) by digest, with its own odd
// whitespace so any re-serialisation shows as a digest change.
func (s *regSide) image(t testing.TB, repo string, docker bool, layers, size int, arch string) v1.Descriptor {
	t.Helper()
	mt, cfgMT, layerMT := types.OCIManifestSchema1, types.OCIConfigJSON, types.OCILayer
	if docker {
		mt, cfgMT, layerMT = types.DockerManifestSchema2, types.DockerConfigJSON, types.DockerLayer
	}
	cfg := s.blob(t, repo, fmt.Appendf(nil, `{"architecture":%q,"os":"linux","rootfs":{"type":"layers"},"nonce":%q}`, arch, random(t, 8)), cfgMT)
	var ls []string
	for range layers {
		ls = append(ls, js(s.blob(t, repo, random(t, size), layerMT)))
	}
	raw := fmt.Sprintf("{\n   \"schemaVersion\": 2,\n   \"mediaType\": %q,\n   \"config\": %s,\n   \"layers\": [\n      %s\n   ]\n}", mt, js(cfg), strings.Join(ls, ",\n      "))
	return s.manifest(t, repo, "", mt, []byte(raw), &v1.Platform{OS: "linux", Architecture: arch})
}

// index pushes an index of children at repo:tag.
func (s *regSide) index(t testing.TB, repo, tag string, mt types.MediaType, children []v1.Descriptor) v1.Descriptor {
	t.Helper()
	var cs []string
	for _, c := range children {
		cs = append(cs, js(c))
	}
	raw := fmt.Sprintf("{\n  \"schemaVersion\": 2,\n  \"mediaType\": %q,\n  \"manifests\": [\n    %s\n  ],\n  \"annotations\": {\"z\": \"1\", \"a\": \"2\"}\n}", mt, strings.Join(cs, ",\n    "))
	return s.manifest(t, repo, tag, mt, []byte(raw), nil)
}

// attested pushes an OCI index of two platforms, their in-toto attestation manifests and an
// artifact of an unknown media type.
func (s *regSide) attested(t testing.TB, repo, tag string, size int) v1.Descriptor {
	t.Helper()
	amd := s.image(t, repo, false, 2, size, "amd64")
	arm := s.image(t, repo, false, 2, size, "arm64")
	children := []v1.Descriptor{amd, arm}
	for _, img := range []v1.Descriptor{amd, arm} {
		cfg := s.blob(t, repo, []byte(`{"architecture":"unknown","os":"unknown"}`), types.OCIConfigJSON)
		stmt := s.blob(t, repo, fmt.Appendf(nil, `{"_type":"https://in-toto.io/Statement/v0.1","subject":%q}`, img.Digest), "application/vnd.in-toto+json")
		raw := fmt.Sprintf(`{"schemaVersion":2,"mediaType":%q,"config":%s,"layers":[%s]}`, types.OCIManifestSchema1, js(cfg), js(stmt))
		att := s.manifest(t, repo, "", types.OCIManifestSchema1, []byte(raw), &v1.Platform{OS: "unknown", Architecture: "unknown"})
		att.Annotations = map[string]string{"vnd.docker.reference.digest": img.Digest.String(), "vnd.docker.reference.type": "attestation-manifest"}
		children = append(children, att)
	}
	odd := s.blob(t, repo, []byte("an unknown payload"), "application/vnd.example.payload")
	raw := fmt.Sprintf(`{"mediaType":"application/vnd.example.thing.v1+json","blobs":[%s]}`, js(odd))
	children = append(children, s.manifest(t, repo, "", "application/vnd.example.thing.v1+json", []byte(raw), nil))
	return s.index(t, repo, tag, types.OCIImageIndex, children)
}

// options are Copy options for src → dst with fast retries.
func options(src, dst *regSide) Options {
	return Options{SourceAuth: src.auth, DestAuth: dst.auth, StallTimeout: 5 * time.Second, Backoff: &remote.Backoff{Duration: time.Millisecond, Factor: 1, Steps: 2}}
}

// rawAt returns the manifest bytes and digest the registry serves at ref.
func rawAt(t testing.TB, s *regSide, repoRef string) ([]byte, v1.Hash) {
	t.Helper()
	ref, err := name.ParseReference(s.reg.Host + "/" + repoRef)
	if err != nil {
		t.Fatal(err)
	}
	d, err := remote.Get(ref, remote.WithAuth(s.auth))
	if err != nil {
		t.Fatalf("reading %s: %v", ref, err)
	}
	return d.Manifest, d.Digest
}

func TestCopyIsVerbatim(t *testing.T) {
	src, dst := newSide(t, "src"), newSide(t, "dst")
	docker := []v1.Descriptor{src.image(t, "lib/list", true, 2, 1024, "amd64"), src.image(t, "lib/list", true, 1, 1024, "arm64")}
	src.index(t, "lib/list", "v1", types.DockerManifestList, docker)
	src.attested(t, "lib/attested", "v1", 1024)
	s2 := src.image(t, "lib/schema2", true, 2, 1024, "amd64")
	src.manifest(t, "lib/schema2", "v1", s2.MediaType, mustRaw(t, src, "lib/schema2@"+s2.Digest.String()), nil)
	oci := src.image(t, "lib/oci", false, 2, 1024, "amd64")
	src.manifest(t, "lib/oci", "v1", oci.MediaType, mustRaw(t, src, "lib/oci@"+oci.Digest.String()), nil)
	pinnedDesc := src.attested(t, "lib/pinned", "v1", 512)

	for name, tc := range map[string]struct{ src, dst, check string }{
		"a Docker v2 manifest list":                      {"lib/list:v1", "m/list:v1", "lib/list:v1"},
		"an OCI index with attestations and an artifact": {"lib/attested:v1", "m/attested:v1", "lib/attested:v1"},
		"a single schema 2 manifest":                     {"lib/schema2:v1", "m/schema2:v1", "lib/schema2:v1"},
		"a single OCI manifest":                          {"lib/oci:v1", "m/oci:v1", "lib/oci:v1"},
		"a tag@digest reference":                         {"lib/pinned:v1@" + pinnedDesc.Digest.String(), "m/pinned:v1", "lib/pinned:v1"},
	} {
		t.Run(name, func(t *testing.T) {
			srcRef, want, err := ParsePinned(src.front.Host + "/" + tc.src)
			if err != nil {
				t.Fatal(err)
			}
			opts := options(src, dst)
			opts.Digest = want
			res, err := Copy(t.Context(), srcRef, dst.ref(t, tc.dst), opts)
			if err != nil {
				t.Fatal(err)
			}
			wantRaw, wantDigest := rawAt(t, src, tc.check)
			gotRaw, gotDigest := rawAt(t, dst, tc.dst)
			if gotDigest != wantDigest || res.Digest != wantDigest || !bytes.Equal(gotRaw, wantRaw) {
				t.Fatalf("destination %s (result %s), source %s; bytes equal: %v", gotDigest, res.Digest, wantDigest, bytes.Equal(gotRaw, wantRaw))
			}
			if res.Action != Copied {
				t.Fatalf("action %s, want Copied", res.Action)
			}
			// Every child is readable from the destination with its bytes.
			var idx manifestFields
			_ = json.Unmarshal(wantRaw, &idx)
			for _, c := range idx.Manifests {
				repo := strings.SplitN(tc.check, ":", 2)[0]
				mRepo := strings.SplitN(tc.dst, ":", 2)[0]
				a, _ := rawAt(t, src, repo+"@"+c.Digest.String())
				b, _ := rawAt(t, dst, mRepo+"@"+c.Digest.String())
				if !bytes.Equal(a, b) {
					t.Fatalf("child %s differs", c.Digest)
				}
			}
		})
	}
}

func mustRaw(t testing.TB, s *regSide, repoRef string) []byte {
	b, _ := rawAt(t, s, repoRef)
	return b
}

func TestAlreadyPresentMovesNoBlobAndGetsNothingUpstream(t *testing.T) {
	src, dst := newSide(t, "src"), newSide(t, "dst")
	src.attested(t, "lib/app", "v1", 4096)
	if _, err := Copy(t.Context(), src.ref(t, "lib/app:v1"), dst.ref(t, "m/app:v1"), options(src, dst)); err != nil {
		t.Fatal(err)
	}
	_, digest := rawAt(t, src, "lib/app:v1")

	for name, tc := range map[string]struct {
		dst        string
		digest     bool
		wantAction Action
		srcHeads   int
	}{
		"the same tag, digest known":           {"m/app:v1", true, AlreadyPresent, 0},
		"the same tag, digest from source":     {"m/app:v1", false, AlreadyPresent, 1},
		"a new tag on the digest, known":       {"m/app:v2", true, Tagged, 0},
		"a new tag on the digest, from source": {"m/app:v3", false, Tagged, 1},
	} {
		t.Run(name, func(t *testing.T) {
			src.front.Reset()
			dst.front.Reset()
			opts := options(src, dst)
			if tc.digest {
				opts.Digest = digest
			}
			res, err := Copy(t.Context(), src.ref(t, "lib/app:v1"), dst.ref(t, tc.dst), opts)
			if err != nil {
				t.Fatal(err)
			}
			if res.Action != tc.wantAction || res.Digest != digest {
				t.Fatalf("got %s %s, want %s %s", res.Action, res.Digest, tc.wantAction, digest)
			}
			if n := src.front.Count(http.MethodGet, testutil.KindManifest) + src.front.Count(http.MethodGet, testutil.KindBlob); n != 0 {
				t.Logf("%+v", src.front.Requests())
				t.Fatalf("%d source GETs, want 0", n)
			}
			if n := src.front.Count(http.MethodHead, testutil.KindManifest); n != tc.srcHeads {
				t.Fatalf("%d source HEADs, want %d", n, tc.srcHeads)
			}
			if n := dst.front.UploadedBytes(); n != 0 || dst.front.Count("", testutil.KindUpload) != 0 {
				t.Fatalf("%d bytes uploaded to the destination, want 0", n)
			}
			if _, got := rawAt(t, dst, tc.dst); got != digest {
				t.Fatalf("destination tag at %s, want %s", got, digest)
			}
		})
	}
}

func TestNewImageTakesOnePlusNManifestGETs(t *testing.T) {
	src, dst := newSide(t, "src"), newSide(t, "dst")
	src.attested(t, "lib/app", "v1", 1024) // 5 children
	pacer := NewPacer(PacerConfig{})
	opts := options(src, dst)
	opts.Pacer = pacer
	res, err := Copy(t.Context(), src.ref(t, "lib/app:v1"), dst.ref(t, "m/app:v1"), opts)
	if err != nil {
		t.Fatal(err)
	}
	if got := src.front.Count(http.MethodGet, testutil.KindManifest); got != 1+5 {
		t.Fatalf("%d manifest GETs, want 1+5", got)
	}
	if res.Manifests != 6 || res.Blobs == 0 {
		t.Fatalf("result %+v", res)
	}
	pacer.mu.Lock()
	pending := pacer.hosts[src.front.Host].pending
	pacer.mu.Unlock()
	if pending != 0 {
		t.Fatalf("%d manifest GETs still reserved", pending)
	}
}

func TestMountsWithinOneRegistry(t *testing.T) {
	reg := newSide(t, "one")
	reg.attested(t, "lib/app", "v1", 1<<16)
	// go-containerregistry's registry shares blobs between repositories; answer 404 to blob
	// HEADs in m/ as a registry with per-repository blobs does, so only a mount avoids bytes.
	// It has no mount either: answer a mount from lib/app with 201 when the blob is there.
	reg.front.Intercept(func(w http.ResponseWriter, r *http.Request) bool {
		if r.Method == http.MethodHead && strings.HasPrefix(r.URL.Path, "/v2/m/") && strings.Contains(r.URL.Path, "/blobs/sha256:") {
			w.WriteHeader(http.StatusNotFound)
			return true
		}
		q := r.URL.Query()
		if r.Method == http.MethodPost && q.Get("mount") != "" && q.Get("from") == "lib/app" {
			req, _ := http.NewRequest(http.MethodHead, "http://"+reg.reg.Host+"/v2/lib/app/blobs/"+q.Get("mount"), nil)
			req.SetBasicAuth("one", "pw-one")
			if resp, err := http.DefaultClient.Do(req); err == nil && resp.StatusCode == http.StatusOK {
				resp.Body.Close()
				w.Header().Set("Location", strings.TrimSuffix(r.URL.Path, "uploads/")+q.Get("mount"))
				w.Header().Set("Docker-Content-Digest", q.Get("mount"))
				w.WriteHeader(http.StatusCreated)
				return true
			}
		}
		return false
	})
	res, err := Copy(t.Context(), reg.ref(t, "lib/app:v1"), reg.ref(t, "m/app:v1"), options(reg, reg))
	if err != nil {
		t.Fatal(err)
	}
	mounted := 0
	for _, r := range reg.front.Requests() {
		if r.Method == http.MethodPost && r.Kind == testutil.KindUpload && strings.Contains(r.Query, "mount=") && r.Status == http.StatusCreated {
			mounted++
		}
	}
	if res.Bytes != 0 || reg.front.DownloadedBytes() != 0 || reg.front.UploadedBytes() != 0 || mounted != 10 {
		t.Fatalf("%d blob bytes streamed, %d mounted; want 0 bytes and the 10 blobs mounted", res.Bytes, mounted)
	}
}

func TestTagIsWrittenLast(t *testing.T) {
	src, dst := newSide(t, "src"), newSide(t, "dst")
	src.attested(t, "lib/app", "v1", 1024)
	dst.front.FailUploads(true)
	_, err := Copy(t.Context(), src.ref(t, "lib/app:v1"), dst.ref(t, "m/app:v1"), options(src, dst))
	if ReasonOf(err) != PushFailed {
		t.Fatalf("got %v, want PushFailed", err)
	}
	if n := dst.front.Count(http.MethodPut, testutil.KindManifest); n != 0 {
		t.Fatalf("%d manifests written although a blob failed", n)
	}
	if _, err := remote.Head(dst.ref(t, "m/app:v1"), remote.WithAuth(dst.auth)); err == nil {
		t.Fatal("the tag exists although a blob failed")
	}
}

func TestStalledDestinationIsAbandonedAndRetryCompletes(t *testing.T) {
	src, dst := newSide(t, "src"), newSide(t, "dst")
	// 6 small blobs (configs, statements, an artifact payload) and 4 layers of 4 MiB.
	src.attested(t, "lib/big", "v1", 4<<20)
	dst.front.StallUploads(1 << 20)
	opts := options(src, dst)
	opts.StallTimeout = time.Second
	start := time.Now()
	_, err := Copy(t.Context(), src.ref(t, "lib/big:v1"), dst.ref(t, "m/big:v1"), opts)
	if ReasonOf(err) != Stalled {
		t.Fatalf("got %v, want Stalled", err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("abandoned after %s", took)
	}
	if dst.front.Stalled() == 0 {
		t.Fatal("no upload stalled")
	}
	if _, err := remote.Head(dst.ref(t, "m/big:v1"), remote.WithAuth(dst.auth)); err == nil {
		t.Fatal("the tag exists after a stalled copy")
	}
	committed := committedBlobs(dst.front)
	if len(committed) != 6 {
		t.Fatalf("%d blobs committed before the stall, want the 6 small ones", len(committed))
	}
	dst.front.Unstall()
	dst.front.Reset()
	res, err := Copy(t.Context(), src.ref(t, "lib/big:v1"), dst.ref(t, "m/big:v1"), opts)
	if err != nil {
		t.Fatal(err)
	}
	if res.Action != Copied || res.Blobs != 4 {
		t.Fatalf("retry: %+v, want the 4 layers copied", res)
	}
	for d := range committedBlobs(dst.front) {
		if committed[d] {
			t.Fatalf("retry uploaded %s again", d)
		}
	}
	if n := dst.front.Count(http.MethodPost, testutil.KindUpload); n != 4 {
		t.Fatalf("retry started %d uploads, want 4", n)
	}
}

// committedBlobs are the digests of the blob uploads the registry committed.
func committedBlobs(f *testutil.Front) map[string]bool {
	out := map[string]bool{}
	for _, r := range f.Requests() {
		if r.Kind == testutil.KindUpload && r.Method == http.MethodPut && r.Status == http.StatusCreated {
			q, _ := url.ParseQuery(r.Query)
			out[q.Get("digest")] = true
		}
	}
	return out
}

func TestSourceErrorsAreClassified(t *testing.T) {
	for name, tc := range map[string]struct {
		prepare func(src *regSide)
		srcRef  string
		auth    authn.Authenticator
		want    Reason
	}{
		"a missing tag":      {srcRef: "lib/none:v1", want: SourceUnavailable},
		"a failing source":   {prepare: func(s *regSide) { s.reg.SetBehavior(testutil.Fail) }, srcRef: "lib/app:v1", want: SourceUnavailable},
		"a rate-limited one": {prepare: func(s *regSide) { s.reg.SetBehavior(testutil.RateLimit) }, srcRef: "lib/app:v1", want: QuotaExceeded},
		"a wrong credential": {srcRef: "lib/app:v1", auth: authn.FromConfig(authn.AuthConfig{Username: "src", Password: "wrong"}), want: AuthRequired},
	} {
		t.Run(name, func(t *testing.T) {
			src, dst := newSide(t, "src"), newSide(t, "dst")
			src.reg.Push(t, "lib/app:v1")
			if tc.prepare != nil {
				tc.prepare(src)
			}
			opts := options(src, dst)
			if tc.auth != nil {
				opts.SourceAuth = tc.auth
			}
			_, err := Copy(t.Context(), src.ref(t, tc.srcRef), dst.ref(t, "m/app:v1"), opts)
			if got := ReasonOf(err); got != tc.want {
				t.Fatalf("got %q (%v), want %q", got, err, tc.want)
			}
		})
	}
}

func TestMovedTagCopiesTheDigestThatRan(t *testing.T) {
	src, dst := newSide(t, "src"), newSide(t, "dst")
	src.attested(t, "lib/app", "v1", 1024)
	ranRaw, ran := rawAt(t, src, "lib/app:v1")
	src.attested(t, "lib/app", "v1", 1024) // the tag moves to new content
	if _, now := rawAt(t, src, "lib/app:v1"); now == ran {
		t.Fatal("the tag did not move")
	}
	opts := options(src, dst)
	opts.Digest = ran
	res, err := Copy(t.Context(), src.ref(t, "lib/app:v1"), dst.ref(t, "m/app:v1"), opts)
	if err != nil {
		t.Fatal(err)
	}
	gotRaw, got := rawAt(t, dst, "m/app:v1")
	if got != ran || res.Digest != ran || !bytes.Equal(gotRaw, ranRaw) {
		t.Fatalf("destination %s (result %s), want the digest that ran %s; bytes equal: %v", got, res.Digest, ran, bytes.Equal(gotRaw, ranRaw))
	}
	var idx manifestFields
	_ = json.Unmarshal(ranRaw, &idx)
	for _, c := range idx.Manifests {
		if a, b := mustRaw(t, src, "lib/app@"+c.Digest.String()), mustRaw(t, dst, "m/app@"+c.Digest.String()); !bytes.Equal(a, b) {
			t.Fatalf("child %s differs", c.Digest)
		}
	}

	// The digest that ran is gone from the source too, and a new destination lacks it: ErrTagMoved.
	if err := remote.Delete(src.ref(t, "lib/app@"+ran.String()), remote.WithAuth(src.auth)); err != nil {
		t.Fatal(err)
	}
	fresh := newSide(t, "dst")
	_, err = Copy(t.Context(), src.ref(t, "lib/app:v1"), fresh.ref(t, "m/app:v1"), options(src, fresh))
	if err != nil {
		t.Fatalf("without a digest, the moved tag copies what it points to now: %v", err)
	}
	fresh = newSide(t, "dst")
	opts = options(src, fresh)
	opts.Digest = ran
	_, err = Copy(t.Context(), src.ref(t, "lib/app:v1"), fresh.ref(t, "m/app:v1"), opts)
	if ReasonOf(err) != SourceUnavailable || !errors.Is(err, ErrTagMoved) {
		t.Fatalf("moved tag, digest gone: got %v, want SourceUnavailable with ErrTagMoved", err)
	}
}

func TestTooLarge(t *testing.T) {
	src, dst := newSide(t, "src"), newSide(t, "dst")
	src.reg.Push(t, "lib/app:v1")
	opts := options(src, dst)
	opts.MaxSize = 100
	_, err := Copy(t.Context(), src.ref(t, "lib/app:v1"), dst.ref(t, "m/app:v1"), opts)
	if ReasonOf(err) != TooLarge {
		t.Fatalf("too large: got %v", err)
	}
}

// hubLike makes the front of s announce a Docker-Hub-like quota: limit per window, one
// manifest GET each, 429 with Retry-After when spent.
func hubLike(s *regSide, limit int) *atomic.Int64 {
	var remaining atomic.Int64
	remaining.Store(int64(limit))
	s.front.Intercept(func(w http.ResponseWriter, r *http.Request) bool {
		if r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/manifests/") && remaining.Add(-1) < 0 {
			remaining.Store(0)
			w.Header().Set("Retry-After", "3600")
			w.WriteHeader(http.StatusTooManyRequests)
			return true
		}
		return false
	})
	s.front.Respond(func(resp *http.Response) {
		resp.Header.Set("Ratelimit-Limit", strconv.Itoa(limit)+";w=21600")
		resp.Header.Set("Ratelimit-Remaining", strconv.FormatInt(remaining.Load(), 10)+";w=21600")
	})
	return &remaining
}

func TestPacerKeepsTheReserve(t *testing.T) {
	src, dst := newSide(t, "src"), newSide(t, "dst")
	remaining := hubLike(src, 20)
	for i := range 6 {
		src.attested(t, "lib/app", fmt.Sprintf("v%d", i), 256) // 1 + 5 manifest GETs each
	}
	now := time.Unix(1_800_000_000, 0)
	pacer := NewPacer(PacerConfig{Now: func() time.Time { return now }})
	opts := options(src, dst)
	opts.Pacer = pacer
	copied, refused := 0, 0
	for i := range 6 {
		tag := fmt.Sprintf("v%d", i)
		_, err := Copy(t.Context(), src.ref(t, "lib/app:"+tag), dst.ref(t, "m/app:"+tag), opts)
		switch {
		case err == nil:
			copied++
		case ReasonOf(err) == QuotaExceeded:
			refused++
		default:
			t.Fatal(err)
		}
		if r := remaining.Load(); r < 10 {
			t.Fatalf("after copy %d the source has %d left, below the reserve of 10", i, r)
		}
	}
	if copied == 0 || refused == 0 {
		t.Fatalf("copied %d, refused %d: want some of each", copied, refused)
	}
}

func TestTooManyRequestsFreezesThatHostOnly(t *testing.T) {
	hub, other, dst := newSide(t, "hub"), newSide(t, "other"), newSide(t, "dst")
	hub.reg.Push(t, "lib/a:v1")
	hub.reg.Push(t, "lib/b:v1")
	other.reg.Push(t, "lib/c:v1")
	hubLike(hub, 0)
	now := time.Unix(1_800_000_000, 0)
	pacer := NewPacer(PacerConfig{Now: func() time.Time { return now }})
	hubOpts := options(hub, dst)
	hubOpts.Pacer = pacer
	_, err := Copy(t.Context(), hub.ref(t, "lib/a:v1"), dst.ref(t, "m/a:v1"), hubOpts)
	if ReasonOf(err) != QuotaExceeded {
		t.Fatalf("first copy: got %v, want QuotaExceeded", err)
	}
	if got := hub.front.Count(http.MethodGet, testutil.KindManifest); got != 1 {
		t.Fatalf("%d manifest GETs, want 1 (no retry of a 429)", got)
	}
	if until := pacer.FrozenUntil(hub.front.Host); !until.Equal(now.Add(time.Hour)) {
		t.Fatalf("frozen until %s, want Retry-After", until)
	}
	hub.front.Reset()
	_, err = Copy(t.Context(), hub.ref(t, "lib/b:v1"), dst.ref(t, "m/b:v1"), hubOpts)
	var e *Error
	if ReasonOf(err) != QuotaExceeded || !errorsAs(err, &e) || !e.RetryAt.Equal(now.Add(time.Hour)) {
		t.Fatalf("second copy: got %v, want QuotaExceeded until the freeze ends", err)
	}
	if n := len(hub.front.Requests()); n != 0 {
		t.Fatalf("%d requests sent to a frozen host", n)
	}
	otherOpts := options(other, dst)
	otherOpts.Pacer = pacer
	if _, err := Copy(t.Context(), other.ref(t, "lib/c:v1"), dst.ref(t, "m/c:v1"), otherOpts); err != nil {
		t.Fatalf("another host: %v", err)
	}
}

func TestStalledSourceIsAbandoned(t *testing.T) {
	src, dst := newSide(t, "src"), newSide(t, "dst")
	src.attested(t, "lib/app", "v1", 1<<20)
	src.front.Intercept(func(w http.ResponseWriter, r *http.Request) bool {
		if r.Method != http.MethodGet || !strings.Contains(r.URL.Path, "/blobs/sha256:") {
			return false
		}
		// Headers, then not a byte of the body.
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
		return true
	})
	opts := options(src, dst)
	opts.StallTimeout = 300 * time.Millisecond
	start := time.Now()
	_, err := Copy(t.Context(), src.ref(t, "lib/app:v1"), dst.ref(t, "m/app:v1"), opts)
	if ReasonOf(err) != Stalled {
		t.Fatalf("got %v, want Stalled", err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("abandoned after %s", took)
	}
}

// One insecure clone serves every copy of a base transport: a clone per copy keeps its own idle
// connections, and a keeper copying thousands of images held thousands of sockets.
func TestInsecureTransportIsOneCloneShared(t *testing.T) {
	base := &http.Transport{}
	a, b := InsecureTransport(base), InsecureTransport(base)
	if a != b {
		t.Fatal("two calls gave two clones")
	}
	if a == http.RoundTripper(base) || !a.(*http.Transport).TLSClientConfig.InsecureSkipVerify {
		t.Fatal("the clone does not skip TLS verification, or is the base itself")
	}
	if base.TLSClientConfig != nil && base.TLSClientConfig.InsecureSkipVerify {
		t.Fatal("the base transport skips TLS verification too")
	}
}
