package keeper

import (
	"context"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/enix/kuik/internal/keep"
	"github.com/enix/kuik/internal/keep/transfer"
	"github.com/enix/kuik/internal/routing"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// The seams between the keeper's scheduler (keeper.go: queue, copies, self-heal, sweeps) and
// its Kubernetes side (run.go: caches, credentials, status, events). The scheduler reads the
// cluster only through Gather and writes it only through Store and Reporter.

// Inputs is what one plan pass reads, gathered from the caches.
type Inputs struct {
	// Index is the routing index of every routing resource, with the cluster ID applied: the
	// webhook's own naming.
	Index *routing.Index
	// Mirrors are the keep-enabled ImageMirrors' settings, and Specs the objects, by name.
	Mirrors []keep.Mirror
	Specs   map[string]*v1alpha1.ImageMirror
	// Snapshot is the cluster: live pods, namespaces' labels, workload templates.
	Snapshot keep.Snapshot
	// Safety says whether the caches are synced and every list succeeded; the scheduler adds
	// its own clock doubt.
	Safety keep.Safety
	// DeclaredHosts are the registry hosts some routing resource names (entries' repositories,
	// mirrors' destinations and prefixes): metric labels use them, every other host is "other".
	DeclaredHosts map[string]struct{}
	// InsecureHosts are the hosts an entry or a destination with insecure: true names: the
	// keeper talks plain HTTP (or unverified TLS) to them, as the webhook's probes do.
	InsecureHosts map[string]struct{}
}

// Store persists the inventory of the tags the keeper wrote (internal/keeper/inventory).
type Store interface {
	// Load returns the saved inventory; an error when it cannot be read whole (never an
	// empty inventory in its place).
	Load(ctx context.Context) (keep.Inventory, error)
	// Save replaces the saved inventory; an error when another writer changed it meanwhile.
	Save(ctx context.Context, inv keep.Inventory) error
}

// Credentials resolves the credentials of a copy.
type Credentials interface {
	// Push is the credential of mirror's spec.keep.push.auth.secretRef, for the destination.
	Push(ctx context.Context, mirror *v1alpha1.ImageMirror) (authn.Authenticator, error)
	// Source is the credential of a Want's SourceAuth (a routing resource's entry auth);
	// authn.Anonymous when auth is nil. Never a pod's imagePullSecrets.
	Source(ctx context.Context, auth *v1alpha1.Auth, image string) (authn.Authenticator, error)
}

// Outcome is the end of one copy attempt.
type Outcome struct {
	Want   keep.Want
	Result transfer.Result
	// Err is nil on success; Reason says why it failed, in status.keep's words.
	Err    error
	Reason v1alpha1.KeepFailureReason
	At     time.Time
}

// Reporter publishes what the scheduler did: events and the ImageMirror's status.
type Reporter interface {
	// Outcome is called after each copy attempt: an ImageKept event when an image was
	// written (Copied or Tagged), a KeepFailed event on a failure.
	Outcome(ctx context.Context, mirror *v1alpha1.ImageMirror, o Outcome)
	// Status writes status.keep and the KeepReady condition of mirror (server-side apply of
	// those fields only), at most once per Options.StatusInterval per mirror.
	Status(ctx context.Context, mirror *v1alpha1.ImageMirror, st v1alpha1.KeepStatus, ready metav1.Condition) error
}

// TagDeleter deletes one tag, never a digest (transfer.DeleteTag).
type TagDeleter func(ctx context.Context, tag name.Tag, opts transfer.Options) error

// Deps are what NewKeeper is given.
type Deps struct {
	Gather    func(ctx context.Context) (Inputs, error)
	Store     Store
	Creds     Credentials
	Report    Reporter
	DeleteTag TagDeleter
	// Now is the clock (default time.Now).
	Now func() time.Time
}
