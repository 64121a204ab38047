package transfer

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/enix/kuik/internal/testutil"
)

// repoBlobs makes a Front answer blob requests as a registry whose blobs belong to
// repositories (go-containerregistry's registry shares them all): a HEAD or GET of a blob the
// repository does not hold is a 404; a committed upload or a mount adds it. With mounts, a
// POST ?mount=<d>&from=<repo> whose repo holds d answers 201 as distribution does; without,
// it goes to the registry, which ignores the mount and opens an upload session (202).
type repoBlobs struct {
	mu   sync.Mutex
	held map[string]map[string]bool // repository → digest → held
}

// blobPath splits /v2/<repo>/blobs/<rest>.
func blobPath(p string) (repo, rest string, ok bool) {
	p, ok = strings.CutPrefix(p, "/v2/")
	i := strings.LastIndex(p, "/blobs/")
	if !ok || i < 0 {
		return "", "", false
	}
	return p[:i], p[i+len("/blobs/"):], true
}

func (b *repoBlobs) holds(repo, d string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.held[repo][d]
}

func (b *repoBlobs) add(repo, d string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.held[repo] == nil {
		b.held[repo] = map[string]bool{}
	}
	b.held[repo][d] = true
}

// newRepoBlobs installs the behaviour on s.front. check, when set, runs first and may answer.
func newRepoBlobs(s *regSide, mounts bool, check func(http.ResponseWriter, *http.Request) bool) *repoBlobs {
	b := &repoBlobs{held: map[string]map[string]bool{}}
	s.front.Intercept(func(w http.ResponseWriter, r *http.Request) bool {
		if check != nil && check(w, r) {
			return true
		}
		repo, rest, ok := blobPath(r.URL.Path)
		if !ok {
			return false
		}
		if u, p, ok := r.BasicAuth(); ok && (u != s.reg.Username || p != s.reg.Password) {
			return false // the registry refuses it
		}
		switch {
		case (r.Method == http.MethodHead || r.Method == http.MethodGet) && strings.HasPrefix(rest, "sha256:"):
			if !b.holds(repo, rest) {
				w.WriteHeader(http.StatusNotFound)
				return true
			}
		case r.Method == http.MethodPost && rest == "uploads/" && mounts:
			d, from := r.URL.Query().Get("mount"), r.URL.Query().Get("from")
			if d != "" && b.holds(from, d) {
				b.add(repo, d)
				w.Header().Set("Location", "/v2/"+repo+"/blobs/"+d)
				w.Header().Set("Docker-Content-Digest", d)
				w.WriteHeader(http.StatusCreated)
				return true
			}
		}
		return false
	})
	s.front.Respond(func(resp *http.Response) {
		repo, rest, ok := blobPath(resp.Request.URL.Path)
		if ok && resp.Request.Method == http.MethodPut && strings.HasPrefix(rest, "uploads/") && resp.StatusCode == http.StatusCreated {
			b.add(repo, resp.Request.URL.Query().Get("digest"))
		}
	})
	return b
}

// sharedImages pushes lib/a:v1 and lib/b:v1, two images whose two base layers are the same
// 64 KiB blobs, each with a small layer and a config of its own; it returns the shared
// layers and the sizes of b's own blobs.
func sharedImages(t *testing.T, src *regSide) (shared []v1.Descriptor, ownB int64) {
	t.Helper()
	shared = []v1.Descriptor{
		src.blob(t, "lib/base", random(t, 1<<16), types.OCILayer),
		src.blob(t, "lib/base", random(t, 1<<16), types.OCILayer),
	}
	for _, repo := range []string{"lib/a", "lib/b"} {
		cfg := src.blob(t, repo, fmt.Appendf(nil, `{"architecture":"amd64","os":"linux","nonce":%q}`, random(t, 8)), types.OCIConfigJSON)
		own := src.blob(t, repo, random(t, 1024), types.OCILayer)
		layers := []string{js(shared[0]), js(shared[1]), js(own)}
		raw := fmt.Sprintf(`{"schemaVersion":2,"mediaType":%q,"config":%s,"layers":[%s]}`, types.OCIManifestSchema1, js(cfg), strings.Join(layers, ","))
		src.manifest(t, repo, "v1", types.OCIManifestSchema1, []byte(raw), nil)
		ownB = cfg.Size + own.Size
	}
	return shared, ownB
}

