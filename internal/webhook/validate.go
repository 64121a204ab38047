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
// parsed by the real parsers), then checks with SubjectAccessReviews that the requesting user
// may use every credential the resource references, on create and on every update that changes
// the spec: write access to routing resources must not become a way to spray a credential one
// may not use into every namespace, by referencing it or by widening where it lands. For each
// entry:
//   - auth.secretRef: get on that Secret in the cluster resource namespace;
//   - auth.provider, injecting or not: the verb use on the provider, as the cluster-scoped
//     resource credentialproviders.kuik.enix.io named after it, which no API serves: it exists
//     only in RBAC, so an operator grants who may spread which cloud credential. An entry that
//     does not inject still makes the syncer run the plugin with kuik's own cloud identity, keep
//     the answer in the shared kuik-provider-* Secret (whose room it takes from everyone else's
//     entries) and the webhook probe with it (which tells its author whether kuik's identity
//     may read a repository): the same right;
//   - auth.provider.serviceAccountRef: create on serviceaccounts/token for that ServiceAccount,
//     the right to obtain its tokens, which the syncer exercises on the author's behalf.
//
// An ImageMirror's spec.keep.push.auth.secretRef needs get on that Secret too: the keeper
// writes and deletes tags with it under a destination.path the author chooses.
type RoutingValidator struct {
	ClusterResourceNamespace string
	Review                   AccessReviewer
}

// What the provider checks ask for: a provider is named in RBAC as the cluster-scoped resource
// credentialproviders in kuik's API group, with the verb use.
const (
	ProviderResource = "credentialproviders"
	ProviderUseVerb  = "use"
)

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
	checks, spec, errs, err := v.decode(req.Kind.Kind, req.Object.Raw)
	if err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	if len(errs) > 0 {
		return admission.Denied(errs.ToAggregate().Error())
	}
	if req.Operation == admissionv1.Update && len(req.OldObject.Raw) > 0 {
		// Any spec change can change where or for which paths a referenced credential is
		// written (policy, selectors, entries, auth, injectPullSecret), so it is checked for
		// every reference, not only new ones; metadata and status changes are not.
		if _, oldSpec, _, err := v.decode(req.Kind.Kind, req.OldObject.Raw); err == nil && equality.Semantic.DeepEqual(spec, oldSpec) {
			return admission.Allowed("")
		}
	}
	checked := map[authorizationv1.ResourceAttributes]bool{}
	for _, ch := range checks {
		if checked[ch.attrs] {
			continue
		}
		checked[ch.attrs] = true
		allowed, reason, err := v.may(ctx, req, ch.attrs)
		if err != nil {
			log.FromContext(ctx).Error(err, "SubjectAccessReview failed", "verb", ch.attrs.Verb, "resource", ch.attrs.Resource, "subresource", ch.attrs.Subresource, "namespace", ch.attrs.Namespace, "name", ch.attrs.Name)
			return admission.Errored(http.StatusInternalServerError, fmt.Errorf("checking access to %s: %w", ch.what, err))
		}
		if !allowed {
			msg := fmt.Sprintf("%s: user %q %s", ch.path, req.UserInfo.Username, ch.denied)
			if reason != "" {
				msg += " (" + reason + ")"
			}
			return admission.Denied(msg)
		}
	}
	return admission.Allowed("")
}

// may asks whether the requesting user may do what attrs say.
func (v *RoutingValidator) may(ctx context.Context, req admission.Request, attrs authorizationv1.ResourceAttributes) (bool, string, error) {
	extra := make(map[string]authorizationv1.ExtraValue, len(req.UserInfo.Extra))
	for k, val := range req.UserInfo.Extra {
		extra[k] = authorizationv1.ExtraValue(val)
	}
	sar := &authorizationv1.SubjectAccessReview{
		Spec: authorizationv1.SubjectAccessReviewSpec{
			User:               req.UserInfo.Username,
			Groups:             req.UserInfo.Groups,
			UID:                req.UserInfo.UID,
			Extra:              extra,
			ResourceAttributes: &attrs,
		},
	}
	got, err := v.Review(ctx, sar)
	if err != nil {
		return false, "", err
	}
	return got.Status.Allowed, got.Status.Reason, nil
}

