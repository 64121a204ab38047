package syncer

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/enix/kuik/internal/credentialprovider"
	"github.com/enix/kuik/internal/credentials"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

func TestSchedule(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	floor := time.Minute
	tests := map[string]struct {
		expires         time.Time
		renewAt, expiry time.Time
	}{
		"a twelve-hour credential is renewed with four hours left": {
			expires: t0.Add(12 * time.Hour), renewAt: t0.Add(8 * time.Hour), expiry: t0.Add(12 * time.Hour),
		},
		"a credential the plugin asked not to cache lives twice the floor": {
			expires: time.Time{}, renewAt: t0.Add(80 * time.Second), expiry: t0.Add(2 * floor),
		},
		"a credential shorter than the floor is still renewed no sooner than the floor": {
			expires: t0.Add(30 * time.Second), renewAt: t0.Add(floor), expiry: t0.Add(30 * time.Second),
		},
		"a credential of 90s is renewed at the floor, before it expires": {
			expires: t0.Add(90 * time.Second), renewAt: t0.Add(floor), expiry: t0.Add(90 * time.Second),
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			o := Schedule(credentialprovider.Credential{ObtainedAt: t0, ExpiresAt: tc.expires}, floor)
			if !o.RenewAt.Equal(tc.renewAt) || !o.ExpiresAt.Equal(tc.expiry) {
				t.Errorf("renewAt %s expiresAt %s, want %s and %s", o.RenewAt, o.ExpiresAt, tc.renewAt, tc.expiry)
			}
		})
	}
}

func TestDemandOfAsksAboutTheEntrysPath(t *testing.T) {
	provider := &v1alpha1.Auth{Provider: &v1alpha1.ProviderAuth{Name: "ecr"}}
	tests := map[string]struct {
		lookupPath string
		want       string
	}{
		"a repository as it is":                  {"123.dkr.ecr.eu-west-1.amazonaws.com/acme/foo", "123.dkr.ecr.eu-west-1.amazonaws.com/acme/foo"},
		"a group without its trailing slash":     {"quay.io/acme/", "quay.io/acme"},
		"a mirror path without its slash":        {"registry.tld/mirror/", "registry.tld/mirror"},
		"a Docker Hub short form normalized":     {"acme/foo", "docker.io/acme/foo"},
		"a registry root as the registry itself": {"registry.local:5000/", "registry.local:5000"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			d, ok := DemandOf(&Entry{LookupPath: tc.lookupPath, Auth: provider})
			if !ok || d.Image != tc.want || d.Provider != "ecr" || d.ServiceAccount != "" {
				t.Errorf("DemandOf = %+v, %v; want image %q", d, ok, tc.want)
			}
		})
	}
	if _, ok := DemandOf(&Entry{LookupPath: "quay.io/x", Auth: &v1alpha1.Auth{SecretRef: &v1alpha1.LocalSecretReference{Name: "s"}}}); ok {
		t.Error("a secretRef entry has a provider demand")
	}
	withSA := &v1alpha1.Auth{Provider: &v1alpha1.ProviderAuth{Name: "ecr", ServiceAccountRef: &v1alpha1.ServiceAccountReference{Namespace: "ns", Name: "puller"}}}
	d, _ := DemandOf(&Entry{LookupPath: "quay.io/x", Auth: withSA})
	if d.ServiceAccount != "ns/puller" || d.SecretName() == (Demand{Provider: "ecr", Image: "quay.io/x"}).SecretName() {
		t.Errorf("a serviceAccountRef demand %+v must have its own Secret %q", d, d.SecretName())
	}
}

func TestStaticReason(t *testing.T) {
	cfg := &credentialprovider.Config{Providers: []credentialprovider.Provider{
		{Name: "ecr", MatchImages: []string{"*.dkr.ecr.*.amazonaws.com"}, DefaultCacheDuration: time.Hour, APIVersion: "credentialprovider.kubelet.k8s.io/v1"},
		{Name: "tokens", MatchImages: []string{"registry.tld"}, DefaultCacheDuration: time.Hour, APIVersion: "credentialprovider.kubelet.k8s.io/v1",
			TokenAttributes: &credentialprovider.TokenAttributes{Audience: "kuik", CacheType: "ServiceAccount", RequireServiceAccount: true}},
	}}
	tests := map[string]struct {
		cfg    *credentialprovider.Config
		d      Demand
		reason string
	}{
		"no configuration":             {nil, Demand{Provider: "ecr", Image: "1.dkr.ecr.x.amazonaws.com/a"}, v1alpha1.ReasonProviderNotConfigured},
		"a provider not in the config": {cfg, Demand{Provider: "gcr", Image: "gcr.io/a"}, v1alpha1.ReasonProviderNotConfigured},
		"matchImages do not match":     {cfg, Demand{Provider: "ecr", Image: "quay.io/acme"}, v1alpha1.ReasonProviderNotMatched},
		"a token without an account":   {cfg, Demand{Provider: "tokens", Image: "registry.tld/a"}, v1alpha1.ReasonServiceAccountRequired},
		"a token with an account":      {cfg, Demand{Provider: "tokens", ServiceAccount: "ns/sa", Image: "registry.tld/a"}, ""},
		"a matching provider":          {cfg, Demand{Provider: "ecr", Image: "1.dkr.ecr.x.amazonaws.com/a"}, ""},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			reason, msg := StaticReason(tc.cfg, tc.d)
			if reason != tc.reason {
				t.Errorf("reason %q (%s), want %q", reason, msg, tc.reason)
			}
			if reason != "" && !strings.Contains(msg, tc.d.Provider) {
				t.Errorf("message %q does not name the provider", msg)
			}
		})
	}
}

