package missedpulls

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
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
	"github.com/enix/kuik/internal/probe"
	"github.com/enix/kuik/internal/route"
	"github.com/enix/kuik/internal/routing"
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
	// ClusterID is the webhook's --cluster-id (valid or empty): the decision routes to this
	// cluster's mirror tags (routing.Index.WithClusterID), as the webhook does.
	ClusterID string
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
	opts   Options
	cache  cache.Cache
	core   corev1client.CoreV1Interface
	jobs   batchv1client.BatchV1Interface
	owners map[schema.GroupKind]bool
	// evictable is the owners' kinds as Evictable takes them: RecreateOwners, plus Jobs with
	// RecreateJobs.
	evictable []schema.GroupKind
	recorder  record.EventRecorder
	chooser   *route.ProbeChooser
	prober    *probe.Prober
	limiter   *rate.Limiter
	excluded  map[string]bool
	queue     workqueue.TypedRateLimitingInterface[types.NamespacedName]

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
	w.evictable = slices.Clone(opts.RecreateOwners)
	if opts.RecreateJobs {
		w.evictable = append(w.evictable, JobKind)
	}
	for _, ns := range opts.ExcludedNamespaces {
		w.excluded[ns] = true
	}
	w.dirty.Store(true)
	w.prober = probe.New(probe.Options{Timeout: opts.ProbeTimeout, TTL: opts.ProbeTTL, Transport: opts.ProbeTransport})
	w.chooser = &route.ProbeChooser{
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
