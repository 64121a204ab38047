package transfer

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// hangWhen makes s's front hold the requests match picks until the client gives up.
func hangWhen(s *regSide, match func(r *http.Request) bool) {
	s.front.Intercept(func(w http.ResponseWriter, r *http.Request) bool {
		if !match(r) {
			return false
		}
		// Read the body first: the server notices a gone client only then.
		_, _ = io.Copy(io.Discard, r.Body)
		<-r.Context().Done()
		return true
	})
}

// hangManifest matches the manifest requests of method on a tag ("tag"), any digest
// ("digest"), a digest other than top ("child"), or the tag after its PUT ("tag after PUT").
func hangManifest(method, which, top string) func(r *http.Request) bool {
	put := false
	return func(r *http.Request) bool {
		_, id, ok := strings.Cut(r.URL.Path, "/manifests/")
		if !ok {
			return false
		}
		digest := strings.HasPrefix(id, "sha256:")
		if !digest && r.Method == http.MethodPut {
			put = true
		}
		if r.Method != method {
			return false
		}
		switch which {
		case "tag":
			return !digest
		case "digest":
			return digest
		case "child":
			return digest && id != top
		}
		return !digest && put
	}
}

func TestManifestRequestsThatNeverAnswerStall(t *testing.T) {
	for name, tc := range map[string]struct {
		source        bool
		method, which string
	}{
		"the source tag HEAD":          {true, http.MethodHead, "tag"},
		"the source manifest GET":      {true, http.MethodGet, "digest"},
		"the source GET of a child":    {true, http.MethodGet, "child"},
		"the destination tag HEAD":     {false, http.MethodHead, "tag"},
		"a destination child HEAD":     {false, http.MethodHead, "digest"},
		"a destination child PUT":      {false, http.MethodPut, "digest"},
		"the destination tag PUT":      {false, http.MethodPut, "tag"},
		"the HEAD after the tag's PUT": {false, http.MethodHead, "tag after PUT"},
	} {
		t.Run(name, func(t *testing.T) {
			src, dst := newSide(t, "src"), newSide(t, "dst")
			top := src.attested(t, "lib/app", "v1", 256)
			s := dst
			if tc.source {
				s = src
			}
			hangWhen(s, hangManifest(tc.method, tc.which, top.Digest.String()))
			pacer := NewPacer(PacerConfig{})
			opts := options(src, dst)
			opts.Pacer = pacer
			opts.StallTimeout = 300 * time.Millisecond
			// The caller's context outlives the stall timeout by far: only the stall ends it.
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			_, err := Copy(ctx, src.ref(t, "lib/app:v1"), dst.ref(t, "m/app:v1"), opts)
			if ReasonOf(err) != Stalled || ctx.Err() != nil {
				t.Fatalf("got %v (caller's context: %v), want Stalled", err, ctx.Err())
			}
			pacer.mu.Lock()
			var pending int
			if b, ok := pacer.hosts[src.front.Host]; ok {
				pending = b.pending
			}
			pacer.mu.Unlock()
			if pending != 0 {
				t.Fatalf("%d manifest GETs still reserved after the stall", pending)
			}
		})
	}
}

func TestDeleteTagThatNeverAnswersStalls(t *testing.T) {
	dst := newSide(t, "dst")
	twoTags(t, dst)
	hangWhen(dst, hangManifest(http.MethodDelete, "tag", ""))
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	err := DeleteTag(ctx, dst.tag(t, "m/app:v1"), Options{DestAuth: dst.auth, StallTimeout: 300 * time.Millisecond})
	if !errors.Is(err, errStalled) || ctx.Err() != nil {
		t.Fatalf("got %v, want a stall", err)
	}
}
