package syncer

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"golang.org/x/time/rate"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/enix/kuik/internal/metrics"
	"github.com/enix/kuik/internal/probe"
	"github.com/enix/kuik/internal/routing"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// Background availability checks, on the leader. Each repository ahead of where live pods
// were routed (Fallbacks.Ahead: the originals, and a resource's candidates before the one
// the pods got) is sent one anonymous manifest HEAD per Interval, one at a time per registry
// host and at most PerSecond in all. Those that give no HTTP answer are written to the
// resource's status.unavailable under AvailabilityFieldManager; every webhook replica reads
// them as hints (probe.Prober.SetSharedHints). Any HTTP answer is an answer: a 401, 404, 429
// or 5xx is never a hint. A 429, or a RateLimit-Remaining under rateLimitFloor, pauses the
// host for rateLimitPause: its entries stay as last checked and age out in the webhooks.

const (
	// MaxUnavailable is the CRD's bound on status.unavailable, and the bound on the
	// repositories checked for one resource.
	MaxUnavailable = 256
	// AvailabilityFieldManager owns status.unavailable.
	AvailabilityFieldManager = "kuik-availability"
	// DefaultAvailabilityInterval is AvailabilityOptions.Interval's default in the command.
	DefaultAvailabilityInterval = 30 * time.Second
	// DefaultAvailabilityPerSecond is AvailabilityOptions.PerSecond's default.
	DefaultAvailabilityPerSecond = 5
	// writeEvery is how often what a pass found so far is written while it runs.
	writeEvery = 2 * time.Second
	// rewriteCheckedAfter: while a repository stays unavailable, its checkedAt is rewritten
	// at least this often (a webhook ignores a hint older than its --hint-max-age, 5 min by
	// default), and no more often.
	rewriteCheckedAfter = 2 * time.Minute
	// rateLimitFloor and rateLimitPause: a registry reporting fewer requests left pauses
	// the checks of its host.
	rateLimitFloor = 10
	rateLimitPause = 10 * time.Minute
)

// AvailabilityOptions configure the background availability checks.
type AvailabilityOptions struct {
	// Interval between two checks of one repository; zero or less turns the checks off.
	Interval time.Duration
	// PerSecond bounds the checks sent, every registry together (default
	// DefaultAvailabilityPerSecond).
	PerSecond float64
	// Timeout bounds one check (default probe.DefaultTimeout).
	Timeout time.Duration
	// Transport carries the checks (tests; default: go-containerregistry's, two connections
	// per host).
	Transport http.RoundTripper
}

// CheckTarget is one repository to check.
type CheckTarget struct {
	// Repository names it in status.unavailable, as probe.RepositoryOf writes it.
	Repository string
	// Reference is what is sent: a candidate's reference in that repository.
	Reference string
	Insecure  bool
	// Host is the registry host, the unit of pacing.
	Host string
}

type availability struct {
	opts    AvailabilityOptions
	prober  *probe.Prober
	limiter *rate.Limiter
	wake    chan struct{}
	now     func() time.Time

	mu sync.Mutex
	// targets holds every resource whose live fallbacks were computed in this run, with
	// what is ahead of them (nil for nothing).
	targets map[ResourceKey][]CheckTarget
	// found holds the repositories the last check found giving no answer.
	found map[string]v1alpha1.UnavailableRepository
	// last is when each targeted repository was last checked in this run.
	last map[string]time.Time
	// paused holds the hosts not checked until the time given.
	paused map[string]time.Time
	// dirty: found changed since the last write.
	dirty atomic.Bool
}

