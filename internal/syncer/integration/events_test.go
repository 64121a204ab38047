package integration_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/enix/kuik/internal/testutil"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// The syncer may write events only as it writes them: core/v1 events in "default", where
// the API server puts the events of its cluster-scoped routing resources (it refuses them in
// any other namespace), in its own namespace for leader election's events on its Lease, and,
// with missed pulls (syncer.missedPulls.enabled, as the harness installs it), create and patch in
// every namespace (ImagePullMissedRouting on pods) and list/watch (the kubelet's image-pull
// failures, with field selectors). Nothing in events.k8s.io (its recorder is core/v1's), no
// get, update or delete. The API server's authorizer answers, under the chart's RBAC.
func TestEventRightsAreNarrow(t *testing.T) {
	e := harness(t)
	other := createNamespace(t, e, nil)
	user := "system:serviceaccount:" + crns + ":" + serviceAccount
	groups := []string{"system:authenticated", "system:serviceaccounts", "system:serviceaccounts:" + crns}
	tests := map[string]struct {
		namespace, group, verb string
		allowed                bool
	}{
		"create in default":              {metav1.NamespaceDefault, "", "create", true},
		"patch in default":               {metav1.NamespaceDefault, "", "patch", true},
		"create in its namespace":        {crns, "", "create", true},
		"patch in its namespace":         {crns, "", "patch", true},
		"create in another namespace":    {other, "", "create", true},
		"create in kube-system":          {metav1.NamespaceSystem, "", "create", true},
		"create in every namespace":      {"", "", "create", true},
		"update in default":              {metav1.NamespaceDefault, "", "update", false},
		"delete in default":              {metav1.NamespaceDefault, "", "delete", false},
		"get in default":                 {metav1.NamespaceDefault, "", "get", false},
		"list in default":                {metav1.NamespaceDefault, "", "list", true},
		"watch in every namespace":       {"", "", "watch", true},
		"update in another namespace":    {other, "", "update", false},
		"delete in another namespace":    {other, "", "delete", false},
		"events.k8s.io in default":       {metav1.NamespaceDefault, "events.k8s.io", "create", false},
		"events.k8s.io in its namespace": {crns, "events.k8s.io", "create", false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User: user, Groups: groups,
				ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: tc.namespace, Group: tc.group, Resource: "events", Verb: tc.verb},
			}}
			got, err := e.cs.AuthorizationV1().SubjectAccessReviews().Create(t.Context(), sar, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if got.Status.Allowed != tc.allowed {
				t.Errorf("allowed = %v, want %v (%s)", got.Status.Allowed, tc.allowed, got.Status.Reason)
			}
		})
	}

	// Why "default": a core/v1 event about a cluster-scoped object is refused anywhere else.
	ev := func(ns string) *corev1.Event {
		return &corev1.Event{
			ObjectMeta:     metav1.ObjectMeta{GenerateName: "probe-", Namespace: ns},
			InvolvedObject: corev1.ObjectReference{APIVersion: v1alpha1.GroupVersion.String(), Kind: "ImageAlternative", Name: "probe"},
			Reason:         "Probe", Message: "probe", Type: corev1.EventTypeNormal,
			Source: corev1.EventSource{Component: "test"},
		}
	}
	if _, err := e.cs.CoreV1().Events(crns).Create(t.Context(), ev(crns), metav1.CreateOptions{}); !apierrors.IsInvalid(err) {
		t.Errorf("an ImageAlternative's event in %s: %v, want Invalid", crns, err)
	}
	created, err := e.cs.CoreV1().Events(metav1.NamespaceDefault).Create(t.Context(), ev(metav1.NamespaceDefault), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("an ImageAlternative's event in default: %v", err)
	}
	_ = e.cs.CoreV1().Events(metav1.NamespaceDefault).Delete(t.Context(), created.Name, metav1.DeleteOptions{})
}

// A cause reported again (its entry fixed, then broken again) counts on its event: the
// recorder patches it, which the narrowed RBAC allows.
func TestRecurringCauseCountsOnItsEvent(t *testing.T) {
	e := harness(t)
	n := name(t)
	ia := testutil.NewImageAlternative(n).Policy(v1alpha1.RewritePolicyAlways).NamespaceSelector(map[string]string{"scope": n}).
		Repository("quay.io/acme/foo").SecretRef(n + "-creds").Build()
	create(t, e, &ia)
	ns := createNamespace(t, e, map[string]string{"scope": n})
	startSyncer(t, syncerConfig())
	secretName := "kuik-inject-imagealternative-" + n
	secretHolds(t, e, ns, secretName, map[string]string{})

	count := func(ctx context.Context) (int32, error) {
		evs := injectionEvents(ctx, t, e.cs, ia.UID)
		if len(evs) != 1 {
			return 0, fmt.Errorf("%d events", len(evs))
		}
		return evs[0].Count, nil
	}
	eventually(t, "one SecretNotFound event", func(ctx context.Context) error {
		c, err := count(ctx)
		if err == nil && c != 1 {
			err = fmt.Errorf("count %d", c)
		}
		return err
	})
	// Fixed...
	putSecret(t, e, pullSecret(n+"-creds", map[string]string{"quay.io": "u:pw"}))
	secretHolds(t, e, ns, secretName, map[string]string{"quay.io/acme/foo": "u:pw"})
	eventually(t, "status Ready", func(ctx context.Context) error {
		var got v1alpha1.ImageAlternative
		if err := e.cl.Get(ctx, client.ObjectKeyFromObject(&ia), &got); err != nil {
			return err
		}
		if c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionReady); c == nil || c.Status != metav1.ConditionTrue {
			return fmt.Errorf("condition %+v", c)
		}
		return nil
	})
	// ...and broken again: the same event, counted twice.
	if err := e.cs.CoreV1().Secrets(crns).Delete(t.Context(), n+"-creds", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	secretHolds(t, e, ns, secretName, map[string]string{})
	eventually(t, "the event counted twice", func(ctx context.Context) error {
		c, err := count(ctx)
		if err == nil && c != 2 {
			err = errors.New("count " + fmt.Sprint(c))
		}
		return err
	})
}