// accessCheck is one right the author of a routing resource must hold.
type accessCheck struct {
	// path is the field that needs it.
	path  *field.Path
	attrs authorizationv1.ResourceAttributes
	// what names the object in errors; denied completes `user "x" ...` in a refusal.
	what, denied string
}

// accessChecks lists what an entry's auth requires of the author, in field order.
func (v *RoutingValidator) accessChecks(a *v1alpha1.Auth, p *field.Path) []accessCheck {
	if a == nil {
		return nil
	}
	var out []accessCheck
	p = p.Child("auth")
	if a.SecretRef != nil && a.SecretRef.Name != "" {
		what := fmt.Sprintf("Secret %s/%s", v.ClusterResourceNamespace, a.SecretRef.Name)
		out = append(out, accessCheck{
			path:   p.Child("secretRef", "name"),
			attrs:  authorizationv1.ResourceAttributes{Namespace: v.ClusterResourceNamespace, Verb: "get", Version: "v1", Resource: "secrets", Name: a.SecretRef.Name},
			what:   what,
			denied: "may not get " + what + ", so may not reference it",
		})
	}
	if pr := a.Provider; pr != nil {
		if pr.Name != "" {
			out = append(out, accessCheck{
				path:  p.Child("provider", "name"),
				attrs: authorizationv1.ResourceAttributes{Verb: ProviderUseVerb, Group: v1alpha1.GroupVersion.Group, Resource: ProviderResource, Name: pr.Name},
				what:  fmt.Sprintf("credential provider %q", pr.Name),
				denied: fmt.Sprintf("may not use credential provider %q (verb %s on %s.%s), so may not name it: its plugin runs with kuik's own cloud identity, injecting or not",
					pr.Name, ProviderUseVerb, ProviderResource, v1alpha1.GroupVersion.Group),
			})
		}
		if sa := pr.ServiceAccountRef; sa != nil && sa.Name != "" && sa.Namespace != "" {
			what := fmt.Sprintf("ServiceAccount %s/%s", sa.Namespace, sa.Name)
			out = append(out, accessCheck{
				path:   p.Child("provider", "serviceAccountRef"),
				attrs:  authorizationv1.ResourceAttributes{Namespace: sa.Namespace, Verb: "create", Version: "v1", Resource: "serviceaccounts", Subresource: "token", Name: sa.Name},
				what:   "the token of " + what,
				denied: fmt.Sprintf("may not create a token for %s (verb create on serviceaccounts/token), so may not reference it", what),
			})
		}
	}
	return out
}

// decode decodes a routing resource, validates it and lists the rights its author needs
// (accessChecks), with its spec for comparison.
func (v *RoutingValidator) decode(kind string, raw []byte) ([]accessCheck, any, field.ErrorList, error) {
	switch kind {
	case string(routing.KindImageAlternative):
		obj := &v1alpha1.ImageAlternative{}
		if err := json.Unmarshal(raw, obj); err != nil {
			return nil, nil, nil, fmt.Errorf("decoding ImageAlternative: %w", err)
		}
		var checks []accessCheck
		for i := range obj.Spec.Alternatives {
			checks = append(checks, v.accessChecks(obj.Spec.Alternatives[i].Auth, field.NewPath("spec", "alternatives").Index(i))...)
		}
		return checks, &obj.Spec, routing.ValidateImageAlternative(obj), nil
	case string(routing.KindImageMirror):
		obj := &v1alpha1.ImageMirror{}
		if err := json.Unmarshal(raw, obj); err != nil {
			return nil, nil, nil, fmt.Errorf("decoding ImageMirror: %w", err)
		}
		var checks []accessCheck
		if obj.Spec.Destination.Pull != nil {
			checks = v.accessChecks(obj.Spec.Destination.Pull.Auth, field.NewPath("spec", "destination", "pull"))
		}
		if k := obj.Spec.Keep; k != nil && k.Push != nil && k.Push.Auth != nil {
			push := &v1alpha1.Auth{SecretRef: &k.Push.Auth.SecretRef}
			checks = append(checks, v.accessChecks(push, field.NewPath("spec", "keep", "push"))...)
		}
		return checks, &obj.Spec, routing.ValidateImageMirror(obj), nil
	default:
		return nil, nil, nil, fmt.Errorf("unexpected kind %q", strings.TrimSpace(kind))
	}
}

var _ admission.Handler = (*RoutingValidator)(nil)
