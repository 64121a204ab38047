package transfer

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/sync/errgroup"
)

// DefaultStallTimeout is how long a blob or a manifest request may move no byte before it is
// abandoned.
const DefaultStallTimeout = 2 * time.Minute

// Options configures Copy. The source credential is the caller's choice: a routing
// resource's auth or a provider's, never the pod's own imagePullSecrets.
type Options struct {
	// SourceAuth, else SourceKeychain, else anonymous, authenticates to the source.
	SourceAuth     authn.Authenticator
	SourceKeychain authn.Keychain
	// DestAuth, else DestKeychain, else anonymous, authenticates to the destination.
	DestAuth     authn.Authenticator
	DestKeychain authn.Keychain
	// SourceInsecure and DestInsecure allow plain HTTP and unverified TLS on that side.
	SourceInsecure, DestInsecure bool
	// Digest, when set, is the digest to keep (the node's imageID): when the source tag points
	// elsewhere, src@Digest is copied under the destination tag (ErrTagMoved if it is gone).
	Digest v1.Hash
	// StallTimeout abandons a blob or a manifest request that moved no byte for this long
	// (default DefaultStallTimeout).
	StallTimeout time.Duration
	// MaxSize, when positive, refuses images whose missing blobs sum to more bytes (TooLarge).
	MaxSize int64
	// Pacer, when set, budgets the source's manifest GETs and sees its answers.
	Pacer *Pacer
	// Transport is the base transport of both sides (default remote.DefaultTransport).
	Transport http.RoundTripper
	// Jobs is how many blobs move at once (default 4).
	Jobs int
	// Mounts, when set, names a sibling repository of the destination registry that holds a
	// missing blob: the blob is mounted from it, and streamed from the source only when the
	// registry does not mount. Every blob found present or written is recorded in it. One
	// table can serve every copy and every destination registry.
	Mounts *Mounts
	// Backoff is go-containerregistry's retry of network flakes and 408/5xx (default 3 tries,
	// 1 s then 3 s). 429 is never retried.
	Backoff *remote.Backoff
}

// Action is what Copy did.
type Action string

const (
	// AlreadyPresent: the destination tag already had the digest; nothing was written.
	AlreadyPresent Action = "AlreadyPresent"
	// Tagged: the destination held the digest; only the tag was written.
	Tagged Action = "Tagged"
	// Copied: manifests and missing blobs were copied, then the tag.
	Copied Action = "Copied"
)

// Result is a successful copy.
type Result struct {
	Digest v1.Hash
	Action Action
	// Manifests counts manifests written (children and the top one).
	Manifests int
	// Blobs and Bytes count blobs streamed from the source and their bytes (mounted and
	// present blobs are not counted).
	Blobs int
	Bytes int64
}

// ParsePinned parses "repo:tag@sha256:…" into the tag and the digest; a reference without
// digest gives a zero hash, one without tag gives the digest reference itself.
func ParsePinned(s string, opts ...name.Option) (name.Reference, v1.Hash, error) {
	ref, err := name.ParseReference(s, opts...)
	if err != nil {
		return nil, v1.Hash{}, err
	}
	d, ok := ref.(name.Digest)
	if !ok {
		return ref, v1.Hash{}, nil
	}
	h, err := v1.NewHash(d.DigestStr())
	if err != nil {
		return nil, v1.Hash{}, err
	}
	base := s[:len(s)-len(d.DigestStr())-1]
	if tag, err := name.NewTag(base, append(opts, name.StrictValidation)...); err == nil {
		return tag, h, nil
	}
	return d, h, nil
}

// copier is one Copy's state.
type copier struct {
	opts       Options
	src, dst   name.Reference
	puller     *remote.Puller
	srcOpts    []remote.Option
	dstPuller  *remote.Puller
	pusher     *remote.Pusher
	blobs      atomic.Int64
	bytes      atomic.Int64
	written    int
	sameOrigin bool
}

// Copy copies the image src into dst verbatim (same manifest bytes, same digest, every
// platform), destination first and the tag last. See the package comment for the order.
func Copy(ctx context.Context, src, dst name.Reference, opts Options) (Result, error) {
	c, err := newCopier(src, dst, opts)
	if err != nil {
		return Result{}, err
	}
	return c.run(ctx)
}

// withDefaults sets the zero fields of o that have a default.
func (o Options) withDefaults() Options {
	if o.StallTimeout <= 0 {
		o.StallTimeout = DefaultStallTimeout
	}
	if o.Jobs <= 0 {
		o.Jobs = 4
	}
	if o.Transport == nil {
		o.Transport = remote.DefaultTransport
	}
	return o
}

