// Package app parses the secret-syncer's command line. The command takes the function that
// runs the syncer as an argument, so that flags are tested without a server.
package app

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/client-go/tools/clientcmd"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/enix/kuik/internal/credentialprovider"
	"github.com/enix/kuik/internal/logflags"
	"github.com/enix/kuik/internal/metrics"
	"github.com/enix/kuik/internal/probe"
	"github.com/enix/kuik/internal/routing"
	"github.com/enix/kuik/internal/syncer"
)

// Options is what the command line configures.
type Options struct {
	syncer.Options
	// Kubeconfig is a kubeconfig path; empty uses $KUBECONFIG, ~/.kube/config, then the
	// in-cluster configuration.
	Kubeconfig string
	// Providers are the credential-provider flags, the kubelet's own.
	Providers ProviderFlags
	// Missed are the missed-pull controller's flags.
	Missed MissedPullFlags
}

// ProviderFlags are --image-credential-provider-config and --image-credential-provider-bin-dir,
// the kubelet's flags: a CredentialProviderConfig file (or directory) and the plugins' directory.
type ProviderFlags struct {
	Config, BinDir string
}

func (p *ProviderFlags) bind(f *pflag.FlagSet) {
	f.StringVar(&p.Config, "image-credential-provider-config", "",
		"the kubelet's CredentialProviderConfig (a file, or a directory of *.json, *.yaml, *.yml merged in name order) for the entries with auth.provider; empty leaves them out")
	f.StringVar(&p.BinDir, "image-credential-provider-bin-dir", "",
		"the directory holding the credential-provider plugins the configuration names")
}

func (p *ProviderFlags) validate() error {
	if (p.Config == "") != (p.BinDir == "") {
		return errors.New("--image-credential-provider-config and --image-credential-provider-bin-dir go together")
	}
	return nil
}

// Plugins loads and checks the configuration as the kubelet does at start (an invalid one is
// an error naming the provider and field, a missing binary too); nil without the flags.
func (p *ProviderFlags) Plugins() (*credentialprovider.Plugins, error) {
	if p.Config == "" {
		return nil, nil
	}
	cfg, err := credentialprovider.LoadConfig(p.Config)
	if err != nil {
		return nil, fmt.Errorf("--image-credential-provider-config: %w", err)
	}
	if err := cfg.CheckBinDir(p.BinDir); err != nil {
		return nil, fmt.Errorf("--image-credential-provider-bin-dir: %w", err)
	}
	return credentialprovider.NewPlugins(cfg, p.BinDir, credentialprovider.Options{Observe: metrics.ObservePluginRun}), nil
}

// RunFunc runs the syncer with parsed options until ctx ends.
type RunFunc func(ctx context.Context, opts Options) error

// DefaultClusterResourceNamespace is used when neither the flag nor $POD_NAMESPACE says.
const DefaultClusterResourceNamespace = "kuik-system"

// NewCommand is the secret-syncer command; run is called with the parsed options and a context
// carrying the logger the logging flags (-v, --zap-*) configure.
func NewCommand(run RunFunc) *cobra.Command {
	var opts Options
	var logs *logflags.Flags
	cmd := &cobra.Command{
		Use:   "secret-syncer",
		Short: "Keep the pull Secrets kuik injects into pods",
		Long: `secret-syncer writes, for each routing resource (ImageAlternative, ImageMirror) and each
namespace that needs it, the kubernetes.io/dockerconfigjson Secret kuik-inject-<kind>-<name>
holding the credentials of the entries the webhook rewrites pods to.`,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := opts.validate(); err != nil {
				return err
			}
			// Refuse to start on a bad configuration, before anything else.
			plugins, err := opts.Providers.Plugins()
			if err != nil {
				return err
			}
			opts.Plugins = plugins
			if opts.MissedPulls, err = opts.Missed.options(); err != nil {
				return err
			}
			logger, err := logs.Logger(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			return run(logr.NewContext(cmd.Context(), logger), opts)
		},
	}
	// On the subcommand too, as the webhook's (render does not log, but takes them).
	logs = logflags.Bind(cmd.PersistentFlags())
	f := cmd.Flags()
	f.StringVar(&opts.ClusterResourceNamespace, "cluster-resource-namespace", defaultNamespace(),
		"namespace holding the secretRef Secrets and the leader election Lease (default $POD_NAMESPACE, else kuik-system)")
	f.StringVar(&opts.ClusterID, "cluster-id", "",
		`the webhook's --cluster-id: a pod's record of a mirror counts only with this cluster's tag ("-kuik-<id>" suffix), and missed pulls are routed to those tags; empty: the images' own tags`)
	f.StringVar(&opts.Kubeconfig, "kubeconfig", "", "path to a kubeconfig; empty uses $KUBECONFIG, ~/.kube/config, then in-cluster")
	f.DurationVar(&opts.Retention, "retention", 15*time.Minute, "how long an OnFailure entry no live pod uses stays in its Secret")
	f.DurationVar(&opts.ResyncPeriod, "resync-period", 10*time.Minute, "how often every Secret is applied again, restoring those deleted or edited")
	f.DurationVar(&opts.Debounce, "debounce", 200*time.Millisecond, "window in which the events of one (resource, namespace) pair collapse into one apply")
	f.IntVar(&opts.Workers, "workers", 16, "concurrent applies")
	f.StringVar(&opts.MatchConditionsOf, "match-conditions-of", "",
		"MutatingWebhookConfiguration whose pod webhook's matchConditions the leader keeps in step with the routing resources, so that pods no resource may cover are admitted without a call; empty: off")
	f.DurationVar(&opts.MatchConditionsSettle, "match-conditions-settle", syncer.DefaultMatchConditionsSettle,
		"wait after writing the matchConditions before marking the resources they cover PodsSent (a webhook run with --match-conditions-gate routes with a resource only then): the time every API server takes to see the change")
	f.DurationVar(&opts.FallbackDelay, "fallback-delay", syncer.DefaultFallbackDelay,
		"window in which the pod changes of one routing resource collapse into one update of its live fallbacks (status.activeFallbacks): at most one status write per resource per window")
	f.DurationVar(&opts.Availability.Interval, "availability-check-interval", syncer.DefaultAvailabilityInterval,
		"how often the leader checks each repository ahead of live fallbacks (one anonymous manifest HEAD) and writes those giving no answer to status.unavailable, which every webhook replica reads as hints; 0: off")
	f.Float64Var(&opts.Availability.PerSecond, "availability-checks-per-second", syncer.DefaultAvailabilityPerSecond,
		"bound on the availability checks sent, every registry together (one at a time per registry host)")
	f.DurationVar(&opts.Availability.Timeout, "availability-check-timeout", probe.DefaultTimeout,
		"how long a check waits for an answer; none within it is a Timeout")
	// --metrics-bind-address, --health-probe-bind-address and --leader-elect*: internal/ctrlkit.
	opts.BindFlags(f, syncer.DefaultLeaderElectionID)
	opts.Providers.bind(f)
	opts.Missed.bind(f)
	f.DurationVar(&opts.ProviderRenewFloor, "provider-renew-floor", time.Minute,
		"least time between two plugin runs for one image; a credential the plugin asks not to cache is kept twice that")
	f.DurationVar(&opts.ProviderRetry, "provider-retry", 30*time.Second, "wait after a plugin failure, doubling up to 8 times that")
	cmd.AddCommand(newRenderCommand())
	return cmd
}

