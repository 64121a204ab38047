package keeper

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-containerregistry/pkg/name"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/enix/kuik/internal/credentials"
	"github.com/enix/kuik/internal/keep"
	"github.com/enix/kuik/internal/routing"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// listFailureHold is how long a failed list or watch makes Gather report Safety.ListFailed:
// longer than the reflector's longest backoff (30s), so that an informer failing again and again
// is never seen as healthy between two attempts.
const listFailureHold = 2 * time.Minute

// listFailures records the informers' list and watch failures (the cache's watch error
// handler).
type listFailures struct {
	now func() time.Time

	mu sync.Mutex
	// since: a failure happened since the last Gather; last is when the latest happened.
	since bool
	last  time.Time
}

// handler is the cache's DefaultWatchErrorHandler: it logs as client-go does, and records every
// failure but a watch closed normally or expired (the informer then lists again, missing
// nothing).
func (f *listFailures) handler(ctx context.Context, r *toolscache.Reflector, err error) {
	toolscache.DefaultWatchErrorHandler(ctx, r, err)
	f.record(err)
}

func (f *listFailures) record(err error) {
	if errors.Is(err, io.EOF) || apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.since, f.last = true, f.now()
}

// failed reports whether a list or watch failed since the previous call or within
// listFailureHold, and starts a new period.
func (f *listFailures) failed() bool {
	if f == nil {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	failed := f.since || (!f.last.IsZero() && f.now().Sub(f.last) < listFailureHold)
	f.since = false
	return failed
}

// gatherer reads Inputs from the keeper's cache.
type gatherer struct {
	cache    cache.Cache
	failures *listFailures
	// clusterID names this cluster's tags (routing.Index.WithClusterID), as the webhook does.
	clusterID string
}

// Gather reads one plan pass's Inputs from the informers' stores, never blocking on a cache
// that has not synced: the routing index, the keep-enabled
// mirrors, the live pods, the namespaces' labels and the workload templates. A routing
// resource the index refuses is logged and left out; an error means a cache could not be read
// at all. Safety.Synced is false until every informer has synced (the Snapshot is then
// partial); Safety.ListFailed is true when a list or watch failed since the previous Gather or
// within the last two minutes.
func (g *gatherer) Gather(ctx context.Context) (Inputs, error) {
	log := logr.FromContextOrDiscard(ctx)
	var in Inputs
	synced, err := g.synced(ctx)
	if err != nil {
		return Inputs{}, err
	}
	in.Safety = keep.Safety{Synced: synced, ListFailed: g.failures.failed(), ClusterID: g.clusterID}

	alts, err := storeItems[v1alpha1.ImageAlternative](ctx, g, &v1alpha1.ImageAlternative{})
	if err != nil {
		return Inputs{}, err
	}
	mirrors, err := storeItems[v1alpha1.ImageMirror](ctx, g, &v1alpha1.ImageMirror{})
	if err != nil {
		return Inputs{}, err
	}
	// The webhook's own index and naming: the keeper's destinations are its candidates.
	ix, errs := routing.NewIndex(alts, mirrors)
	for _, err := range errs {
		log.Error(err, "routing resource left out of the index")
	}
	in.Index = ix.WithClusterID(g.clusterID)
	in.Mirrors, in.Specs = keepMirrors(mirrors)
	in.DeclaredHosts, in.InsecureHosts = hosts(alts, mirrors)

	if in.Snapshot.Pods, err = g.pods(ctx); err != nil {
		return Inputs{}, err
	}
	if in.Snapshot.Namespaces, err = g.namespaces(ctx); err != nil {
		return Inputs{}, err
	}
	if in.Snapshot.Templates, err = g.templates(ctx); err != nil {
		return Inputs{}, err
	}
	return in, nil
}

// synced reports whether every informer of the keeper has synced.
func (g *gatherer) synced(ctx context.Context) (bool, error) {
	for _, obj := range watchedObjects() {
		inf, err := g.cache.GetInformer(ctx, obj, cache.BlockUntilSynced(false))
		if err != nil {
			return false, fmt.Errorf("informer for %T: %w", obj, err)
		}
		if !inf.HasSynced() {
			return false, nil
		}
	}
	return true, nil
}

// store is the informer store of obj's kind: the compact values of cache.go.
func (g *gatherer) store(ctx context.Context, obj client.Object) (toolscache.Store, error) {
	inf, err := g.cache.GetInformer(ctx, obj, cache.BlockUntilSynced(false))
	if err != nil {
		return nil, fmt.Errorf("informer for %T: %w", obj, err)
	}
	si, ok := inf.(toolscache.SharedIndexInformer)
	if !ok {
		return nil, fmt.Errorf("informer for %T is a %T, not a shared index informer", obj, inf)
	}
	return si.GetStore(), nil
}

// storeItems are the objects of obj's informer store, shallow copies sharing the cache's
// maps and slices: read only.
func storeItems[T any, P interface {
	*T
	client.Object
}](ctx context.Context, g *gatherer, obj P) ([]T, error) {
	st, err := g.store(ctx, obj)
	if err != nil {
		return nil, err
	}
	items := st.List()
	out := make([]T, 0, len(items))
	for _, item := range items {
		o, ok := item.(P)
		if !ok {
			return nil, fmt.Errorf("the %T cache holds a %T", obj, item)
		}
		out = append(out, *o)
	}
	return out, nil
}

// pods are the live pods, sorted by namespace and name.
func (g *gatherer) pods(ctx context.Context) ([]keep.Pod, error) {
	st, err := g.store(ctx, &corev1.Pod{})
	if err != nil {
		return nil, err
	}
	items := st.List()
	out := make([]keep.Pod, 0, len(items))
	for _, item := range items {
		p, ok := item.(*cachedPod)
		if !ok {
			return nil, fmt.Errorf("the pod cache holds a %T", item)
		}
		if !p.live() {
			continue
		}
		kp := keep.Pod{Namespace: p.Namespace, Name: p.Name, Labels: p.Labels.get(), Annotations: p.Annotations.get()}
		if len(p.Containers) > 0 {
			kp.Containers = make([]keep.Container, len(p.Containers))
			for i := range p.Containers {
				kp.Containers[i] = p.Containers[i].container()
			}
		}
		out = append(out, kp)
	}
	slices.SortFunc(out, func(a, b keep.Pod) int {
		return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name))
	})
	return out, nil
}

