// Package app parses the webhook's command line. The command takes its run functions as
// arguments so that flags are tested without starting a server. Both get the logger the
// logging flags (-v, --zap-*) describe in their context.
package app

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/enix/kuik/internal/credentialprovider"
	"github.com/enix/kuik/internal/logflags"
	"github.com/enix/kuik/internal/probe"
	"github.com/enix/kuik/internal/routing"
)

// Options are the webhook server's settings.
type Options struct {
	Kubeconfig               string
	ClusterResourceNamespace string
	ProbeTimeout             time.Duration
	CacheTTL                 time.Duration
	MaxProbesInFlight        int
	MaxConnsPerRegistry      int
	CertDir                  string
	Host                     string
	Port                     int
	MetricsBindAddress       string
	HealthProbeBindAddress   string
	// PprofBindAddress serves Go's profiles (net/http/pprof); empty turns it off.
	PprofBindAddress string
	// ImageCredentialProviderConfig is the nodes' CredentialProviderConfig file or directory
	// (the kubelet's --image-credential-provider-config), empty for none; CredentialProviders
	// is what the command loaded from it before calling the run function.
	ImageCredentialProviderConfig string
	CredentialProviders           *credentialprovider.Config
	// ClusterID, when set, gives mirror candidates this cluster's tags (routing.ClusterTag).
	ClusterID string
	// MatchConditionsGate routes with a resource's generation only once it is PodsSent.
	MatchConditionsGate bool
	// ProbeRefreshIdle, ProbeRefreshesPerSecond, ProbeRefreshesPerRegistry: the refresher.
	ProbeRefreshIdle          time.Duration
	ProbeRefreshesPerSecond   float64
	ProbeRefreshesPerRegistry int
	// HintedWait and HintMaxAge: the wait on a candidate whose host was Unreachable lately.
	HintedWait time.Duration
	HintMaxAge time.Duration
}

// CandidatesOptions are the settings of `webhook candidates`.
type CandidatesOptions struct {
	Resources       []string
	NamespaceLabels labels.Set
	PodLabels       labels.Set
	Image           string
	// ClusterID, when set, gives mirror candidates this cluster's tags, as the server's flag.
	ClusterID string
}

// RunFunc serves; CandidatesFunc prints candidates. Their context carries the logger
// (logr.FromContext), which they install as the process's (logflags.Install).
type (
	RunFunc        func(ctx context.Context, o Options) error
	CandidatesFunc func(ctx context.Context, o CandidatesOptions) error
)

// UsageError makes main exit with status 2.
type UsageError struct{ Err error }

func (e UsageError) Error() string { return e.Err.Error() }
func (e UsageError) Unwrap() error { return e.Err }

// DefaultNamespace is the cluster resource namespace when neither the flag nor POD_NAMESPACE
// says otherwise.
const DefaultNamespace = "kuik-system"

