package main

import (
	"context"
	"crypto/subtle"
	"errors"
	"flag"
	"fmt"
	"log"
	"net/http"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
)

// serveRegistry runs an OCI registry (go-containerregistry's) behind basic authentication
// until ctx ends: `demo registry --addr 127.0.0.1:PORT --username U --password P`.
func serveRegistry(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("registry", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:0", "listen address")
	user := fs.String("username", "", "required username")
	pass := fs.String("password", "", "required password")
	if err := fs.Parse(args); err != nil {
		return err
	}
	inner := registry.New(registry.Logger(log.Default()))
	srv := &http.Server{
		Addr:              *addr,
		ReadHeaderTimeout: 10 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			u, p, ok := r.BasicAuth()
			if !ok || subtle.ConstantTimeCompare([]byte(u), []byte(*user)) != 1 || subtle.ConstantTimeCompare([]byte(p), []byte(*pass)) != 1 {
				w.Header().Set("WWW-Authenticate", `Basic realm="kuik-demo"`)
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusUnauthorized)
				_, _ = w.Write([]byte(`{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`))
				return
			}
			inner.ServeHTTP(w, r)
		}),
	}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("registry: %w", err)
	}
	return nil
}
