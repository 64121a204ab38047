package webhook

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/enix/kuik/internal/credentialprovider"
	"github.com/enix/kuik/internal/metrics"
	"github.com/enix/kuik/internal/probe"
	"github.com/enix/kuik/internal/route"
	"github.com/enix/kuik/internal/routing"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// Paths the handlers are served at; the chart's webhook configurations use them.
const (
	MutatePodsPath      = "/mutate-pods"
	ValidateRoutingPath = "/validate-routing"
)

// Config is everything the webhook server needs.
type Config struct {
	RestConfig               *rest.Config
	ClusterResourceNamespace string
	ProbeTimeout, CacheTTL   time.Duration
	// MaxProbesInFlight bounds the probes running at once (default probe.DefaultMaxInFlight);
	// MaxConnsPerRegistry the connections to one registry (default probe.DefaultMaxConnsPerHost).
	MaxProbesInFlight, MaxConnsPerRegistry int
	CertDir                                string
	Host                                   string
	Port                                   int
	MetricsBindAddress                     string
	HealthProbeBindAddress                 string
	// PprofBindAddress serves net/http/pprof; "" or "0" turns it off.
	PprofBindAddress string
	// CredentialProviders is the nodes' credential-provider configuration (the file the
	// kubelet's --image-credential-provider-config names), nil for none: an original image its
	// providers match is pulled by the node with credentials of its own (route.ProbeChooser). The
	// webhook never runs the plugins.
	CredentialProviders *credentialprovider.Config
	// ClusterID, when set (valid, routing.ValidateClusterID), gives mirror candidates this
	// cluster's tags: the index is routing.Index.WithClusterID.
	ClusterID string
	// ProbeRefreshIdle, when positive, runs the prober's refresher: a result an admission read
	// within it is probed again before it lapses (probe.Prober.RunRefresher). Zero: off.
	ProbeRefreshIdle time.Duration
	// ProbeRefreshesPerSecond and ProbeRefreshesPerRegistry bound the refresh probes (0: the
	// probe package's defaults).
	ProbeRefreshesPerSecond   float64
	ProbeRefreshesPerRegistry int
	// HintedWait, when positive, is how long a candidate whose registry host a probe found
	// Unreachable within HintMaxAge is waited for before the next one (probe.HintOptions).
	// Zero: off.
	HintedWait time.Duration
	HintMaxAge time.Duration
	// MatchConditionsGate routes with a routing resource's generation only once the
	// secret-syncer's leader marked it PodsSent (--match-conditions-gate).
	MatchConditionsGate bool
	// ProbeTransport overrides the registry HTTP transport (tests).
	ProbeTransport http.RoundTripper
}

// Scheme holds the types the webhook reads.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilRuntimeMust(clientgoscheme.AddToScheme(s))
	utilRuntimeMust(v1alpha1.AddToScheme(s))
	return s
}

func utilRuntimeMust(err error) {
	if err != nil {
		panic(err)
	}
}

