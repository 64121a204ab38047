// Package app parses the keeper's command line. The command takes the function that runs the
// keeper as an argument, so that flags are tested without a server.
package app

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/tools/clientcmd"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/enix/kuik/internal/keeper"
	"github.com/enix/kuik/internal/logflags"
	"github.com/enix/kuik/internal/metrics"
	"github.com/enix/kuik/internal/routing"
)

// Options is what the command line configures.
type Options struct {
	keeper.Options
	// Kubeconfig is a kubeconfig path; empty uses $KUBECONFIG, ~/.kube/config, then the
	// in-cluster configuration.
	Kubeconfig string
}

// RunFunc runs the keeper with parsed options until ctx ends.
type RunFunc func(ctx context.Context, opts Options) error

// DefaultNamespace is used when neither the flag nor $POD_NAMESPACE says.
const DefaultNamespace = "kuik-system"

// Defaults of the pacer's flags: transfer.NewPacer's own.
const (
	DefaultPacerRate    = 10
	DefaultPacerBurst   = 20
	DefaultPacerReserve = 0.5
)

// NewCommand is the keeper command; run is called with the parsed options and a context
// carrying the logger the logging flags (-v, --zap-*) configure.
func NewCommand(run RunFunc) *cobra.Command {
	var opts Options
	var logs *logflags.Flags
	maxSize := sizeValue{v: &opts.MaxImageSize}
	cmd := &cobra.Command{
		Use:   "keeper",
		Short: "Keep the images pods run in the keep-enabled ImageMirrors",
		Long: `keeper copies the origin image of every container of every live pod that a keep-enabled
ImageMirror (spec.keep) selects into that mirror, verbatim (same digest) and paced per source
registry, checks the kept tags every minute, and deletes the tags it wrote once they have been
unused for the mirror's retention.`,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := opts.validate(); err != nil {
				return err
			}
			logger, err := logs.Logger(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			return run(logr.NewContext(cmd.Context(), logger), opts)
		},
	}
	logs = logflags.Bind(cmd.PersistentFlags())
	f := cmd.Flags()
	f.StringVar(&opts.Namespace, "namespace", defaultNamespace(),
		"release namespace: the push and source Secrets, the inventory ConfigMaps and the leader election Lease (default $POD_NAMESPACE, else kuik-system)")
	f.StringVar(&opts.ClusterID, "cluster-id", "", "this cluster's suffix of every kept tag, for mirrors shared by several clusters; empty: none")
	f.StringVar(&opts.Kubeconfig, "kubeconfig", "", "path to a kubeconfig; empty uses $KUBECONFIG, ~/.kube/config, then in-cluster")
	f.DurationVar(&opts.PlanInterval, "plan-interval", keeper.DefaultPlanInterval, "how often the desired images are recomputed (events trigger a pass too, at most once per interval)")
	f.DurationVar(&opts.SelfHealInterval, "self-heal-interval", keeper.DefaultSelfHealInterval, "how often every kept tag is checked by one HEAD (unpaced)")
	f.DurationVar(&opts.SweepInterval, "sweep-interval", keeper.DefaultSweepInterval, "how often garbage collection runs")
	f.DurationVar(&opts.StatusInterval, "status-interval", keeper.DefaultStatusInterval, "least time between two status writes of one ImageMirror")
	f.IntVar(&opts.Workers, "workers", keeper.DefaultWorkers, "copies running at once, all registries together")
	f.DurationVar(&opts.StallTimeout, "stall-timeout", keeper.DefaultStallTimeout, "abandon a blob transfer that moved no byte for this long")
	f.Var(&maxSize, "max-image-size", "refuse an image whose missing blobs sum to more (TooLarge): a quantity (20Gi) or bytes; 0: no limit")
	f.Float64Var(&opts.Pacer.Rate, "pacer-rate", DefaultPacerRate, "manifest GETs per second per source registry")
	f.IntVar(&opts.Pacer.Burst, "pacer-burst", DefaultPacerBurst, "manifest GETs a source registry's bucket holds")
	f.Float64Var(&opts.Pacer.Reserve, "pacer-reserve", DefaultPacerReserve, "fraction of an announced ratelimit-limit left unspent, in (0, 1)")
	// --metrics-bind-address, --health-probe-bind-address and --leader-elect*: internal/ctrlkit.
	opts.BindFlags(f, keeper.DefaultLeaderElectionID)
	return cmd
}