// mountPosts are the destination's POSTs that asked for a mount, as "from status".
func mountPosts(f *testutil.Front) []string {
	var out []string
	for _, r := range f.Requests() {
		if r.Method == http.MethodPost && r.Kind == testutil.KindUpload && strings.Contains(r.Query, "mount=") && strings.Contains(r.Query, "from=") {
			q, _ := url.ParseQuery(r.Query)
			out = append(out, fmt.Sprintf("%s %d", q.Get("from"), r.Status))
		}
	}
	slices.Sort(out)
	return out
}

// shareTwo copies lib/a:v1 to mirror/kuik/a/app:v1 and then lib/b:v1 to mirror/kuik/b/app:v1
// with one Mounts, and returns the second copy's result; the fronts log the second copy only.
func shareTwo(t *testing.T, src, dst *regSide, opts Options) Result {
	t.Helper()
	if _, err := Copy(t.Context(), src.ref(t, "lib/a:v1"), dst.ref(t, "mirror/kuik/a/app:v1"), opts); err != nil {
		t.Fatal(err)
	}
	src.front.Reset()
	dst.front.Reset()
	res, err := Copy(t.Context(), src.ref(t, "lib/b:v1"), dst.ref(t, "mirror/kuik/b/app:v1"), opts)
	if err != nil {
		t.Fatal(err)
	}
	_, want := rawAt(t, src, "lib/b:v1")
	got, err := remote.Head(dst.ref(t, "mirror/kuik/b/app:v1"), remote.WithAuth(dst.auth))
	if err != nil {
		t.Fatal(err)
	}
	if res.Digest != want || got.Digest != want {
		t.Fatalf("copied %s, destination has %s, want the source's %s", res.Digest, got.Digest, want)
	}
	return res
}

// sourceReads counts the source's GETs of the shared blobs.
func sourceReads(src *regSide, shared []v1.Descriptor) int {
	n := 0
	for _, r := range src.front.Requests() {
		for _, d := range shared {
			if r.Kind == testutil.KindBlob && r.Method == http.MethodGet && strings.HasSuffix(r.Path, d.Digest.String()) {
				n++
			}
		}
	}
	return n
}

func TestSharedLayersAreMountedFromASiblingRepository(t *testing.T) {
	src, dst := newSide(t, "src"), newSide(t, "dst")
	shared, ownB := sharedImages(t, src)
	newRepoBlobs(dst, true, nil)
	opts := options(src, dst)
	opts.Mounts = NewMounts(0)
	res := shareTwo(t, src, dst, opts)

	// The two shared layers are mounted with the push credential; only b's own blobs move.
	want := []string{"mirror/kuik/a/app 201", "mirror/kuik/a/app 201"}
	if diff := cmp.Diff(want, mountPosts(dst.front)); diff != "" {
		t.Errorf("mount POSTs (-want +got):\n%s", diff)
	}
	if n := sourceReads(src, shared); n != 0 {
		t.Errorf("%d source GETs of the shared layers, want 0", n)
	}
	if res.Bytes != ownB || dst.front.UploadedBytes() != ownB {
		t.Errorf("%d bytes read from the source, %d uploaded; want only b's own %d", res.Bytes, dst.front.UploadedBytes(), ownB)
	}
}

func TestRefusedMountStreamsFromTheSource(t *testing.T) {
	for name, tc := range map[string]struct {
		mounts bool
		refuse func(http.ResponseWriter, *http.Request) bool
		status int
	}{
		"a registry without mounts opens an upload session (202)": {status: http.StatusAccepted},
		"a mount denied (403) is retried as a plain upload": {
			mounts: true,
			refuse: func(w http.ResponseWriter, r *http.Request) bool {
				if r.Method != http.MethodPost || r.URL.Query().Get("mount") == "" {
					return false
				}
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusForbidden)
				_, _ = w.Write([]byte(`{"errors":[{"code":"DENIED","message":"no pull on from"}]}`))
				return true
			},
			status: http.StatusForbidden,
		},
	} {
		t.Run(name, func(t *testing.T) {
			src, dst := newSide(t, "src"), newSide(t, "dst")
			shared, ownB := sharedImages(t, src)
			newRepoBlobs(dst, tc.mounts, tc.refuse)
			opts := options(src, dst)
			opts.Mounts = NewMounts(0)
			res := shareTwo(t, src, dst, opts)

			s := fmt.Sprintf("mirror/kuik/a/app %d", tc.status)
			if diff := cmp.Diff([]string{s, s}, mountPosts(dst.front)); diff != "" {
				t.Errorf("mount POSTs (-want +got):\n%s", diff)
			}
			// Each shared layer is read once, as a plain copy does.
			full := ownB + shared[0].Size + shared[1].Size
			if n := sourceReads(src, shared); n != 2 || res.Bytes != full {
				t.Errorf("%d source GETs of the shared layers and %d bytes, want 2 and %d", n, res.Bytes, full)
			}
		})
	}
}

