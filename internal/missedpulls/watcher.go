package missedpulls

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	batchv1client "k8s.io/client-go/kubernetes/typed/batch/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	"k8s.io/utils/lru"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/enix/kuik/internal/credentialprovider"
	"github.com/enix/kuik/internal/metrics"
	"github.com/enix/kuik/internal/probe"
	"github.com/enix/kuik/internal/routing"
	"github.com/enix/kuik/internal/webhook"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// Defaults of [Options].
const (
	DefaultStuckPodAge   = 2 * time.Minute
	DefaultRecreateRate  = 0.2 // pods per second: one every 5s
	DefaultRecreateBurst = 10
)

// Bounds on memory, whatever the number of failing pods or forged events.
const (
	maxQueued  = 10000
	maxTracked = 10000
	maxEmitted = 10000
	workers    = 2
	maxNote    = 1024
	// maxHeldWait bounds the wait of a pod the rate limit holds back.
	maxHeldWait = time.Hour
	// maxRepeats bounds the doubling of the stuck age for a controller whose pods come back
	// stuck (StuckPodAge << maxRepeats at most); repeatWindow is how long a delete counts.
	maxRepeats   = 5
	repeatWindow = time.Hour
	// maxInFlightWait bounds the wait of a pod whose sibling (same controller) is being evicted.
	maxInFlightWait = 5 * time.Second
)

// Options configure a [Watcher].
type Options struct {
	// ClusterResourceNamespace holds the secretRef and kuik-provider-* Secrets the probes read.
	ClusterResourceNamespace string
	// ExcludedNamespaces are the namespaces the webhook configuration leaves out (kube-system
	// and the cluster resource namespace are always).
	ExcludedNamespaces []string
	// AllowDelete lets the watcher evict stuck pods of resources with spec.recreateStuckPods;
	// false only reports them (the chart grants create on pods/eviction only with it).
	AllowDelete bool
	// RecreateOwners are the kinds of controllers whose pods are evicted, those that recreate
	// a deleted pod from their template (nil: DefaultRecreateOwners). A Job is never one of
	// them: see RecreateJobs.
	RecreateOwners []schema.GroupKind
	// RecreateJobs evicts the pods of a Job too, while it has retries left (JobHasRetries,
	// read from the Job right before): the eviction counts as one of its failures.
	RecreateJobs bool
	// StuckPodAge is how long a pod must have been seen failing before it is deleted (default
	// DefaultStuckPodAge).
	StuckPodAge time.Duration
	// RecreateRate (pods per second) and RecreateBurst bound the deletes, all resources
	// together (defaults DefaultRecreateRate, DefaultRecreateBurst).
	RecreateRate  float64
	RecreateBurst int
	// ProbeTimeout bounds one registry probe (default probe.DefaultTimeout) and ProbeTTL is how
	// long a result is reused (default probe.DefaultTTL): the webhook's, so both decide alike.
	ProbeTimeout, ProbeTTL time.Duration
	// NodeProviders are the nodes' credential providers, as the webhook is given them (nil when
	// it is given none, whatever providers the syncer runs itself).
	NodeProviders *credentialprovider.Config
	// ProbeTransport overrides the registry HTTP transport (tests).
	ProbeTransport http.RoundTripper
	// Clock measures how long a pod has been failing; nil is the real one.
	Clock clock.PassiveClock
}