// validateClusterID checks --cluster-id; empty is none.
func validateClusterID(id string) error {
	if id == "" {
		return nil
	}
	if err := routing.ValidateClusterID(id); err != nil {
		return fmt.Errorf("--cluster-id: %w", err)
	}
	return nil
}

func defaultNamespace() string {
	if ns := os.Getenv("POD_NAMESPACE"); ns != "" {
		return ns
	}
	return DefaultClusterResourceNamespace
}

func (o *Options) validate() error {
	var errs []error
	if o.ClusterResourceNamespace == "" {
		errs = append(errs, errors.New("--cluster-resource-namespace must not be empty"))
	}
	if err := validateClusterID(o.ClusterID); err != nil {
		errs = append(errs, err)
	}
	if o.Retention < 0 {
		errs = append(errs, fmt.Errorf("--retention must not be negative, got %s", o.Retention))
	}
	if o.ResyncPeriod <= 0 {
		errs = append(errs, fmt.Errorf("--resync-period must be positive, got %s", o.ResyncPeriod))
	}
	if o.Debounce < 0 {
		errs = append(errs, fmt.Errorf("--debounce must not be negative, got %s", o.Debounce))
	}
	if o.MatchConditionsSettle < 0 {
		errs = append(errs, fmt.Errorf("--match-conditions-settle must not be negative, got %s", o.MatchConditionsSettle))
	}
	if o.FallbackDelay <= 0 {
		errs = append(errs, fmt.Errorf("--fallback-delay must be positive, got %s", o.FallbackDelay))
	}
	if o.Availability.Interval < 0 {
		errs = append(errs, fmt.Errorf("--availability-check-interval must not be negative, got %s", o.Availability.Interval))
	}
	if o.Availability.PerSecond <= 0 {
		errs = append(errs, fmt.Errorf("--availability-checks-per-second must be positive, got %v", o.Availability.PerSecond))
	}
	if o.Availability.Timeout <= 0 {
		errs = append(errs, fmt.Errorf("--availability-check-timeout must be positive, got %s", o.Availability.Timeout))
	}
	if o.Workers < 1 {
		errs = append(errs, fmt.Errorf("--workers must be at least 1, got %d", o.Workers))
	}
	if err := o.ValidateFlags(); err != nil {
		errs = append(errs, err)
	}
	if o.ProviderRenewFloor <= 0 {
		errs = append(errs, fmt.Errorf("--provider-renew-floor must be positive, got %s", o.ProviderRenewFloor))
	}
	if o.ProviderRetry <= 0 {
		errs = append(errs, fmt.Errorf("--provider-retry must be positive, got %s", o.ProviderRetry))
	}
	if err := o.Providers.validate(); err != nil {
		errs = append(errs, err)
	}
	if err := o.Missed.validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Run is the real RunFunc: it installs the context's logger as the process's (logflags.Install),
// registers the metrics, loads the client configuration and runs the syncer.
func Run(ctx context.Context, opts Options) error {
	logflags.Install(logr.FromContextOrDiscard(ctx))
	if err := metrics.RegisterSyncer(ctrlmetrics.Registry); err != nil {
		return err
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = opts.Kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return fmt.Errorf("loading client configuration: %w", err)
	}
	return syncer.Run(ctx, cfg, opts.Options)
}