// Run serves the webhooks until ctx ends. Readiness turns true only once the informers have
// synced and the routing index is built.
func Run(ctx context.Context, cfg Config) error {
	logger := log.FromContext(ctx)
	mgr, err := ctrl.NewManager(cfg.RestConfig, ctrl.Options{
		Scheme: Scheme(),
		Cache: cache.Options{
			// Secrets only in the cluster resource namespace: never a cluster-wide Secret watch.
			ByObject: map[client.Object]cache.ByObject{
				&corev1.Secret{}: {Namespaces: map[string]cache.Config{cfg.ClusterResourceNamespace: {}}},
			},
		},
		Metrics:                metricsserver.Options{BindAddress: cfg.MetricsBindAddress},
		HealthProbeBindAddress: cfg.HealthProbeBindAddress,
		PprofBindAddress:       cfg.PprofBindAddress,
		WebhookServer:          webhook.NewServer(webhook.Options{Host: cfg.Host, Port: cfg.Port, CertDir: cfg.CertDir}),
		Logger:                 logger,
		// Runnables (the index builder) log through their context: without this they would get
		// a bare one.
		BaseContext: func() context.Context { return log.IntoContext(context.Background(), logger) },
	})
	if err != nil {
		return fmt.Errorf("creating manager: %w", err)
	}
	cs, err := kubernetes.NewForConfig(cfg.RestConfig)
	if err != nil {
		return fmt.Errorf("creating clientset: %w", err)
	}

	var index atomic.Pointer[routing.Index]
	rebuild := make(chan struct{}, 1)
	trigger := toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { poke(rebuild) },
		UpdateFunc: func(any, any) { poke(rebuild) },
		DeleteFunc: func(any) { poke(rebuild) },
	}
	for _, obj := range []client.Object{&v1alpha1.ImageAlternative{}, &v1alpha1.ImageMirror{}} {
		inf, err := mgr.GetCache().GetInformer(ctx, obj)
		if err != nil {
			return fmt.Errorf("informer for %T: %w", obj, err)
		}
		if _, err := inf.AddEventHandler(trigger); err != nil {
			return fmt.Errorf("watching %T: %w", obj, err)
		}
	}
	// Namespaces are read as metadata only, Secrets through the namespaced cache.
	nsMeta := &metav1.PartialObjectMetadata{}
	nsMeta.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Namespace"))
	if _, err := mgr.GetCache().GetInformer(ctx, nsMeta); err != nil {
		return fmt.Errorf("namespace informer: %w", err)
	}
	if _, err := mgr.GetCache().GetInformer(ctx, &corev1.Secret{}); err != nil {
		return fmt.Errorf("secret informer: %w", err)
	}

	prober := probe.New(probe.Options{
		Timeout:         cfg.ProbeTimeout,
		TTL:             cfg.CacheTTL,
		MaxInFlight:     cfg.MaxProbesInFlight,
		MaxConnsPerHost: cfg.MaxConnsPerRegistry,
		Transport:       cfg.ProbeTransport,
		Observe: func(registry string, r probe.Result, took time.Duration) {
			metrics.Probes.WithLabelValues(registry, string(r)).Inc()
			metrics.ProbeDuration.WithLabelValues(registry).Observe(took.Seconds())
		},
		Skip: func(reason string) { metrics.ProbesSkipped.WithLabelValues(reason).Inc() },
		Refresh: probe.RefreshOptions{
			Idle: cfg.ProbeRefreshIdle, PerSecond: cfg.ProbeRefreshesPerSecond, PerRegistry: cfg.ProbeRefreshesPerRegistry,
			Refreshed: func(registry string) { metrics.ProbeRefreshes.WithLabelValues(registry).Inc() },
		},
		Hints: probe.HintOptions{
			Wait: cfg.HintedWait, MaxAge: cfg.HintMaxAge,
			PassedOver: func(registry string) { metrics.HintedPassOvers.WithLabelValues(registry).Inc() },
		},
	})
	if cfg.ProbeRefreshIdle > 0 {
		if err := mgr.Add(runnable(prober.RunRefresher)); err != nil {
			return fmt.Errorf("adding the probe refresher: %w", err)
		}
	}
	metrics.ProbesInFlight.Set(prober.InFlight)
	reader := mgr.GetCache()
	chooser := &route.ProbeChooser{
		Prober:        prober,
		NodeProviders: cfg.CredentialProviders,
		Secrets: func(ctx context.Context, name string) (*corev1.Secret, error) {
			s := &corev1.Secret{}
			err := reader.Get(ctx, types.NamespacedName{Namespace: cfg.ClusterResourceNamespace, Name: name}, s)
			return s, err
		},
	}
	srv := mgr.GetWebhookServer()
	srv.Register(MutatePodsPath, podAdmission(cfg.ProbeTimeout, &PodMutator{
		Index:      &index,
		Namespaces: NamespaceLabelsFrom(reader, cs),
		Choose:     chooser.Choose,
	}))
	srv.Register(ValidateRoutingPath, routingAdmission(&RoutingValidator{
		ClusterResourceNamespace: cfg.ClusterResourceNamespace,
		Review: func(ctx context.Context, sar *authorizationv1.SubjectAccessReview) (*authorizationv1.SubjectAccessReview, error) {
			return cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
		},
	}))

	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return fmt.Errorf("adding health check: %w", err)
	}
	if err := mgr.AddReadyzCheck("routing-index", func(*http.Request) error {
		if index.Load() == nil {
			return errors.New("routing index not built yet")
		}
		return nil
	}); err != nil {
		return fmt.Errorf("adding readiness check: %w", err)
	}
	if err := mgr.AddReadyzCheck("webhook-server", srv.StartedChecker()); err != nil {
		return fmt.Errorf("adding readiness check: %w", err)
	}

	if err := mgr.Add(runnable(func(ctx context.Context) error {
		if !mgr.GetCache().WaitForCacheSync(ctx) {
			return errors.New("informers did not sync")
		}
		var g *gate
		if cfg.MatchConditionsGate {
			g = newGate()
		}
		build := func() {
			ix, err := buildIndex(ctx, reader, cfg.ClusterID, g, prober.SetSharedHints)
			if err != nil {
				log.FromContext(ctx).Error(err, "Rebuilding routing index")
				return
			}
			index.Store(ix)
			metrics.RoutingResources.Set(float64(ix.Len()))
		}
		build()
		sweep := time.NewTicker(time.Minute)
		defer sweep.Stop()
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-rebuild:
				build()
			case <-sweep.C:
				prober.Sweep()
			}
		}
	})); err != nil {
		return fmt.Errorf("adding index builder: %w", err)
	}
	return mgr.Start(ctx)
}