func newAvailability(opts AvailabilityOptions, now func() time.Time) *availability {
	if opts.PerSecond <= 0 {
		opts.PerSecond = DefaultAvailabilityPerSecond
	}
	if opts.Timeout <= 0 {
		opts.Timeout = probe.DefaultTimeout
	}
	a := &availability{
		opts: opts, now: now, wake: make(chan struct{}, 1),
		limiter: rate.NewLimiter(rate.Limit(opts.PerSecond), 1),
		targets: map[ResourceKey][]CheckTarget{}, found: map[string]v1alpha1.UnavailableRepository{},
		last: map[string]time.Time{}, paused: map[string]time.Time{},
	}
	base := opts.Transport
	if base == nil {
		t := remote.DefaultTransport.(*http.Transport).Clone()
		t.MaxConnsPerHost = 2
		base = t
	}
	a.prober = probe.New(probe.Options{Timeout: opts.Timeout, Transport: rateLimitWatch{base: base, a: a}, Now: now})
	return a
}

// set records what is ahead of rk's live fallbacks; a repository never checked in this run
// wakes the checks.
func (a *availability) set(rk ResourceKey, ahead []CheckTarget) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.targets[rk] = ahead
	for _, t := range ahead {
		if _, ok := a.last[t.Repository]; !ok {
			select {
			case a.wake <- struct{}{}:
			default:
			}
			return
		}
	}
}

// forget drops a resource that is gone.
func (a *availability) forget(rk ResourceKey) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.targets, rk)
}

// runAvailability checks what is due every Interval, and at once when a new repository is
// targeted; what the checks find is written every writeEvery while a pass runs, and at its
// end: a long pass (many hosts that hang) never holds back the entries found early.
func (c *Controller) runAvailability(ctx context.Context) {
	a := c.availability
	defer metrics.UnavailableRepositories.Set(0)
	timer := time.NewTimer(a.opts.Interval)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		case <-a.wake:
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			a.pass(ctx)
		}()
		tick := time.NewTicker(writeEvery)
	passing:
		for {
			select {
			case <-done:
				break passing
			case <-tick.C:
				if a.dirty.Swap(false) {
					c.writeUnavailable(ctx)
				}
			}
		}
		tick.Stop()
		if ctx.Err() != nil {
			return
		}
		a.dirty.Store(false)
		c.writeUnavailable(ctx)
		timer.Reset(a.opts.Interval)
	}
}

// pass checks every targeted repository not checked within Interval, hosts in parallel
// (workers), each host's one at a time.
func (a *availability) pass(ctx context.Context) {
	now := a.now()
	byHost := map[string][]CheckTarget{}
	a.mu.Lock()
	want := map[string]struct{}{}
	keys := make([]ResourceKey, 0, len(a.targets))
	for rk := range a.targets {
		keys = append(keys, rk)
	}
	slices.SortFunc(keys, func(x, y ResourceKey) int { return cmp.Or(cmp.Compare(x.Kind, y.Kind), cmp.Compare(x.Name, y.Name)) })
	for _, rk := range keys {
		for _, t := range a.targets[rk] {
			if _, dup := want[t.Repository]; dup {
				continue
			}
			want[t.Repository] = struct{}{}
			if last, ok := a.last[t.Repository]; ok && now.Sub(last) < a.opts.Interval {
				continue
			}
			byHost[t.Host] = append(byHost[t.Host], t)
		}
	}
	for repo := range a.last {
		if _, ok := want[repo]; !ok {
			delete(a.last, repo)
			delete(a.found, repo)
		}
	}
	for host, until := range a.paused {
		if !now.Before(until) {
			delete(a.paused, host)
		}
	}
	a.mu.Unlock()

	hosts := make([]string, 0, len(byHost))
	for h := range byHost {
		hosts = append(hosts, h)
	}
	slices.Sort(hosts)
	work := make(chan string)
	var wg sync.WaitGroup
	for range min(a.workers(), len(hosts)) {
		wg.Go(func() {
			for h := range work {
				a.checkHost(ctx, h, byHost[h])
			}
		})
	}
feed:
	for _, h := range hosts {
		select {
		case work <- h:
		case <-ctx.Done():
			break feed
		}
	}
	close(work)
	wg.Wait()
}

// workers is the number of hosts checked at once: enough for PerSecond checks that each
// take the whole timeout, 4 to 32.
func (a *availability) workers() int {
	return min(max(int(math.Ceil(a.opts.PerSecond*a.opts.Timeout.Seconds())), 4), 32)
}

