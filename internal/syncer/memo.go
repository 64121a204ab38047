package syncer

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/enix/kuik/internal/routing"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// memoEntry caches a resource's view and resolution while neither the resource's spec nor its
// secretRef Secrets change.
type memoEntry struct {
	uid         types.UID
	generation  int64
	fingerprint string
	resource    *Resource
	resolution  *Resolution
}

// resource returns the syncer's view of a routing resource and the resolution of its
// credentials, computed once per (spec generation, secretRef Secrets' versions). It returns
// nil, nil, nil for a resource that is gone or being deleted.
func (c *Controller) resource(ctx context.Context, rk ResourceKey) (*Resource, *Resolution, error) {
	var (
		meta metav1.Object
		conv func() (*Resource, error)
	)
	switch rk.Kind {
	case routing.KindImageAlternative:
		var obj v1alpha1.ImageAlternative
		if err := c.cache.Get(ctx, client.ObjectKey{Name: rk.Name}, &obj); err != nil {
			return nil, nil, client.IgnoreNotFound(err)
		}
		meta, conv = &obj, func() (*Resource, error) { return FromImageAlternative(&obj) }
	case routing.KindImageMirror:
		var obj v1alpha1.ImageMirror
		if err := c.cache.Get(ctx, client.ObjectKey{Name: rk.Name}, &obj); err != nil {
			return nil, nil, client.IgnoreNotFound(err)
		}
		meta, conv = &obj, func() (*Resource, error) { return FromImageMirror(&obj, c.cfg.ClusterID) }
	default:
		return nil, nil, fmt.Errorf("unknown kind %q", rk.Kind)
	}
	if meta.GetDeletionTimestamp() != nil {
		c.providers.use(ctx, rk, nil)
		return nil, nil, nil
	}

	c.mu.Lock()
	m := c.memo[rk]
	c.mu.Unlock()
	if m == nil || m.uid != meta.GetUID() || m.generation != meta.GetGeneration() {
		r, err := conv()
		if err != nil {
			return nil, nil, err
		}
		m = &memoEntry{uid: meta.GetUID(), generation: meta.GetGeneration(), resource: r}
		c.providers.use(ctx, rk, r)
	} else {
		m = &memoEntry{uid: m.uid, generation: m.generation, resource: m.resource, fingerprint: m.fingerprint, resolution: m.resolution}
	}
	fp := c.secretsFingerprint(ctx, m.resource)
	if m.resolution == nil || fp != m.fingerprint {
		m.fingerprint = fp
		m.resolution = Resolve(m.resource, func(name string) (*corev1.Secret, bool) { return c.secret(ctx, name) }, c.providers.answer)
	}
	c.mu.Lock()
	c.memo[rk] = m
	c.mu.Unlock()
	return m.resource, m.resolution, nil
}

func (c *Controller) secret(ctx context.Context, name string) (*corev1.Secret, bool) {
	var s corev1.Secret
	if err := c.cache.Get(ctx, client.ObjectKey{Namespace: c.cfg.ClusterResourceNamespace, Name: name}, &s); err != nil {
		return nil, false
	}
	return &s, true
}

// secretsFingerprint changes when one of the resource's secretRef Secrets changes, or, for a
// resource with a provider entry, when a provider credential changes.
func (c *Controller) secretsFingerprint(ctx context.Context, r *Resource) string {
	var b strings.Builder
	for i := range r.Entries {
		e := &r.Entries[i]
		if e.Injects && e.Auth.Provider != nil {
			fmt.Fprintf(&b, "providers=%d;", c.providers.version.Load())
		}
		if !e.Injects || e.Auth.SecretRef == nil {
			continue
		}
		b.WriteString(e.Auth.SecretRef.Name)
		b.WriteByte('=')
		if s, ok := c.secret(ctx, e.Auth.SecretRef.Name); ok {
			b.WriteString(string(s.UID))
			b.WriteByte('/')
			b.WriteString(s.ResourceVersion)
		}
		b.WriteByte(';')
	}
	return b.String()
}
