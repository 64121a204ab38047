package syncer

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/enix/kuik/internal/credentialprovider"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// World is a snapshot of what the syncer watches, for [Render].
type World struct {
	Resources []*Resource
	// Secrets of the cluster resource namespace, by name.
	Secrets map[string]*corev1.Secret
	// Namespaces by name with their labels; nil stands for the namespaces of Pods, unlabelled.
	Namespaces map[string]labels.Set
	// Pods are the rewritten pods.
	Pods []Pod
	// Providers answers for provider entries; nil leaves them out (ProviderNotConfigured).
	Providers ProviderLookup
}

// Render returns the Secrets the syncer would apply for a world, sorted by namespace then
// name, and every injecting entry left out, by resource then entry. It uses the decisions of
// the controller, from a fresh start: no retention history, so OnFailure Secrets hold what live
// pods use.
func Render(w World) ([]*corev1.Secret, []LeftOut, error) {
	namespaces := w.Namespaces
	if namespaces == nil {
		namespaces = map[string]labels.Set{}
		for _, p := range w.Pods {
			namespaces[p.Namespace] = labels.Set{}
		}
	}
	podsByNamespace := map[string][]Pod{}
	for _, p := range w.Pods {
		podsByNamespace[p.Namespace] = append(podsByNamespace[p.Namespace], p)
	}
	lookup := func(name string) (*corev1.Secret, bool) {
		s, ok := w.Secrets[name]
		return s, ok
	}
	resources := slices.Clone(w.Resources)
	slices.SortFunc(resources, func(a, b *Resource) int {
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Name, b.Name))
	})

	var secrets []*corev1.Secret
	var leftOut []LeftOut
	for _, r := range resources {
		if !r.Injecting() {
			continue
		}
		res := Resolve(r, lookup, w.Providers)
		leftOut = append(leftOut, res.LeftOut...)
		for _, ns := range slices.Sorted(maps.Keys(namespaces)) {
			d, err := DecidePair(PairInput{
				Resource:        r,
				Resolution:      res,
				Namespace:       ns,
				NamespaceLabels: namespaces[ns],
				Pods:            podsByNamespace[ns],
			})
			if err != nil {
				return nil, nil, err
			}
			if d.Needed {
				secrets = append(secrets, d.Secret)
			}
		}
	}
	slices.SortFunc(secrets, func(a, b *corev1.Secret) int {
		return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name))
	})
	return secrets, leftOut, nil
}

// RenderProviders runs the plugins once for every provider entry of the resources, as a fresh
// syncer would, and returns the answers for [World.Providers] and the kuik-provider-* Secrets
// that would hold them in the cluster resource namespace. It requests no service-account
// token (it has no API server): an entry whose provider takes one is left out
// (ServiceAccountRequired).
func RenderProviders(ctx context.Context, plugins *credentialprovider.Plugins, resources []*Resource, namespace string, floor time.Duration) (ProviderLookup, []*corev1.Secret, error) {
	type answer struct {
		a   ProviderAnswer
		key string
		o   *Obtained
	}
	answers := map[Demand]*answer{}
	var cfg *credentialprovider.Config
	if plugins != nil {
		cfg = plugins.Config()
	}
	for _, r := range resources {
		if r.Policy == v1alpha1.RewritePolicyNone {
			continue
		}
		for i := range r.Entries {
			e := &r.Entries[i]
			d, ok := DemandOf(e)
			if !ok || answers[d] != nil {
				continue
			}
			an := &answer{key: e.Key}
			answers[d] = an
			if reason, msg := StaticReason(cfg, d); reason != "" {
				an.a = ProviderAnswer{Reason: reason, Message: msg}
				continue
			}
			if p := cfg.Provider(d.Provider); p.TokenAttributes != nil && d.ServiceAccount != "" {
				an.a = ProviderAnswer{Reason: v1alpha1.ReasonServiceAccountRequired,
					Message: fmt.Sprintf("provider %q takes a service account token, which render does not request", d.Provider)}
				continue
			}
			c, err := plugins.Get(ctx, d.Provider, credentialprovider.Request{Image: d.Image})
			if err != nil {
				an.a = ProviderAnswer{Reason: v1alpha1.ReasonProviderFailed, Message: fmt.Sprintf("provider %q: %v", d.Provider, err)}
				continue
			}
			o, err := Keep(d, c, floor)
			if err != nil {
				an.a = ProviderAnswer{Reason: v1alpha1.ReasonProviderFailed, Message: fmt.Sprintf("provider %q: %v", d.Provider, err)}
				continue
			}
			an.o = o
			an.a = ProviderAnswer{Auth: o.Auth, OK: true}
		}
	}
	// Laid out as the provider keeper writes them (LayOutProviderSecret).
	bySecret := map[string][]SecretDemand{}
	for _, d := range slices.SortedFunc(maps.Keys(answers), compareDemands) {
		an := answers[d]
		name := d.SecretName()
		bySecret[name] = append(bySecret[name], SecretDemand{Demand: d, Key: an.key, Cred: an.o, Static: an.o == nil && an.a.Reason != v1alpha1.ReasonProviderFailed})
	}
	var secrets []*corev1.Secret
	for _, name := range slices.Sorted(maps.Keys(bySecret)) {
		layout := LayOutProviderSecret(bySecret[name], MaxProviderSecretBytes)
		if len(layout.Creds) == 0 {
			continue
		}
		s, err := credentialprovider.Secret(namespace, name, layout.Creds)
		if err != nil {
			return nil, nil, err
		}
		secrets = append(secrets, s)
	}
	lookup := func(e *Entry) ProviderAnswer {
		d, ok := DemandOf(e)
		if !ok || answers[d] == nil {
			return ProviderAnswer{}
		}
		return answers[d].a
	}
	return lookup, secrets, nil
}
