package syncer

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/enix/kuik/internal/credentialprovider"
	"github.com/enix/kuik/internal/credentials"
)

// answered is a demand of provider p for image with the credential a plugin gave: cacheKeyType
// typ, auth map key responseKey, password pass, obtained at t0+at.
func answered(image, typ, responseKey, pass string, at time.Duration) SecretDemand {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	d := Demand{Provider: "p", Image: image}
	o, err := Keep(d, credentialprovider.Credential{
		Auth: credentials.AuthEntry{Username: "u", Password: pass}, Key: responseKey, CacheKeyType: typ,
		ObtainedAt: t0.Add(at), ExpiresAt: t0.Add(at + time.Hour),
	}, time.Minute)
	if err != nil {
		panic(err)
	}
	return SecretDemand{Demand: d, Key: image, Cred: o}
}

func pending(image string) SecretDemand {
	return SecretDemand{Demand: Demand{Provider: "p", Image: image}, Key: image}
}

func TestLayOutProviderSecret(t *testing.T) {
	tests := map[string]struct {
		demands []SecretDemand
		// want is the password each auths key holds.
		want map[string]string
		// reads is the password each demand's image reads with the keyring rules ("" nothing).
		reads   map[string]string
		leftOut []string
	}{
		"Registry answers of one registry are written once, under the answer's key": {
			demands: []SecretDemand{
				answered("ecr.example/acme/a", "Registry", "ecr.example", "t1", 0),
				answered("ecr.example/acme/b", "Registry", "ecr.example", "t1", 0),
				answered("ecr.example/team/c", "Registry", "ecr.example", "t1", 0),
			},
			want:  map[string]string{"ecr.example": "t1"},
			reads: map[string]string{"ecr.example/acme/a": "t1", "ecr.example/acme/b": "t1", "ecr.example/team/c": "t1"},
		},
		"the newest answer of a registry is the one kept, as in the kubelet's cache": {
			demands: []SecretDemand{
				answered("ecr.example/acme/a", "Registry", "ecr.example", "old", 0),
				answered("ecr.example/acme/b", "Registry", "ecr.example", "new", time.Minute),
			},
			want:  map[string]string{"ecr.example": "new"},
			reads: map[string]string{"ecr.example/acme/a": "new", "ecr.example/acme/b": "new"},
		},
		"two registries answering with one glob key each keep their own credential": {
			demands: []SecretDemand{
				answered("1.ecr.example/a", "Registry", "*.ecr.example", "one", 0),
				answered("2.ecr.example/b", "Registry", "*.ecr.example", "two", 0),
			},
			want:  map[string]string{"*.ecr.example": "one", "2.ecr.example/b": "two"},
			reads: map[string]string{"1.ecr.example/a": "one", "2.ecr.example/b": "two"},
		},
		"Image answers are written per entry": {
			demands: []SecretDemand{
				answered("reg.example/a", "Image", "reg.example", "a", 0),
				answered("reg.example/b", "Image", "reg.example", "b", 0),
			},
			want:  map[string]string{"reg.example/a": "a", "reg.example/b": "b"},
			reads: map[string]string{"reg.example/a": "a", "reg.example/b": "b"},
		},
		"an Image answer is read before its registry's, as the kubelet's cache": {
			demands: []SecretDemand{
				answered("reg.example/a", "Image", "reg.example", "a", 0),
				answered("reg.example/b", "Registry", "reg.example", "r", 0),
			},
			want:  map[string]string{"reg.example/a": "a", "reg.example": "r"},
			reads: map[string]string{"reg.example/a": "a", "reg.example/b": "r"},
		},
		"a pending entry of the registry reads the registry's answer, as the kubelet would": {
			demands: []SecretDemand{
				answered("ecr.example/a", "Registry", "ecr.example", "t", 0),
				pending("ecr.example/b"),
			},
			want:  map[string]string{"ecr.example": "t"},
			reads: map[string]string{"ecr.example/a": "t", "ecr.example/b": "t"},
		},
		"an entry the provider does not match reads nothing": {
			demands: []SecretDemand{
				answered("reg.example/acme/a", "Registry", "reg.example", "t", 0),
				{Demand: Demand{Provider: "p", Image: "reg.example/other/x"}, Key: "reg.example/other/x", Static: true},
			},
			want:  map[string]string{"reg.example/acme/a": "t"},
			reads: map[string]string{"reg.example/acme/a": "t", "reg.example/other/x": ""},
		},
		"a Global answer is written once for every registry": {
			demands: []SecretDemand{
				answered("a.example/x", "Global", "*.example", "g", 0),
				answered("b.example/y", "Global", "*.example", "g", 0),
			},
			want:  map[string]string{"*.example": "g"},
			reads: map[string]string{"a.example/x": "g", "b.example/y": "g"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			l := LayOutProviderSecret(tc.demands, MaxProviderSecretBytes)
			got := map[string]string{}
			auths := map[string]credentials.AuthEntry{}
			for k, o := range l.Creds {
				got[k] = o.Auth.Password
				auths[k] = o.Auth
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("auths (-want +got):\n%s", diff)
			}
			cfg := credentials.NewDockerConfig(auths)
			reads := map[string]string{}
			for _, sd := range tc.demands {
				a, _, _ := cfg.Lookup(sd.Demand.Image)
				reads[sd.Demand.Image] = a.Password
			}
			if diff := cmp.Diff(tc.reads, reads); diff != "" {
				t.Errorf("what each entry reads (-want +got):\n%s", diff)
			}
			if len(l.LeftOut) != 0 {
				t.Errorf("left out %v", l.LeftOut)
			}
		})
	}
}

// Past the bound, the last credentials are left out, and the data stays within it.
func TestLayOutProviderSecretStaysWithinItsBound(t *testing.T) {
	pass := strings.Repeat("x", 2000)
	var demands []SecretDemand
	for i := range 10 {
		demands = append(demands, answered(fmt.Sprintf("reg.example/r%02d", i), "Image", "reg.example", pass, 0))
	}
	l := LayOutProviderSecret(demands, 20000)
	s, err := credentialprovider.Secret("ns", "name", l.Creds)
	if err != nil {
		t.Fatal(err)
	}
	if got := dataBytes(s.Data); got > 20000 || got != l.Bytes {
		t.Errorf("the data is %d bytes, the layout says %d, the bound is 20000", got, l.Bytes)
	}
	kept := slices.Sorted(maps.Keys(l.Creds))
	var left []string
	for _, d := range l.LeftOut {
		left = append(left, d.Image)
	}
	if len(kept) == 0 || len(kept)+len(left) != 10 || slices.Contains(kept, left[0]) || left[len(left)-1] != "reg.example/r09" {
		t.Errorf("kept %v, left out %v", kept, left)
	}
}