func newCopier(src, dst name.Reference, opts Options) (*copier, error) {
	opts = opts.withDefaults()
	var err error
	if src, err = reparse(src, opts.SourceInsecure); err != nil {
		return nil, err
	}
	if dst, err = reparse(dst, opts.DestInsecure); err != nil {
		return nil, err
	}
	srcRT := progressTransport{baseTransport(opts.Transport, opts.SourceInsecure)}
	var srcInner http.RoundTripper = srcRT
	if opts.Pacer != nil {
		srcInner = opts.Pacer.Transport(srcRT)
	}
	dstRT := progressTransport{baseTransport(opts.Transport, opts.DestInsecure)}
	c := &copier{opts: opts, src: src, dst: dst}
	c.sameOrigin = src.Context().RegistryStr() == dst.Context().RegistryStr()
	c.srcOpts = remoteOptions(srcInner, opts.SourceAuth, opts.SourceKeychain, opts)
	if c.puller, err = remote.NewPuller(c.srcOpts...); err != nil {
		return nil, err
	}
	dstOpts := remoteOptions(dstRT, opts.DestAuth, opts.DestKeychain, opts)
	if c.dstPuller, err = remote.NewPuller(dstOpts...); err != nil {
		return nil, err
	}
	if c.pusher, err = remote.NewPusher(dstOpts...); err != nil {
		return nil, err
	}
	return c, nil
}

// reparse applies insecure to ref's registry.
func reparse(ref name.Reference, insecure bool) (name.Reference, error) {
	if !insecure {
		return ref, nil
	}
	return name.ParseReference(ref.String(), name.Insecure)
}

// baseTransport is rt, with TLS verification off when insecure and rt is an *http.Transport.
func baseTransport(rt http.RoundTripper, insecure bool) http.RoundTripper {
	if !insecure {
		return rt
	}
	return InsecureTransport(rt)
}

// insecureClones holds one insecure clone per base *http.Transport: a clone per copy would
// keep its own idle connections, thousands of them on a busy keeper.
var insecureClones sync.Map // *http.Transport → *http.Transport

