package webhook

import (
	"context"
	"strings"
	"sync"

	"github.com/distribution/reference"
	corev1 "k8s.io/api/core/v1"

	"github.com/enix/kuik/internal/credentials"
	"github.com/enix/kuik/internal/probe"
	"github.com/enix/kuik/internal/routing"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// SecretGetter reads a Secret of the cluster resource namespace (from an informer's cache).
type SecretGetter func(ctx context.Context, name string) (*corev1.Secret, error)

// ProbeChooser chooses with registry probes, each made with its entry's credential.
type ProbeChooser struct {
	Prober  *probe.Prober
	Secrets SecretGetter

	// parsed remembers each Secret's parse by resourceVersion: every admission of a covered
	// image needs its credential (it keys the probe cache), and the Secret rarely changes.
	mu     sync.Mutex
	parsed map[string]parsedSecret
}

type parsedSecret struct {
	resourceVersion string
	config          *credentials.DockerConfig
	err             error
}

// Choose implements Chooser.
//
// The original image is probed with the credential of the entry it sits on, if any, else
// anonymously. A pod that brings its own pull secrets may hold a credential for the original
// that kuik cannot read, so for such a pod an original answering "authentication required"
// counts as available: kuik never moves a pod away from a private registry it is entitled to.
func (c *ProbeChooser) Choose(ctx context.Context, cands []routing.Candidate, ownPullSecrets bool) int {
	targets := make([]probe.Target, len(cands))
	for i, cand := range cands {
		targets[i] = probe.Target{Reference: cand.Reference, Insecure: cand.Insecure, Credential: c.credential(ctx, cand)}
	}
	if !ownPullSecrets {
		i, _ := c.Prober.First(ctx, targets)
		return i
	}
	for i, res := range c.probeAll(ctx, targets) {
		if res == probe.Available || (res == probe.InvalidAuth && cands[i].Source.IsOriginal()) {
			return i
		}
	}
	return -1
}

// probeAll probes every target at once and waits for all, in list order.
func (c *ProbeChooser) probeAll(ctx context.Context, targets []probe.Target) []probe.Result {
	out := make([]chan probe.Result, len(targets))
	for i, t := range targets {
		out[i] = make(chan probe.Result, 1)
		go func() { out[i] <- c.Prober.Probe(ctx, t) }()
	}
	res := make([]probe.Result, len(targets))
	for i := range out {
		res[i] = <-out[i]
	}
	return res
}

// credential resolves the entry's credential for the candidate's repository by the kubelet's
// rules; anything missing or broken probes anonymously (which is what the kubelet would do).
func (c *ProbeChooser) credential(ctx context.Context, cand routing.Candidate) probe.Credential {
	if cand.Auth == nil || c.Secrets == nil {
		return probe.Credential{}
	}
	secretName := ""
	switch {
	case cand.Auth.SecretRef != nil:
		secretName = cand.Auth.SecretRef.Name
	case cand.Auth.Provider != nil:
		secretName = ProviderSecretName(cand.Auth.Provider.Name)
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
	named, err := reference.ParseNormalizedNamed(cand.Reference)
	if err != nil {
		return probe.Credential{}
	}
	entry, _, err := cfg.Lookup(named.Name())
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

// ProviderSecretName is where the secret-syncer keeps a provider's credential.
func ProviderSecretName(provider string) string {
	return v1alpha1.ProviderSecretPrefix + strings.ToLower(provider)
}
