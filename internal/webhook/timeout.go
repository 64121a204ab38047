package webhook

import (
	"context"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// withTimeout bounds a handler's context, so probes give up before the API server does.
func withTimeout(d time.Duration, h admission.Handler) admission.Handler {
	return admission.HandlerFunc(func(ctx context.Context, req admission.Request) admission.Response {
		ctx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		return h.Handle(ctx, req)
	})
}