// checkHost checks one host's repositories in turn. Once the host gave no answer in this
// pass, its other repositories are given the same result without a request: a host that
// hangs costs a pass one timeout, not one per repository.
func (a *availability) checkHost(ctx context.Context, host string, targets []CheckTarget) {
	ctx = context.WithValue(ctx, checkedHost{}, host)
	silent := ""
	for _, t := range targets {
		if a.isPaused(host) {
			metrics.AvailabilityChecks.WithLabelValues("paused").Inc()
			continue
		}
		answered, reason := false, silent
		if silent == "" {
			if err := a.limiter.Wait(ctx); err != nil {
				return
			}
			r, ok, timedOut := a.prober.Check(ctx, probe.Target{Reference: t.Reference, Insecure: t.Insecure})
			if ctx.Err() != nil {
				return // a stop is not an outage
			}
			answered = ok || r == probe.Invalid
			if r == probe.QuotaExceeded {
				a.pause(host)
			}
			reason = v1alpha1.UnavailableUnreachable
			if timedOut {
				reason = v1alpha1.UnavailableTimeout
			}
			if !answered {
				silent = reason
			}
		}
		a.record(t.Repository, answered, reason)
	}
}

// record notes what a check of repo found.
func (a *availability) record(repo string, answered bool, reason string) {
	now := a.now()
	a.mu.Lock()
	defer a.mu.Unlock()
	a.last[repo] = now
	if answered {
		if _, ok := a.found[repo]; ok {
			delete(a.found, repo)
			a.dirty.Store(true)
		}
		metrics.AvailabilityChecks.WithLabelValues("answered").Inc()
	} else {
		u, ok := a.found[repo]
		if !ok {
			u = v1alpha1.UnavailableRepository{Repository: repo, Since: metav1.NewTime(now).Rfc3339Copy()}
		}
		u.Reason, u.CheckedAt = reason, metav1.NewTime(now).Rfc3339Copy()
		a.found[repo] = u
		a.dirty.Store(true)
		metrics.AvailabilityChecks.WithLabelValues(strings.ToLower(reason)).Inc()
	}
	metrics.UnavailableRepositories.Set(float64(len(a.found)))
}

// checkedHost keys the target host a check's requests are for, in their context: a pause
// is the target host's, whatever host a token realm or a redirect sends a request to.
type checkedHost struct{}

func (a *availability) pause(host string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.paused[host] = a.now().Add(rateLimitPause)
}

func (a *availability) isPaused(host string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	until, ok := a.paused[host]
	if ok && !a.now().Before(until) {
		delete(a.paused, host)
		return false
	}
	return ok
}

// desired is rk's status.unavailable after the last pass: the targeted repositories found
// giving no answer, and those not checked yet in this run as current holds them (a new
// leader keeps its predecessor's hints until it has checked them itself); the most recent
// first, at most MaxUnavailable. known is false for a resource whose fallbacks this run has
// not computed yet: nothing is written for it.
func (a *availability) desired(rk ResourceKey, current []v1alpha1.UnavailableRepository) (out []v1alpha1.UnavailableRepository, known bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	targets, known := a.targets[rk]
	if !known {
		return nil, false
	}
	for _, t := range targets {
		if u, ok := a.found[t.Repository]; ok {
			out = append(out, u)
			continue
		}
		if _, checked := a.last[t.Repository]; checked {
			continue
		}
		if i := slices.IndexFunc(current, func(u v1alpha1.UnavailableRepository) bool { return u.Repository == t.Repository }); i >= 0 {
			out = append(out, current[i])
		}
	}
	slices.SortFunc(out, func(x, y v1alpha1.UnavailableRepository) int {
		return cmp.Or(y.Since.Compare(x.Since.Time), cmp.Compare(x.Repository, y.Repository))
	})
	return out[:min(len(out), MaxUnavailable)], true
}

