package route

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/enix/kuik/internal/probe"
	"github.com/enix/kuik/internal/routing"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// ErrInvalidResources is wrapped by PrintCandidates when a routing resource fails validation.
var ErrInvalidResources = errors.New("invalid routing resources")

// PrintCandidates writes the ordered candidates for image, without probing, one per line:
// REFERENCE<TAB>SOURCE<TAB>PULLSECRET; when dry-run resources change the list, the list they
// would give follows a comment line, their candidates marked "(dry run)". Every routing resource among objs is validated with the
// rules the API server and the validating webhook apply; any invalid one is an error naming the
// resource and the field. Objects of other kinds are ignored. A clusterID (valid or empty)
// gives mirror candidates that cluster's tags, as the webhook's --cluster-id. The hints the
// resources' status.unavailable gives (as `kubectl get -o yaml` prints them) follow, one
// comment line per candidate a webhook would wait for at most its hinted wait.
func PrintCandidates(w io.Writer, objs []runtime.Object, image string, podLabels, namespaceLabels labels.Set, clusterID string) error {
	var ias []v1alpha1.ImageAlternative
	var ims []v1alpha1.ImageMirror
	var problems []string
	for _, o := range objs {
		switch obj := o.(type) {
		case *v1alpha1.ImageAlternative:
			for _, e := range routing.ValidateImageAlternative(obj) {
				problems = append(problems, fmt.Sprintf("ImageAlternative/%s: %s", obj.Name, e.Error()))
			}
			ias = append(ias, *obj)
		case *v1alpha1.ImageMirror:
			for _, e := range routing.ValidateImageMirror(obj) {
				problems = append(problems, fmt.Sprintf("ImageMirror/%s: %s", obj.Name, e.Error()))
			}
			ims = append(ims, *obj)
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w:\n  %s", ErrInvalidResources, strings.Join(problems, "\n  "))
	}
	ix, errs := routing.NewIndex(ias, ims)
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrInvalidResources, errors.Join(errs...))
	}
	if clusterID != "" {
		ix = ix.WithClusterID(clusterID)
	}
	cands, err := ix.Candidates(image, podLabels, namespaceLabels)
	if err != nil {
		return fmt.Errorf("image %q: %w", image, err)
	}
	if err := printList(w, cands); err != nil {
		return err
	}
	if err := printHints(w, cands, ias, ims); err != nil {
		return err
	}
	// With dry-run resources, what the list would be if they enforced, after a comment line.
	if dry := ix.WithDryRun(); dry != nil {
		all, err := dry.Candidates(image, podLabels, namespaceLabels)
		if err != nil {
			return fmt.Errorf("image %q: %w", image, err)
		}
		if !sameList(all, cands) {
			if _, err := fmt.Fprintln(w, "# if the dry-run resources enforced:"); err != nil {
				return fmt.Errorf("writing: %w", err)
			}
			return printList(w, all)
		}
	}
	return nil
}

func printList(w io.Writer, cands []routing.Candidate) error {
	for _, c := range cands {
		secret := "-"
		if c.Inject {
			secret = routing.PullSecretName(c.Source.Kind, c.Source.Name)
		}
		source := c.Source.String()
		if c.DryRun {
			source += " (dry run)"
		}
		if _, err := fmt.Fprintf(w, "%s\t%s\t%s\n", c.Reference, source, secret); err != nil {
			return fmt.Errorf("writing: %w", err)
		}
	}
	return nil
}

// printHints writes a comment line for each candidate, but the last (never passed over), whose
// repository a resource's status.unavailable names.
func printHints(w io.Writer, cands []routing.Candidate, ias []v1alpha1.ImageAlternative, ims []v1alpha1.ImageMirror) error {
	hints := Hints(ias, ims)
	for i := 0; i < len(cands)-1 && len(hints) > 0; i++ {
		u, ok := hints[probe.RepositoryOf(cands[i].Reference)]
		if !ok {
			continue
		}
		if _, err := fmt.Fprintf(w, "# hinted: %s gave no answer (%s) since %s, checked %s: waited for at most --hinted-wait until that check is older than --hint-max-age\n",
			cands[i].Reference, u.Reason, u.Since.UTC().Format(time.RFC3339), u.CheckedAt.UTC().Format(time.RFC3339)); err != nil {
			return fmt.Errorf("writing: %w", err)
		}
	}
	return nil
}

// Hints gathers the routing resources' status.unavailable by repository, each the entry
// with the latest checkedAt; nil when none has any.
func Hints(alts []v1alpha1.ImageAlternative, mirrors []v1alpha1.ImageMirror) map[string]v1alpha1.UnavailableRepository {
	var out map[string]v1alpha1.UnavailableRepository
	add := func(list []v1alpha1.UnavailableRepository) {
		for _, u := range list {
			if out == nil {
				out = map[string]v1alpha1.UnavailableRepository{}
			}
			if cur, ok := out[u.Repository]; !ok || u.CheckedAt.After(cur.CheckedAt.Time) {
				out[u.Repository] = u
			}
		}
	}
	for i := range alts {
		add(alts[i].Status.Unavailable)
	}
	for i := range mirrors {
		add(mirrors[i].Status.Unavailable)
	}
	return out
}