func (o *Options) defaults() {
	if o.StuckPodAge <= 0 {
		o.StuckPodAge = DefaultStuckPodAge
	}
	if o.RecreateRate <= 0 {
		o.RecreateRate = DefaultRecreateRate
	}
	if o.RecreateBurst <= 0 {
		o.RecreateBurst = DefaultRecreateBurst
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.RecreateOwners == nil {
		o.RecreateOwners = DefaultRecreateOwners
	}
}

// Watcher is the missed-pull controller (see the package documentation).
type Watcher struct {
	opts     Options
	cache    cache.Cache
	core     corev1client.CoreV1Interface
	jobs     batchv1client.BatchV1Interface
	owners   map[schema.GroupKind]bool
	recorder record.EventRecorder
	chooser  *webhook.ProbeChooser
	prober   *probe.Prober
	limiter  *rate.Limiter
	excluded map[string]bool
	queue    workqueue.TypedRateLimitingInterface[types.NamespacedName]

	// index is the routing index, rebuilt when a routing resource changed (dirty).
	ixMu  sync.Mutex
	ix    *routing.Index
	dirty atomic.Bool

	mu sync.Mutex
	// since is when each pod (by UID) was first seen failing with a routable image.
	since *lru.Cache
	// emitted holds the (pod UID, container, candidate) already reported.
	emitted *lru.Cache
	// held are the pods the rate limit holds back, each looked at again after its turn: as
	// many token intervals as pods are held, so that a thousand held pods cost about one check
	// per token, not a thousand.
	held map[types.NamespacedName]struct{}
	// repeats holds, by controller UID, the generations of the pods deleted lately: a pod
	// created after the syncer deleted one of its controller's pods, and stuck again on a
	// routable image, is a replacement recreated without the webhook (still down or timing
	// out); deleting it again every stuck age is churn, and burns a Job's backoffLimit. Each
	// generation doubles the stuck age; pods created before the first delete (the siblings of
	// a Deployment's replicas) are the first generation, whatever the number deleted.
	repeats *lru.Cache
	// inFlight holds, by controller UID, the one pod of that controller being evicted: its
	// siblings wait until it is gone, so that a burst never takes every replica at once.
	inFlight *lru.Cache
}

// flight is a pod being evicted.
type flight struct {
	key types.NamespacedName
	uid types.UID
}

// generations are the deletes of a controller's pods: step i is when a pod of generation
// i+1 was first deleted (at most maxRepeats+1 steps).
type generations []time.Time

// New builds a Watcher reading routing resources, Namespaces and the cluster resource
// namespace's Secrets from c (the syncer's cache), pods, events and Jobs through cs, and
// emitting events with recorder.
func New(opts Options, c cache.Cache, cs kubernetes.Interface, recorder record.EventRecorder) *Watcher {
	opts.defaults()
	w := &Watcher{
		opts:     opts,
		cache:    c,
		core:     cs.CoreV1(),
		jobs:     cs.BatchV1(),
		owners:   map[schema.GroupKind]bool{},
		recorder: recorder,
		limiter:  rate.NewLimiter(rate.Limit(opts.RecreateRate), opts.RecreateBurst),
		excluded: map[string]bool{"kube-system": true, opts.ClusterResourceNamespace: true},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedMaxOfRateLimiter(
				workqueue.NewTypedItemExponentialFailureRateLimiter[types.NamespacedName](time.Second, 5*time.Minute),
				&workqueue.TypedBucketRateLimiter[types.NamespacedName]{Limiter: rate.NewLimiter(rate.Limit(10), 100)},
			),
			workqueue.TypedRateLimitingQueueConfig[types.NamespacedName]{Name: "secret-syncer-missed-pulls"}),
		since:    lru.New(maxTracked),
		emitted:  lru.New(maxEmitted),
		held:     map[types.NamespacedName]struct{}{},
		repeats:  lru.New(maxTracked),
		inFlight: lru.New(maxTracked),
	}
	for _, gk := range opts.RecreateOwners {
		w.owners[gk] = true
	}
	for _, ns := range opts.ExcludedNamespaces {
		w.excluded[ns] = true
	}
	w.dirty.Store(true)
	w.prober = probe.New(probe.Options{Timeout: opts.ProbeTimeout, TTL: opts.ProbeTTL, Transport: opts.ProbeTransport})
	w.chooser = &webhook.ProbeChooser{
		Prober:        w.prober,
		NodeProviders: opts.NodeProviders,
		Secrets: func(ctx context.Context, name string) (*corev1.Secret, error) {
			s := &corev1.Secret{}
			err := c.Get(ctx, types.NamespacedName{Namespace: opts.ClusterResourceNamespace, Name: name}, s)
			return s, err
		},
	}
	return w
}

// NeedLeaderElection: only the leader reports and deletes.
func (*Watcher) NeedLeaderElection() bool { return true }