// sameUnavailable reports whether a status holding current need not be rewritten to hold
// want: the same repositories, reasons and since, and no checkedAt older by
// rewriteCheckedAfter than the one want has.
func sameUnavailable(current, want []v1alpha1.UnavailableRepository) bool {
	if len(current) != len(want) {
		return false
	}
	for i := range want {
		c, w := &current[i], &want[i]
		if c.Repository != w.Repository || c.Reason != w.Reason || !c.Since.Equal(&w.Since) ||
			w.CheckedAt.Sub(c.CheckedAt.Time) >= rewriteCheckedAfter {
			return false
		}
	}
	return true
}

// writeUnavailable writes the status.unavailable of every cached resource whose entries
// changed, each with the resource's UID as a precondition.
func (c *Controller) writeUnavailable(ctx context.Context) {
	log := logr.FromContextOrDiscard(ctx)
	var alts v1alpha1.ImageAlternativeList
	var mirrors v1alpha1.ImageMirrorList
	if err := c.cache.List(ctx, &alts); err != nil {
		log.Error(err, "listing ImageAlternatives for status.unavailable")
		return
	}
	if err := c.cache.List(ctx, &mirrors); err != nil {
		log.Error(err, "listing ImageMirrors for status.unavailable")
		return
	}
	write := func(kind routing.Kind, meta *metav1.ObjectMeta, current []v1alpha1.UnavailableRepository) {
		want, known := c.availability.desired(ResourceKey{Kind: kind, Name: meta.Name}, current)
		if !known || sameUnavailable(current, want) {
			return
		}
		if err := c.applyUnavailable(ctx, kind, meta, want); err != nil {
			log.Error(err, "writing status.unavailable", "kind", kind, "name", meta.Name)
		}
	}
	for i := range alts.Items {
		write(routing.KindImageAlternative, &alts.Items[i].ObjectMeta, alts.Items[i].Status.Unavailable)
	}
	for i := range mirrors.Items {
		write(routing.KindImageMirror, &mirrors.Items[i].ObjectMeta, mirrors.Items[i].Status.Unavailable)
	}
}

func (c *Controller) applyUnavailable(ctx context.Context, kind routing.Kind, meta *metav1.ObjectMeta, list []v1alpha1.UnavailableRepository) error {
	entries := make([]any, len(list))
	for i := range list {
		u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&list[i])
		if err != nil {
			return fmt.Errorf("encoding status.unavailable: %w", err)
		}
		entries[i] = u
	}
	patch := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v1alpha1.GroupVersion.String(),
		"kind":       string(kind),
		"metadata":   map[string]any{"name": meta.Name, "uid": string(meta.UID)},
		"status":     map[string]any{"unavailable": entries},
	}}
	err := c.status.Status().Apply(ctx, client.ApplyConfigurationFromUnstructured(patch), client.FieldOwner(AvailabilityFieldManager), client.ForceOwnership)
	switch {
	case err == nil:
		metrics.SyncerStatusUpdates.WithLabelValues(metrics.ResultSuccess).Inc()
		return nil
	case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
		return nil // gone, or made again: the next pass sees the new one
	default:
		metrics.SyncerStatusUpdates.WithLabelValues(metrics.ResultError).Inc()
		return err
	}
}

// rateLimitWatch pauses a host whose answer says its rate limit is (nearly) reached: a 429,
// or a RateLimit-Remaining header ("42" or "42;w=21600") under rateLimitFloor.
type rateLimitWatch struct {
	base http.RoundTripper
	a    *availability
}

func (w rateLimitWatch) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := w.base.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	host, _ := req.Context().Value(checkedHost{}).(string)
	if host != "" && (resp.StatusCode == http.StatusTooManyRequests || nearLimit(resp.Header.Get("RateLimit-Remaining"))) {
		w.a.pause(host)
	}
	return resp, nil
}

func nearLimit(v string) bool {
	if v == "" {
		return false
	}
	n, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(v, ";", 2)[0]))
	return err == nil && n < rateLimitFloor
}
