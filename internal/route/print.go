package route

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"

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
// gives mirror candidates that cluster's tags, as the webhook's --cluster-id.
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