// Start watches the image-pull failure events and works the queue until ctx ends.
func (w *Watcher) Start(ctx context.Context) error {
	log := logr.FromContextOrDiscard(ctx).WithName("missed-pulls")
	ctx = logr.NewContext(ctx, log)
	mark := toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { w.dirty.Store(true) },
		UpdateFunc: func(any, any) { w.dirty.Store(true) },
		DeleteFunc: func(any) { w.dirty.Store(true) },
	}
	for _, obj := range []client.Object{&v1alpha1.ImageAlternative{}, &v1alpha1.ImageMirror{}} {
		inf, err := w.cache.GetInformer(ctx, obj)
		if err != nil {
			return fmt.Errorf("informer for %T: %w", obj, err)
		}
		reg, err := inf.AddEventHandler(mark)
		if err != nil {
			return fmt.Errorf("watching %T: %w", obj, err)
		}
		defer func() { _ = inf.RemoveEventHandler(reg) }()
	}
	if !w.cache.WaitForCacheSync(ctx) {
		return nil // stopping
	}
	defer w.queue.ShutDown()
	var wg sync.WaitGroup
	for _, reason := range []string{ReasonFailed, ReasonBackOff} {
		selector := fields.AndSelectors(
			fields.OneTermEqualSelector("reason", reason),
			fields.OneTermEqualSelector("involvedObject.kind", "Pod"),
		).String()
		lw := pagedListWatch{&toolscache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, _ metav1.ListOptions) (runtime.Object, error) {
				return w.listEvents(ctx, selector)
			},
			WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				o.FieldSelector = selector
				return w.core.Events(metav1.NamespaceAll).Watch(ctx, o)
			},
		}}
		name := "missed-pulls-" + reason
		r := toolscache.NewReflectorWithOptions(lw, &corev1.Event{}, triggerStore{w.observe}, toolscache.ReflectorOptions{Name: name})
		wg.Go(func() { r.RunWithContext(ctx) })
	}
	for range workers {
		wg.Go(func() {
			for w.process(ctx) {
			}
		})
	}
	sweep := time.NewTicker(time.Minute)
	defer sweep.Stop()
	for {
		select {
		case <-ctx.Done():
			w.queue.ShutDown()
			wg.Wait()
			return nil
		case <-sweep.C:
			w.prober.Sweep()
		}
	}
}

// observe queues the pod an event names, when it is an image-pull failure.
func (w *Watcher) observe(obj any) {
	ev, ok := obj.(*corev1.Event)
	if !ok {
		return
	}
	key, ok := PodOfEvent(ev)
	if !ok || w.excluded[key.Namespace] {
		return
	}
	if w.queue.Len() >= maxQueued {
		return // a flood of (forged) events: the pods already queued come first
	}
	w.queue.Add(key)
}

func (w *Watcher) process(ctx context.Context) bool {
	key, shutdown := w.queue.Get()
	if shutdown {
		return false
	}
	defer w.queue.Done(key)
	after, err := w.sync(ctx, key)
	switch {
	case err != nil:
		logr.FromContextOrDiscard(ctx).Error(err, "checking a pod failing to pull", "pod", key)
		w.queue.AddRateLimited(key)
	case after > 0:
		w.queue.Forget(key)
		w.queue.AddAfter(key, after)
	default:
		w.queue.Forget(key)
	}
	return true
}

// hit is a failing container the webhook would route now.
type hit struct {
	container, image, candidate string
	source                      routing.Source
	resource                    client.Object
	recreate                    bool
}

// sync checks one pod; it returns when to look at it again (0: when an event says so).
func (w *Watcher) sync(ctx context.Context, key types.NamespacedName) (time.Duration, error) {
	w.release(key)
	pod, err := w.core.Pods(key.Namespace).Get(ctx, key.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("reading pod %s: %w", key, err)
	}
	failing := FailingContainers(pod)
	if len(failing) == 0 || pod.DeletionTimestamp != nil || Skipped(pod, w.excluded) {
		w.forget(pod.UID)
		return 0, nil
	}
	hits, err := w.decide(ctx, pod, failing)
	if err != nil {
		return 0, err
	}
	if len(hits) == 0 {
		w.forget(pod.UID)
		return 0, nil
	}
	now := w.opts.Clock.Now()
	since := w.firstSeen(pod.UID, now)
	var recreate *hit
	for i := range hits {
		w.report(pod, &hits[i])
		if hits[i].recreate && recreate == nil {
			recreate = &hits[i]
		}
	}
	if recreate == nil {
		if w.opts.AllowDelete && w.notRecreated(pod) == "" {
			// Looked at again while it fails: its resource may opt in later.
			return w.opts.StuckPodAge, nil
		}
		return 0, nil
	}
	if w.notRecreated(pod) != "" {
		return 0, nil // reported with the reason; the next event starts over
	}
	if need, age := w.stuckAge(pod, now), now.Sub(since); age < need {
		return need - age, nil
	}
	return w.recreate(ctx, pod, failing, hits, recreate, now)
}