// namespaces maps every namespace to its labels.
func (g *gatherer) namespaces(ctx context.Context) (map[string]labels.Set, error) {
	st, err := g.store(ctx, &corev1.Namespace{})
	if err != nil {
		return nil, err
	}
	items := st.List()
	out := make(map[string]labels.Set, len(items))
	for _, item := range items {
		n, ok := item.(*cachedNamespace)
		if !ok {
			return nil, fmt.Errorf("the namespace cache holds a %T", item)
		}
		out[n.Name] = n.Labels
	}
	return out, nil
}

// templates are every workload template, sorted by kind, namespace and name.
func (g *gatherer) templates(ctx context.Context) ([]keep.Template, error) {
	var out []keep.Template
	for _, kind := range slices.Sorted(maps.Keys(templateObjects)) {
		st, err := g.store(ctx, templateObjects[kind])
		if err != nil {
			return nil, err
		}
		items := st.List()
		start := len(out)
		for _, item := range items {
			t, ok := item.(*cachedTemplate)
			if !ok {
				return nil, fmt.Errorf("the %s cache holds a %T", kind, item)
			}
			out = append(out, t.template())
		}
		slices.SortFunc(out[start:], func(a, b keep.Template) int {
			return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name))
		})
	}
	return out, nil
}

// keepMirrors are the keep-enabled ImageMirrors (spec.keep set, not being deleted), sorted by
// name, and the objects by name. A mirror without spec.keep.push writes anonymously, as the
// API says.
func keepMirrors(items []v1alpha1.ImageMirror) ([]keep.Mirror, map[string]*v1alpha1.ImageMirror) {
	var out []keep.Mirror
	specs := map[string]*v1alpha1.ImageMirror{}
	for i := range items {
		m := &items[i]
		k := m.Spec.Keep
		if k == nil || m.DeletionTimestamp != nil {
			continue
		}
		out = append(out, keep.Mirror{
			Name:                m.Name,
			Destination:         m.Spec.Destination.Path,
			Retention:           k.RetentionOrDefault().Duration,
			CountTemplates:      k.CountsTemplates(),
			AllowPrivateSources: k.AllowsPrivateSources(),
			Selects:             selects(m),
		})
		specs[m.Name] = m
	}
	slices.SortFunc(out, func(a, b keep.Mirror) int { return strings.Compare(a.Name, b.Name) })
	return out, specs
}

// selects is whether m's selectors select a pod; a selector that does not compile (the
// routing index leaves that mirror out) selects nothing.
func selects(m *v1alpha1.ImageMirror) func(podLabels, namespaceLabels labels.Set) bool {
	pod, errPod := routing.CompileSelector(m.Spec.PodSelector)
	ns, errNs := routing.CompileSelector(m.Spec.NamespaceSelector)
	if errPod != nil || errNs != nil {
		return func(labels.Set, labels.Set) bool { return false }
	}
	return func(podLabels, namespaceLabels labels.Set) bool {
		return (pod == nil || pod.Matches(podLabels)) && (ns == nil || ns.Matches(namespaceLabels))
	}
}

// hosts are the registry hosts the routing resources declare (every alternative entry's
// repository or repositoryGroup, every mirror's destination), and those of them some entry or
// destination marks insecure. Hosts are spelled as go-containerregistry's RegistryStr (Docker
// Hub is index.docker.io), as probe.Registry labels the webhook's metrics.
func hosts(alts []v1alpha1.ImageAlternative, mirrors []v1alpha1.ImageMirror) (declared, insecure map[string]struct{}) {
	declared, insecure = map[string]struct{}{}, map[string]struct{}{}
	add := func(path string, isInsecure bool) {
		h := hostOf(path)
		if h == "" {
			return
		}
		declared[h] = struct{}{}
		if isInsecure {
			insecure[h] = struct{}{}
		}
	}
	for i := range alts {
		for j := range alts[i].Spec.Alternatives {
			a := &alts[i].Spec.Alternatives[j]
			add(routing.AlternativeAuthPath(a), a.Insecure)
		}
	}
	for i := range mirrors {
		add(mirrors[i].Spec.Destination.Path, mirrors[i].Spec.Destination.Insecure)
	}
	return declared, insecure
}

// hostOf is the registry host of a repository or path prefix as the kubelet reads it (nginx is
// on Docker Hub, registry.tld/ is the registry registry.tld); "" when it does not parse.
func hostOf(path string) string {
	normalized, err := credentials.NormalizePath(path)
	if err != nil {
		return ""
	}
	host, _, _ := strings.Cut(normalized, "/")
	reg, err := name.NewRegistry(host)
	if err != nil {
		return ""
	}
	return reg.RegistryStr()
}