func defaultNamespace() string {
	if ns := os.Getenv("POD_NAMESPACE"); ns != "" {
		return ns
	}
	return DefaultNamespace
}

// validate names the flag of every option that is wrong (keeper.Run checks Options.Validate
// again).
func (o *Options) validate() error {
	var errs []error
	if o.Namespace == "" {
		errs = append(errs, errors.New("--namespace must not be empty"))
	}
	if o.ClusterID != "" {
		if err := routing.ValidateClusterID(o.ClusterID); err != nil {
			errs = append(errs, fmt.Errorf("--cluster-id: %w", err))
		}
	}
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{
		{"--plan-interval", o.PlanInterval}, {"--self-heal-interval", o.SelfHealInterval}, {"--sweep-interval", o.SweepInterval},
		{"--status-interval", o.StatusInterval}, {"--stall-timeout", o.StallTimeout},
	} {
		if d.v <= 0 {
			errs = append(errs, fmt.Errorf("%s must be positive, got %s", d.flag, d.v))
		}
	}
	if o.Workers < 1 {
		errs = append(errs, fmt.Errorf("--workers must be at least 1, got %d", o.Workers))
	}
	if o.MaxImageSize < 0 {
		errs = append(errs, fmt.Errorf("--max-image-size must not be negative, got %d", o.MaxImageSize))
	}
	if o.Pacer.Rate <= 0 {
		errs = append(errs, fmt.Errorf("--pacer-rate must be positive, got %g", o.Pacer.Rate))
	}
	if o.Pacer.Burst < 1 {
		errs = append(errs, fmt.Errorf("--pacer-burst must be at least 1, got %d", o.Pacer.Burst))
	}
	// The pacer reads a zero reserve as its default: 0 is refused rather than silently 0.5.
	if o.Pacer.Reserve <= 0 || o.Pacer.Reserve >= 1 {
		errs = append(errs, fmt.Errorf("--pacer-reserve must be in (0, 1), got %g", o.Pacer.Reserve))
	}
	if err := o.ValidateFlags(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// sizeValue is a byte count given as a quantity (20Gi, 500M) or a plain number of bytes.
type sizeValue struct{ v *int64 }

func (s *sizeValue) String() string {
	if s.v == nil {
		return "0"
	}
	return strconv.FormatInt(*s.v, 10)
}

func (s *sizeValue) Set(v string) error {
	q, err := resource.ParseQuantity(v)
	if err != nil {
		return fmt.Errorf("a quantity (20Gi) or bytes: %w", err)
	}
	n := q.Value() // rounded up
	if resource.NewQuantity(n, q.Format).Cmp(q) != 0 {
		return fmt.Errorf("%s is not a whole number of bytes", v)
	}
	*s.v = n
	return nil
}

func (s *sizeValue) Type() string { return "quantity" }

// Run is the real RunFunc: it installs the context's logger as the process's (logflags.Install),
// registers the metrics, loads the client configuration and runs the keeper.
func Run(ctx context.Context, opts Options) error {
	logflags.Install(logr.FromContextOrDiscard(ctx))
	if err := metrics.RegisterKeeper(ctrlmetrics.Registry); err != nil {
		return err
	}
	if err := metrics.RegisterRuntime(ctrlmetrics.Registry); err != nil {
		return err
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = opts.Kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return fmt.Errorf("loading client configuration: %w", err)
	}
	return keeper.Run(ctx, cfg, opts.Options)
}