// decide runs the webhook's decision on a copy of the pod and keeps the failing containers it
// would rewrite.
func (w *Watcher) decide(ctx context.Context, pod *corev1.Pod, failing map[string]string) ([]hit, error) {
	ix, err := w.index(ctx)
	if err != nil {
		return nil, err
	}
	ns := &metav1.PartialObjectMetadata{}
	ns.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Namespace"))
	if err := w.cache.Get(ctx, types.NamespacedName{Name: pod.Namespace}, ns); err != nil {
		return nil, fmt.Errorf("reading namespace %s: %w", pod.Namespace, err)
	}
	decisions, err := route(ctx, pod.DeepCopy(), labels.Set(ns.Labels), ix, w.chooser.Choose)
	if err != nil {
		return nil, fmt.Errorf("routing pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	var hits []hit
	for _, d := range decisions {
		image, ok := failing[d.Container]
		if !ok || d.Image == d.Original || d.Original != image || d.Source.IsOriginal() {
			continue
		}
		res, recreate, err := w.resource(ctx, d.Source)
		if err != nil {
			return nil, err
		}
		if res == nil {
			continue // gone since the index was built
		}
		// An ephemeral container is no part of the pod template: the replacement would not
		// have it, and the pod deleted would be one being debugged. Reported only.
		recreate = recreate && !Ephemeral(pod, d.Container)
		hits = append(hits, hit{container: d.Container, image: image, candidate: d.Image, source: d.Source, resource: res, recreate: recreate})
	}
	return hits, nil
}

// route is the webhook's decision for a pod being created: the one call to adapt when
// webhook.Route changes.
func route(ctx context.Context, pod *corev1.Pod, namespaceLabels labels.Set, ix *routing.Index, choose webhook.Chooser) ([]webhook.Decision, error) {
	return webhook.Route(ctx, pod, namespaceLabels, ix, choose, webhook.Scope{})
}

// index returns the routing index of the enforcing resources, rebuilt after a change. Dry-run
// resources are left out before indexing (routing.NewIndex would leave them out of what it
// enforces too, but keep them in Index.WithDryRun): so Route sends no trial probe for a
// decision that only wants what the webhook enforces.
func (w *Watcher) index(ctx context.Context) (*routing.Index, error) {
	w.ixMu.Lock()
	defer w.ixMu.Unlock()
	if w.ix != nil && !w.dirty.Load() {
		return w.ix, nil
	}
	w.dirty.Store(false)
	var ias v1alpha1.ImageAlternativeList
	if err := w.cache.List(ctx, &ias); err != nil {
		w.dirty.Store(true)
		return nil, fmt.Errorf("listing ImageAlternatives: %w", err)
	}
	var ims v1alpha1.ImageMirrorList
	if err := w.cache.List(ctx, &ims); err != nil {
		w.dirty.Store(true)
		return nil, fmt.Errorf("listing ImageMirrors: %w", err)
	}
	alternatives := make([]v1alpha1.ImageAlternative, 0, len(ias.Items))
	for _, o := range ias.Items {
		if !o.Spec.DryRun {
			alternatives = append(alternatives, o)
		}
	}
	mirrors := make([]v1alpha1.ImageMirror, 0, len(ims.Items))
	for _, o := range ims.Items {
		if !o.Spec.DryRun {
			mirrors = append(mirrors, o)
		}
	}
	ix, errs := routing.NewIndex(alternatives, mirrors)
	for _, err := range errs {
		logr.FromContextOrDiscard(ctx).V(1).Info("routing resource left out of the index", "error", err.Error())
	}
	w.ix = ix
	return ix, nil
}

// resource reads the routing resource a decision names from the cache: the object events go
// on, and whether it asks for stuck pods to be recreated (nil when it is gone).
func (w *Watcher) resource(ctx context.Context, src routing.Source) (client.Object, bool, error) {
	var (
		obj      client.Object
		recreate func() bool
	)
	switch src.Kind {
	case routing.KindImageAlternative:
		o := &v1alpha1.ImageAlternative{}
		obj, recreate = o, func() bool { return o.Spec.RecreateStuckPods && !o.Spec.DryRun }
	case routing.KindImageMirror:
		o := &v1alpha1.ImageMirror{}
		obj, recreate = o, func() bool { return o.Spec.RecreateStuckPods && !o.Spec.DryRun }
	default:
		return nil, false, nil
	}
	if err := w.cache.Get(ctx, types.NamespacedName{Name: src.Name}, obj); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, false, nil
		}
		return nil, false, fmt.Errorf("reading %s: %w", src, err)
	}
	return obj, recreate(), nil
}