// podAdmission is the HTTP handler served at MutatePodsPath: m within the admission budget of
// probeTimeout (the fuzz target serves the same), logging through requestLogger, the reviews
// the API server writes read by reviewHandler.
func podAdmission(probeTimeout time.Duration, m *PodMutator) http.Handler {
	h := withTimeout(AdmissionBudget(probeTimeout), m)
	return &reviewHandler{handler: h, slow: &webhook.Admission{Handler: h, LogConstructor: requestLogger}}
}

// routingAdmission is the HTTP handler served at ValidateRoutingPath.
func routingAdmission(v *RoutingValidator) *webhook.Admission {
	return &webhook.Admission{Handler: v, LogConstructor: requestLogger}
}

// AdmissionMargin is what an admission may take beyond one probe timeout (decoding, routing,
// the patch). The rule, written once: budget = probe timeout + AdmissionMargin, and the chart's
// webhook timeoutSeconds = probe timeout + 1 s, so the webhook answers before the API server
// gives up on it.
const AdmissionMargin = 500 * time.Millisecond

// AdmissionBudget bounds one pod admission.
func AdmissionBudget(probeTimeout time.Duration) time.Duration { return probeTimeout + AdmissionMargin }

// NamespaceLabelsFrom reads a namespace's labels from the informer cache, or from the API server
// when the cache does not hold it yet: a namespace created a moment before its pods (a GitOps
// apply of a Namespace and a Deployment) must not leave them unrouted. The chart grants the
// webhook `get` on namespaces for exactly this.
func NamespaceLabelsFrom(cached client.Reader, cs kubernetes.Interface) NamespaceLabels {
	return func(ctx context.Context, name string) (labels.Set, error) {
		m := &metav1.PartialObjectMetadata{}
		m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Namespace"))
		if err := cached.Get(ctx, types.NamespacedName{Name: name}, m); err == nil {
			return m.Labels, nil
		}
		ns, err := cs.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		return ns.Labels, nil
	}
}

// buildIndex compiles every routing resource in the cache, with mirror tags of clusterID,
// through g when it is not nil; invalid ones (admitted before the validating webhook existed)
// are left out and logged. It gives hints the resources' status.unavailable, every
// resource's, marked or not: a hint routes nothing.
func buildIndex(ctx context.Context, r client.Reader, clusterID string, g *gate, hints func(map[string]time.Time)) (*routing.Index, error) {
	var ias v1alpha1.ImageAlternativeList
	if err := r.List(ctx, &ias); err != nil {
		return nil, fmt.Errorf("listing ImageAlternatives: %w", err)
	}
	var ims v1alpha1.ImageMirrorList
	if err := r.List(ctx, &ims); err != nil {
		return nil, fmt.Errorf("listing ImageMirrors: %w", err)
	}
	alts, mirrors := ias.Items, ims.Items
	hints(SharedHints(alts, mirrors))
	if g != nil {
		var waiting int
		alts, mirrors, waiting = g.filter(alts, mirrors)
		metrics.RoutingResourcesWaiting.Set(float64(waiting))
	}
	ix, errs := routing.NewIndex(alts, mirrors)
	for _, err := range errs {
		log.FromContext(ctx).Error(err, "Routing resource left out of the index")
	}
	if clusterID != "" {
		ix = ix.WithClusterID(clusterID)
	}
	return ix, nil
}

func poke(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

type runnable func(context.Context) error

func (r runnable) Start(ctx context.Context) error { return r(ctx) }

// SharedHints are the routing resources' status.unavailable as the prober takes them: for
// each repository, the latest checkedAt any of them gives.
func SharedHints(alts []v1alpha1.ImageAlternative, mirrors []v1alpha1.ImageMirror) map[string]time.Time {
	hints := route.Hints(alts, mirrors)
	if len(hints) == 0 {
		return nil
	}
	out := make(map[string]time.Time, len(hints))
	for repo, u := range hints {
		out[repo] = u.CheckedAt.Time
	}
	return out
}
