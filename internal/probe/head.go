package probe

import (
	"context"
	"errors"
	"net"
	"net/http"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
)

// safeHead is head run where no caller's recover reaches: a panic (a registry answer the
// client library chokes on; an original's registry is the pod author's to choose) counts as
// Unreachable instead of ending the process, and the flight still lands. answered reports
// whether the registry sent an HTTP answer (any status): hints come only from probes it did
// not answer; timedOut, that none came within the timeout.
func (p *Prober) safeHead(ctx context.Context, t Target) (r Result, digest string, answered, timedOut bool) {
	defer func() {
		if recover() != nil {
			r, digest, answered, timedOut = Unreachable, "", false, false
		}
	}()
	r, digest, err := p.head(ctx, t)
	var terr *transport.Error
	if err == nil || errors.As(err, &terr) {
		return r, digest, true, false
	}
	return r, digest, false, errors.Is(err, context.DeadlineExceeded) || isTimeout(err)
}

// Check sends one manifest HEAD for t, outside the cache, the flights and MaxInFlight, and
// reports what came back: answered when the registry sent any HTTP answer (whatever its
// status), timedOut when none came within the timeout. It is the background check of the
// secret-syncer's leader (status.unavailable), which paces its own calls.
func (p *Prober) Check(ctx context.Context, t Target) (r Result, answered, timedOut bool) {
	r, _, answered, timedOut = p.safeHead(ctx, t)
	return r, answered, timedOut
}

func isTimeout(err error) bool {
	var nerr net.Error
	return errors.As(err, &nerr) && nerr.Timeout()
}

// head sends the manifest HEAD. go-containerregistry refuses an answer without a valid
// Docker-Content-Digest, and one for a digest reference whose digest differs from the one asked
// for, so an Available answer always comes with the digest it names.
func (p *Prober) head(ctx context.Context, t Target) (Result, string, error) {
	var opts []name.Option
	if t.Insecure {
		opts = append(opts, name.Insecure)
	}
	ref, err := name.ParseReference(t.Reference, opts...)
	if err != nil {
		return Invalid, "", err
	}
	auth := authn.Anonymous
	if t.Credential != (Credential{}) {
		auth = authn.FromConfig(authn.AuthConfig{Username: t.Credential.Username, Password: t.Credential.Password})
	}
	ctx, cancel := context.WithTimeout(ctx, p.opts.Timeout)
	defer cancel()
	desc, err := remote.Head(ref,
		remote.WithContext(ctx),
		remote.WithAuth(auth),
		remote.WithTransport(p.opts.Transport),
		remote.WithUserAgent("kuik-webhook"),
		// One attempt: the probe timeout is the whole budget, and the cache does the rest.
		remote.WithRetryBackoff(remote.Backoff{Steps: 1}),
		remote.WithRetryPredicate(func(error) bool { return false }),
		remote.WithRetryStatusCodes(),
	)
	if err != nil {
		return classify(err), "", err
	}
	return Available, desc.Digest.String(), nil
}

func classify(err error) Result {
	if err == nil {
		return Available
	}
	var terr *transport.Error
	if errors.As(err, &terr) {
		switch terr.StatusCode {
		case http.StatusNotFound:
			return NotFound
		case http.StatusUnauthorized, http.StatusForbidden:
			return InvalidAuth
		case http.StatusTooManyRequests:
			return QuotaExceeded
		}
		for _, d := range terr.Errors {
			switch d.Code {
			case transport.ManifestUnknownErrorCode, transport.NameUnknownErrorCode:
				return NotFound
			case transport.UnauthorizedErrorCode, transport.DeniedErrorCode:
				return InvalidAuth
			case transport.TooManyRequestsErrorCode:
				return QuotaExceeded
			}
		}
		return Unreachable
	}
	var nerr net.Error
	if errors.As(err, &nerr) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return Unreachable
	}
	return Unreachable
}