// report emits the ImagePullMissedRouting events of a hit, once per (pod, container, candidate).
func (w *Watcher) report(pod *corev1.Pod, h *hit) {
	key := string(pod.UID) + "\x00" + h.container + "\x00" + h.candidate
	w.mu.Lock()
	_, done := w.emitted.Get(key)
	if !done {
		w.emitted.Add(key, struct{}{})
	}
	w.mu.Unlock()
	if done {
		return
	}
	metrics.MissedPulls.WithLabelValues(string(h.source.Kind), h.source.Name).Inc()
	if w.recorder == nil {
		return
	}
	extra := ""
	if h.recreate {
		extra = w.notRecreated(pod)
		if extra == "" {
			extra = fmt.Sprintf("recreateStuckPods: the pod is evicted for its controller to recreate it once failing for %s", w.stuckAge(pod, w.opts.Clock.Now()))
		}
		extra = "; " + extra
	}
	w.recorder.Event(pod, corev1.EventTypeWarning, v1alpha1.EventImagePullMissedRouting, clip(fmt.Sprintf(
		"container %q fails to pull %q, which %s routes to %q, available now (the pod was admitted without kuik's webhook)%s",
		h.container, h.image, h.source, h.candidate, extra)))
	w.recorder.Event(h.resource, corev1.EventTypeWarning, v1alpha1.EventImagePullMissedRouting, clip(fmt.Sprintf(
		"pod %s/%s: container %q fails to pull %q, which this resource routes to %q, available now (the pod was admitted without kuik's webhook)%s",
		pod.Namespace, pod.Name, h.container, h.image, h.candidate, extra)))
}

// notRecreated is why a stuck pod is not evicted although its resource has recreateStuckPods,
// "" when it may be (a Job's retries are read right before the eviction).
func (w *Watcher) notRecreated(pod *corev1.Pod) string {
	switch {
	case !w.opts.AllowDelete:
		return "recreateStuckPods is set but the secret-syncer may not evict pods (--recreate-stuck-pods=false)"
	case !Controlled(pod):
		return "recreateStuckPods is set but no controller owns the pod, so it is not evicted"
	case !w.ownerRecreates(pod):
		return fmt.Sprintf("recreateStuckPods is set but the pod's controller, a %s, is not one the secret-syncer counts on to recreate it (--recreate-stuck-pod-owners, --recreate-stuck-job-pods), so it is not evicted",
			OwnerKind(*ControllerOf(pod)))
	case !NeverRan(pod):
		return "recreateStuckPods is set but the pod is not Pending or one of its containers has run, so it is not evicted"
	}
	return ""
}

// ownerRecreates reports whether the pod's controller is one of the kinds whose pods are evicted.
func (w *Watcher) ownerRecreates(pod *corev1.Pod) bool {
	r := ControllerOf(pod)
	if r == nil {
		return false
	}
	gk := OwnerKind(*r)
	return w.owners[gk] || (w.opts.RecreateJobs && gk == JobKind)
}

// errChanged: the pod changed between the two reads; it is looked at again.
var errChanged = errors.New("the pod changed before it could be evicted")

