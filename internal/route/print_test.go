package route_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/enix/kuik/internal/manifest"
	"github.com/enix/kuik/internal/route"
	"github.com/enix/kuik/internal/testutil"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

const routingYAML = `
apiVersion: kuik.enix.io/v1alpha1
kind: ImageAlternative
metadata: {name: acme-foo}
spec:
  namespaceSelector: {matchLabels: {team: payments}}
  alternatives:
  - repository: quay.io/acme/foo
  - repository: registry.local:5000/acme/foo
    auth: {secretRef: {name: local-registry}}
---
apiVersion: kuik.enix.io/v1alpha1
kind: ImageMirror
metadata: {name: corp-mirror}
spec:
  rewritePolicy: Always
  excludeImages: ["ghcr.io/huge/**"]
  destination:
    path: registry.tld/mirror/
    pull: {auth: {secretRef: {name: mirror-read}}}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: ignored}
`

func TestPrintCandidates(t *testing.T) {
	objs, err := manifest.Read(strings.NewReader(routingYAML))
	if err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		image    string
		nsLabels labels.Set
		want     string
	}{
		"mirror, original, then the alternative in a selected namespace": {
			image: "quay.io/acme/foo:v1", nsLabels: labels.Set{"team": "payments"},
			want: "registry.tld/mirror/quay.io/acme/foo:v1\tImageMirror/corp-mirror\tkuik-inject-imagemirror-corp-mirror\n" +
				"quay.io/acme/foo:v1\toriginal\t-\n" +
				"registry.local:5000/acme/foo:v1\tImageAlternative/acme-foo\tkuik-inject-imagealternative-acme-foo\n",
		},
		"outside the namespaceSelector only the mirror applies": {
			image: "quay.io/acme/foo:v1",
			want: "registry.tld/mirror/quay.io/acme/foo:v1\tImageMirror/corp-mirror\tkuik-inject-imagemirror-corp-mirror\n" +
				"quay.io/acme/foo:v1\toriginal\t-\n",
		},
		"excluded and uncovered image": {
			image: "ghcr.io/huge/model:v1",
			want:  "ghcr.io/huge/model:v1\toriginal\t-\n",
		},
		"short docker hub name is normalized": {
			image: "nginx",
			want: "registry.tld/mirror/docker.io/library/nginx:latest\tImageMirror/corp-mirror\tkuik-inject-imagemirror-corp-mirror\n" +
				"docker.io/library/nginx:latest\toriginal\t-\n",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var out bytes.Buffer
			if err := route.PrintCandidates(&out, objs, tc.image, nil, tc.nsLabels, ""); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, out.String()); diff != "" {
				t.Errorf("output (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPrintCandidatesRefusesInvalidResourcesNamingTheField(t *testing.T) {
	bad := strings.Replace(routingYAML, "repository: quay.io/acme/foo\n", "repository: quay.io/acme/foo:v1\n", 1)
	objs, err := manifest.Read(strings.NewReader(bad))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	err = route.PrintCandidates(&out, objs, "quay.io/acme/foo:v1", nil, nil, "")
	if !errors.Is(err, route.ErrInvalidResources) {
		t.Fatalf("error = %v, want ErrInvalidResources", err)
	}
	if !strings.Contains(err.Error(), "ImageAlternative/acme-foo: spec.alternatives[0].repository") {
		t.Errorf("error %q does not name the resource and the field", err)
	}
	if out.Len() != 0 {
		t.Errorf("printed candidates for invalid resources: %q", out.String())
	}
}

func TestPrintCandidatesShowsWhatDryRunsWouldChange(t *testing.T) {
	trial := testutil.NewImageMirror("trial", "registry.tld/trial/").Policy(v1alpha1.RewritePolicyAlways).DryRun().Build()
	objs, err := manifest.Read(strings.NewReader(routingYAML))
	if err != nil {
		t.Fatal(err)
	}
	objs = append(objs, &trial)
	var out bytes.Buffer
	if err := route.PrintCandidates(&out, objs, "quay.io/acme/foo:v1", nil, nil, ""); err != nil {
		t.Fatal(err)
	}
	want := "registry.tld/mirror/quay.io/acme/foo:v1\tImageMirror/corp-mirror\tkuik-inject-imagemirror-corp-mirror\n" +
		"quay.io/acme/foo:v1\toriginal\t-\n" +
		"# if the dry-run resources enforced:\n" +
		"registry.tld/mirror/quay.io/acme/foo:v1\tImageMirror/corp-mirror\tkuik-inject-imagemirror-corp-mirror\n" +
		"registry.tld/trial/quay.io/acme/foo:v1\tImageMirror/trial (dry run)\t-\n" +
		"quay.io/acme/foo:v1\toriginal\t-\n"
	if diff := cmp.Diff(want, out.String()); diff != "" {
		t.Errorf("output (-want +got):\n%s", diff)
	}
}

// With a cluster ID, a mirror candidate has the cluster's tag and the alternative its own, as
// the webhook's index WithClusterID; a digest-only image has no tag to suffix.
func TestPrintCandidatesWithClusterID(t *testing.T) {
	objs, err := manifest.Read(strings.NewReader(routingYAML))
	if err != nil {
		t.Fatal(err)
	}
	digest := "@sha256:" + strings.Repeat("a", 64)
	for image, want := range map[string]string{
		"quay.io/acme/foo:v1": "registry.tld/mirror/quay.io/acme/foo:v1-kuik-eu-1\tImageMirror/corp-mirror\tkuik-inject-imagemirror-corp-mirror\n" +
			"quay.io/acme/foo:v1\toriginal\t-\n" +
			"registry.local:5000/acme/foo:v1\tImageAlternative/acme-foo\tkuik-inject-imagealternative-acme-foo\n",
		"quay.io/acme/foo" + digest: "registry.tld/mirror/quay.io/acme/foo" + digest + "\tImageMirror/corp-mirror\tkuik-inject-imagemirror-corp-mirror\n" +
			"quay.io/acme/foo" + digest + "\toriginal\t-\n" +
			"registry.local:5000/acme/foo" + digest + "\tImageAlternative/acme-foo\tkuik-inject-imagealternative-acme-foo\n",
	} {
		var out bytes.Buffer
		if err := route.PrintCandidates(&out, objs, image, nil, labels.Set{"team": "payments"}, "eu-1"); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, out.String()); diff != "" {
			t.Errorf("%s: output (-want +got):\n%s", image, diff)
		}
	}
}

// The hints of status.unavailable, as `kubectl get -o yaml` prints them, follow the list: one
// line per candidate a webhook would wait for at most its hinted wait, never the last (it is
// always waited for).
func TestPrintCandidatesShowsTheHints(t *testing.T) {
	withStatus := routingYAML + `---
apiVersion: kuik.enix.io/v1alpha1
kind: ImageAlternative
metadata: {name: hinted}
spec:
  alternatives:
  - repository: docker.io/library/nginx
  - repository: registry.local:5000/library/nginx
status:
  unavailable:
  - {repository: docker.io/library/nginx, reason: Timeout, since: "2026-12-03T10:00:00Z", checkedAt: "2026-12-03T10:04:00Z"}
  - {repository: registry.local:5000/library/nginx, reason: Unreachable, since: "2026-12-03T10:00:00Z", checkedAt: "2026-12-03T10:04:00Z"}
`
	objs, err := manifest.Read(strings.NewReader(withStatus))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := route.PrintCandidates(&out, objs, "nginx", nil, nil, ""); err != nil {
		t.Fatal(err)
	}
	want := "registry.tld/mirror/docker.io/library/nginx:latest\tImageMirror/corp-mirror\tkuik-inject-imagemirror-corp-mirror\n" +
		"docker.io/library/nginx:latest\toriginal\t-\n" +
		"registry.local:5000/library/nginx:latest\tImageAlternative/hinted\t-\n" +
		"# hinted: docker.io/library/nginx:latest gave no answer (Timeout) since 2026-12-03T10:00:00Z, checked 2026-12-03T10:04:00Z: waited for at most --hinted-wait until that check is older than --hint-max-age\n"
	if diff := cmp.Diff(want, out.String()); diff != "" {
		t.Errorf("output (-want +got):\n%s", diff)
	}
}