// NewCommand builds `webhook` and its `candidates` subcommand.
func NewCommand(run RunFunc, candidates CandidatesFunc) *cobra.Command {
	o := Options{}
	var logs *logflags.Flags
	cmd := &cobra.Command{
		Use:   "webhook",
		Short: "kuik's admission webhook: routes pod images to the first available candidate",
		Long: `webhook serves kuik's mutating admission webhook for Pods, which rewrites each container
image to the first available candidate among the original and the alternatives and mirrors
declared by ImageAlternative and ImageMirror resources, and the validating webhook for those
resources.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.ProbeTimeout <= 0 {
				return UsageError{errors.New("--probe-timeout must be positive")}
			}
			if o.CacheTTL < 0 {
				return UsageError{errors.New("--cache-ttl must not be negative")}
			}
			if o.MaxProbesInFlight <= 0 {
				return UsageError{errors.New("--max-probes-in-flight must be positive")}
			}
			if o.ProbeRefreshIdle < 0 {
				return UsageError{errors.New("--probe-refresh-idle must not be negative")}
			}
			if o.ProbeRefreshesPerSecond <= 0 {
				return UsageError{errors.New("--probe-refreshes-per-second must be positive")}
			}
			if o.ProbeRefreshesPerRegistry <= 0 {
				return UsageError{errors.New("--probe-refreshes-per-registry must be positive")}
			}
			if o.HintedWait < 0 || o.HintedWait >= o.ProbeTimeout {
				return UsageError{errors.New("--hinted-wait must be at least 0 and shorter than --probe-timeout")}
			}
			if o.HintMaxAge <= 0 {
				return UsageError{errors.New("--hint-max-age must be positive")}
			}
			if o.MaxConnsPerRegistry <= 0 {
				return UsageError{errors.New("--max-conns-per-registry must be positive")}
			}
			if o.ClusterResourceNamespace == "" {
				return UsageError{errors.New("--cluster-resource-namespace must not be empty")}
			}
			if err := validateClusterID(o.ClusterID); err != nil {
				return err
			}
			// Refuse to start on a configuration the kubelet would refuse.
			if o.ImageCredentialProviderConfig != "" {
				cfg, err := credentialprovider.LoadConfig(o.ImageCredentialProviderConfig)
				if err != nil {
					return fmt.Errorf("--image-credential-provider-config: %w", err)
				}
				o.CredentialProviders = cfg
			}
			ctx, err := withLogger(cmd, logs)
			if err != nil {
				return err
			}
			return run(ctx, o)
		},
	}
	// The logging flags are the subcommand's too.
	logs = logflags.Bind(cmd.PersistentFlags())
	f := cmd.Flags()
	f.StringVar(&o.Kubeconfig, "kubeconfig", "", "Path to a kubeconfig; in-cluster configuration when empty.")
	f.StringVar(&o.ClusterResourceNamespace, "cluster-resource-namespace", envOr("POD_NAMESPACE", DefaultNamespace), "Namespace holding the Secrets that routing resources reference (default: $POD_NAMESPACE, else kuik-system).")
	f.DurationVar(&o.ProbeTimeout, "probe-timeout", probe.DefaultTimeout, "Timeout of one registry probe; the worst case of an admission, whatever its number of containers.")
	f.DurationVar(&o.CacheTTL, "cache-ttl", probe.DefaultTTL, "How long a probe result is reused.")
	f.IntVar(&o.MaxProbesInFlight, "max-probes-in-flight", probe.DefaultMaxInFlight, "Most registry probes running at once; a probe beyond it is not sent, and its container is left as it is. Dry-run probes have a bound of their own of the same size.")
	f.DurationVar(&o.ProbeRefreshIdle, "probe-refresh-idle", probe.DefaultRefreshIdle, "A probe result an admission read within this is probed again in the background before it lapses, so admissions almost never wait on a registry, even one that hangs; 0 turns it off.")
	f.Float64Var(&o.ProbeRefreshesPerSecond, "probe-refreshes-per-second", probe.DefaultRefreshesPerSecond, "Most background refresh probes started a second, all registries together.")
	f.IntVar(&o.ProbeRefreshesPerRegistry, "probe-refreshes-per-registry", probe.DefaultRefreshesPerRegistry, "Most background refresh probes in flight to one registry host; they never take room from the probes admissions wait on.")
	f.DurationVar(&o.HintedWait, "hinted-wait", probe.DefaultHintedWait, "A candidate whose registry host a probe found Unreachable within --hint-max-age (no HTTP answer: a timeout, a refused connection, a TLS error; any status is an answer) is still probed, but waited for at most this before the next candidate in order is taken; a candidate that answers within it is chosen as before. 0 turns it off.")
	f.DurationVar(&o.HintMaxAge, "hint-max-age", probe.DefaultHintMaxAge, "How long a registry host found Unreachable stays hinted, unless it answers before.")
	f.IntVar(&o.MaxConnsPerRegistry, "max-conns-per-registry", probe.DefaultMaxConnsPerHost, "Most connections to one registry (per scheme).")
	f.StringVar(&o.CertDir, "cert-dir", "/tmp/k8s-webhook-server/serving-certs", "Directory holding tls.crt and tls.key for the webhook server.")
	f.StringVar(&o.Host, "webhook-bind-address", "", "Address the webhook server binds to (empty: all interfaces).")
	f.IntVar(&o.Port, "webhook-port", 9443, "Port of the webhook server.")
	f.StringVar(&o.MetricsBindAddress, "metrics-bind-address", ":8080", `Address of the Prometheus metrics endpoint ("0" disables it).`)
	f.StringVar(&o.HealthProbeBindAddress, "health-probe-bind-address", ":8081", "Address of the /healthz and /readyz endpoints.")
	f.StringVar(&o.PprofBindAddress, "pprof-bind-address", "", `Address serving Go's CPU and heap profiles at /debug/pprof/ (empty or "0": off). Bind it to 127.0.0.1: the profiles are not authenticated.`)
	f.StringVar(&o.ImageCredentialProviderConfig, "image-credential-provider-config", "", "The nodes' CredentialProviderConfig, as the kubelet's flag of that name reads it (a file, or a directory of *.json, *.yaml, *.yml merged in name order). An original image one of its providers' matchImages matches is pulled by the node with a credential of its own, so a probe refused for lack of credentials (401, 403) counts as available. The plugins are never run here.")
	f.StringVar(&o.ClusterID, "cluster-id", "", `This cluster's ID in the mirrors it shares with other clusters: a mirror candidate's tag gets the suffix "-kuik-<id>" (nginx:1.27 is nginx:1.27-kuik-<id>), the tag the keeper of this cluster keeps. A DNS label of at most 32 bytes, without "kuik-". Empty: the tags are the images' own.`)

	f.BoolVar(&o.MatchConditionsGate, "match-conditions-gate", false, "Route with a routing resource's generation only once its PodsSent condition says the pod webhook's matchConditions send its pods (written by the secret-syncer run with --match-conditions-of); until then, the generation marked before, or none. Without it, a new resource may route a pod sent for another image while a pod of its image alone is not sent.")

	cmd.AddCommand(newCandidatesCommand(candidates, logs))
	return cmd
}

// withLogger is cmd's context with the logger the logging flags describe, writing to cmd's
// standard error.
func withLogger(cmd *cobra.Command, logs *logflags.Flags) (context.Context, error) {
	logger, err := logs.Logger(cmd.ErrOrStderr())
	if err != nil {
		return nil, UsageError{err}
	}
	return logr.NewContext(cmd.Context(), logger), nil
}

func newCandidatesCommand(candidates CandidatesFunc, logs *logflags.Flags) *cobra.Command {
	o := CandidatesOptions{}
	var nsLabels, podLabels string
	cmd := &cobra.Command{
		Use:   "candidates --resources FILE [--resources FILE...] [--namespace-labels k=v,...] [--pod-labels k=v,...] IMAGE",
		Short: "Print the ordered candidates of an image, without probing",
		Long: `candidates reads routing resources from YAML files, validates them with the rules of the CRD
(an invalid one exits 2 with a message naming the resource and the field) and prints the
candidates a container running IMAGE would be routed among, in order, one per line:
REFERENCE<TAB>SOURCE<TAB>PULLSECRET. Resources saved with their status (kubectl get -o yaml)
add a "# hinted:" line for each candidate their status.unavailable names: the webhook waits
for it at most --hinted-wait.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var err error
			if o.NamespaceLabels, err = labels.ConvertSelectorToLabelsMap(nsLabels); err != nil {
				return UsageError{fmt.Errorf("--namespace-labels: %w", err)}
			}
			if o.PodLabels, err = labels.ConvertSelectorToLabelsMap(podLabels); err != nil {
				return UsageError{fmt.Errorf("--pod-labels: %w", err)}
			}
			if len(o.Resources) == 0 {
				return UsageError{errors.New("--resources is required")}
			}
			if err := validateClusterID(o.ClusterID); err != nil {
				return err
			}
			o.Image = args[0]
			ctx, err := withLogger(cmd, logs)
			if err != nil {
				return err
			}
			return candidates(ctx, o)
		},
	}
	f := cmd.Flags()
	f.StringArrayVar(&o.Resources, "resources", nil, "YAML file of ImageAlternative and ImageMirror resources (repeatable).")
	f.StringVar(&nsLabels, "namespace-labels", "", "Labels of the pod's namespace, k=v,...")
	f.StringVar(&podLabels, "pod-labels", "", "Labels of the pod, k=v,...")
	f.StringVar(&o.ClusterID, "cluster-id", "", `The server's --cluster-id: mirror candidates get this cluster's tags ("-kuik-<id>" suffix). Empty: the images' own tags.`)
	return cmd
}

// validateClusterID checks --cluster-id; empty is none.
func validateClusterID(id string) error {
	if id == "" {
		return nil
	}
	if err := routing.ValidateClusterID(id); err != nil {
		return UsageError{fmt.Errorf("--cluster-id: %w", err)}
	}
	return nil
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