// recreate evicts a stuck pod when no pod of its controller is being evicted and the rate limit
// allows, after reading and verifying it again (and its Job's retries).
func (w *Watcher) recreate(ctx context.Context, pod *corev1.Pod, failing map[string]string, hits []hit, h *hit, now time.Time) (time.Duration, error) {
	log := logr.FromContextOrDiscard(ctx)
	key := types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name}
	claimed, err := w.claim(ctx, pod)
	if err != nil {
		return 0, err
	}
	if !claimed {
		metrics.StuckPodsRecreated.WithLabelValues("in-flight").Inc()
		return min(w.opts.StuckPodAge, maxInFlightWait), nil
	}
	evicted := false
	defer func() {
		if !evicted {
			w.unclaim(controllerUID(pod), pod.UID)
		}
	}()
	if !w.limiter.AllowN(now, 1) {
		metrics.StuckPodsRecreated.WithLabelValues("rate-limited").Inc()
		// Its turn: one token interval per pod held back, itself included.
		held := w.hold(key)
		wait := time.Duration(min(float64(held)/w.opts.RecreateRate, maxHeldWait.Seconds()) * float64(time.Second))
		return max(wait, time.Second), nil
	}
	fresh, err := w.core.Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		w.forget(pod.UID)
		return 0, nil
	}
	if err != nil {
		metrics.StuckPodsRecreated.WithLabelValues(metrics.ResultError).Inc()
		return 0, fmt.Errorf("reading pod %s/%s again: %w", pod.Namespace, pod.Name, err)
	}
	want := map[string]string{}
	for _, x := range hits {
		want[x.container] = failing[x.container]
	}
	if fresh.UID != pod.UID || controllerUID(fresh) != controllerUID(pod) || w.notRecreated(fresh) != "" || Skipped(fresh, w.excluded) || !StillFailing(fresh, want) {
		return 0, nil // recovered, ran, replaced or changed: the next event starts over
	}
	if r := ControllerOf(fresh); OwnerKind(*r) == JobKind {
		job, err := w.jobs.Jobs(fresh.Namespace).Get(ctx, r.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return 0, nil // the garbage collector deletes its pods
		case err != nil:
			metrics.StuckPodsRecreated.WithLabelValues(metrics.ResultError).Inc()
			return 0, fmt.Errorf("reading the Job of pod %s/%s: %w", pod.Namespace, pod.Name, err)
		case job.UID != r.UID || !JobHasRetries(job):
			log.Info("not evicting a stuck pod: its Job has no retry left", "pod", key.String(), "job", r.Name)
			return 0, nil
		}
	}
	uid, rv := fresh.UID, fresh.ResourceVersion
	err = w.core.Pods(pod.Namespace).EvictV1(ctx, &policyv1.Eviction{
		// The label selects the eviction for the pod-deletes policy's check of the pod (the
		// Eviction is all an admission policy sees of it), which refuses one without it.
		ObjectMeta:    metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name, Labels: map[string]string{v1alpha1.LabelManagedBy: v1alpha1.ManagedBySecretSyncer}},
		DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid, ResourceVersion: &rv}},
	})
	switch {
	case apierrors.IsNotFound(err):
		w.forget(pod.UID)
		return 0, nil
	case apierrors.IsConflict(err):
		return 0, fmt.Errorf("evicting pod %s/%s: %w: %w", pod.Namespace, pod.Name, errChanged, err)
	case apierrors.IsTooManyRequests(err):
		// A PodDisruptionBudget allows no disruption now (the API server checks budgets for
		// pods that are not Pending, so only when the pod changed since it was read).
		metrics.StuckPodsRecreated.WithLabelValues("disruption-budget").Inc()
		return w.opts.StuckPodAge, nil
	case err != nil:
		metrics.StuckPodsRecreated.WithLabelValues(metrics.ResultError).Inc()
		return 0, fmt.Errorf("evicting pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	evicted = true
	metrics.StuckPodsRecreated.WithLabelValues("deleted").Inc()
	w.deleted(fresh, now)
	failingFor := now.Sub(w.sinceOr(pod.UID, now)).Round(time.Second)
	w.forget(pod.UID)
	log.Info("evicted a pod stuck pulling an image kuik routes, for its controller to recreate it",
		"pod", key.String(), "container", h.container, "image", h.image, "candidate", h.candidate, "by", h.source.String())
	if w.recorder != nil {
		w.recorder.Event(h.resource, corev1.EventTypeNormal, v1alpha1.EventStuckPodRecreated, clip(fmt.Sprintf(
			"evicted pod %s/%s (uid %s), failing to pull %q in container %q for %s although this resource routes it to %q: its controller recreates it through the webhook",
			pod.Namespace, pod.Name, pod.UID, h.image, h.container, failingFor, h.candidate)))
	}
	return 0, nil
}

// claim makes pod its controller's pod in flight, unless another one is and still exists: at
// most one pod of a controller is being evicted at a time.
func (w *Watcher) claim(ctx context.Context, pod *corev1.Pod) (bool, error) {
	controller := string(controllerUID(pod))
	for {
		w.mu.Lock()
		v, ok := w.inFlight.Get(controller)
		if !ok || v.(flight).uid == pod.UID {
			w.inFlight.Add(controller, flight{key: types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name}, uid: pod.UID})
			w.mu.Unlock()
			return true, nil
		}
		w.mu.Unlock()
		other := v.(flight)
		p, err := w.core.Pods(other.key.Namespace).Get(ctx, other.key.Name, metav1.GetOptions{})
		switch {
		case err != nil && !apierrors.IsNotFound(err):
			return false, fmt.Errorf("reading pod %s, evicted before its sibling %s/%s: %w", other.key, pod.Namespace, pod.Name, err)
		case err == nil && p.UID == other.uid:
			return false, nil // still there, terminating
		}
		w.unclaim(types.UID(controller), other.uid)
	}
}