// bearerFront makes s.front demand registry tokens, as distribution's token auth does: a
// token holds the scopes asked for when the basic credential is right, and a request needs
// pull (reads) or push (writes) on its repository, and a mount pull on its from repository
// too. The token is the scopes themselves, base64.
func bearerFront(s *regSide) func(http.ResponseWriter, *http.Request) bool {
	realm := "http://" + s.front.Host + "/token"
	return func(w http.ResponseWriter, r *http.Request) bool {
		if r.URL.Path == "/token" {
			if u, p, ok := r.BasicAuth(); !ok || u != "dst" || p != "pw-dst" {
				w.WriteHeader(http.StatusUnauthorized)
				return true
			}
			tok := base64.RawURLEncoding.EncodeToString([]byte(strings.Join(r.URL.Query()["scope"], " ")))
			w.Header().Set("Content-Type", "application/json")
			_, _ = fmt.Fprintf(w, `{"token":%q}`, tok)
			return true
		}
		granted := map[string]bool{}
		if tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
			raw, _ := base64.RawURLEncoding.DecodeString(tok)
			for _, sc := range strings.Fields(string(raw)) {
				parts := strings.Split(sc, ":")
				if len(parts) == 3 {
					for _, a := range strings.Split(parts[2], ",") {
						granted[parts[1]+" "+a] = true
					}
				}
				granted[""] = true // any token opens /v2/
			}
		}
		var need []string
		if r.URL.Path == "/v2/" {
			need = []string{""}
		} else if repo, ok := repoOf(r.URL.Path); ok {
			action := "push"
			if r.Method == http.MethodGet || r.Method == http.MethodHead {
				action = "pull"
			}
			need = append(need, repo+" "+action)
			if from := r.URL.Query().Get("from"); from != "" && r.Method == http.MethodPost {
				need = append(need, from+" pull")
			}
		}
		for _, n := range need {
			if !granted[n] {
				w.Header().Set("WWW-Authenticate", fmt.Sprintf(`Bearer realm=%q,service="test"`, realm))
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusUnauthorized)
				_, _ = w.Write([]byte(`{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`))
				return true
			}
		}
		r.Header.Del("Authorization") // the registry behind is anonymous
		return false
	}
}

// repoOf is the repository of a /v2/<repo>/(blobs|manifests|tags)/… path.
func repoOf(p string) (string, bool) {
	p, ok := strings.CutPrefix(p, "/v2/")
	if !ok {
		return "", false
	}
	for _, sep := range []string{"/blobs/", "/manifests/", "/tags/"} {
		if i := strings.LastIndex(p, sep); i >= 0 {
			return p[:i], true
		}
	}
	return "", false
}

func TestMountAsksPullOnTheSiblingInThePushToken(t *testing.T) {
	src := newSide(t, "src")
	reg := testutil.NewRegistry(t, "", "")
	dst := &regSide{reg: reg, front: testutil.NewFront(t, reg)}
	dst.auth = authn.FromConfig(authn.AuthConfig{Username: "dst", Password: "pw-dst"}) // for the token endpoint
	shared, ownB := sharedImages(t, src)
	newRepoBlobs(dst, true, bearerFront(dst))
	opts := options(src, dst)
	opts.Mounts = NewMounts(0)
	res := shareTwo(t, src, dst, opts)

	want := []string{"mirror/kuik/a/app 201", "mirror/kuik/a/app 201"}
	if diff := cmp.Diff(want, mountPosts(dst.front)); diff != "" {
		t.Errorf("mount POSTs (-want +got):\n%s", diff)
	}
	if n := sourceReads(src, shared); n != 0 || res.Bytes != ownB {
		t.Errorf("%d source GETs of the shared layers and %d bytes, want 0 and %d", n, res.Bytes, ownB)
	}
}

