package transfer

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// Reason is why a copy failed: the reason ImageMirror status.keep reports, one type for both.
type Reason = v1alpha1.KeepFailureReason

// The reasons a copy fails with.
const (
	// SourceUnavailable: the source answered 404 or 5xx, could not be reached, or its tag moved
	// and the expected digest is gone.
	SourceUnavailable = v1alpha1.KeepSourceUnavailable
	// QuotaExceeded: the source answered 429, or its budget is spent down to the reserve.
	QuotaExceeded = v1alpha1.KeepQuotaExceeded
	// AuthRequired: the source answered 401 or 403.
	AuthRequired = v1alpha1.KeepAuthRequired
	// PushFailed: the destination refused or failed a request.
	PushFailed = v1alpha1.KeepPushFailed
	// TooLarge: the image is larger than Options.MaxSize.
	TooLarge = v1alpha1.KeepTooLarge
	// Stalled: a blob or a manifest request moved no byte for Options.StallTimeout.
	Stalled = v1alpha1.KeepStalled
)

// ErrTagMoved is wrapped when the source tag no longer points at the expected digest and that
// digest is gone from the source too.
var ErrTagMoved = errors.New("source tag moved")

// errStalled is the cancel cause of a blob or a request that made no progress.
var errStalled = errors.New("no progress")

// Error is a failed copy with its reason.
type Error struct {
	Reason Reason
	// RetryAt, when set, is the earliest time a retry can succeed (a frozen or spent host).
	RetryAt time.Time
	Err     error
}

func (e *Error) Error() string { return string(e.Reason) + ": " + e.Err.Error() }

func (e *Error) Unwrap() error { return e.Err }

// ReasonOf returns the reason of an error returned by Copy, or "" for nil or another error.
func ReasonOf(err error) Reason {
	var e *Error
	if errors.As(err, &e) {
		return e.Reason
	}
	return ""
}

// side is which registry an error came from.
type side int

const (
	source side = iota
	destination
)

// classify wraps err, an error from the given side, into an *Error.
func classify(s side, err error, format string, args ...any) error {
	if err == nil {
		return nil
	}
	wrapped := fmt.Errorf(format+": %w", append(args, err)...)
	var already *Error
	if errors.As(err, &already) {
		return &Error{Reason: already.Reason, RetryAt: already.RetryAt, Err: wrapped}
	}
	if errors.Is(err, errStalled) {
		return &Error{Reason: Stalled, Err: wrapped}
	}
	var q *QuotaError
	if errors.As(err, &q) {
		return &Error{Reason: QuotaExceeded, RetryAt: q.Until, Err: wrapped}
	}
	if s == destination {
		return &Error{Reason: PushFailed, Err: wrapped}
	}
	var te *transport.Error
	if errors.As(err, &te) {
		switch te.StatusCode {
		case http.StatusTooManyRequests:
			return &Error{Reason: QuotaExceeded, Err: wrapped}
		case http.StatusUnauthorized, http.StatusForbidden:
			return &Error{Reason: AuthRequired, Err: wrapped}
		}
	}
	return &Error{Reason: SourceUnavailable, Err: wrapped}
}

// stallCause turns a context error of a blob into errStalled when its watchdog fired.
func stallCause(ctx context.Context, err error) error {
	if err != nil && errors.Is(context.Cause(ctx), errStalled) {
		return fmt.Errorf("%w: %w", errStalled, err)
	}
	return err
}
