package main

import (
	"crypto/subtle"
	"io"
	"log"
	"net/http"

	"github.com/google/go-containerregistry/pkg/registry"
)

// registryHandler is an OCI registry (go-containerregistry's), behind basic authentication
// when user is set.
func registryHandler(user, pass string) http.Handler {
	inner := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	if user == "" {
		return inner
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, p, ok := r.BasicAuth()
		if !ok || subtle.ConstantTimeCompare([]byte(u), []byte(user)) != 1 || subtle.ConstantTimeCompare([]byte(p), []byte(pass)) != 1 {
			w.Header().Set("WWW-Authenticate", `Basic realm="kuik-demo"`)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`))
			return
		}
		inner.ServeHTTP(w, r)
	})
}