// unclaim ends the flight of pod uid for its controller (a pod gone, or not evicted after all).
func (w *Watcher) unclaim(controller, uid types.UID) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if v, ok := w.inFlight.Get(string(controller)); ok && v.(flight).uid == uid {
		w.inFlight.Remove(string(controller))
	}
}

// firstSeen is when the pod was first seen failing with a routable image, now if never.
func (w *Watcher) firstSeen(uid types.UID, now time.Time) time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	if v, ok := w.since.Get(string(uid)); ok {
		return v.(time.Time)
	}
	w.since.Add(string(uid), now)
	return now
}

func (w *Watcher) sinceOr(uid types.UID, now time.Time) time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	if v, ok := w.since.Get(string(uid)); ok {
		return v.(time.Time)
	}
	return now
}

// stuckAge is how long the pod must have been failing before it is deleted: StuckPodAge,
// doubled for each generation of its controller's pods deleted before it was created.
func (w *Watcher) stuckAge(pod *corev1.Pod, now time.Time) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.opts.StuckPodAge << min(w.generationLocked(pod, now)-1, maxRepeats)
}

// generationLocked is 1 for a pod created before any delete of its controller's pods within
// repeatWindow, 1 more than the latest generation deleted before its creation otherwise. The
// creation time is the API server's, at the second: a delete counts from the start of its
// second.
func (w *Watcher) generationLocked(pod *corev1.Pod, now time.Time) int {
	v, ok := w.repeats.Get(string(controllerUID(pod)))
	if !ok {
		return 1
	}
	created := pod.CreationTimestamp.Time
	g := 1
	for i, at := range v.(generations) {
		if now.Sub(at) <= repeatWindow && !created.Before(at.Truncate(time.Second)) {
			g = i + 2
		}
	}
	return g
}

// deleted records the delete of a pod of its controller.
func (w *Watcher) deleted(pod *corev1.Pod, now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	uid := string(controllerUID(pod))
	g := w.generationLocked(pod, now)
	var gens generations
	if v, ok := w.repeats.Get(uid); ok {
		gens = v.(generations)
	}
	// Steps older than the window count no more: start over from this delete.
	if len(gens) > 0 && now.Sub(gens[len(gens)-1]) > repeatWindow {
		gens, g = nil, 1
	}
	if g > len(gens) && len(gens) <= maxRepeats {
		gens = append(slices.Clone(gens), now)
	}
	w.repeats.Add(uid, gens)
}

// hold records a pod the rate limit held back and returns how many are.
func (w *Watcher) hold(key types.NamespacedName) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.held[key] = struct{}{}
	return len(w.held)
}

// release drops a pod from the held ones: it is being looked at again.
func (w *Watcher) release(key types.NamespacedName) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.held, key)
}

func (w *Watcher) forget(uid types.UID) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.since.Remove(string(uid))
}

