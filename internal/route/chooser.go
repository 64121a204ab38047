package route

import (
	"context"
	"sync"

	corev1 "k8s.io/api/core/v1"

	"github.com/enix/kuik/internal/credentialprovider"
	"github.com/enix/kuik/internal/credentials"
	"github.com/enix/kuik/internal/probe"
	"github.com/enix/kuik/internal/routing"
)

// SecretGetter reads a Secret of the cluster resource namespace (from an informer's cache).
type SecretGetter func(ctx context.Context, name string) (*corev1.Secret, error)

// ProbeChooser chooses with registry probes, each made with its entry's credential.
type ProbeChooser struct {
	Prober  *probe.Prober
	Secrets SecretGetter
	// NodeProviders are the credential providers the nodes' kubelets run (the configuration of
	// their --image-credential-provider-config), nil for none. An original image one of them
	// matches is one the node pulls with credentials of its own, which kuik cannot see.
	NodeProviders *credentialprovider.Config

	// parsed remembers each Secret's parse by resourceVersion: every admission of a covered
	// image needs its credential (it keys the probe cache), and the Secret rarely changes.
	mu     sync.Mutex
	parsed map[string]parsedSecret

	// labels memoizes RegistryLabel's parse by reference: parsing a reference was a fifth of an
	// admission's CPU, and a rollout asks for the same few references over and over. It starts
	// over past maxRegistryLabels entries, so pod authors' tags cannot grow it without bound.
	labelsMu sync.Mutex
	labels   map[string]string
}

const maxRegistryLabels = 4096

type parsedSecret struct {
	resourceVersion string
	config          *credentials.DockerConfig
	err             error
}

// Choose implements Chooser: every candidate of every list is probed at once (identical ones
// once), and each list resolves to its first available candidate.
//
// Each candidate is probed with exactly the credential the kubelet will have for it
// (credential). The kubelet may also hold a credential for the original that kuik cannot read:
// from the pod's own pull secrets, or from the node's credential providers when one of their
// matchImages matches the original (a private ECR, GCR or ACR image). For such a pod, or such
// an original, an original answering "authentication required" (401, 403) counts as
// available: kuik never moves a pod away from a private registry it is entitled to.
func (c *ProbeChooser) Choose(ctx context.Context, lists [][]routing.Candidate, ownPullSecrets bool) []Choice {
	n := 0
	for _, cands := range lists {
		n += len(cands)
	}
	all := make([]probe.Target, n) // one allocation for every list's targets
	targets := make([][]probe.Target, len(lists))
	for l, cands := range lists {
		targets[l], all = all[:len(cands):len(cands)], all[len(cands):]
		for i := range cands {
			cand := &cands[i]
			targets[l][i] = probe.Target{
				Reference:  cand.Reference,
				Insecure:   cand.Insecure,
				Credential: c.credential(ctx, cand),
				Registry:   c.registryLabel(cand),
				Trial:      cand.Trial,
			}
		}
	}
	var accept probe.Accept
	if ownPullSecrets || c.nodeHasProviders() {
		accept = func(l, i int, r probe.Result) bool {
			if r == probe.Available {
				return true
			}
			cand := &lists[l][i]
			return r == probe.InvalidAuth && cand.Source.IsOriginal() && (ownPullSecrets || c.nodePulls(cand.Reference))
		}
	}
	return c.Prober.ResolveChoices(ctx, targets, accept)
}

func (c *ProbeChooser) nodeHasProviders() bool {
	return c.NodeProviders != nil && len(c.NodeProviders.Providers) > 0
}

// nodePulls reports whether the node's credential providers cover the image.
func (c *ProbeChooser) nodePulls(image string) bool {
	return c.nodeHasProviders() && c.NodeProviders.MatchingAny(image) != nil
}

// OtherRegistry is the registry label of probes of images no routing resource declares.
const OtherRegistry = "other"

// RegistryLabel is the registry a probe of the candidate is counted under: its registry host
// when a routing resource declares it (every alternative and mirror candidate, and an original
// that sits on an entry), OtherRegistry otherwise. A pod author chooses the original's host, so
// using it as a label value would let them add metric series at will.
func RegistryLabel(cand *routing.Candidate) string {
	if cand.Source.IsOriginal() && cand.Entry < 0 {
		return OtherRegistry
	}
	if r := probe.Registry(cand.Reference); r != "" {
		return r
	}
	return OtherRegistry
}

// registryLabel is RegistryLabel(cand), each reference parsed once.
func (c *ProbeChooser) registryLabel(cand *routing.Candidate) string {
	if cand.Source.IsOriginal() && cand.Entry < 0 {
		return OtherRegistry
	}
	c.labelsMu.Lock()
	label, ok := c.labels[cand.Reference]
	c.labelsMu.Unlock()
	if ok {
		return label
	}
	label = RegistryLabel(cand)
	c.labelsMu.Lock()
	if c.labels == nil || len(c.labels) >= maxRegistryLabels {
		c.labels = make(map[string]string)
	}
	c.labels[cand.Reference] = label
	c.labelsMu.Unlock()
	return label
}

// credential is the credential the kubelet will have for the candidate, which is what it must
// be probed with, or a probe could find available an image the pod cannot pull:
//   - a candidate that injects: the entry's credential for the entry's LookupPath, exactly as
//     the syncer writes it into the pod's Secret, read from its secretRef Secret, or for a
//     provider entry from the kuik-provider-* Secret where the syncer keeps what the plugin
//     gave (credentialprovider.SecretName of the provider and the entry's serviceAccountRef,
//     its auths keyed by the entry's LookupPath);
//   - a provider entry that does not inject: the node resolves the credential itself with the
//     same plugin, whose result that provider Secret holds;
//   - anything else, the original included: anonymous (the pod's own pull secrets and the
//     node's credential providers, which kuik cannot use, are accounted for by Choose).
//
// A credential that is missing or broken probes anonymously, which is what the kubelet would do.
func (c *ProbeChooser) credential(ctx context.Context, cand *routing.Candidate) probe.Credential {
	if cand.Auth == nil || c.Secrets == nil {
		return probe.Credential{}
	}
	secretName := ""
	switch {
	case cand.Auth.Provider != nil && (cand.Inject || !cand.Auth.Injects()):
		secretName = credentialprovider.SecretName(cand.Auth.Provider.Name, cand.Auth.Provider.ServiceAccountRef)
	case cand.Auth.SecretRef != nil && cand.Inject:
		secretName = cand.Auth.SecretRef.Name
	default:
		return probe.Credential{}
	}
	s, err := c.Secrets(ctx, secretName)
	if err != nil {
		return probe.Credential{}
	}
	cfg, err := c.parse(s)
	if err != nil {
		return probe.Credential{}
	}
	path := cand.LookupPath
	if path == "" {
		path = cand.Reference
	}
	entry, _, err := cfg.Lookup(path)
	if err != nil {
		return probe.Credential{}
	}
	return probe.Credential{Username: entry.Username, Password: entry.Password}
}

func (c *ProbeChooser) parse(s *corev1.Secret) (*credentials.DockerConfig, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p, ok := c.parsed[s.Name]; ok && p.resourceVersion == s.ResourceVersion && s.ResourceVersion != "" {
		return p.config, p.err
	}
	cfg, err := credentials.ParseSecret(s)
	if c.parsed == nil {
		c.parsed = map[string]parsedSecret{}
	}
	c.parsed[s.Name] = parsedSecret{resourceVersion: s.ResourceVersion, config: cfg, err: err}
	return cfg, err
}
