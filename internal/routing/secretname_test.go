package routing_test

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/enix/kuik/internal/routing"
)

func TestPullSecretName(t *testing.T) {
	tests := map[string]struct {
		kind routing.Kind
		name string
		want string
	}{
		"ImageAlternative is lower-cased": {
			kind: routing.KindImageAlternative, name: "acme", want: "kuik-inject-imagealternative-acme",
		},
		"ImageMirror is lower-cased": {
			kind: routing.KindImageMirror, name: "hub.mirror", want: "kuik-inject-imagemirror-hub.mirror",
		},
		"a name reaching exactly 253 characters is kept whole": {
			kind: routing.KindImageMirror,
			name: strings.Repeat("a", 253-len("kuik-inject-imagemirror-")),
			want: "kuik-inject-imagemirror-" + strings.Repeat("a", 253-len("kuik-inject-imagemirror-")),
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := routing.PullSecretName(tc.kind, tc.name); got != tc.want {
				t.Errorf("PullSecretName(%s, %q) = %q, want %q", tc.kind, tc.name, got, tc.want)
			}
		})
	}
}

func TestPullSecretNameShortened(t *testing.T) {
	const prefix = "kuik-inject-imagealternative-"
	// cutAt is the index in the resource name where the cut falls: 253 - 1 - 10 characters of
	// the full name are kept before the hash.
	const cutAt = 253 - 11 - len(prefix)
	long := strings.Repeat("a", 253)
	withDotAtCut := strings.Repeat("b", cutAt-1) + "." + strings.Repeat("c", 253-cutAt)
	withDashAtCut := strings.Repeat("b", cutAt-2) + "--" + strings.Repeat("c", 253-cutAt-1)

	tests := map[string]struct {
		name       string
		wantPrefix string
	}{
		"a 253-character name keeps a readable prefix": {
			name: long, wantPrefix: prefix + strings.Repeat("a", cutAt) + "-",
		},
		"a cut ending on a dot drops the dot": {
			name: withDotAtCut, wantPrefix: prefix + strings.Repeat("b", cutAt-1) + "-",
		},
		"a cut ending on dashes drops them": {
			name: withDashAtCut, wantPrefix: prefix + strings.Repeat("b", cutAt-2) + "-",
		},
	}
	seen := map[string]string{}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := routing.PullSecretName(routing.KindImageAlternative, tc.name)
			if len(got) > 253 {
				t.Errorf("len = %d, want at most 253", len(got))
			}
			if errs := validation.IsDNS1123Subdomain(got); len(errs) > 0 {
				t.Errorf("%q is not a DNS subdomain: %v", got, errs)
			}
			if !strings.HasPrefix(got, tc.wantPrefix) || len(got) != len(tc.wantPrefix)+10 {
				t.Errorf("PullSecretName = %q, want %q followed by 10 hash characters", got, tc.wantPrefix)
			}
			if again := routing.PullSecretName(routing.KindImageAlternative, tc.name); again != got {
				t.Errorf("PullSecretName is not deterministic: %q then %q", got, again)
			}
			if other, dup := seen[got]; dup {
				t.Errorf("%q and %q share the Secret name %q", tc.name, other, got)
			}
			seen[got] = tc.name
		})
	}
}

func TestPullSecretNameHashDistinguishesNamesSharingTheCut(t *testing.T) {
	a := routing.PullSecretName(routing.KindImageMirror, strings.Repeat("a", 252)+"x")
	b := routing.PullSecretName(routing.KindImageMirror, strings.Repeat("a", 252)+"y")
	if a == b {
		t.Errorf("two names differing after the cut share the Secret name %q", a)
	}
}

func TestSource(t *testing.T) {
	tests := map[string]struct {
		source routing.Source
		text   string
	}{
		"the zero source is the original":   {source: routing.Source{}, text: "original"},
		"an ImageAlternative with its name": {source: routing.Source{Kind: routing.KindImageAlternative, Name: "a.b"}, text: "ImageAlternative/a.b"},
		"an ImageMirror with its name":      {source: routing.Source{Kind: routing.KindImageMirror, Name: "m"}, text: "ImageMirror/m"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := tc.source.String(); got != tc.text {
				t.Errorf("String() = %q, want %q", got, tc.text)
			}
			if got := tc.source.IsOriginal(); got != (tc.text == "original") {
				t.Errorf("IsOriginal() = %v", got)
			}
			back, err := routing.ParseSource(tc.text)
			if err != nil {
				t.Fatal(err)
			}
			if back != tc.source {
				t.Errorf("ParseSource(%q) = %#v, want %#v", tc.text, back, tc.source)
			}
		})
	}
	for _, bad := range []string{"", "ImageAlternative", "ImageAlternative/", "Pod/x", "original/x"} {
		if _, err := routing.ParseSource(bad); err == nil {
			t.Errorf("ParseSource(%q) succeeded, want an error", bad)
		}
	}
}