func TestMountsIsBounded(t *testing.T) {
	m := NewMounts(3)
	reg := name.MustParseReference("mirror.example/x:1").Context().Registry
	other := name.MustParseReference("other.example/x:1").Context().Registry
	h := func(i int) v1.Hash {
		d, _, _ := v1.SHA256(strings.NewReader(strconv.Itoa(i)))
		return d
	}
	for i := range 5 {
		m.Record(reg.Repo(fmt.Sprintf("r%d", i)), h(i))
	}
	if m.Len() != 3 {
		t.Fatalf("%d blobs remembered, want 3", m.Len())
	}
	dst := reg.Repo("dst")
	got := map[int]string{}
	for i := range 5 {
		if r, ok := m.Lookup(dst, h(i)); ok {
			got[i] = r.String()
		}
	}
	// The oldest two are forgotten; the others name their repository on the same registry.
	want := map[int]string{2: "mirror.example/r2", 3: "mirror.example/r3", 4: "mirror.example/r4"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("lookups (-want +got):\n%s", diff)
	}
	// A lookup makes a blob recent: 2 was read last, so 3 goes first.
	m.Lookup(dst, h(2))
	m.Record(reg.Repo("r5"), h(5))
	if _, ok := m.Lookup(dst, h(3)); ok {
		t.Error("the least recently used blob is still remembered")
	}
	if _, ok := m.Lookup(dst, h(2)); !ok {
		t.Error("a blob just looked up was forgotten")
	}
	// Another registry, the repository itself, and other algorithms give nothing.
	if _, ok := m.Lookup(other.Repo("dst"), h(4)); ok {
		t.Error("a blob of another registry was offered")
	}
	if _, ok := m.Lookup(reg.Repo("r4"), h(4)); ok {
		t.Error("a blob was offered from the repository that lacks it")
	}
	m.Record(reg.Repo("r6"), v1.Hash{Algorithm: "sha512", Hex: strings.Repeat("0", 128)})
	if m.Len() != 3 {
		t.Errorf("%d blobs remembered after a sha512 one, want 3", m.Len())
	}
	var nilTable *Mounts
	nilTable.Record(dst, h(1))
	if _, ok := nilTable.Lookup(dst, h(1)); ok || nilTable.Len() != 0 {
		t.Error("a nil table remembered a blob")
	}
}

func TestMountsForgetDropsOnlyTheEntryNamingThatRepository(t *testing.T) {
	m := NewMounts(4)
	reg := name.MustParseReference("mirror.example/x:1").Context().Registry
	h := func(i int) v1.Hash {
		d, _, _ := v1.SHA256(strings.NewReader(strconv.Itoa(i)))
		return d
	}
	for i := range 4 {
		m.Record(reg.Repo(fmt.Sprintf("r%d", i)), h(i))
	}
	dst := reg.Repo("dst")
	m.Forget(reg.Repo("elsewhere"), h(1)) // names another repository: kept
	m.Forget(reg.Repo("r1"), h(1))
	if _, ok := m.Lookup(dst, h(1)); ok || m.Len() != 3 {
		t.Fatalf("after Forget: blob 1 offered %v, %d remembered; want gone and 3", ok, m.Len())
	}
	// The table stays whole: the others are found, two more fit, and eviction still works.
	for _, i := range []int{0, 2, 3} {
		if r, ok := m.Lookup(dst, h(i)); !ok || r.RepositoryStr() != fmt.Sprintf("r%d", i) {
			t.Errorf("blob %d: %v %v", i, r, ok)
		}
	}
	m.Record(reg.Repo("r4"), h(4))
	m.Record(reg.Repo("r5"), h(5)) // evicts 0, the least recently used
	if _, ok := m.Lookup(dst, h(0)); ok || m.Len() != 4 {
		t.Errorf("blob 0 offered %v, %d remembered; want evicted and 4", ok, m.Len())
	}
}

