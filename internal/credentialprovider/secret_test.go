package credentialprovider

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/enix/kuik/internal/credentials"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

func TestSecretRoundTrip(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	creds := map[string]*Obtained{
		"quay.io/acme/":           {Auth: credentials.AuthEntry{Username: "u", Password: "p1"}, Image: "quay.io/acme", ObtainedAt: t0, RenewAt: t0.Add(time.Hour), ExpiresAt: t0.Add(2 * time.Hour)},
		"docker.io/library/nginx": {Auth: credentials.AuthEntry{Username: "v", Password: "p2"}, Image: "docker.io/library/nginx", ObtainedAt: t0, RenewAt: t0.Add(time.Minute), ExpiresAt: t0.Add(2 * time.Minute)},
	}
	s, err := Secret("kuik-system", "kuik-provider-x-12345678", creds)
	if err != nil {
		t.Fatal(err)
	}
	if s.Labels[v1alpha1.LabelManagedBy] != v1alpha1.ManagedBySecretSyncer || s.Type != "kubernetes.io/dockerconfigjson" || s.Namespace != "kuik-system" {
		t.Errorf("the provider secret is not one the admission policy lets the syncer write: %+v", s.ObjectMeta)
	}
	got := ParseSecret(s)
	if diff := cmp.Diff(creds, got); diff != "" {
		t.Errorf("read back (-wrote +read):\n%s", diff)
	}
	cfg, err := credentials.ParseSecret(s)
	if err != nil {
		t.Fatal(err)
	}
	if a, _, err := cfg.Lookup("quay.io/acme/"); err != nil || a.Password != "p1" {
		t.Errorf("the webhook's lookup of the entry's path gives %+v, %v", a, err)
	}
	// A record without its credential (or the other way round) is not reused.
	delete(creds, "quay.io/acme/")
	s2, _ := Secret("kuik-system", "n", creds)
	s.Data[CredentialsKey] = s2.Data[CredentialsKey]
	s.Data[".dockerconfigjson"] = s2.Data[".dockerconfigjson"]
	s.Data[CredentialsKey] = []byte(strings.Replace(string(s.Data[CredentialsKey]), "docker.io/library/nginx", "docker.io/library/other", 1))
	if got := ParseSecret(s); len(got) != 0 {
		t.Errorf("an entry recorded without a credential was read back: %v", got)
	}
}

func TestStored(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	sa := &v1alpha1.ServiceAccountReference{Namespace: "ns", Name: "puller"}
	cred := func(provider, account, pass string, expires time.Duration) *Obtained {
		return &Obtained{Auth: credentials.AuthEntry{Username: "AWS", Password: pass}, Provider: provider, ServiceAccount: account, ObtainedAt: t0, ExpiresAt: t0.Add(expires)}
	}
	s, err := Secret("kuik-system", SecretName("ecr", nil), map[string]*Obtained{
		// A Registry answer, kept under the registry host, and an Image answer of one repository.
		"1.dkr.ecr.x.amazonaws.com":         cred("ecr", "", "registry", time.Hour),
		"1.dkr.ecr.x.amazonaws.com/expired": cred("ecr", "", "expired", time.Minute),
		"1.dkr.ecr.x.amazonaws.com/other":   cred("gcr", "", "other-provider", time.Hour),
		"1.dkr.ecr.x.amazonaws.com/account": cred("ecr", "ns/puller", "account", time.Hour),
	})
	if err != nil {
		t.Fatal(err)
	}
	now := t0.Add(30 * time.Minute)
	tests := map[string]struct {
		image, provider string
		sa              *v1alpha1.ServiceAccountReference
		wantPass        string // "" for none
		wantKey         string
	}{
		"a repository reads its registry's answer":               {image: "1.dkr.ecr.x.amazonaws.com/app", provider: "ecr", wantPass: "registry", wantKey: "1.dkr.ecr.x.amazonaws.com"},
		"the most specific key wins, and it expired":             {image: "1.dkr.ecr.x.amazonaws.com/expired/app", provider: "ecr"},
		"a credential recorded for another provider":             {image: "1.dkr.ecr.x.amazonaws.com/other", provider: "ecr"},
		"a credential recorded for a ServiceAccount, without it": {image: "1.dkr.ecr.x.amazonaws.com/account", provider: "ecr"},
		"a credential recorded for that ServiceAccount":          {image: "1.dkr.ecr.x.amazonaws.com/account", provider: "ecr", sa: sa, wantPass: "account", wantKey: "1.dkr.ecr.x.amazonaws.com/account"},
		"an image no key covers":                                 {image: "quay.io/acme/app", provider: "ecr"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			o, key := Stored(s, tc.provider, tc.sa, tc.image, now)
			got := ""
			if o != nil {
				got = o.Auth.Password
			}
			if got != tc.wantPass || key != tc.wantKey {
				t.Errorf("Stored = %q under %q, want %q under %q", got, key, tc.wantPass, tc.wantKey)
			}
		})
	}
}