func clip(s string) string {
	if len(s) > maxNote {
		return s[:maxNote-3] + "..."
	}
	return s
}

// listPage is how many events one list request asks for. It bounds no memory (a page is read
// as a stream, one event at a time): it bounds how long the API server serves one request.
const listPage = 50

// listEvents lists the matching events page by page (a consistent snapshot: resourceVersion
// unset), observing each event as it is decoded, and returns an empty list at the snapshot's
// resourceVersion for the reflector to watch from: the reflector's own pager, or its
// watch-list temporary store, would hold every matching event of the cluster at once.
func (w *Watcher) listEvents(ctx context.Context, selector string) (*corev1.EventList, error) {
	o := metav1.ListOptions{FieldSelector: selector, Limit: listPage}
	rv := ""
	for {
		meta, err := w.listEventsPage(ctx, o)
		if err != nil {
			return nil, fmt.Errorf("listing events (%s): %w", selector, err)
		}
		if rv == "" {
			rv = meta.ResourceVersion
		}
		if meta.Continue == "" {
			return &corev1.EventList{ListMeta: metav1.ListMeta{ResourceVersion: rv}}, nil
		}
		o.Continue = meta.Continue
	}
}

// listEventsPage reads one page of events as a JSON stream, decoding and observing one event at
// a time, and returns the page's list metadata. core/v1 events have no size limit but the
// largest object the API server stores (etcd's --max-request-bytes, 1.5 MiB by default): a
// client that reads a page whole (client-go's List does) holds the page's bytes and then all its
// events decoded, up to the page size times that; this holds what it has read of one event and
// that event decoded.
func (w *Watcher) listEventsPage(ctx context.Context, o metav1.ListOptions) (metav1.ListMeta, error) {
	var meta metav1.ListMeta
	body, err := w.core.RESTClient().Get().Resource("events").
		VersionedParams(&o, scheme.ParameterCodec).
		SetHeader("Accept", runtime.ContentTypeJSON).
		Stream(ctx)
	if err != nil {
		return meta, err
	}
	defer func() { _ = body.Close() }()
	dec := json.NewDecoder(body)
	if err := delim(dec, '{'); err != nil {
		return meta, err
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return meta, fmt.Errorf("reading an event list: %w", err)
		}
		switch tok {
		case "metadata":
			if err := dec.Decode(&meta); err != nil {
				return meta, fmt.Errorf("reading an event list's metadata: %w", err)
			}
		case "items":
			if err := delim(dec, '['); err != nil {
				return meta, err
			}
			for dec.More() {
				ev := &corev1.Event{}
				if err := dec.Decode(ev); err != nil {
					return meta, fmt.Errorf("reading an event: %w", err)
				}
				w.observe(ev)
			}
			if err := delim(dec, ']'); err != nil {
				return meta, err
			}
		default: // kind, apiVersion
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return meta, fmt.Errorf("reading an event list: %w", err)
			}
		}
	}
	return meta, delim(dec, '}')
}

// delim reads the JSON delimiter want.
func delim(dec *json.Decoder, want json.Delim) error {
	tok, err := dec.Token()
	if err != nil {
		return fmt.Errorf("reading an event list: %w", err)
	}
	if tok != want {
		return fmt.Errorf("reading an event list: got %v, want %v", tok, want)
	}
	return nil
}

// pagedListWatch tells the reflector not to use watch-list (client-go's WatchListClient): its
// initial events would fill a temporary store of every matching event; listEvents pages.
type pagedListWatch struct{ *toolscache.ListWatch }

// IsWatchListSemanticsUnSupported implements client-go's watchlist opt-out.
func (pagedListWatch) IsWatchListSemanticsUnSupported() bool { return true }

// triggerStore is a reflector's store that keeps nothing: each object listed or watched is
// handed to fn, so the events cost no memory beyond the one being read.
type triggerStore struct{ fn func(any) }

func (s triggerStore) Add(obj any) error    { s.fn(obj); return nil }
func (s triggerStore) Update(obj any) error { s.fn(obj); return nil }
func (triggerStore) Delete(any) error       { return nil }
func (s triggerStore) Replace(list []any, _ string) error {
	for _, obj := range list {
		s.fn(obj)
	}
	return nil
}
func (triggerStore) Resync() error { return nil }
