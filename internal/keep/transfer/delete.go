package transfer

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
)

// ErrGone is returned by DeleteTag when the tag or its repository is already gone: for a
// garbage collection, a success.
var ErrGone = errors.New("tag already gone")

// ErrTagDeleteUnsupported is returned by DeleteTag when the registry deletes manifests by
// digest only (distribution's registry:2): nothing was deleted.
var ErrTagDeleteUnsupported = errors.New("registry does not delete by tag")

// DeleteTag deletes tag at the destination with opts' destination credential and transport.
// It deletes by tag only, never by digest: a digest delete takes every tag on that digest.
func DeleteTag(ctx context.Context, tag name.Tag, opts Options) error {
	opts = opts.withDefaults()
	ref, err := reparse(tag, opts.DestInsecure)
	if err != nil {
		return err
	}
	if _, ok := ref.(name.Tag); !ok {
		return fmt.Errorf("deleting %s: not a tag", tag)
	}
	rt := progressTransport{baseTransport(opts.Transport, opts.DestInsecure)}
	pusher, err := remote.NewPusher(remoteOptions(rt, opts.DestAuth, opts.DestKeychain, opts)...)
	if err != nil {
		return err
	}
	_, err = bounded(ctx, opts.StallTimeout, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, pusher.Delete(ctx, ref)
	})
	if err == nil {
		return nil
	}
	var te *transport.Error
	if errors.Is(err, errStalled) {
		return fmt.Errorf("deleting %s: no answer for %s: %w", tag, opts.StallTimeout, err)
	}
	if !errors.As(err, &te) {
		return fmt.Errorf("deleting %s: %w", tag, err)
	}
	switch {
	case te.StatusCode == http.StatusNotFound && hasCode(te, transport.ManifestUnknownErrorCode, transport.NameUnknownErrorCode):
		return fmt.Errorf("deleting %s: %w: %w", tag, ErrGone, err)
	case te.StatusCode == http.StatusMethodNotAllowed || hasCode(te, transport.UnsupportedErrorCode):
		return fmt.Errorf("deleting %s: %w: %w", tag, ErrTagDeleteUnsupported, err)
	}
	return fmt.Errorf("deleting %s: status %d: %w", tag, te.StatusCode, err)
}

// hasCode reports whether te carries one of codes.
func hasCode(te *transport.Error, codes ...transport.ErrorCode) bool {
	for _, d := range te.Errors {
		for _, c := range codes {
			if d.Code == c {
				return true
			}
		}
	}
	return false
}