func TestResolveAsksTheProviderLookup(t *testing.T) {
	r := &Resource{Kind: "ImageAlternative", Name: "a", Entries: []Entry{
		{Field: "spec.alternatives[0]", Path: "1.dkr.ecr.x.amazonaws.com/a", Key: "1.dkr.ecr.x.amazonaws.com/a", LookupPath: "1.dkr.ecr.x.amazonaws.com/a", Injects: true,
			Auth: &v1alpha1.Auth{Provider: &v1alpha1.ProviderAuth{Name: "ok"}, InjectPullSecret: ptr.To(true)}},
		{Field: "spec.alternatives[1]", Path: "2.dkr.ecr.x.amazonaws.com/a", Key: "2.dkr.ecr.x.amazonaws.com/a", LookupPath: "2.dkr.ecr.x.amazonaws.com/a", Injects: true,
			Auth: &v1alpha1.Auth{Provider: &v1alpha1.ProviderAuth{Name: "failing"}, InjectPullSecret: ptr.To(true)}},
		{Field: "spec.alternatives[2]", Path: "3.dkr.ecr.x.amazonaws.com/a", Key: "3.dkr.ecr.x.amazonaws.com/a", LookupPath: "3.dkr.ecr.x.amazonaws.com/a", Injects: true,
			Auth: &v1alpha1.Auth{Provider: &v1alpha1.ProviderAuth{Name: "renewal-failing"}, InjectPullSecret: ptr.To(true)}},
		{Field: "spec.alternatives[3]", Path: "4.dkr.ecr.x.amazonaws.com/a", Key: "4.dkr.ecr.x.amazonaws.com/a", LookupPath: "4.dkr.ecr.x.amazonaws.com/a", Injects: false,
			Auth: &v1alpha1.Auth{Provider: &v1alpha1.ProviderAuth{Name: "ok"}}},
	}}
	asked := map[string]int{}
	lookup := func(e *Entry) ProviderAnswer {
		asked[e.Field]++
		switch e.Auth.Provider.Name {
		case "ok":
			return ProviderAnswer{OK: true, Auth: credentials.AuthEntry{Username: "u", Password: "ok"}}
		case "renewal-failing":
			return ProviderAnswer{OK: true, Auth: credentials.AuthEntry{Username: "u", Password: "old"}, Reason: v1alpha1.ReasonProviderRenewalFailed, Message: "plugin exited 1"}
		}
		return ProviderAnswer{Reason: v1alpha1.ReasonProviderFailed, Message: "plugin exited 1"}
	}
	res := Resolve(r, lookupIn(), lookup)
	wantCreds := map[string]credentials.AuthEntry{
		"1.dkr.ecr.x.amazonaws.com/a": {Username: "u", Password: "ok"},
		"3.dkr.ecr.x.amazonaws.com/a": {Username: "u", Password: "old"},
	}
	if diff := cmp.Diff(wantCreds, res.Credentials); diff != "" {
		t.Errorf("credentials (-want +got):\n%s", diff)
	}
	if len(res.LeftOut) != 1 || res.LeftOut[0].Entry != "spec.alternatives[1]" || res.LeftOut[0].Reason != v1alpha1.ReasonProviderFailed {
		t.Errorf("left out %+v, want the failing provider's entry", res.LeftOut)
	}
	if len(res.Warnings) != 1 || res.Warnings[0].Entry != "spec.alternatives[2]" {
		t.Errorf("warnings %+v, want the renewal-failing entry", res.Warnings)
	}
	// A non-injecting entry's credential is never written (wantCreds), but its provider Secret
	// being full is said: the webhook probes it without its credential.
	full := func(e *Entry) ProviderAnswer {
		a := lookup(e)
		if e.Field == "spec.alternatives[3]" {
			a.Reason, a.Message = v1alpha1.ReasonProviderSecretFull, "does not fit"
		}
		return a
	}
	if ws := Resolve(r, lookupIn(), full).Warnings; len(ws) != 2 || ws[1].Entry != "spec.alternatives[3]" || ws[1].Reason != v1alpha1.ReasonProviderSecretFull {
		t.Errorf("warnings %+v, want the renewal-failing entry and the one whose provider secret is full", ws)
	}

	// The status says Ready=False for the entry left out; with only the warning, Ready=True
	// with the warning's reason, so `kubectl get ia` shows it.
	now := metav1.Now()
	st, _ := DesiredStatus(r, res, 1, &v1alpha1.RoutingStatus{}, now)
	if c := st.Conditions[0]; c.Status != metav1.ConditionFalse || c.Reason != v1alpha1.ReasonProviderFailed {
		t.Errorf("condition %+v", c)
	}
	res.LeftOut = nil
	st, _ = DesiredStatus(r, res, 1, &v1alpha1.RoutingStatus{}, now)
	if c := st.Conditions[0]; c.Status != metav1.ConditionTrue || c.Reason != v1alpha1.ReasonProviderRenewalFailed || !strings.Contains(c.Message, "plugin exited 1") {
		t.Errorf("condition %+v", c)
	}
	// Without a lookup (no configuration), a provider entry is left out as before.
	res = Resolve(r, lookupIn(), nil)
	if len(res.LeftOut) != 3 || res.LeftOut[0].Reason != v1alpha1.ReasonProviderNotConfigured {
		t.Errorf("left out without a configuration: %+v", res.LeftOut)
	}
}
