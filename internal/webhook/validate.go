package webhook

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/enix/kuik/internal/metrics"
	"github.com/enix/kuik/internal/routing"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// AccessReviewer asks the API server whether a user may do something (a SubjectAccessReview).
type AccessReviewer func(ctx context.Context, sar *authorizationv1.SubjectAccessReview) (*authorizationv1.SubjectAccessReview, error)

// RoutingValidator is the validating admission handler for ImageAlternative and ImageMirror.
//
// It applies the same rules as the CRD (and some CEL cannot express: references and globs are
// parsed by the real parsers), then checks that the requesting user may get every Secret the
// resource references in the cluster resource namespace, on create and on every update that
// changes the spec: write access to routing resources must not become a way to spray a Secret
// one cannot read into every namespace, by referencing it or by widening where it lands.
type RoutingValidator struct {
	ClusterResourceNamespace string
	Review                   AccessReviewer
}

const validateWebhook = "validate-routing"

// Handle validates the resource.
func (v *RoutingValidator) Handle(ctx context.Context, req admission.Request) (resp admission.Response) {
	start := time.Now()
	result := "allowed"
	defer func() {
		if !resp.Allowed {
			result = "denied"
			if resp.Result != nil && resp.Result.Code >= http.StatusInternalServerError {
				result = "error"
			}
		}
		metrics.Admissions.WithLabelValues(validateWebhook, result).Inc()
		metrics.AdmissionDuration.WithLabelValues(validateWebhook).Observe(time.Since(start).Seconds())
	}()
	if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
		return admission.Allowed("")
	}
	refs, spec, errs, err := refsAndErrors(req.Kind.Kind, req.Object.Raw)
	if err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	if len(errs) > 0 {
		return admission.Denied(errs.ToAggregate().Error())
	}
	if req.Operation == admissionv1.Update && len(req.OldObject.Raw) > 0 {
		// Any spec change can change where or for which paths a referenced credential is
		// written (policy, selectors, entries, auth, injectPullSecret), so it is checked for
		// every referenced Secret, not only new ones; metadata and status changes are not.
		if _, oldSpec, _, err := refsAndErrors(req.Kind.Kind, req.OldObject.Raw); err == nil && equality.Semantic.DeepEqual(spec, oldSpec) {
			return admission.Allowed("")
		}
	}
	checked := map[string]bool{}
	for _, ref := range refs {
		if checked[ref.name] {
			continue
		}
		checked[ref.name] = true
		allowed, reason, err := v.mayGetSecret(ctx, req, ref.name)
		if err != nil {
			log.FromContext(ctx).Error(err, "SubjectAccessReview failed", "secret", ref.name)
			return admission.Errored(http.StatusInternalServerError, fmt.Errorf("checking access to Secret %s/%s: %w", v.ClusterResourceNamespace, ref.name, err))
		}
		if !allowed {
			msg := fmt.Sprintf("%s: user %q may not get Secret %s/%s, so may not reference it", ref.path, req.UserInfo.Username, v.ClusterResourceNamespace, ref.name)
			if reason != "" {
				msg += " (" + reason + ")"
			}
			return admission.Denied(msg)
		}
	}
	return admission.Allowed("")
}

func (v *RoutingValidator) mayGetSecret(ctx context.Context, req admission.Request, name string) (bool, string, error) {
	extra := make(map[string]authorizationv1.ExtraValue, len(req.UserInfo.Extra))
	for k, val := range req.UserInfo.Extra {
		extra[k] = authorizationv1.ExtraValue(val)
	}
	sar := &authorizationv1.SubjectAccessReview{
		ObjectMeta: metav1.ObjectMeta{},
		Spec: authorizationv1.SubjectAccessReviewSpec{
			User:   req.UserInfo.Username,
			Groups: req.UserInfo.Groups,
			UID:    req.UserInfo.UID,
			Extra:  extra,
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: v.ClusterResourceNamespace,
				Verb:      "get",
				Version:   "v1",
				Resource:  "secrets",
				Name:      name,
			},
		},
	}
	got, err := v.Review(ctx, sar)
	if err != nil {
		return false, "", err
	}
	return got.Status.Allowed, got.Status.Reason, nil
}

type secretRef struct {
	name string
	path *field.Path
}

// refsAndErrors decodes a routing resource, validates it and lists the Secrets it references,
// with its spec for comparison.
func refsAndErrors(kind string, raw []byte) ([]secretRef, any, field.ErrorList, error) {
	var refs []secretRef
	addRef := func(a *v1alpha1.Auth, p *field.Path) {
		if a != nil && a.SecretRef != nil && a.SecretRef.Name != "" {
			refs = append(refs, secretRef{name: a.SecretRef.Name, path: p.Child("auth", "secretRef", "name")})
		}
	}
	switch kind {
	case string(routing.KindImageAlternative):
		obj := &v1alpha1.ImageAlternative{}
		if err := json.Unmarshal(raw, obj); err != nil {
			return nil, nil, nil, fmt.Errorf("decoding ImageAlternative: %w", err)
		}
		for i := range obj.Spec.Alternatives {
			addRef(obj.Spec.Alternatives[i].Auth, field.NewPath("spec", "alternatives").Index(i))
		}
		return refs, &obj.Spec, routing.ValidateImageAlternative(obj), nil
	case string(routing.KindImageMirror):
		obj := &v1alpha1.ImageMirror{}
		if err := json.Unmarshal(raw, obj); err != nil {
			return nil, nil, nil, fmt.Errorf("decoding ImageMirror: %w", err)
		}
		if obj.Spec.Destination.Pull != nil {
			addRef(obj.Spec.Destination.Pull.Auth, field.NewPath("spec", "destination", "pull"))
		}
		return refs, &obj.Spec, routing.ValidateImageMirror(obj), nil
	default:
		return nil, nil, nil, fmt.Errorf("unexpected kind %q", strings.TrimSpace(kind))
	}
}

var _ admission.Handler = (*RoutingValidator)(nil)
