package transfer

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/enix/kuik/internal/testutil"
)

func (s *regSide) tag(t testing.TB, repoTag string) name.Tag {
	t.Helper()
	tag, err := name.NewTag(s.front.Host + "/" + repoTag)
	if err != nil {
		t.Fatal(err)
	}
	return tag
}

// twoTags pushes one image at m/app:v1 and m/app:v2 and returns its digest.
func twoTags(t *testing.T, dst *regSide) string {
	t.Helper()
	dst.reg.Push(t, "m/app:v1")
	desc, err := remote.Get(dst.ref(t, "m/app:v1"), remote.WithAuth(dst.auth))
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Tag(dst.tag(t, "m/app:v2"), desc, remote.WithAuth(dst.auth)); err != nil {
		t.Fatal(err)
	}
	return desc.Digest.String()
}

func TestDeleteTagKeepsTheOtherTagsOfItsDigest(t *testing.T) {
	dst := newSide(t, "dst")
	digest := twoTags(t, dst)
	opts := Options{DestAuth: dst.auth}
	if err := DeleteTag(t.Context(), dst.tag(t, "m/app:v1"), opts); err != nil {
		t.Fatal(err)
	}
	if _, err := remote.Head(dst.ref(t, "m/app:v1"), remote.WithAuth(dst.auth)); !isNotFound(err) {
		t.Fatalf("m/app:v1 after its delete: %v, want 404", err)
	}
	desc, err := remote.Head(dst.ref(t, "m/app:v2"), remote.WithAuth(dst.auth))
	if err != nil || desc.Digest.String() != digest {
		t.Fatalf("m/app:v2 after deleting v1: %v %v, want %s", desc, err, digest)
	}
	for _, r := range dst.front.Requests() {
		if r.Method == http.MethodDelete && !strings.HasSuffix(r.Path, "/manifests/v1") {
			t.Fatalf("DELETE %s: only the tag may be deleted", r.Path)
		}
	}
	if n := dst.front.Count(http.MethodDelete, testutil.KindManifest); n != 1 {
		t.Fatalf("%d DELETEs, want 1", n)
	}

	err = DeleteTag(t.Context(), dst.tag(t, "m/app:v1"), opts)
	if !errors.Is(err, ErrGone) {
		t.Fatalf("deleting v1 again: %v, want ErrGone", err)
	}
	if err := DeleteTag(t.Context(), dst.tag(t, "m/none:v1"), opts); !errors.Is(err, ErrGone) {
		t.Fatalf("deleting in a missing repository: %v, want ErrGone", err)
	}
}

func TestDeleteTagOnARegistryThatDeletesByDigestOnly(t *testing.T) {
	dst := newSide(t, "dst")
	digest := twoTags(t, dst)
	dst.front.RefuseTagDeletes(true)
	err := DeleteTag(t.Context(), dst.tag(t, "m/app:v1"), Options{DestAuth: dst.auth})
	if !errors.Is(err, ErrTagDeleteUnsupported) || errors.Is(err, ErrGone) {
		t.Fatalf("got %v, want ErrTagDeleteUnsupported", err)
	}
	for _, r := range dst.front.Requests() {
		if r.Method == http.MethodDelete && strings.Contains(r.Path, "sha256:") {
			t.Fatalf("DELETE %s sent: a digest delete takes every tag", r.Path)
		}
	}
	for _, tag := range []string{"m/app:v1", "m/app:v2"} {
		if desc, err := remote.Head(dst.ref(t, tag), remote.WithAuth(dst.auth)); err != nil || desc.Digest.String() != digest {
			t.Fatalf("%s after a refused delete: %v %v", tag, desc, err)
		}
	}
}

func TestDeleteTagOtherErrorsCarryTheStatus(t *testing.T) {
	for name, tc := range map[string]struct {
		prepare func(s *regSide)
		opts    func(s *regSide) Options
		status  string
	}{
		"a failing registry": {
			prepare: func(s *regSide) { s.reg.SetBehavior(testutil.Fail) },
			opts:    func(s *regSide) Options { return options(s, s) },
			status:  "status 503",
		},
		"a wrong credential": {
			opts: func(*regSide) Options {
				return Options{DestAuth: authn.FromConfig(authn.AuthConfig{Username: "dst", Password: "wrong"})}
			},
			status: "status 401",
		},
	} {
		t.Run(name, func(t *testing.T) {
			dst := newSide(t, "dst")
			twoTags(t, dst)
			if tc.prepare != nil {
				tc.prepare(dst)
			}
			err := DeleteTag(t.Context(), dst.tag(t, "m/app:v1"), tc.opts(dst))
			if err == nil || errors.Is(err, ErrGone) || errors.Is(err, ErrTagDeleteUnsupported) || !strings.Contains(err.Error(), tc.status) {
				t.Fatalf("got %v, want an error with %s", err, tc.status)
			}
		})
	}
}