// InsecureTransport is rt with TLS verification off, when rt is an *http.Transport (else rt):
// one clone per rt, shared by every caller, so its connections are reused.
func InsecureTransport(rt http.RoundTripper) http.RoundTripper {
	t, ok := rt.(*http.Transport)
	if !ok {
		return rt
	}
	if c, ok := insecureClones.Load(t); ok {
		return c.(*http.Transport)
	}
	c := t.Clone()
	if c.TLSClientConfig == nil {
		c.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	c.TLSClientConfig.InsecureSkipVerify = true
	got, _ := insecureClones.LoadOrStore(t, c)
	return got.(*http.Transport)
}

// retryCodes are go-containerregistry's retried statuses without 429: a 429 freezes the host.
var retryCodes = []int{
	http.StatusRequestTimeout,
	http.StatusInternalServerError,
	http.StatusBadGateway,
	http.StatusServiceUnavailable,
	http.StatusGatewayTimeout,
}

// retryable retries network flakes and the retryCodes, never a 429, a frozen host or a stall.
func retryable(err error) bool {
	var q *QuotaError
	if errors.As(err, &q) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var te *transport.Error
	if errors.As(err, &te) {
		for _, c := range retryCodes {
			if te.StatusCode == c {
				return true
			}
		}
		return false
	}
	return errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// remoteOptions are the go-containerregistry options of one side.
func remoteOptions(rt http.RoundTripper, auth authn.Authenticator, kc authn.Keychain, opts Options) []remote.Option {
	o := []remote.Option{
		remote.WithTransport(rt),
		remote.WithRetryStatusCodes(retryCodes...),
		remote.WithRetryPredicate(retryable),
		remote.WithJobs(opts.Jobs),
	}
	if opts.Backoff != nil {
		o = append(o, remote.WithRetryBackoff(*opts.Backoff))
	}
	switch {
	case auth != nil:
		o = append(o, remote.WithAuth(auth))
	case kc != nil:
		o = append(o, remote.WithAuthFromKeychain(kc))
	}
	return o
}

func (c *copier) run(ctx context.Context) (Result, error) {
	want := c.opts.Digest
	if d, ok := c.src.(name.Digest); ok {
		h, err := v1.NewHash(d.DigestStr())
		if err != nil {
			return Result{}, err
		}
		if want != (v1.Hash{}) && want != h {
			return Result{}, &Error{Reason: SourceUnavailable, Err: fmt.Errorf("%s is not the expected %s", d, want)}
		}
		want = h
	}
	_, dstIsTag := c.dst.(name.Tag)

	// 1. Destination first: the tag, then the digest.
	var dstTag v1.Hash
	if dstIsTag {
		desc, err := c.head(ctx, c.dstPuller, c.dst)
		switch {
		case err == nil:
			dstTag = desc.Digest
		case !isNotFound(err):
			return Result{}, classify(destination, err, "checking %s", c.dst)
		}
	}
	if want != (v1.Hash{}) {
		if r, done, err := c.fromDestination(ctx, want, dstTag); done || err != nil {
			return r, err
		}
	}

	// 2. Source HEAD: learn the digest; a moved tag is copied from src@want.
	head, err := c.head(ctx, c.puller, c.src)
	if err != nil {
		return Result{}, classify(source, err, "checking %s", c.src)
	}
	if want == (v1.Hash{}) {
		want = head.Digest
		if r, done, err := c.fromDestination(ctx, want, dstTag); done || err != nil {
			return r, err
		}
	} else if head.Digest != want {
		// The tag moved: keep the bytes that ran, src@want, unless they are gone too.
		pinned := c.src.Context().Digest(want.String())
		if _, err := c.head(ctx, c.puller, pinned); isNotFound(err) {
			return Result{}, &Error{Reason: SourceUnavailable, Err: fmt.Errorf("%w: %s is %s, and %s is gone", ErrTagMoved, c.src, head.Digest, pinned)}
		} else if err != nil {
			return Result{}, classify(source, err, "checking %s", pinned)
		}
	}

	// 3. Verbatim copy.
	if err := c.copyImage(ctx, want); err != nil {
		return Result{}, err
	}
	return Result{Digest: want, Action: Copied, Manifests: c.written, Blobs: int(c.blobs.Load()), Bytes: c.bytes.Load()}, nil
}

// fromDestination finishes when the destination tag already has want (AlreadyPresent) or the
// destination holds want by digest (Tagged, bytes read from the destination).
func (c *copier) fromDestination(ctx context.Context, want, dstTag v1.Hash) (Result, bool, error) {
	_, isTag := c.dst.(name.Tag)
	if isTag && dstTag == want {
		return Result{Digest: want, Action: AlreadyPresent}, true, nil
	}
	byDigest := c.dst.Context().Digest(want.String())
	if _, err := c.head(ctx, c.dstPuller, byDigest); err != nil {
		if isNotFound(err) {
			return Result{}, false, nil
		}
		return Result{}, true, classify(destination, err, "checking %s", byDigest)
	}
	if !isTag {
		return Result{Digest: want, Action: AlreadyPresent}, true, nil
	}
	desc, err := c.get(ctx, c.dstPuller, byDigest)
	if err != nil {
		return Result{}, true, classify(destination, err, "reading %s", byDigest)
	}
	if err := c.putTag(ctx, desc, want); err != nil {
		return Result{}, true, err
	}
	return Result{Digest: want, Action: Tagged, Manifests: 1}, true, nil
}

// putTag writes the tag last and checks that the destination now resolves it to want.
func (c *copier) putTag(ctx context.Context, t remote.Taggable, want v1.Hash) error {
	if err := c.put(ctx, c.dst, t); err != nil {
		return classify(destination, err, "writing %s", c.dst)
	}
	desc, err := c.head(ctx, c.dstPuller, c.dst)
	if err != nil {
		return classify(destination, err, "checking %s", c.dst)
	}
	if desc.Digest != want {
		return &Error{Reason: PushFailed, Err: fmt.Errorf("%s resolves to %s after writing %s", c.dst, desc.Digest, want)}
	}
	return nil
}

// bounded runs one registry call under a watchdog: it fails with errStalled when no answer
// or body byte arrives for d.
func bounded[T any](ctx context.Context, d time.Duration, call func(context.Context) (T, error)) (T, error) {
	wd, wctx := newWatchdog(ctx, d)
	defer wd.stop()
	v, err := call(wctx)
	return v, stallCause(wctx, err)
}

// head HEADs a manifest, bounded by the stall timeout.
func (c *copier) head(ctx context.Context, p *remote.Puller, ref name.Reference) (*v1.Descriptor, error) {
	return bounded(ctx, c.opts.StallTimeout, func(ctx context.Context) (*v1.Descriptor, error) { return p.Head(ctx, ref) })
}

// get GETs a manifest, bounded by the stall timeout.
func (c *copier) get(ctx context.Context, p *remote.Puller, ref name.Reference) (*remote.Descriptor, error) {
	return bounded(ctx, c.opts.StallTimeout, func(ctx context.Context) (*remote.Descriptor, error) { return p.Get(ctx, ref) })
}

// put PUTs a manifest at the destination, bounded by the stall timeout.
func (c *copier) put(ctx context.Context, ref name.Reference, t remote.Taggable) error {
	_, err := bounded(ctx, c.opts.StallTimeout, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, c.pusher.Put(ctx, ref, t)
	})
	return err
}

// node is a manifest to write, with the raw bytes fetched from the source.
type node struct {
	desc     *remote.Descriptor
	children []*node
	blobs    []v1.Descriptor
}

// copyImage fetches the manifests of want (paced), then writes the missing blobs, the
// children by digest, and the top manifest last.
func (c *copier) copyImage(ctx context.Context, want v1.Hash) error {
	host := c.src.Context().RegistryStr()
	top, err := c.fetch(ctx, host, c.src.Context().Digest(want.String()))
	if err != nil {
		return err
	}
	// Children: 1 + N manifest GETs in all, minus the children the destination holds.
	if err := c.fetchChildren(ctx, host, top); err != nil {
		return err
	}
	blobs := map[v1.Hash]v1.Descriptor{}
	collectBlobs(top, blobs)
	if c.opts.MaxSize > 0 {
		var total int64
		for _, b := range blobs {
			total += b.Size
		}
		if total > c.opts.MaxSize {
			return &Error{Reason: TooLarge, Err: fmt.Errorf("%s: %d bytes of blobs, more than %d", c.src, total, c.opts.MaxSize)}
		}
	}
	if err := c.copyBlobs(ctx, blobs); err != nil {
		return err
	}
	if err := c.putChildren(ctx, top); err != nil {
		return err
	}
	if _, isTag := c.dst.(name.Tag); !isTag {
		if err := c.put(ctx, c.dst.Context().Digest(want.String()), top.desc); err != nil {
			return classify(destination, err, "writing %s", c.dst)
		}
		c.written++
		return nil
	}
	if err := c.putTag(ctx, top.desc, want); err != nil {
		return err
	}
	c.written++
	return nil
}

// fetch GETs one manifest by digest from the source, after the pacer grants it.
func (c *copier) fetch(ctx context.Context, host string, ref name.Digest) (*node, error) {
	var res *Reservation
	if c.opts.Pacer != nil {
		var err error
		if res, err = c.opts.Pacer.Wait(ctx, host, 1); err != nil {
			return nil, classify(source, err, "pacing %s", ref)
		}
		defer res.Release()
	}
	desc, err := c.get(res.Bind(ctx), c.puller, ref)
	if err != nil {
		return nil, classify(source, err, "reading %s", ref)
	}
	return parseNode(desc)
}

// fetchChildren fetches the children of n that the destination lacks, recursively.
func (c *copier) fetchChildren(ctx context.Context, host string, n *node) error {
	var missing []v1.Descriptor
	for _, d := range n.childDescs() {
		if _, err := c.head(ctx, c.dstPuller, c.dst.Context().Digest(d.Digest.String())); err == nil {
			continue
		} else if !isNotFound(err) {
			return classify(destination, err, "checking %s", d.Digest)
		}
		missing = append(missing, d)
	}
	if len(missing) == 0 {
		return nil
	}
	var res *Reservation
	if c.opts.Pacer != nil {
		var err error
		if res, err = c.opts.Pacer.Wait(ctx, host, len(missing)); err != nil {
			return classify(source, err, "pacing %d manifests of %s", len(missing), c.src)
		}
		defer res.Release()
	}
	bound := res.Bind(ctx)
	for _, d := range missing {
		ref := c.src.Context().Digest(d.Digest.String())
		desc, err := c.get(bound, c.puller, ref)
		if err != nil {
			return classify(source, err, "reading %s", ref)
		}
		child, err := parseNode(desc)
		if err != nil {
			return err
		}
		n.children = append(n.children, child)
	}
	for _, child := range n.children {
		if err := c.fetchChildren(ctx, host, child); err != nil {
			return err
		}
	}
	return nil
}

// putChildren writes the children of n by digest, deepest first.
func (c *copier) putChildren(ctx context.Context, n *node) error {
	for _, child := range n.children {
		if err := c.putChildren(ctx, child); err != nil {
			return err
		}
		ref := c.dst.Context().Digest(child.desc.Digest.String())
		if err := c.put(ctx, ref, child.desc); err != nil {
			return classify(destination, err, "writing %s", ref)
		}
		c.written++
	}
	return nil
}

// manifestFields are the fields of any manifest that name other content: image manifests
// (config, layers), indexes (manifests) and artifact manifests (blobs).
type manifestFields struct {
	Config    *v1.Descriptor  `json:"config"`
	Layers    []v1.Descriptor `json:"layers"`
	Blobs     []v1.Descriptor `json:"blobs"`
	Manifests []v1.Descriptor `json:"manifests"`
}

// parseNode reads the descriptors of a fetched manifest; the bytes stay as fetched.
func parseNode(desc *remote.Descriptor) (*node, error) {
	n := &node{desc: desc}
	var m manifestFields
	if err := json.Unmarshal(desc.Manifest, &m); err != nil {
		return nil, &Error{Reason: SourceUnavailable, Err: fmt.Errorf("parsing manifest %s: %w", desc.Digest, err)}
	}
	if m.Config != nil && m.Config.Digest != (v1.Hash{}) {
		n.blobs = append(n.blobs, *m.Config)
	}
	n.blobs = append(n.blobs, m.Layers...)
	n.blobs = append(n.blobs, m.Blobs...)
	return n, nil
}

// childDescs are the manifests an index names.
func (n *node) childDescs() []v1.Descriptor {
	var m manifestFields
	_ = json.Unmarshal(n.desc.Manifest, &m)
	return m.Manifests
}

// collectBlobs gathers the distributable blobs of n and its children by digest.
func collectBlobs(n *node, into map[v1.Hash]v1.Descriptor) {
	for _, b := range n.blobs {
		if !b.MediaType.IsDistributable() || len(b.URLs) > 0 && !isKnownDistributable(b.MediaType) {
			continue
		}
		into[b.Digest] = b
	}
	for _, child := range n.children {
		collectBlobs(child, into)
	}
}

// isKnownDistributable reports a layer type that is pushed even when it lists URLs.
func isKnownDistributable(mt types.MediaType) bool {
	return mt == types.DockerLayer || mt == types.OCILayer || mt == types.OCILayerZStd || mt == types.OCIUncompressedLayer
}

// copyBlobs writes the blobs the destination lacks, Jobs at a time. A failed blob does not
// cancel the others: what commits now is not uploaded again by the retry.
func (c *copier) copyBlobs(ctx context.Context, blobs map[v1.Hash]v1.Descriptor) error {
	var g errgroup.Group
	g.SetLimit(c.opts.Jobs)
	for _, d := range blobs {
		g.Go(func() error { return c.copyBlob(ctx, d) })
	}
	return g.Wait()
}

// copyBlob HEADs the blob at the destination, mounts it from the source repository when both
// are on one registry, else from a sibling repository Options.Mounts knows once the source
// has answered a HEAD of it, else streams it from the source; a blob that moves no byte for
// StallTimeout is abandoned. A registry that does not mount answers the mount with an upload
// session, and the blob is streamed into it; a refused sibling mount is retried as an upload.
func (c *copier) copyBlob(ctx context.Context, d v1.Descriptor) error {
	wd, bctx := newWatchdog(ctx, c.opts.StallTimeout)
	defer wd.stop()
	srcRef := c.src.Context().Digest(d.Digest.String())
	b := &blob{c: c, ctx: bctx, ref: srcRef, desc: d, wd: wd}
	var layer v1.Layer = b
	var sibling *name.Repository
	if c.sameOrigin {
		layer = &remote.MountableLayer{Layer: b, Reference: srcRef}
	} else if from, ok := c.opts.Mounts.Lookup(c.dst.Context(), d.Digest); ok && c.sourceServes(bctx, srcRef) {
		// go-containerregistry adds pull on from to the push token's scopes.
		sibling = &from
		layer = &remote.MountableLayer{Layer: b, Reference: from.Digest(d.Digest.String())}
	}
	err := stallCause(bctx, c.pusher.Upload(bctx, c.dst.Context(), layer))
	if err != nil && sibling != nil && b.sourceErr() == nil && !errors.Is(err, errStalled) && bctx.Err() == nil {
		// A token server may refuse pull on the sibling rather than grant less: forget the
		// sibling and upload the blob from the source.
		c.opts.Mounts.Forget(*sibling, d.Digest)
		err = stallCause(bctx, c.pusher.Upload(bctx, c.dst.Context(), b))
	}
	if err == nil {
		c.opts.Mounts.Record(c.dst.Context(), d.Digest)
		return nil
	}
	if serr := b.sourceErr(); serr != nil && !errors.Is(err, errStalled) {
		return classify(source, serr, "reading blob %s", d.Digest)
	}
	return classify(destination, err, "writing blob %s", d.Digest)
}

// sourceServes HEADs the blob at the source with the source credential. A sibling mount is
// made only for a blob the source serves: a mount reads nothing from the source, and without
// this check a manifest naming the layers of an image another mirror keeps (layer digests are
// no secret) would copy them out of that mirror with the push credential.
func (c *copier) sourceServes(ctx context.Context, ref name.Digest) bool {
	l, err := c.puller.Layer(ctx, ref)
	if err != nil {
		return false
	}
	_, err = l.Size()
	return err == nil
}

// isNotFound reports a 404 from a registry.
func isNotFound(err error) bool {
	var te *transport.Error
	return errors.As(err, &te) && te.StatusCode == http.StatusNotFound
}

// blob is a source blob as a v1.Layer whose Compressed streams it from the source.
type blob struct {
	c    *copier
	ctx  context.Context
	ref  name.Digest
	desc v1.Descriptor
	wd   *watchdog
	mu   sync.Mutex
	err  error
}

func (b *blob) Digest() (v1.Hash, error) { return b.desc.Digest, nil }
func (b *blob) DiffID() (v1.Hash, error) {
	return v1.Hash{}, errors.New("diff id of a copied blob is unknown")
}
func (b *blob) Size() (int64, error)                { return b.desc.Size, nil }
func (b *blob) MediaType() (types.MediaType, error) { return b.desc.MediaType, nil }
func (b *blob) Uncompressed() (io.ReadCloser, error) {
	return nil, errors.New("a copied blob is not decompressed")
}

// Compressed GETs the blob from the source; its digest is verified as it streams.
func (b *blob) Compressed() (io.ReadCloser, error) {
	l, err := b.c.puller.Layer(b.ctx, b.ref)
	if err != nil {
		b.setErr(err)
		return nil, err
	}
	rc, err := l.Compressed()
	if err != nil {
		b.setErr(err)
		return nil, err
	}
	b.c.blobs.Add(1)
	return &progressReader{rc: rc, b: b}, nil
}

func (b *blob) setErr(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.err == nil {
		b.err = err
	}
}

func (b *blob) sourceErr() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err
}