// TestASiblingMountNeedsTheSourceToServeTheBlob: layer digests are no secret. A public image
// whose manifest names the layers of an image another repository of the mirror keeps must not
// get them mounted: the source does not serve them, so nothing is copied.
func TestASiblingMountNeedsTheSourceToServeTheBlob(t *testing.T) {
	src, dst := newSide(t, "src"), newSide(t, "dst")
	held := newRepoBlobs(src, false, nil)
	newRepoBlobs(dst, true, nil)
	secret := src.blob(t, "private/v", random(t, 1<<14), types.OCILayer)
	cfg := src.blob(t, "private/v", []byte(`{"architecture":"amd64","os":"linux"}`), types.OCIConfigJSON)
	held.add("private/v", secret.Digest.String())
	held.add("private/v", cfg.Digest.String())
	raw := fmt.Sprintf(`{"schemaVersion":2,"mediaType":%q,"config":%s,"layers":[%s]}`, types.OCIManifestSchema1, js(cfg), js(secret))
	src.manifest(t, "private/v", "v1", types.OCIManifestSchema1, []byte(raw), nil)
	// The attacker's repository holds its own config only, and names the secret layer.
	evilCfg := src.blob(t, "evil/e", []byte(`{"architecture":"amd64","os":"linux","x":1}`), types.OCIConfigJSON)
	held.add("evil/e", evilCfg.Digest.String())
	raw = fmt.Sprintf(`{"schemaVersion":2,"mediaType":%q,"config":%s,"layers":[%s]}`, types.OCIManifestSchema1, js(evilCfg), js(secret))
	src.manifest(t, "evil/e", "v1", types.OCIManifestSchema1, []byte(raw), nil)

	opts := options(src, dst)
	opts.Mounts = NewMounts(0)
	if _, err := Copy(t.Context(), src.ref(t, "private/v:v1"), dst.ref(t, "mirror/kuik/v/app:v1"), opts); err != nil {
		t.Fatal(err)
	}
	dst.front.Reset()
	if _, err := Copy(t.Context(), src.ref(t, "evil/e:v1"), dst.ref(t, "mirror/kuik/e/app:v1"), opts); err == nil {
		t.Fatal("a manifest naming a layer its source does not serve was copied")
	}
	if posts := mountPosts(dst.front); len(posts) != 0 {
		t.Errorf("mount POSTs %v, want none", posts)
	}
	if _, err := remote.Head(dst.ref(t, "mirror/kuik/e/app:v1"), remote.WithAuth(dst.auth)); err == nil {
		t.Error("the attacker's tag exists in the mirror")
	}
}

// TestAMountTheTokenServerRefusesIsRetriedAsAnUpload: a token server that refuses pull on the
// sibling (rather than granting less) must not block the copy.
func TestAMountTheTokenServerRefusesIsRetriedAsAnUpload(t *testing.T) {
	src := newSide(t, "src")
	reg := testutil.NewRegistry(t, "", "")
	dst := &regSide{reg: reg, front: testutil.NewFront(t, reg)}
	dst.auth = authn.FromConfig(authn.AuthConfig{Username: "dst", Password: "pw-dst"})
	shared, ownB := sharedImages(t, src)
	bearer := bearerFront(dst)
	var refused atomic.Int64
	newRepoBlobs(dst, true, func(w http.ResponseWriter, r *http.Request) bool {
		if r.URL.Path == "/token" && len(r.URL.Query()["scope"]) > 1 {
			refused.Add(1)
			w.WriteHeader(http.StatusForbidden)
			return true
		}
		return bearer(w, r)
	})
	opts := options(src, dst)
	opts.Mounts = NewMounts(0)
	res := shareTwo(t, src, dst, opts)
	if refused.Load() == 0 {
		t.Fatal("no token request for the sibling was refused: the test did not mount")
	}
	if full := ownB + shared[0].Size + shared[1].Size; res.Bytes != full {
		t.Errorf("%d bytes copied, want the whole image's %d", res.Bytes, full)
	}
	if _, ok := opts.Mounts.Lookup(dst.ref(t, "mirror/kuik/c/app:v1").Context(), shared[0].Digest); !ok {
		t.Error("the blob uploaded into b is not remembered")
	}
}