// progressReader counts bytes, feeds the watchdog and records source errors.
type progressReader struct {
	rc io.ReadCloser
	b  *blob
}

func (r *progressReader) Read(p []byte) (int, error) {
	n, err := r.rc.Read(p)
	if n > 0 {
		r.b.wd.poke()
		r.b.c.bytes.Add(int64(n))
	}
	if err != nil && err != io.EOF {
		r.b.setErr(err)
	}
	return n, err
}

func (r *progressReader) Close() error { return r.rc.Close() }

// watchdog cancels its context when poke is not called for d.
type watchdog struct {
	d      time.Duration
	timer  *time.Timer
	cancel context.CancelCauseFunc
}

type watchdogKey struct{}

func newWatchdog(ctx context.Context, d time.Duration) (*watchdog, context.Context) {
	ctx, cancel := context.WithCancelCause(ctx)
	w := &watchdog{d: d, cancel: cancel}
	w.timer = time.AfterFunc(d, func() { cancel(errStalled) })
	return w, context.WithValue(ctx, watchdogKey{}, w)
}

func (w *watchdog) poke() { w.timer.Reset(w.d) }

// stop ends the watch and releases its context: call it once the watched calls returned.
func (w *watchdog) stop() {
	w.timer.Stop()
	w.cancel(nil)
}

// progressTransport pokes the request's watchdog when an answer arrives and as its body is read.
type progressTransport struct{ inner http.RoundTripper }

func (t progressTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.inner.RoundTrip(req)
	if w, ok := req.Context().Value(watchdogKey{}).(*watchdog); ok {
		w.poke()
		if resp != nil && resp.Body != nil {
			resp.Body = &pokingBody{ReadCloser: resp.Body, w: w}
		}
	}
	return resp, err
}

// pokingBody pokes a watchdog for every read that moves bytes.
type pokingBody struct {
	io.ReadCloser
	w *watchdog
}

func (b *pokingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		b.w.poke()
	}
	return n, err
}
